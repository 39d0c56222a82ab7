"""The replay's named nodes and GPU work: least-allocated placement, first-arrived-first-done, and the work a
removal cuts (``interrupted_node_minutes``), for ``victims: idle`` and for the cloud picking the newest node."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.__main__ import main
from autoscaler.config.load import build_settings
from autoscaler.models import Outcome
from autoscaler.cluster.nodes import pick_victims
from autoscaler.replay.cluster import ReplayCluster
from autoscaler.replay.report import figures, summary
from autoscaler.replay.sim import simulate, static_peak
from autoscaler.replay.trace import Trace, load_trace, parse_time
from tests.support.replay_cases import config as replay_config

T0 = parse_time("2025-01-06T00:00:00Z")
ROOT = Path(__file__).resolve().parents[3]


def pods_per_node(cluster: ReplayCluster) -> dict[str, int]:
    return {n.name: len(n.gpu_pods) for n in cluster.nodes({})}


def test_work_spreads_to_the_node_with_the_most_free_gpus() -> None:
    cluster = ReplayCluster(["a", "b"], gpus_per_node=8, provision_seconds=300, start=T0)
    cluster.set_demand(1.5, T0)  # 12 one-GPU pods
    assert pods_per_node(cluster) == {"a": 6, "b": 6}  # spread, not packed 8 + 4
    cluster.follow(["a", "b", "c"], T0)
    cluster.set_demand(2.0, T0 + 60)  # 4 more pods, c is not ready: a and b take them
    assert pods_per_node(cluster) == {"a": 8, "b": 8, "c": 0}
    cluster.set_demand(2.5, T0 + 120)  # 4 more: no free GPU anywhere ready, they wait
    assert sum(pods_per_node(cluster).values()) == 16
    cluster.place(T0 + 300)  # c is ready: the waiting pods go there
    assert pods_per_node(cluster) == {"a": 8, "b": 8, "c": 4}


def test_pack_fills_the_fullest_node_that_fits() -> None:
    cluster = ReplayCluster(["a", "b", "c"], gpus_per_node=8, provision_seconds=0, start=T0, pack=True)
    cluster.set_demand(1.5, T0)
    assert pods_per_node(cluster) == {"a": 8, "b": 4, "c": 0}
    cluster.set_demand(0.5, T0 + 60)  # pods 1-8 finish: a is empty, the next pods join b
    cluster.set_demand(1.0, T0 + 120)
    assert pods_per_node(cluster) == {"a": 0, "b": 8, "c": 0}


def test_first_arrived_finish_first_and_cordoned_nodes_take_nothing() -> None:
    cluster = ReplayCluster(["a", "b"], gpus_per_node=4, provision_seconds=0, start=T0)
    cluster.set_demand(1.0, T0)  # pods 1..4: a gets 1 and 3, b gets 2 and 4 (ties go to the older node)
    cluster.set_demand(0.5, T0 + 60)  # pods 1 and 2 finish
    assert {n.name: [p.name for p in n.gpu_pods] for n in cluster.nodes({})} == {
        "a": ["work-3"], "b": ["work-4"]}
    cluster.cordon("a", "replay", T0 + 60)
    cluster.set_demand(1.0, T0 + 120)
    assert pods_per_node(cluster) == {"a": 1, "b": 3}
    assert cluster.node("a") is not None and cluster.node("a").cordoned  # type: ignore[union-attr]


def test_waiting_pods_start_in_arrival_order_when_a_boot_ends_a_gpu_frees_or_a_node_is_uncordoned() -> None:
    """The moments that let a waiting pod run (the cluster skips placing between them, so it must see each one); a
    pod cut earlier goes before the pods that arrived after it."""
    cluster = ReplayCluster(["a"], gpus_per_node=2, provision_seconds=300, start=T0, owners={"a": "p1"})

    def where() -> dict[str, list[str]]:
        return {n.name: [p.name for p in n.gpu_pods] for n in cluster.nodes({})}

    cluster.set_demand(1.0, T0)  # pods 1, 2 on a
    cluster.follow(["a", "b"], T0 + 10, owners={"a": "p1", "b": "p2"})  # b boots until T0 + 310
    cluster.set_demand(2.0, T0 + 60)  # pods 3, 4 wait
    cluster.place(T0 + 309.9)
    assert where() == {"a": ["work-1", "work-2"], "b": []}
    assert (cluster.ready(T0 + 309.9), cluster.ready(T0 + 310)) == (1, 2)
    assert (cluster.ready_by_pool(T0 + 309.9), cluster.ready_by_pool(T0 + 310)) == ({"p1": 1}, {"p1": 1, "p2": 1})
    cluster.place(T0 + 310)  # b's boot ended
    assert where() == {"a": ["work-1", "work-2"], "b": ["work-3", "work-4"]}
    cluster.cordon("b", "replay", T0 + 320)
    cluster.evict("replay", "work-3")  # it waits: b is cordoned, a is full
    cluster.set_demand(2.5, T0 + 360)  # pod 5 arrives and waits behind pod 3
    cluster.place(T0 + 400)
    assert where() == {"a": ["work-1", "work-2"], "b": ["work-4"]}
    cluster.set_demand(2.0, T0 + 420)  # pod 1 (the first arrived) finishes: its GPU goes to pod 3, not pod 5
    assert where() == {"a": ["work-2", "work-3"], "b": ["work-4"]}
    cluster.uncordon("b")
    assert where() == {"a": ["work-2", "work-3"], "b": ["work-4", "work-5"]}
    cluster.follow(["b"], T0 + 480, owners={"b": "p2"})  # a goes: its pods wait, b is full
    assert (cluster.ready(T0 + 480), cluster.ready_by_pool(T0 + 480)) == (1, {"p2": 1})
    cluster.set_demand(0.5, T0 + 540)  # pods 2 and 3 (waiting) and 4 finish: pod 5 runs alone
    cluster.set_demand(1.5, T0 + 600)  # pods 6 and 7 arrive: one GPU is free on b
    assert where() == {"b": ["work-5", "work-6"]}


def test_a_removed_node_cuts_its_work_which_runs_again_elsewhere() -> None:
    cluster = ReplayCluster(["a", "b"], gpus_per_node=8, provision_seconds=0, start=T0)
    cluster.set_demand(0.5, T0)  # 4 pods, 2 on each node, started at T0
    cluster.follow(["a"], T0 + 30 * 60)
    # 2 pods x 30 min x 1 GPU of an 8-GPU node = 7.5 node-minutes of work lost
    assert (cluster.interrupted_node_minutes, cluster.interrupted_pods) == (7.5, 2)
    assert pods_per_node(cluster) == {"a": 4}
    cluster.follow([], T0 + 40 * 60)  # the two that restarted on a had run 10 min, the other two 40
    assert cluster.interrupted_node_minutes == 7.5 + (2 * 40 + 2 * 10) / 8


def test_idle_victims_skip_busy_nodes_through_pick_victims() -> None:
    cluster = ReplayCluster(["a", "b", "c"], gpus_per_node=8, provision_seconds=0, start=T0)
    cluster.set_demand(0.125, T0)  # one pod, on a
    chosen, kept = pick_victims(cluster.nodes({}), 2, (), "idle", 1)
    assert [n.name for n in chosen] == ["c", "b"]
    assert [(n.name, why) for n, why in kept] == [("a", "kept a: runs GPU pod replay/work-1 (nvidia.com/gpu 1)")]


def config() -> dict[str, Any]:
    """Two nodes, min 1, 8 GPUs each; scale-in on utilisation below 30% for 10 min, step 1."""
    return replay_config({"max": 4, "simulated": {"nodes": ["gpu-old", "gpu-new"], "provision_seconds": 300}},
                         rules=[{"alert": "GPULow", "below": 30, "for": "10m", "pool": "gpu", "action": "scale_in"}])


# 12 pods for 10 min (6 on each node), then 4 (the first 8 finish: pods 9-12 stay, 2 on each node) for 50 min.
# 25% < 30% from minute 10: firing at 1200 s, notified at 1230 s: the scale-in from 2 nodes to 1.
BUSY_BOTH = [1.5] * 10 + [0.5] * 50
# The same, then 1 pod (pod 12, on the newest node) from minute 10: the oldest node is idle.
BUSY_NEWEST = [1.5] * 10 + [0.125] * 50


SCALED, IN_USE = Outcome.SCALED, Outcome.SKIPPED_IN_USE


@pytest.mark.parametrize("demand,victims,outcome,left,interrupted,pods", [
    # the cloud removes the newest node with pods 10 and 12 on it, running since T0: 2 x 20.5 min / 8
    pytest.param(BUSY_BOTH, "cloud", SCALED, ["gpu-old"], 2 * 20.5 / 8, 2, id="cloud-cuts-the-newest-nodes-work"),
    pytest.param(BUSY_BOTH, "idle", IN_USE, ["gpu-old", "gpu-new"], 0.0, 0, id="idle-keeps-both-busy-nodes"),
    pytest.param(BUSY_NEWEST, "cloud", SCALED, ["gpu-old"], 1 * 20.5 / 8, 1, id="cloud-cuts-the-last-pod"),
    pytest.param(BUSY_NEWEST, "idle", SCALED, ["gpu-new"], 0.0, 0, id="idle-removes-the-idle-older-node"),
])
def test_interrupted_work_computed_by_hand(demand: list[float], victims: str, outcome: Outcome, left: list[str],
                                           interrupted: float, pods: int) -> None:
    run = simulate(build_settings(config(), env={}), Trace(T0, tuple(demand)), victims=victims)
    (when, decision), *_ = run.decisions
    assert (when - T0, decision.outcome, decision.action) == (1230.0, outcome, "scale_in")
    assert run.minutes[-1].ready == len(left)
    if victims == "idle":  # the engine's node-aware scale-in said which nodes went and why the others stayed
        assert decision.details["nodes"] == [n for n in ("gpu-old", "gpu-new") if n not in left]
        kept = {k["node"]: k["reason"] for k in decision.details["kept"]}
        assert set(kept) == set(left) and all(r.startswith("runs GPU pod replay/work-") for r in kept.values())
    assert (run.interrupted_node_minutes, run.interrupted_pods) == (interrupted, pods)
    assert figures(run)["interrupted_node_minutes"] == interrupted


def test_summary_sets_the_pools_victims_beside_the_clouds() -> None:
    settings = build_settings(config(), env={})
    trace = Trace(T0, tuple(BUSY_BOTH))
    idle, cloud = simulate(settings, trace, victims="idle"), simulate(settings, trace, victims="cloud")
    data = summary(idle, static_peak(trace), cloud, cloud, "idle")
    assert data["interrupted_node_minutes_by_victims"] == {"idle": 0.0, "cloud": 2 * 20.5 / 8}
    assert data["baselines"]["cloud_newest"]["interrupted_node_minutes"] == 2 * 20.5 / 8
    assert data["baselines"]["static_peak"]["interrupted_node_minutes"] == 0.0


@pytest.mark.parametrize("placement", ["spread", "pack"])
@pytest.mark.parametrize("config_name", ["step", "proportional"])
@pytest.mark.parametrize("trace_name", ["diurnal_inference", "training_queue"])
def test_sample_traces_idle_interrupts_nothing_cloud_does(config_name: str, trace_name: str,
                                                          placement: str) -> None:
    raw = yaml.safe_load((ROOT / f"bench/replay/{config_name}.yaml").read_text())
    raw["replay"]["placement"] = placement
    settings = build_settings(raw, env={})
    trace = load_trace(str(ROOT / f"bench/traces/{trace_name}.csv"))
    idle = simulate(settings, trace, victims="idle")
    cloud = simulate(settings, trace, victims="cloud")
    assert idle.interrupted_node_minutes == 0.0 and idle.interrupted_pods == 0
    assert cloud.interrupted_node_minutes > 0 and cloud.interrupted_pods > 0
    if placement == "spread":  # spread work keeps busy nodes longer
        assert figures(cloud)["node_hours"] < figures(idle)["node_hours"]


def test_cli_summary_sets_victims_idle_beside_the_cloud(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = config()
    raw["kubernetes"] = {"host": "https://kubernetes.replay.invalid"}  # check-config's; the replay never calls it
    raw["pools"][0].update(node_selector="pool=gpu", scale_in={**raw["pools"][0]["scale_in"], "victims": "idle"})
    (tmp_path / "idle.yaml").write_text(yaml.safe_dump(raw))
    rows = ["timestamp,demand"] + [f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(T0 + 60 * i))},{d}"
                                   for i, d in enumerate(BUSY_BOTH)]
    (tmp_path / "trace.csv").write_text("\n".join(rows) + "\n")
    code = main(["replay", "--config", str(tmp_path / "idle.yaml"), "--trace", str(tmp_path / "trace.csv"),
                 "--out", str(tmp_path / "out")])
    assert code == 0
    data = json.loads((tmp_path / "out/summary.json").read_text())
    # fired at 1230 s, repeated every 5 min to the end of the hour; a skipped_in_use starts no cooldown
    assert data["victims"] == "idle" and data["outcomes"] == {"skipped_in_use": 8}
    assert data["interrupted_node_minutes_by_victims"] == {"idle": 0.0, "cloud": 2 * 20.5 / 8}
    assert data["baselines"]["cloud_newest"]["outcomes"]["scaled"] == 1
    assert "interrupted work 0.0 node-min with victims idle (cloud picking the newest: 5.1)" in capsys.readouterr().out


@pytest.mark.parametrize("named,outcome,left", [
    pytest.param("gpu-old", SCALED, 1, id="named-idle-node-goes"),
    pytest.param("gpu-new", IN_USE, 2, id="named-busy-node-stays"),
])
def test_alerted_victims_take_the_node_the_rule_names(named: str, outcome: Outcome, left: int) -> None:
    raw = config()
    raw["replay"]["rules"][0]["labels"] = {"node": named}  # routing.node_label's default
    run = simulate(build_settings(raw, env={}), Trace(T0, tuple(BUSY_NEWEST)), victims="alerted")
    (_, decision), *_ = run.decisions
    assert decision.outcome is outcome and run.minutes[-1].ready == left
    assert run.interrupted_node_minutes == 0.0


@pytest.mark.parametrize("victims,outcome,ready,interrupted", [
    pytest.param("cloud", SCALED, 1, 4 * 20.5 / 8, id="cloud-cuts-the-packed-newest-node"),
    pytest.param("idle", SCALED, 1, 0.0, id="idle-removes-the-emptied-oldest-node"),
])
def test_packed_work_leaves_an_idle_node(victims: str, outcome: Outcome, ready: int, interrupted: float) -> None:
    # pack: pods 1-8 on gpu-old, 9-12 on gpu-new; when 8 finish, gpu-old is empty and gpu-new holds the rest
    raw = config()
    raw["replay"]["placement"] = "pack"
    run = simulate(build_settings(raw, env={}), Trace(T0, tuple(BUSY_BOTH)), victims=victims)
    (_, decision), *_ = run.decisions
    assert decision.outcome is outcome and run.minutes[-1].ready == ready
    assert run.interrupted_node_minutes == interrupted


def test_a_replay_config_needs_no_cluster_section_for_victims(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The replay's own cluster holds the pool's nodes: `victims: idle` replays without a `kubernetes:` section or a
    `node_selector` (which the service itself needs, and check-config still asks for), with the same figures."""
    raw = config()
    raw["pools"][0].update(scale_in={**raw["pools"][0]["scale_in"], "victims": "idle"})
    (tmp_path / "idle.yaml").write_text(yaml.safe_dump(raw))
    rows = ["timestamp,demand"] + [f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(T0 + 60 * i))},{d}"
                                   for i, d in enumerate(BUSY_BOTH)]
    (tmp_path / "trace.csv").write_text("\n".join(rows) + "\n")
    code = main(["replay", "--config", str(tmp_path / "idle.yaml"), "--trace", str(tmp_path / "trace.csv"),
                 "--out", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    data = json.loads((tmp_path / "out/summary.json").read_text())
    assert data["victims"] == "idle" and data["outcomes"] == {"skipped_in_use": 8}
    assert data["interrupted_node_minutes_by_victims"] == {"idle": 0.0, "cloud": 2 * 20.5 / 8}
    assert main(["check-config", str(tmp_path / "idle.yaml")]) == 1  # the service would need the cluster
    assert "needs the top-level `kubernetes:` section" in capsys.readouterr().err
