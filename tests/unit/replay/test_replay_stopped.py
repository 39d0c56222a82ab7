"""``simulated.stopped``: a pool that stops the nodes a scale-in removes (AKS ``scaleDownMode: Deallocate``, a warm
pool) and starts them again first, in the replay: a restarted node is ready after ``restart_seconds``, a new one
after ``provision_seconds``; a stopped node is no ready node."""
from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from autoscaler.config.load import build_settings
from autoscaler.replay.cluster import ReplayCluster
from autoscaler.replay.report import figures
from autoscaler.replay.sim import simulate
from autoscaler.replay.trace import Trace
from providers.simulated import SimulatedSettings
from tests.support.replay_cases import T0, config


def test_removed_nodes_are_kept_stopped_up_to_keep_and_start_again_first() -> None:
    owners = {n: "gpu" for n in ("a", "b", "c", "d", "e", "f")}
    cluster = ReplayCluster(["a", "b", "c"], gpus_per_node=8, provision_seconds=300, start=T0, owners=owners,
                            stopped_by_pool={"gpu": (2, 60.0)})
    cluster.follow(["a"], T0 + 100, owners=owners)  # b and c removed: both kept stopped
    assert cluster.stopped == {"gpu": 2} and cluster.ready(T0 + 100) == 1
    cluster.follow(["a", "d", "e", "f"], T0 + 200, owners=owners)  # two restarts (60 s), one new node (300 s)
    assert cluster.restarts == 2 and cluster.stopped == {"gpu": 0}
    assert [cluster.ready(T0 + t) for t in (259, 261, 499, 501)] == [1, 3, 3, 4]
    cluster.follow([], T0 + 600, owners=owners)  # four removed, two kept (keep: 2), two deleted
    assert cluster.stopped == {"gpu": 2}


def test_a_pool_without_stopped_nodes_boots_every_node_anew() -> None:
    owners = {n: "gpu" for n in ("a", "b", "c")}
    cluster = ReplayCluster(["a", "b"], gpus_per_node=8, provision_seconds=300, start=T0, owners=owners)
    cluster.follow(["a"], T0 + 100, owners=owners)
    cluster.follow(["a", "c"], T0 + 200, owners=owners)
    assert cluster.restarts == 0 and [cluster.ready(T0 + t) for t in (261, 501)] == [1, 2]


def _run(pool: dict[str, Any]) -> dict[str, Any]:
    # demand 3 nodes for an hour, 1 for an hour (the pool scales in), 3 again: the second rise waits for its nodes
    demand = [3.0] * 60 + [0.5] * 60 + [3.0] * 60
    rules = [{"alert": "Pending", "pending_above": 0, "for": "0s", "pool": "gpu", "action": "scale_out"},
             {"alert": "Low", "below": 40, "for": "5m", "pool": "gpu", "action": "scale_in"}]
    raw = config({"gpus_per_node": 8, "scale_out": {"mode": "demand", "cooldown": "1m"},
                  "scale_in": {"step": 2, "cooldown": "1m", "delay_after_scale_out": "1m"},
                  "simulated": {"initial_count": 3, "provision_seconds": 600, **pool}}, rules)
    return figures(simulate(build_settings(raw, replay=True), Trace(T0, tuple(demand))))


def test_a_replay_restarts_stopped_nodes_faster_and_says_how_many() -> None:
    deleted = _run({})
    stopped = _run({"stopped": {"keep": 4, "restart_seconds": "2m"}})
    assert deleted["restarted_nodes"] == 0 and stopped["restarted_nodes"] == 2
    # the same decisions; the second rise is served 8 minutes sooner (10-minute boots against 2-minute restarts)
    assert stopped["scale_actions"] == deleted["scale_actions"]
    assert deleted["saturated_minutes"] - stopped["saturated_minutes"] == 8


def test_stopped_needs_a_keep_and_a_restart() -> None:
    with pytest.raises(ValidationError, match="keep"):
        SimulatedSettings(stopped={"keep": 0, "restart_seconds": 60})
    with pytest.raises(ValidationError, match="restart_seconds"):
        SimulatedSettings(stopped={"keep": 2})
    assert SimulatedSettings(stopped={"keep": 2, "restart_seconds": "3m"}).stopped.restart_seconds == 180
