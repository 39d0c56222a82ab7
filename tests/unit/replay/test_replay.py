"""The what-if replay on small synthetic traces with answers computed by hand, and its CLI."""
from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any

import pytest

from autoscaler.__main__ import main
from autoscaler.config.load import build_settings
from autoscaler.models import Outcome
from autoscaler.replay.report import figures
from autoscaler.replay.sim import simulate, static_peak
from autoscaler.replay.trace import Trace, load_trace
from tests.support.replay_cases import T0, config, write_trace

ROOT = Path(__file__).resolve().parents[3]


def test_step_up_first_scale_out_at_the_time_computed_by_hand() -> None:
    # Demand 1 for 10 min on 1 node (100% would fire, so start at 0.7 = 70%), then 5 from minute 10.
    # Utilisation hits 100% at the evaluation at 600 s; `for: 2m` -> firing at 720 s; group_wait 30 s ->
    # notification at 750 s; the node asked for then is ready at 750 + 300 = 1050 s.
    run = simulate(build_settings(config(), env={}), Trace(T0, tuple([0.7] * 10 + [5.0] * 20)))
    first_time, first = run.decisions[0]
    assert first_time - T0 == 750.0
    assert (first.outcome, first.action, first.from_, first.to) == (Outcome.SCALED, "scale_out", 1, 2)
    rows = {int((m.time - T0) // 60): m for m in run.minutes}
    assert rows[12].outcomes == ("scaled",)  # 750 s falls in the minute starting at 720 s
    assert (rows[12].requested, rows[13].requested) == (1, 2)
    assert (rows[17].ready, rows[18].ready) == (1, 2)  # ready at 1050 s, inside minute 17
    # The next notification is the repeat 5 min later (1050 s): the pool is no longer busy, so it acts again.
    assert (run.decisions[1][0] - T0, run.decisions[1][1].to) == (1050.0, 3)


def test_constant_trace_node_hours_are_exact() -> None:
    # 1.5 nodes of work on 2 nodes = 75%: between the thresholds, so nothing ever fires.
    settings = build_settings(config({"simulated": {"initial_count": 2, "provision_seconds": 300}}), env={})
    trace = Trace(T0, tuple([1.5] * 90))
    out = figures(simulate(settings, trace))
    assert (out["node_hours"], out["saturated_minutes"], out["minutes_above_90"]) == (3.0, 0, 0)
    assert (out["scale_actions"], out["direction_changes"], out["outcomes"]) == (0, 0, {})
    assert figures(static_peak(trace))["node_hours"] == 3.0  # ceil(1.5) = 2 nodes for 90 min


def test_resolved_notification_is_sent_and_ignored() -> None:
    # 5 nodes of work on 1 node for 5 min, then 0.5: fires at 120 s, notifies at 150 s, resolves at 300 s.
    run = simulate(build_settings(config(), env={}), Trace(T0, tuple([5.0] * 5 + [0.5] * 5)))
    statuses = [(t - T0, body["status"]) for t, body in run.notifications]
    assert statuses == [(150.0, "firing"), (330.0, "resolved")]  # resolved at the next group flush
    assert [d.outcome for _, d in run.decisions] == [Outcome.SCALED, Outcome.IGNORED_RESOLVED]
    assert run.notifications[0][1]["alerts"][0]["annotations"]["value"] == "100"


def test_proportional_scales_by_the_formula() -> None:
    pool = {"max": 20, "simulated": {"initial_count": 4, "provision_seconds": 300},
            "scale_out": {"mode": "proportional", "target_utilization": 50, "max_step": 10, "cooldown": "3m"}}
    run = simulate(build_settings(config(pool), env={}), Trace(T0, tuple([3.6] * 10)))
    [(when, decision)] = [(t, d) for t, d in run.decisions if d.outcome is Outcome.SCALED]
    # 90% on 4 nodes -> ceil(4 x 90 / 50) = 8; at 450 s the 8 nodes are ready and the alert resolves
    assert (when - T0, decision.from_, decision.to) == (150.0, 4, 8)
    assert "ceil(4 x 90 / 50) = 8" in decision.reason


def test_day_long_trace_replays_in_under_ten_seconds(tmp_path: Path) -> None:
    started = time.monotonic()
    code = main(["replay", "--config", str(ROOT / "bench/replay/proportional.yaml"),
                 "--trace", str(ROOT / "bench/traces/diurnal_inference.csv"), "--out", str(tmp_path / "out")])
    assert code == 0 and time.monotonic() - started < 10.0
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert set(summary) >= {"node_hours", "saturated_minutes", "minutes_above_90", "scale_actions",
                            "direction_changes", "baselines"}
    assert set(summary["baselines"]) == {"static_peak", "fixed_step", "cloud_newest", "cluster_autoscaler",
                                          "cluster_autoscaler_overprovisioned"}
    assert summary["victims"] == "cloud" and summary["interrupted_node_minutes"] > 0
    assert summary["interrupted_node_minutes_by_victims"] == {"cloud": summary["interrupted_node_minutes"]}
    with open(tmp_path / "out/timeline.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["timestamp", "demand", "ready", "requested", "utilization", "outcomes"]
    assert len(rows) == 1 + 1440 and rows[1][0] == "2025-01-06T00:00:00Z"
    assert (tmp_path / "out/replay.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("text", "message"), [
    pytest.param("time,demand\n", "line 1: expected the header timestamp,demand", id="bad-header"),
    pytest.param("timestamp,demand\n2025-01-06T00:00:00Z,1\n2025-01-06T00:02:00Z,1\n",
                 "line 3: timestamp 2025-01-06T00:02:00Z is not 60 s after", id="gap"),
    pytest.param("timestamp,demand\n2025-01-06T00:00:00Z,lots\n", "line 2: demand 'lots' is not a number",
                 id="not-a-number"),
    pytest.param("timestamp,demand\n2025-01-06T00:00:00Z,-1\n", "line 2: demand '-1' must be", id="negative"),
    pytest.param("timestamp,demand\n2025-01-06T00:00:00+02:00,1\n", "line 2: timestamp", id="not-utc"),
    pytest.param("timestamp,demand\n", "no rows after the header", id="empty"),
])
def test_bad_trace_exits_1_naming_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                          message: str) -> None:
    (tmp_path / "trace.csv").write_text(text)
    (tmp_path / "c.yaml").write_text(json.dumps(config()))
    assert main(["replay", "--config", str(tmp_path / "c.yaml"), "--trace", str(tmp_path / "trace.csv"),
                 "--out", str(tmp_path / "out")]) == 1
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("change", "message"), [
    pytest.param(lambda c: c.pop("replay"), "replay: missing", id="no-replay-section"),
    pytest.param(lambda c: c["replay"]["rules"][0].update(pool="cpu"), "replay.rules[0].pool: no pool named 'cpu'",
                 id="unknown-pool"),
    pytest.param(lambda c: c["replay"]["rules"][1].pop("below"), "replay.rules[1]: give exactly one",
                 id="no-threshold"),
    pytest.param(lambda c: c["replay"].update(evaluation_interval="soon"), "replay.evaluation_interval: must be "
                 "a duration", id="bad-duration"),
    pytest.param(lambda c: c["replay"]["rules"][0].update(fro="2m"), "replay.rules[0].fro: Extra inputs",
                 id="unknown-key"),
])
def test_bad_config_exits_1_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          change: Any, message: str) -> None:
    cfg = config()
    change(cfg)
    (tmp_path / "c.yaml").write_text(json.dumps(cfg))
    trace = write_trace(tmp_path / "trace.csv", [1.0] * 3)
    assert main(["replay", "--config", str(tmp_path / "c.yaml"), "--trace", str(trace),
                 "--out", str(tmp_path / "out")]) == 1
    assert message in capsys.readouterr().err


def test_load_trace_reads_what_it_is_given(tmp_path: Path) -> None:
    trace = load_trace(str(write_trace(tmp_path / "t.csv", [0.5, 2.25, 3.0])))
    assert (trace.start, trace.demand, trace.at(T0 + 61)) == (T0, (0.5, 2.25, 3.0), 2.25)
