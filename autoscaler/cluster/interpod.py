"""Where one more pod may land among the pods on the nodes that stay (pure): kube-scheduler's PodTopologySpread
and InterPodAffinity filters.

The pods are counted once per pod to place, over every node that stays (those that take pods, and cordoned or
not Ready ones, whose pods still count), pods placed earlier in the same simulation included. The node being
emptied and the nodes going in the same decision are not there, so pods moving off count only where they land
(cluster-autoscaler takes the node out of its snapshot the same way). A node then takes the pod when:

- hard topology spread: it carries the constraint's key, and the matching pods of the pod's namespace in its
  domain, the pod included, exceed the emptiest eligible domain by at most ``maxSkew`` (the emptiest counts as 0
  while fewer than ``minDomains`` domains are eligible). Eligible nodes carry every constraint's key and, per the
  policies, match the pod's node selector and affinity (Honor) and tolerate its taints (Ignore by default);
- required pod affinity: it carries every term's key, and its domain runs a pod matching all the terms (or no
  pod anywhere does and the pod matches its own terms: the first of a group goes anywhere);
- required pod anti-affinity: no pod a term matches runs in its domain of that term;
- nor does a pod whose own required anti-affinity matches this pod.

Pods on nodes outside the pool are not seen: a zone's domain is the pool's nodes in it.
"""
from __future__ import annotations

from typing import Callable, Generic, Mapping, Protocol, Sequence, TypeVar

from autoscaler.cluster.pods import PodFacts
from autoscaler.cluster.topology import Spread

Pair = tuple[str, str]  # (topology key, value): one domain


class Place(Protocol):
    """A node as the filters see it: its labels and the pods on it."""

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def pods(self) -> Sequence[PodFacts]: ...


P = TypeVar("P", bound=Place)


def has_rules(pods: Sequence[PodFacts]) -> bool:
    """Whether any of these pods has a required anti-affinity that others must respect."""
    return any(p.pod_anti_affinity for p in pods)


class Neighbours(Generic[P]):
    """The domains' counts for one pod to place; :meth:`refusal` says why a node may not take it."""

    def __init__(self, pod: PodFacts, places: Sequence[P], eligible: Callable[[P, Spread], bool],
                 shunners: bool = True) -> None:
        self.pod, self.own = pod, pod.label_map
        self.peers: dict[Pair, int] = {}  # domains with a pod matching all the pod's affinity terms
        self.shunned: dict[Pair, str] = {}  # domains with a pod the pod's anti-affinity matches: the first one
        self.shunning: dict[Pair, str] = {}  # domains with a pod whose anti-affinity matches the pod
        if pod.pod_affinity or pod.pod_anti_affinity or shunners:
            for place in places:
                for other in place.pods:
                    self._count(place.labels, other)
        self.spread = [(c, self._domains(c, places, eligible)) for c in pod.spread]

    def _count(self, labels: Mapping[str, str], other: PodFacts) -> None:
        pod = self.pod
        if not (pod.pod_affinity or pod.pod_anti_affinity or other.pod_anti_affinity):
            return
        theirs = other.label_map
        if pod.pod_affinity and all(t.matches(other.namespace, theirs) for t in pod.pod_affinity):
            for t in pod.pod_affinity:
                if t.topology_key in labels:
                    pair = (t.topology_key, labels[t.topology_key])
                    self.peers[pair] = self.peers.get(pair, 0) + 1
        for t in pod.pod_anti_affinity:
            if t.topology_key in labels and t.matches(other.namespace, theirs):
                self.shunned.setdefault((t.topology_key, labels[t.topology_key]), other.key)
        for t in other.pod_anti_affinity:
            if t.topology_key in labels and t.matches(pod.namespace, self.own):
                self.shunning.setdefault((t.topology_key, labels[t.topology_key]), other.key)

    def _domains(self, c: Spread, places: Sequence[P], eligible: Callable[[P, Spread], bool]) -> dict[str, int]:
        """Matching pods per eligible domain of the constraint's key."""
        keys = {s.topology_key for s in self.pod.spread}
        counts: dict[str, int] = {}
        for place in places:
            if not keys.issubset(place.labels) or not eligible(place, c):
                continue
            value = place.labels[c.topology_key]
            counts[value] = counts.get(value, 0) + sum(
                c.counts(o.namespace, o.label_map, self.pod.namespace) for o in place.pods)
        return counts

    def refusal(self, place: P) -> str | None:
        """Why ``place`` may not take the pod, None when it may."""
        return self._spread_refusal(place.labels) or self._affinity_refusal(place.labels)

    def _spread_refusal(self, labels: Mapping[str, str]) -> str | None:
        for c, counts in self.spread:
            value = labels.get(c.topology_key)
            if value is None:
                return f"has no label {c.topology_key} (topology spread)"
            if not counts:  # no eligible domain at all: the scheduler skips the constraint
                continue
            least = 0 if len(counts) < c.min_domains else min(counts.values())
            here = counts.get(value, 0) + c.counts(self.pod.namespace, self.own, self.pod.namespace)
            if here - least > c.max_skew:
                return (f"topology spread on {c.topology_key}: {here} matching pods in {value}, {least} in the "
                        f"emptiest domain, maxSkew {c.max_skew}")
        return None

    def _affinity_refusal(self, labels: Mapping[str, str]) -> str | None:
        pod = self.pod
        for t in pod.pod_affinity:
            if t.topology_key not in labels:
                return f"has no label {t.topology_key} (required pod affinity)"
        lonely = next((t for t in pod.pod_affinity if not self.peers.get((t.topology_key, labels[t.topology_key]))),
                      None)
        first = not self.peers and all(t.matches(pod.namespace, self.own) for t in pod.pod_affinity)
        if lonely is not None and not first:
            return (f"required pod affinity: no matching pod in its {lonely.topology_key} "
                    f"{labels[lonely.topology_key]}")
        for t in pod.pod_anti_affinity:
            who = self.shunned.get((t.topology_key, labels.get(t.topology_key, "")))
            if t.topology_key in labels and who:
                return f"required pod anti-affinity: {who} runs in its {t.topology_key} {labels[t.topology_key]}"
        for (key, value), who in self.shunning.items():
            if labels.get(key) == value:
                return f"pod {who}'s required anti-affinity keeps it out of {key} {value}"
        return None
