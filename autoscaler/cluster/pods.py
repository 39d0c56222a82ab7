"""A pod as the scale-in weighs moving it: what it asks for, where it may run, and whether it may move (pure).

The rules follow cluster-autoscaler's drain rules, narrowed to what a GPU pool needs: a pod may move when a
controller that recreates it owns it (``scale_in.movable_owners``: ReplicaSet and StatefulSet by default), no
annotation protects it, it keeps nothing on the node's disk (hostPath, or emptyDir not in memory) unless
``cluster-autoscaler.kubernetes.io/safe-to-evict: "true"`` says that is fine, and, in kube-system, a
PodDisruptionBudget covers it. A Job's pod, a bare pod or any other owner's keeps its node. Required pod
(anti-)affinity and hard topology spread are simulated by the fit (:mod:`autoscaler.cluster.interpod`) for the
topology keys a GPU pool has (:data:`autoscaler.cluster.topology.TOPOLOGY_KEYS`); a pod that uses another key
keeps its node.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping, Sequence

from autoscaler.cluster.labels import Requirement, Selector, requirements
from autoscaler.cluster.topology import PodTerm, Spread, pod_rules
from autoscaler.config.common import DEFAULT_MOVABLE_OWNERS
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
KUBE_SYSTEM = "kube-system"
_SUFFIX: dict[str, int | Decimal] = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1, "k": 10**3, "M": 10**6, "G": 10**9,
           "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")

def quantity(value: Any) -> Decimal:
    """A Kubernetes quantity (``500m``, ``16Gi``, ``1e3``, ``2``) as a number; 0 for garbage (the API server
    would not have admitted it, so a fact we cannot read must not block a decision)."""
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return Decimal(0)
    try:
        return Decimal(match.group(1)) * Decimal(_SUFFIX[match.group(2) or ""])
    except InvalidOperation:
        return Decimal(0)


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str  # Equal | Exists
    value: str
    effect: str  # "" tolerates every effect


@dataclass(frozen=True)
class PodFacts:
    """One pod that would stop if its node went (not a DaemonSet's, not a mirror pod, not finished)."""

    namespace: str
    name: str
    owner: str  # the controlling owner's kind, "" for a bare pod
    requests: tuple[tuple[str, Decimal], ...]  # resource -> amount (cpu in cores, memory in bytes, GPUs)
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    local_storage: str = ""  # the first volume that lives on the node's disk, "" for none
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: tuple[tuple[Requirement, ...], ...] = ()  # required node affinity: OR of terms, each an AND
    tolerations: tuple[Toleration, ...] = ()
    pod_affinity: tuple[PodTerm, ...] = ()  # required: every term needs a matching pod in the node's domain
    pod_anti_affinity: tuple[PodTerm, ...] = ()  # required: no pod any term matches in the node's domain
    spread: tuple[Spread, ...] = ()  # hard topology spread constraints
    unsimulated: str = ""  # which of its rules the fit cannot simulate ("" when it can simulate them all)
    gpus: int = 0  # GPU units requested (the resources matching kubernetes.gpu_resources)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @cached_property
    def label_map(self) -> dict[str, str]:
        """The labels as a mapping, built once (the fit matches every pod of a pool against each one it moves)."""
        return dict(self.labels)

    def annotation(self, key: str) -> str:
        return dict(self.annotations).get(key, "")


@dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget: which pods it covers and how many may be disrupted now."""

    namespace: str
    name: str
    match_labels: tuple[tuple[str, str], ...]
    match_expressions: tuple[Requirement, ...]
    disruptions_allowed: int

    def covers(self, pod: PodFacts) -> bool:
        if pod.namespace != self.namespace:
            return False
        return Selector(self.match_labels, self.match_expressions).matches(pod.label_map)


# ---- parsing ------------------------------------------------------------------------------------------------

def _controller_kind(meta: Mapping[str, Any]) -> str:
    refs = meta.get("ownerReferences") or []
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    return str(ref.get("kind", "")) if ref else ""


def requests_of(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """What the pod asks the scheduler for: the containers' sum or the largest init container's, whichever is
    more, per resource; a container's limit stands for its request where it sets only the limit."""
    def one(container: Mapping[str, Any]) -> dict[str, Decimal]:
        res = container.get("resources") or {}
        limits, asked = res.get("limits") or {}, res.get("requests") or {}
        return {name: quantity(asked[name] if name in asked else limits[name]) for name in {*asked, *limits}}

    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or ():
        for name, amount in one(c).items():
            total[name] = total.get(name, Decimal(0)) + amount
    for c in spec.get("initContainers") or ():
        for name, amount in one(c).items():
            total[name] = max(total.get(name, Decimal(0)), amount)
    for name, amount in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, Decimal(0)) + quantity(amount)
    return {k: v for k, v in total.items() if v > 0}


def _local_storage(spec: Mapping[str, Any]) -> str:
    for volume in spec.get("volumes") or ():
        if "hostPath" in volume:
            return f"hostPath volume {volume.get('name', '')}"
        empty = volume.get("emptyDir")
        if empty is not None and (empty or {}).get("medium") != "Memory":
            return f"emptyDir volume {volume.get('name', '')}"
    return ""


def _node_affinity(spec: Mapping[str, Any]) -> tuple[tuple[Requirement, ...], ...]:
    affinity = spec.get("affinity") or {}
    required = ((affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = tuple(requirements(t.get("matchExpressions")) + tuple(
        ("metadata.name", op, values) for _, op, values in requirements(t.get("matchFields")))
        for t in required.get("nodeSelectorTerms") or ())
    return terms


def pod_facts(pod: Mapping[str, Any], is_gpu: Any) -> PodFacts:
    """A pod as the API server sends it; ``is_gpu(resource)`` says which resources are GPU work."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    asked = requests_of(spec)
    namespace = str(meta.get("namespace", ""))
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    rules = pod_rules(spec, namespace, labels)
    return PodFacts(
        namespace=namespace, name=str(meta.get("name", "")), owner=_controller_kind(meta),
        requests=tuple(sorted(asked.items())),
        labels=tuple(sorted(labels.items())),
        annotations=tuple(sorted((str(k), str(v)) for k, v in (meta.get("annotations") or {}).items())),
        local_storage=_local_storage(spec),
        node_selector=tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items())),
        affinity=_node_affinity(spec),
        tolerations=tuple(Toleration(str(t.get("key") or ""), str(t.get("operator") or "Equal"),
                                     str(t.get("value") or ""), str(t.get("effect") or ""))
                          for t in spec.get("tolerations") or ()),
        pod_affinity=rules.affinity, pod_anti_affinity=rules.anti_affinity, spread=rules.spread,
        unsimulated=rules.unsimulated,
        gpus=int(sum(v for k, v in asked.items() if is_gpu(k))),
    )


def budget_of(raw: Mapping[str, Any]) -> Budget:
    """A policy/v1 PodDisruptionBudget as the API server sends it."""
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    selector = spec.get("selector") or {}
    return Budget(str(meta.get("namespace", "")), str(meta.get("name", "")),
                  tuple(sorted((str(k), str(v)) for k, v in (selector.get("matchLabels") or {}).items())),
                  requirements(selector.get("matchExpressions")),
                  int((raw.get("status") or {}).get("disruptionsAllowed") or 0))


# ---- the rule -----------------------------------------------------------------------------------------------

def move_blocker(pod: PodFacts, owners: Sequence[str] = DEFAULT_MOVABLE_OWNERS,
                 budgets: Sequence[Budget] | None = None) -> str | None:
    """Why the pod cannot move off its node, None when it may. ``budgets`` None: not read (kube-system pods then
    keep their node: without the list no budget can be shown to cover them)."""
    said = f"pod {pod.key}"
    for key, keep in ((SAFE_TO_EVICT, "false"), (DO_NOT_DISRUPT, "true")):
        if pod.annotation(key).lower() == keep:
            return f"{said} is annotated {key}={keep}"
    if not pod.owner:
        return f"{said} has no controller (a bare pod is not recreated elsewhere)"
    if pod.owner not in owners:
        return f"{said} is owned by a {pod.owner} (movable: {', '.join(owners) or 'none'})"
    safe = pod.annotation(SAFE_TO_EVICT).lower() == "true"
    if pod.local_storage and not safe:
        return f"{said} keeps data on the node ({pod.local_storage}; {SAFE_TO_EVICT}: \"true\" allows it)"
    covering = [b for b in budgets or () if b.covers(pod)]
    if pod.namespace == KUBE_SYSTEM and not covering:
        return f"{said} is in kube-system without a PodDisruptionBudget"
    closed = next((b for b in covering if b.disruptions_allowed <= 0), None)
    if closed is not None:
        return f"{said}: PodDisruptionBudget {closed.namespace}/{closed.name} allows no disruption now"
    if pod.unsimulated:
        return f"{said} has required {pod.unsimulated} (not simulated: it stays)"
    return None
