"""A pod's required pod (anti-)affinity terms and hard topology spread constraints, parsed (pure).

Read as kube-scheduler reads them: a term's namespaces default to the pod's own, ``namespaceSelector: {}`` means
every namespace, a term or constraint without a ``labelSelector`` matches no pod, and ``matchLabelKeys`` (and an
affinity term's ``mismatchLabelKeys``) add the pod's own values to the selector (the API server folds them in on
newer versions; doing it again changes nothing). Only ``whenUnsatisfiable: DoNotSchedule`` constraints bind.
What the fit cannot simulate is said in ``PodRules.unsimulated`` and keeps the pod on its node.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from autoscaler.cluster.labels import Requirement, Selector, selector_of

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
#: Topology keys the fit simulates: a node is its own domain, and a zone is read from the pool's own nodes. Any
#: other key keeps the pod on its node (its domains, racks or blocks, are not something a GPU pool's view shows).
TOPOLOGY_KEYS = (HOSTNAME, ZONE)
_SIMULATED = f"the fit simulates {HOSTNAME} and {ZONE}"


@dataclass(frozen=True)
class PodTerm:
    """A required pod (anti-)affinity term: the pods ``selector`` matches in ``namespaces`` (None: every one),
    counted per domain of ``topology_key``."""

    topology_key: str
    selector: Selector | None
    namespaces: tuple[str, ...] | None

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (self.selector is not None and (self.namespaces is None or namespace in self.namespaces)
                and self.selector.matches(labels))


@dataclass(frozen=True)
class Spread:
    """A hard topology spread constraint; the policies default as in the API (``nodeAffinityPolicy: Honor``,
    ``nodeTaintsPolicy: Ignore``)."""

    topology_key: str
    max_skew: int
    selector: Selector | None  # None matches no pod
    min_domains: int = 1
    honor_affinity: bool = True
    honor_taints: bool = False

    def counts(self, namespace: str, labels: Mapping[str, str], own_namespace: str) -> bool:
        """Whether a pod (its namespace, labels) counts for the constraint of a pod in ``own_namespace``."""
        return namespace == own_namespace and self.selector is not None and self.selector.matches(labels)


@dataclass(frozen=True)
class PodRules:
    affinity: tuple[PodTerm, ...] = ()
    anti_affinity: tuple[PodTerm, ...] = ()
    spread: tuple[Spread, ...] = ()
    unsimulated: str = ""  # "" when the fit can simulate every rule


def _with_keys(selector: Selector | None, labels: Mapping[str, str], raw: Mapping[str, Any]) -> Selector | None:
    """The selector with ``matchLabelKeys`` (In) and ``mismatchLabelKeys`` (NotIn) of the pod's own values."""
    if selector is None:
        return None
    extra: list[Requirement] = []
    for field, op in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn")):
        extra += [(str(k), op, (labels[k],)) for k in raw.get(field) or () if k in labels]
    return replace(selector, match_expressions=selector.match_expressions + tuple(extra)) if extra else selector


def _term(raw: Mapping[str, Any], namespace: str, labels: Mapping[str, str]) -> tuple[PodTerm, str]:
    """One term and what of it the fit cannot simulate ("" for nothing)."""
    key = str(raw.get("topologyKey") or "")
    names = tuple(str(n) for n in raw.get("namespaces") or ())
    chosen = raw.get("namespaceSelector")
    problem = "" if key in TOPOLOGY_KEYS else f'pod (anti-)affinity on topology key "{key}" ({_SIMULATED})'
    if chosen is not None and (chosen.get("matchLabels") or chosen.get("matchExpressions")):
        problem = problem or "pod (anti-)affinity with a namespaceSelector (namespaces' labels are not read)"
    # a namespaceSelector the fit cannot read is taken as every namespace: the stricter reading for another
    # pod's anti-affinity; a pod whose own term has one keeps its node anyway
    namespaces = None if chosen is not None else (names or (namespace,))
    return PodTerm(key, _with_keys(selector_of(raw.get("labelSelector")), labels, raw), namespaces), problem


def _spread(raw: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[Spread, str]:
    key = str(raw.get("topologyKey") or "")
    problem = "" if key in TOPOLOGY_KEYS else f'topology spread on topology key "{key}" ({_SIMULATED})'
    return Spread(key, int(raw.get("maxSkew") or 1), _with_keys(selector_of(raw.get("labelSelector")), labels, raw),
                  int(raw.get("minDomains") or 1), raw.get("nodeAffinityPolicy") != "Ignore",
                  raw.get("nodeTaintsPolicy") == "Honor"), problem


def pod_rules(spec: Mapping[str, Any], namespace: str, labels: Mapping[str, str]) -> PodRules:
    """The pod's required (anti-)affinity terms and hard spread constraints, from its spec."""
    affinity = spec.get("affinity") or {}
    problems: list[str] = []
    terms: dict[str, tuple[PodTerm, ...]] = {}
    for kind in ("podAffinity", "podAntiAffinity"):
        raw = (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or ()
        parsed = [_term(t, namespace, labels) for t in raw]
        terms[kind] = tuple(t for t, _ in parsed)
        problems += [p for _, p in parsed if p]
    hard = [c for c in spec.get("topologySpreadConstraints") or ()
            if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"]
    spreads = [_spread(c, labels) for c in hard]
    problems += [p for _, p in spreads if p]
    return PodRules(terms["podAffinity"], terms["podAntiAffinity"], tuple(s for s, _ in spreads),
                    problems[0] if problems else "")
