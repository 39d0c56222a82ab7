"""ProvisioningRequests (``autoscaling.x-k8s.io/v1``) as the service reads them (pure: plain JSON in, facts out).

A request's ``spec.podSets`` name PodTemplates of its namespace and how many pods of each; each template's pod asks
for GPUs through an extended resource (``kubernetes.gpu_resources``) or a DRA claim template, and pins nodes with
its ``nodeSelector``. Conditions are written as cluster-autoscaler writes them: ``Accepted``, ``Provisioned``,
``Failed``, ``BookingExpired``, each ``{type, status, reason, message, lastTransitionTime, observedGeneration}``.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from autoscaler.cluster.gpus import extended_gpus

GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
ACCEPTED, PROVISIONED, FAILED, BOOKING_EXPIRED = "Accepted", "Provisioned", "Failed", "BookingExpired"


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
    """What one pod of a pod set needs: GPUs (0: unknown, asked through a DRA claim template: a whole node), the
    labels its ``nodeSelector`` pins, and how it asks (a resource name or ``claim template <name>``)."""

    gpus: int
    selector: tuple[tuple[str, str], ...]
    how: str


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
        return PodNeed(0, selector, f"claim template {claims[0]}")
    return None


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
