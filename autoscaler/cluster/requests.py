"""ProvisioningRequests (``autoscaling.x-k8s.io/v1``) as the service reads them (pure: plain JSON in, facts out).

A request's ``spec.podSets`` name PodTemplates of its namespace and how many pods of each; each template's pod asks
for GPUs through an extended resource (``kubernetes.gpu_resources``) or a DRA claim template, and pins nodes with
its ``nodeSelector``. Conditions are written as cluster-autoscaler writes them: ``Accepted``, ``Provisioned``,
``Failed``, ``BookingExpired``, ``CapacityRevoked``, each ``{type, status, reason, message, lastTransitionTime,
observedGeneration}``. A pod consumes a request when Kueue annotated it so (:data:`CONSUMES`).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from autoscaler.cluster.gpus import extended_gpus
from autoscaler.cluster.pods import PodFacts

GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
ACCEPTED, PROVISIONED, FAILED, BOOKING_EXPIRED = "Accepted", "Provisioned", "Failed", "BookingExpired"
#: The capacity provisioned for the request is no longer there (a booked node lost): Kueue evicts the workload.
CAPACITY_REVOKED = "CapacityRevoked"
#: The pod annotation naming the request (its name, in the pod's namespace) a pod consumes: Kueue's since 0.14, and
#: the older key that cluster-autoscaler still reads.
CONSUMES = ("autoscaling.x-k8s.io/consume-provisioning-request",
            "cluster-autoscaler.kubernetes.io/consume-provisioning-request")


@dataclass(frozen=True)
class PodSet:
    """``count`` pods of the PodTemplate ``template``."""

    template: str
    count: int


@dataclass(frozen=True)
class ProvisioningRequest:
    """One request as listed: where, which class, its pod sets, its conditions and the version they were read at."""

    namespace: str
    name: str
    class_name: str
    pod_sets: tuple[PodSet, ...]
    conditions: tuple[Mapping[str, Any], ...]
    resource_version: str
    generation: int
    raw: Mapping[str, Any]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def condition(self, kind: str) -> Mapping[str, Any] | None:
        return next((c for c in self.conditions if c.get("type") == kind), None)

    def holds(self, kind: str) -> bool:
        """Whether the condition ``kind`` is there with status True."""
        found = self.condition(kind)
        return found is not None and found.get("status") == "True"


def parse_request(raw: Mapping[str, Any]) -> ProvisioningRequest | None:
    """A listed request, or None when it is not one the service can read (no name, malformed pod sets)."""
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not isinstance(namespace, str) or not isinstance(spec, Mapping):
        return None
    sets = []
    for item in spec.get("podSets") or ():
        ref = (item or {}).get("podTemplateRef") or {}
        count = (item or {}).get("count")
        if not isinstance(ref.get("name"), str) or not isinstance(count, int) or isinstance(count, bool) or count < 1:
            return None
        sets.append(PodSet(ref["name"], count))
    conditions = tuple(c for c in ((raw.get("status") or {}).get("conditions") or ()) if isinstance(c, Mapping))
    return ProvisioningRequest(namespace, name, str(spec.get("provisioningClassName") or ""), tuple(sets),
                               conditions, str(meta.get("resourceVersion") or ""), int(meta.get("generation") or 0),
                               raw)


@dataclass(frozen=True)
class PodNeed:
    """What one pod of a pod set needs: GPUs (0: not known yet, asked through DRA claim ``templates``, counted
    from them; a whole node when they cannot be), the labels its ``nodeSelector`` pins, and how it asks (a resource
    name or ``claim template <name>``)."""

    gpus: int
    selector: tuple[tuple[str, str], ...]
    how: str
    templates: tuple[str, ...] = ()


def pod_need(template: Mapping[str, Any], patterns: Sequence[str]) -> PodNeed | None:
    """One pod of a PodTemplate; None when it asks for no GPU at all."""
    spec = ((template.get("template") or {}).get("spec")) or {}
    selector = tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items()))
    totals = extended_gpus(spec, patterns)
    if totals:
        resource = max(sorted(totals), key=lambda r: totals[r])
        return PodNeed(totals[resource], selector, resource)
    claims = [c.get("resourceClaimTemplateName") for c in spec.get("resourceClaims") or () if isinstance(c, Mapping)]
    claims = [c for c in claims if c]
    if claims:
        return PodNeed(0, selector, f"claim template {claims[0]}", tuple(str(c) for c in claims))
    return None


def template_gpus(template: Mapping[str, Any], gpu_classes: Sequence[str]) -> int | None:
    """The GPU devices a ResourceClaimTemplate's claim asks for (its requests of a ``kubernetes.gpu_device_classes``
    class, a ``firstAvailable`` request by its first GPU choice); None when one asks ``allocationMode: All`` (as
    many as a node has: a whole node)."""
    total = 0
    for req in ((((template.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests") or ()):
        choices = [req.get("exactly") or req] + list(req.get("firstAvailable") or ())
        chosen = next((c for c in choices if c.get("deviceClassName") in gpu_classes), None)
        if chosen is None:
            continue
        if chosen.get("allocationMode") == "All":
            return None
        count = chosen.get("count")
        total += int(count) if isinstance(count, int) and count > 0 else 1
    return total


def consumes(pod: PodFacts, request: ProvisioningRequest) -> bool:
    """Whether the pod is one of the request's (annotated with its name, in its namespace)."""
    return pod.namespace == request.namespace and any(pod.annotation(k) == request.name for k in CONSUMES)


def nodes_needed(count: int, gpus: int, gpus_per_node: int) -> int:
    """Nodes for ``count`` pods of ``gpus`` GPUs each on nodes of ``gpus_per_node`` (a pod never spans nodes; a pod
    of unknown GPUs takes a node of its own)."""
    per_node = gpus_per_node // gpus if 0 < gpus <= gpus_per_node else (1 if gpus == 0 else 0)
    if per_node == 0:
        return 0  # a pod larger than any node of the pool: the pool can never hold it
    return -(-count // per_node)


def condition(kind: str, status: bool, reason: str, message: str, now: float, generation: int) -> dict[str, Any]:
    """A status condition as cluster-autoscaler writes it."""
    stamp = datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": kind, "status": "True" if status else "False", "reason": reason, "message": message[:1000],
            "lastTransitionTime": stamp, "observedGeneration": generation}


def with_condition(conditions: Sequence[Mapping[str, Any]], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``conditions`` with ``new`` in place of the one of its type (its transition time kept when the status is the
    same), the others kept as they are."""
    out, put = [], False
    for c in conditions:
        if c.get("type") == new["type"]:
            same = c.get("status") == new["status"]
            out.append({**new, "lastTransitionTime": c.get("lastTransitionTime")} if same and c.get(
                "lastTransitionTime") else dict(new))
            put = True
        else:
            out.append(dict(c))
    return out if put else out + [dict(new)]
