"""The replay's movable work: inference replicas (a ReplicaSet's) that ``victims: movable`` drains and the
scheduler places again, beside Jobs' pods that keep their node; ``evictions`` and ``interrupted_node_minutes``."""
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
from autoscaler.replay.cluster import ReplayCluster
from autoscaler.replay.report import figures
from autoscaler.replay.sim import simulate
from autoscaler.replay.trace import Trace, load_trace, parse_time

T0 = parse_time("2025-01-06T00:00:00Z")
ROOT = Path(__file__).resolve().parents[3]
# 12 pods for 10 min, then the first 8 finish: pods 9-12 stay, 9 and 11 on gpu-old, 10 and 12 on gpu-new. With
# movable_share 0.5 the even pods are replicas: gpu-new holds replicas only. Notified at 1230 s: 2 nodes -> 1.
BUSY_BOTH = [1.5] * 10 + [0.5] * 50


def config(share: float) -> dict[str, Any]:
    return {
        "server": {"auth": {"disabled": True}},
        "defaults": {"dedup_window": "1m"},
        "pools": [{"name": "gpu", "provider": "simulated", "min": 1, "max": 4,
                   "scale_out": {"step": 1, "cooldown": "3m"},
                   "scale_in": {"step": 1, "cooldown": "10m", "delay_after_scale_out": "10m", "victims": "movable"},
                   "simulated": {"nodes": ["gpu-old", "gpu-new"], "provision_seconds": 300}}],
        "replay": {"evaluation_interval": "30s", "group_wait": "30s", "group_interval": "1m",
                   "repeat_interval": "5m", "movable_share": share,
                   "rules": [{"alert": "GPULow", "below": 30, "for": "10m", "pool": "gpu", "action": "scale_in"}]},
    }


def test_replicas_are_spread_evenly_over_arrivals() -> None:
    cluster = ReplayCluster(["a"], 8, 0, T0, movable_share=0.25)
    assert [n for n in range(1, 9) if cluster.movable(n)] == [4, 8]
    assert not any(ReplayCluster(["a"], 8, 0, T0).movable(n) for n in range(1, 9))


@pytest.mark.parametrize("share,victims,outcome,left,evictions,interrupted", [
    pytest.param(0.5, "movable", Outcome.SCALED, 1, 2, 0.0, id="movable-drains-the-replicas-node"),
    pytest.param(0.5, "idle", Outcome.SKIPPED_IN_USE, 2, 0, 0.0, id="idle-keeps-both"),
    pytest.param(0.0, "movable", Outcome.SKIPPED_IN_USE, 2, 0, 0.0, id="movable-keeps-jobs-nodes"),
    pytest.param(0.0, "cloud", Outcome.SCALED, 1, 0, 2 * 20.5 / 8, id="cloud-cuts-two-jobs"),
])
def test_computed_by_hand(share: float, victims: str, outcome: Outcome, left: int, evictions: int,
                          interrupted: float) -> None:
    run = simulate(build_settings(config(share), env={}, replay=True), Trace(T0, tuple(BUSY_BOTH)), victims=victims)
    (when, decision), *_ = run.decisions
    assert (when - T0, decision.outcome) == (1230.0, outcome)
    assert run.minutes[-1].ready == left
    assert (run.evictions, run.interrupted_node_minutes) == (evictions, interrupted)
    if (share, victims) == (0.5, "movable"):
        assert decision.details["nodes"] == ["gpu-new"]
    if (share, victims) == (0.0, "movable"):
        kept = {k["node"]: k["reason"] for k in decision.details["kept"]}
        assert kept["gpu-new"] == "pod replay/work-10 is owned by a Job (movable: ReplicaSet, StatefulSet): cannot move"


@pytest.mark.parametrize("trace_name", ["diurnal_inference", "training_queue"])
def test_sample_traces_movable_costs_what_the_cloud_does_and_cuts_no_job(trace_name: str) -> None:
    """The goal: within 5% of the cloud's node-hours, no Job's work cut, on both sample days (default spreading)."""
    raw = yaml.safe_load((ROOT / "bench/replay/movable.yaml").read_text())
    settings = build_settings(raw, env={}, replay=True)
    trace = load_trace(str(ROOT / f"bench/traces/{trace_name}.csv"))
    runs = {v: figures(simulate(settings, trace, victims=v)) for v in ("movable", "idle", "cloud")}
    assert runs["movable"]["interrupted_node_minutes"] == 0.0 and runs["movable"]["evictions"] > 0
    assert runs["cloud"]["interrupted_node_minutes"] > 0
    assert runs["movable"]["node_hours"] <= 1.05 * runs["cloud"]["node_hours"] < runs["idle"]["node_hours"]


def test_cli_summary_has_evictions_and_idle_beside_the_cloud(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "movable.yaml").write_text(yaml.safe_dump(config(0.5)))
    rows = ["timestamp,demand"] + [f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(T0 + 60 * i))},{d}"
                                   for i, d in enumerate(BUSY_BOTH)]
    (tmp_path / "trace.csv").write_text("\n".join(rows) + "\n")
    assert main(["replay", "--config", str(tmp_path / "movable.yaml"), "--trace", str(tmp_path / "trace.csv"),
                 "--out", str(tmp_path / "out")]) == 0
    data = json.loads((tmp_path / "out/summary.json").read_text())
    assert data["victims"] == "movable" and data["evictions"] == 2 and data["interrupted_node_minutes"] == 0.0
    assert data["baselines"]["idle"]["outcomes"] == {"skipped_in_use": 8}
    assert data["interrupted_node_minutes_by_victims"] == {"movable": 0.0, "cloud": 0.0, "idle": 0.0}
    assert "2 evictions" in capsys.readouterr().out
