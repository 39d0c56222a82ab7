"""Required pod (anti-)affinity and hard topology spread in the scale-in's fit (pure, case by case, from the API
server's own JSON shapes): kube-scheduler's InterPodAffinity and PodTopologySpread filters over the nodes that stay."""
from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from autoscaler.cluster.fit import Room, Taint, place_all
from autoscaler.cluster.movable import pick_movable
from autoscaler.cluster.nodes import NodeView, node_view, pick_victims
from autoscaler.cluster.pods import PodFacts, move_blocker, pod_facts
from autoscaler.cluster.topology import HOSTNAME, ZONE

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def pod(name: str, *, app: str = "infer", namespace: str = "ml", gpus: int = 1,
        anti: list[dict[str, Any]] | None = None, affinity: list[dict[str, Any]] | None = None,
        spread: list[dict[str, Any]] | None = None, labels: dict[str, str] | None = None,
        node_selector: dict[str, str] | None = None) -> PodFacts:
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {
        "requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": str(gpus)} if gpus else {}}}]}
    rules: dict[str, Any] = {}
    if anti is not None:
        rules["podAntiAffinity"] = {REQUIRED: anti}
    if affinity is not None:
        rules["podAffinity"] = {REQUIRED: affinity}
    if rules:
        spec["affinity"] = rules
    if spread is not None:
        spec["topologySpreadConstraints"] = spread
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    meta = {"name": name, "namespace": namespace, "labels": labels or {"app": app},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": True}]}
    return pod_facts({"metadata": meta, "spec": spec, "status": {"phase": "Running"}},
                     lambda r: r.startswith("nvidia.com/"))


def term(key: str = HOSTNAME, app: str = "infer", **extra: Any) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key, **extra}


def spread(key: str = HOSTNAME, skew: int = 1, app: str = "infer", **extra: Any) -> dict[str, Any]:
    return {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}}, **extra}


def node(name: str, *pods: PodFacts, zone: str = "a", gpus: int = 8, takes: bool = True, hostname: bool = True,
         labels: dict[str, str] | None = None, taints: list[Taint] | None = None) -> Room:
    named = {HOSTNAME: name} if hostname else {}
    return Room(name, {**named, ZONE: zone, **(labels or {})}, taints or [],
                {"nvidia.com/gpu": Decimal(gpus), "cpu": Decimal(96)}, frozenset({"nvidia.com/gpu"}), list(pods),
                takes)


ANTI = [term()]
SPREAD = [spread()]
A, B = pod("infer-a", anti=ANTI), pod("infer-b", anti=ANTI)
MOVING = pod("infer-c", anti=ANTI)
TAINT = Taint("dedicated", "x", "NoSchedule")

FIT_CASES = [
    # required pod anti-affinity
    pytest.param([MOVING], [node("n1", A), node("n2", B)],
                 "n1: required pod anti-affinity: ml/infer-a runs in its kubernetes.io/hostname n1",
                 id="anti-affinity-hostname-blocks"),
    pytest.param([MOVING], [node("n1", A), node("n2", B), node("n3")], "n3", id="anti-affinity-fits-on-free-node"),
    pytest.param([MOVING, pod("infer-d", anti=ANTI)], [node("n1", A), node("n3")], "pod ml/infer-d fits on none",
                 id="anti-affinity-counts-a-pod-placed-earlier"),
    pytest.param([MOVING, pod("infer-d", anti=ANTI)], [node("n1", A), node("n3"), node("n4")], "n3,n4",
                 id="anti-affinity-two-moved-two-free-nodes"),
    pytest.param([MOVING], [node("n1", pod("infer-a", namespace="other"))], "n1",
                 id="anti-affinity-other-namespace-does-not-count"),
    pytest.param([pod("infer-c", anti=[term(namespaces=["other"])])], [node("n1", pod("x", namespace="other"))],
                 "required pod anti-affinity: other/x", id="anti-affinity-listed-namespace-counts"),
    pytest.param([pod("infer-c", anti=[term(namespaceSelector={})])], [node("n1", pod("x", namespace="other"))],
                 "required pod anti-affinity: other/x", id="anti-affinity-empty-namespace-selector-is-every-one"),
    pytest.param([MOVING], [node("n1", A, hostname=False)], "n1", id="anti-affinity-node-without-the-key-passes"),
    pytest.param([pod("web-1", app="web", gpus=0)], [node("n1", pod("q", anti=[term(app="web")]))],
                 "pod ml/q's required anti-affinity keeps it out of kubernetes.io/hostname n1",
                 id="existing-pods-anti-affinity-blocks"),
    pytest.param([pod("infer-c", anti=[term(ZONE)])], [node("n1", A), node("n2")],
                 "n2: required pod anti-affinity: ml/infer-a runs in its topology.kubernetes.io/zone a",
                 id="anti-affinity-zone-blocks-the-whole-zone"),
    pytest.param([pod("infer-c", anti=[term(ZONE)])], [node("n1", A), node("n2"), node("n3", zone="b")], "n3",
                 id="anti-affinity-zone-fits-in-another-zone"),
    pytest.param([pod("infer-c", anti=[term(ZONE)])], [node("n1", A, takes=False), node("n2")],
                 "n2: required pod anti-affinity", id="anti-affinity-cordoned-nodes-pods-count"),
    # required pod affinity
    pytest.param([pod("web-1", app="web", affinity=[term(app="cache")])],
                 [node("n1", pod("q", app="other")), node("n2", pod("c", app="cache"))], "n2",
                 id="affinity-needs-peer"),
    pytest.param([pod("web-1", app="web", affinity=[term(app="cache")])], [node("n1", pod("q", app="other"))],
                 "required pod affinity: no matching pod in its kubernetes.io/hostname n1",
                 id="affinity-no-peer-anywhere"),
    pytest.param([pod("web-1", app="web", affinity=[term(app="web")])], [node("n1")], "n1",
                 id="affinity-first-of-its-group-goes-anywhere"),
    pytest.param([pod("web-1", app="web", affinity=[term(ZONE, app="cache")])],
                 [node("n1", pod("c", app="cache"), takes=False), node("n2"), node("n3", zone="b")], "n2",
                 id="affinity-zone-peer-on-another-node"),
    pytest.param([pod("web-1", app="web", affinity=[term(app="cache")])], [node("n1", pod("c", app="cache"),
                                                                                 hostname=False)],
                 "has no label kubernetes.io/hostname (required pod affinity)", id="affinity-node-without-the-key"),
    # hard topology spread
    pytest.param([pod("infer-c", spread=SPREAD)], [node("n1", pod("a")), node("n2", pod("b")), node("n3")], "n3",
                 id="spread-within-skew"),
    pytest.param([pod("infer-c", spread=SPREAD)], [node("n1", pod("a")), node("n3", gpus=0)],
                 "n1: topology spread on kubernetes.io/hostname: 2 matching pods in n1, 0 in the emptiest domain, "
                 "maxSkew 1", id="spread-over-skew"),
    pytest.param([pod("infer-c", spread=SPREAD)], [node("n1", pod("a")), node("n2", pod("b"))], "n1",
                 id="spread-moving-pods-old-node-not-counted"),
    pytest.param([pod("infer-c", spread=[spread(minDomains=3)])], [node("n1", pod("a")), node("n2", pod("b"))],
                 "0 in the emptiest domain", id="spread-below-min-domains-counts-zero"),
    pytest.param([pod("infer-c", spread=SPREAD, node_selector={"gpu": "a100"})],
                 [node("n1", pod("a"), labels={"gpu": "a100"}), node("n3")], "n1",
                 id="spread-node-affinity-policy-honor-skips-unfit-node"),
    pytest.param([pod("infer-c", spread=[spread(nodeAffinityPolicy="Ignore")], node_selector={"gpu": "a100"})],
                 [node("n1", pod("a"), labels={"gpu": "a100"}), node("n3")], "2 matching pods in n1",
                 id="spread-node-affinity-policy-ignore-counts-it"),
    pytest.param([pod("infer-c", spread=SPREAD)], [node("n1", pod("a")), node("n3", taints=[TAINT])],
                 "2 matching pods in n1", id="spread-taints-policy-ignore-counts-tainted-node"),
    pytest.param([pod("infer-c", spread=[spread(nodeTaintsPolicy="Honor")])],
                 [node("n1", pod("a")), node("n3", taints=[TAINT])], "n1", id="spread-taints-policy-honor-skips-it"),
    pytest.param([pod("infer-c", spread=SPREAD)], [node("n1", pod("a", namespace="other")), node("n2", pod("b"))],
                 "n1", id="spread-other-namespace-not-counted"),
    pytest.param([pod("infer-c", spread=SPREAD)], [node("n1", hostname=False)],
                 "has no label kubernetes.io/hostname (topology spread)", id="spread-node-without-the-key"),
    pytest.param([pod("c", labels={"app": "infer", "pod-template-hash": "new"},
                      spread=[spread(matchLabelKeys=["pod-template-hash"])])],
                 [node("n1", pod("a", labels={"app": "infer", "pod-template-hash": "old"})), node("n2", gpus=0)],
                 "n1", id="spread-match-label-keys-count-own-revision-only"),
    pytest.param([pod("infer-c", spread=[spread(ZONE)]), pod("infer-d", spread=[spread(ZONE)])],
                 [node("n1", pod("a")), node("n2", zone="b"), node("n3", zone="b")], "n1,n2",
                 id="spread-zone-evens-out"),
    pytest.param([pod("infer-c", spread=[spread(whenUnsatisfiable="ScheduleAnyway")])],
                 [node("n1", pod("a"), pod("b")), node("n3", gpus=0)], "n1", id="spread-schedule-anyway-does-not-bind"),
]


@pytest.mark.parametrize("pods, rooms, expect", FIT_CASES)
def test_interpod_fit(pods: list[PodFacts], rooms: list[Room], expect: str) -> None:
    """``expect``: the nodes the moved pods land on (comma-separated, in the rooms' order), or the refusal."""
    before = {r.name: len(r.pods) for r in rooms}
    why = place_all(pods, rooms)
    landed = ",".join(r.name for r in rooms for _ in range(len(r.pods) - before[r.name]))
    if " " in expect:
        assert why is not None and expect in why, why
    else:
        assert why is None and landed == expect, (why, landed)


MOVE_CASES = [
    pytest.param(pod("p", anti=[term("example.com/rack")]),
                 'pod (anti-)affinity on topology key "example.com/rack"', id="unknown-topology-key-keeps-pod"),
    pytest.param(pod("p", spread=[spread("example.com/rack")]), 'topology spread on topology key "example.com/rack"',
                 id="unknown-spread-key-keeps-pod"),
    pytest.param(pod("p", affinity=[term(namespaceSelector={"matchLabels": {"team": "ml"}})]),
                 "with a namespaceSelector", id="namespace-selector-keeps-pod"),
    pytest.param(pod("p", anti=ANTI), None, id="hostname-anti-affinity-moves"),
    pytest.param(pod("p", affinity=[term(ZONE)], spread=[spread(ZONE)]), None, id="zone-rules-move"),
    pytest.param(pod("p", spread=[spread("example.com/rack", whenUnsatisfiable="ScheduleAnyway")]), None,
                 id="soft-spread-on-any-key-moves"),
]


@pytest.mark.parametrize("facts, blocker", MOVE_CASES)
def test_which_rules_keep_a_pod(facts: PodFacts, blocker: str | None) -> None:
    why = move_blocker(facts)
    assert (why is None) if blocker is None else (why is not None and blocker in why), why


def raw_node(name: str, day: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"pool": "gpu", HOSTNAME: name, ZONE: "a"},
                         "creationTimestamp": f"2026-11-{day:02d}T00:00:00Z"},
            "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}],
                                   "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "512Gi"}}}


def raw_replica(name: str, node_name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml", "labels": {"app": "infer"},
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": True}]},
            "spec": {"nodeName": node_name, "affinity": {"podAntiAffinity": {REQUIRED: ANTI}}, "containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running"}}


def test_a_spread_deployment_frees_one_node_onto_a_free_one() -> None:
    """Three replicas with hostname anti-affinity on n0..n2 of five nodes; n3 and n4 take jobs' work. The idle
    scale-in keeps all five; movable drains the newest replica's node onto a node without a replica (the other
    replicas' nodes refuse it)."""
    def job(i: int) -> dict[str, Any]:
        return {"metadata": {"name": f"train-{i}", "namespace": "ml", "labels": {"app": "train"},
                             "ownerReferences": [{"kind": "Job", "name": "j", "controller": True}]},
                "spec": {"nodeName": f"n{i}", "containers": [
                    {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
                "status": {"phase": "Running"}}
    views: list[NodeView] = [node_view(raw_node(f"n{i}", i + 1),
                                       [raw_replica(f"infer-{i}", f"n{i}") if i < 3 else job(i)],
                                       ("nvidia.com/gpu",)) for i in range(5)]
    pick = pick_movable(views, 1, (), 1)
    assert pick.drain is not None and pick.drain.name == "n2" and pick.idle == []
    stay = [v.room() for v in views if v.name != "n2"]
    assert place_all(pick.drain.pods, stay) is None
    assert [r.name for r in stay if len(r.pods) == 2] == ["n3"]  # no replica there; n3 and n4 tie: the first
    assert pick_victims(views, 1, (), "idle", 1)[0] == []  # what idle frees: nothing


def test_rules_parse_as_the_scheduler_reads_them() -> None:
    from autoscaler.cluster.labels import Selector
    from autoscaler.cluster.topology import pod_rules

    spec = {"affinity": {"podAntiAffinity": {REQUIRED: [
        term(mismatchLabelKeys=["tenant"]), term(namespaces=["a", "b"]), {"topologyKey": HOSTNAME}]}},
        "topologySpreadConstraints": [spread(matchLabelKeys=["pod-template-hash", "absent"], minDomains=2),
                                      spread(ZONE, whenUnsatisfiable="ScheduleAnyway")]}
    rules = pod_rules(spec, "ml", {"app": "infer", "tenant": "t1", "pod-template-hash": "h2"})
    own, listed, bare = rules.anti_affinity
    assert own.namespaces == ("ml",) and listed.namespaces == ("a", "b") and bare.selector is None
    assert own.selector == Selector((("app", "infer"),), (("tenant", "NotIn", ("t1",)),))
    assert not own.matches("ml", {"app": "infer", "tenant": "t1"}) and own.matches("ml", {"app": "infer"})
    assert not bare.matches("ml", {"app": "infer"})  # no labelSelector: matches no pod
    (hard,) = rules.spread  # ScheduleAnyway does not bind
    assert hard.selector == Selector((("app", "infer"),), (("pod-template-hash", "In", ("h2",)),))
    assert (hard.min_domains, hard.honor_affinity, hard.honor_taints, rules.unsimulated) == (2, True, False, "")


def test_the_pick_bench_measures_what_it_says() -> None:
    from bench.movable_fit import measure

    got = measure(nodes=6, pods=3, runs=1)
    assert [got[k]["drains"] for k in ("plain", "anti", "anti-full")] == ["gpu-004", "gpu-004", None]
