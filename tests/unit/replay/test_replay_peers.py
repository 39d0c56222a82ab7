"""The peers replayed beside ours: cluster-autoscaler's scale-up after one scan and its scale-down after 10 minutes
unneeded and 10 minutes after an addition, with and without pause pods; and the replay's summary and CLI."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from autoscaler.__main__ import main
from autoscaler.replay.peers import PeerSettings, cluster_autoscaler, need, peer_figures
from tests.support.replay_cases import T0, config, write_trace

BOOT = 300.0


@pytest.mark.parametrize(("demand", "ca", "actions", "ready"), [
    pytest.param([1.0] * 3 + [4.0] * 12, PeerSettings(boot=BOOT, initial=1),
                 [(180 + 10, "scale_out", 4)], {3: 1, 8: 1, 9: 4, 14: 4},
                 id="step-of-pending-demand-scales-up-one-scan-later-ready-after-boot"),
    pytest.param([1.0] * 3 + [3.2] * 12, PeerSettings(boot=BOOT, initial=1, overprovision=1),
                 [(10, "scale_out", 2), (190, "scale_out", 5)], {0: 1, 5: 1, 6: 2, 8: 2, 9: 5},
                 id="pause-pods-keep-one-more-node-and-round-up"),
    pytest.param([2.5] * 10, PeerSettings(boot=BOOT, initial=1, high=2), [(10, "scale_out", 2)], {5: 1, 6: 2, 9: 2},
                 id="max-caps-the-scale-up"),
    pytest.param([0.0] * 15, PeerSettings(boot=BOOT, initial=2, low=1), [(610, "scale_in", 1)], {10: 2, 11: 1},
                 id="idle-node-goes-after-ten-minutes-unneeded-never-below-min"),
    pytest.param([0.0] * 30, PeerSettings(boot=BOOT, initial=3, low=0, unneeded_time=1200.0),
                 [(1210, "scale_in", 0)], {20: 3, 21: 0}, id="unneeded-time-is-a-setting"),
    pytest.param([1.0] * 30, PeerSettings(boot=BOOT, initial=1, overprovision=0), [], {0: 1, 29: 1},
                 id="demand-that-fits-changes-nothing"),
    pytest.param([2.5] * 30, PeerSettings(boot=BOOT, initial=4), [], {29: 4},
                 id="a-spare-node-stays-while-the-nodes-are-over-half-used"),
    pytest.param([1.4] * 30, PeerSettings(boot=BOOT, initial=4), [(610, "scale_in", 2)], {10: 4, 11: 2},
                 id="under-half-used-the-nodes-beyond-the-need-go"),
])
def test_cluster_autoscaler_model(demand: list[float], ca: PeerSettings, actions: list[tuple[float, str, int]],
                                  ready: dict[int, int]) -> None:
    run = cluster_autoscaler(demand, T0, ca)
    assert [(t - T0, kind, size) for t, kind, size in run.actions] == actions
    assert {minute: run.ready[minute] for minute in ready} == ready


def test_scale_down_waits_ten_minutes_after_an_addition_even_when_unneeded_longer() -> None:
    # 4 nodes of demand for 3 minutes: scale-up at 10 s to 4 (ready at minute 6 at the earliest: 10 + 300 s).
    # Demand falls to 1 at minute 3: three nodes unneeded from the scan at 190 s. Unneeded for 10 min at 790 s,
    # but the addition at 10 s blocks scale-down until 610 s only, so the removal is at the first scan at or after
    # both: 790 s (the scan of minute 13). With the delay after add at 20 min, the removal waits for 1210 s.
    demand = [4.0] * 3 + [1.0] * 25
    quick = cluster_autoscaler(demand, T0, PeerSettings(boot=BOOT, initial=1))
    assert [(t - T0, k, n) for t, k, n in quick.actions] == [(10, "scale_out", 4), (790, "scale_in", 1)]
    slow = cluster_autoscaler(demand, T0, PeerSettings(boot=BOOT, initial=1, delay_after_add=1200.0))
    assert [(t - T0, k, n) for t, k, n in slow.actions] == [(10, "scale_out", 4), (1210, "scale_in", 1)]


def test_a_node_needed_again_restarts_its_unneeded_clock() -> None:
    # 3 nodes; demand 1 (a third used) leaves two unneeded from 10 s, demand 2 at minute 8 (two thirds used,
    # over the 0.5 threshold) makes them needed again (their clock is cleared), demand 1 from minute 9 starts it
    # anew at 550 s: removed at 550 + 600 = 1150 s, not at 610 s.
    demand = [1.0] * 8 + [2.0] + [1.0] * 15
    run = cluster_autoscaler(demand, T0, PeerSettings(boot=BOOT, initial=3))
    assert [(t - T0, k, n) for t, k, n in run.actions] == [(1150, "scale_in", 1)]


def test_peer_figures_count_ready_nodes_saturation_and_direction_changes() -> None:
    run = cluster_autoscaler([1.0] * 3 + [4.0] * 12 + [1.0] * 30, T0, PeerSettings(boot=BOOT, initial=1))
    data = peer_figures(run, gpus_per_node=8, foresight=10.0)
    assert data["saturated_minutes"] == 6  # minutes 3-8: demand 4 on 1 ready node
    # 100% used: minutes 0-2 (1 on 1 node), 3-8 (4 on 1), 9-14 (4 on 4), and 26-44 (1 on 1 after the removal at
    # 1510 s); 15-25 are 1 on 4
    assert data["minutes_above_90"] == 3 + 6 + 6 + 19
    assert data["unmet_demand_gpu_minutes"] == pytest.approx(6 * 3 * 8)
    assert (data["scale_actions"], data["direction_changes"]) == (2, 1)
    assert data["node_hours"] == pytest.approx(sum(run.ready) / 60.0, abs=1e-4)
    assert data["vs_foresight"] == pytest.approx(data["node_hours"] / 10.0, abs=1e-4)
    assert need(0.0, PeerSettings(boot=BOOT, low=1, overprovision=2)) == 2


def test_replay_summary_and_cli_give_both_peers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "replay.yaml"
    cfg.write_text(yaml.safe_dump(config()))
    trace = write_trace(tmp_path / "t.csv", [0.5] * 10 + [3.0] * 30 + [0.5] * 40)
    assert main(["replay", "--config", str(cfg), "--trace", str(trace), "--out", str(tmp_path / "out"),
                 "--overprovision", "2"]) == 0
    data = json.loads((tmp_path / "out" / "summary.json").read_text())
    plain, padded = (data["baselines"][k] for k in ("cluster_autoscaler", "cluster_autoscaler_overprovisioned"))
    for peer in (plain, padded):  # the contract's keys of a baseline, and the ratio to foresight
        assert {"node_hours", "saturated_minutes", "minutes_above_90", "scale_actions", "direction_changes",
                "vs_foresight"} <= set(peer)
    assert (plain["overprovision"], padded["overprovision"]) == (0, 2)
    assert padded["node_hours"] > plain["node_hours"] and padded["saturated_minutes"] < plain["saturated_minutes"]
    # the plain peer asks for 3 nodes at 610 s (minute 10 + one scan), ready from minute 16: 6 saturated minutes
    assert plain["saturated_minutes"] == 6
    assert "cluster-autoscaler" in capsys.readouterr().out
    assert main(["replay", "--config", str(cfg), "--trace", str(trace), "--out", str(tmp_path / "o2"),
                 "--overprovision", "-1"]) == 1
