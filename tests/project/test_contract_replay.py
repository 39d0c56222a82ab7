"""CONTRACT "Proportional mode and the what-if replay" and the replay side of "Demand sizing": the examples as
written (no `server` section) replay through ``python -m autoscaler replay``, and the outputs have the promised
shape."""
from __future__ import annotations

import csv
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.__main__ import main

CONFIGS = Path(__file__).resolve().parents[2] / "tests" / "support" / "configs"
KEYS = {"node_hours", "saturated_minutes", "minutes_above_90", "scale_actions", "direction_changes"}


def proportional_block() -> dict[str, Any]:
    """CONTRACT's example, without the server section the test copy adds."""
    raw = yaml.safe_load((CONFIGS / "contract_proportional.yaml").read_text())
    raw.pop("server")
    return raw  # type: ignore[no-any-return]


def write_trace(path: Path, demand: list[float]) -> Path:
    start = datetime(2026, 11, 16, tzinfo=timezone.utc)
    lines = ["timestamp,demand"] + [f"{(start + timedelta(minutes=i)).strftime('%Y-%m-%dT%H:%M:%SZ')},{d}"
                                    for i, d in enumerate(demand)]
    path.write_text("\n".join(lines) + "\n")
    return path


def surge() -> list[float]:
    return [2.0] * 60 + [9.0] * 120 + [2.0] * 180


def replay(tmp_path: Path, raw: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, Path]:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = tmp_path / "out"
    code = main(["replay", "--config", str(config), "--trace", str(write_trace(tmp_path / "t.csv", surge())),
                 "--out", str(out)])
    return code, capsys.readouterr().err, out


def test_the_proportional_example_replays_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOSCALER_TOKEN", raising=False)
    code, err, out = replay(tmp_path, proportional_block(), capsys)
    assert code == 0, err
    with open(out / "timeline.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["timestamp", "demand", "ready", "requested", "utilization", "outcomes"]
    assert len(rows) == 1 + len(surge())
    assert rows[1][0] == "2026-11-16T00:00:00Z"
    decided = [r[5] for r in rows[1:] if r[5]]
    assert decided and all(set(o.split(";")) <= {"scaled", "dry_run", "skipped_cooldown", "skipped_limit",
                                                 "skipped_duplicate", "skipped_busy", "ignored_resolved",
                                                 "skipped_in_use", "skipped_backoff"} for o in decided)
    summary = json.loads((out / "summary.json").read_text())
    assert KEYS <= summary.keys() and KEYS <= summary["baselines"]["static_peak"].keys()
    assert KEYS <= summary["baselines"]["fixed_step"].keys()
    assert summary["baselines"]["static_peak"]["node_hours"] == pytest.approx(9 * len(surge()) / 60)
    # the foresight limit: ceil(demand) every minute, never below the pool's min
    low = proportional_block()["pools"][0]["min"]
    limit = sum(max(low, -(-d // 1)) for d in surge()) / 60
    assert summary["foresight_node_hours"] == pytest.approx(limit)
    assert summary["vs_foresight"] == pytest.approx(summary["node_hours"] / limit, abs=1e-4) and limit
    assert (out / "replay.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_service_config_replays_without_its_secrets(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing serves HTTP in a replay: `server.auth` naming unset variables does not stop it."""
    monkeypatch.delenv("AUTOSCALER_TOKEN", raising=False)
    raw = {"server": {"auth": {"bearer_tokens": ["${AUTOSCALER_TOKEN}"]}}, **proportional_block()}
    code, err, _ = replay(tmp_path, raw, capsys)
    assert code == 0, err


def test_the_rest_of_the_config_is_still_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = proportional_block()
    raw["pools"][0]["max"] = 0
    code, err, _ = replay(tmp_path, raw, capsys)
    assert code == 1 and "pools[0].max: must be >= min (1)" in err


def test_the_demand_example_with_a_pending_rule_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = proportional_block()
    (demand,) = yaml.safe_load((CONFIGS / "contract_demand.yaml").read_text())["pools"]
    raw["pools"][0].update({k: v for k, v in demand.items() if k not in ("name", "scale_out")})
    raw["pools"][0]["scale_out"] = {"mode": "demand", "cooldown": "1m"}
    raw["replay"]["rules"][0] = {"alert": "GPUDemandPending", "pending_above": 0, "for": "1m", "pool": "gpu",
                                 "action": "scale_out"}
    code, err, out = replay(tmp_path, raw, capsys)
    assert code == 0, err
    with open(out / "timeline.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert max(int(r["requested"]) for r in rows) >= 9  # the surge's unmet demand was asked for
    assert sum(r["outcomes"].count("scaled") for r in rows[60:75]) >= 1


def test_the_proportional_example_tunes_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`replay --tune` reads the base as the replay does (no `server` section needed); tuned.yaml is that file with
    the chosen settings, and replays as written."""
    monkeypatch.delenv("AUTOSCALER_TOKEN", raising=False)
    config = tmp_path / "base.yaml"
    config.write_text(yaml.safe_dump(proportional_block(), sort_keys=False))
    trace = write_trace(tmp_path / "t.csv", surge() * 4)
    out = tmp_path / "tuned"
    code = main(["replay", "--tune", "--config", str(config), "--trace", str(trace), "--max-saturated", "5%",
                 "--out", str(out), "--candidates", "12", "--workers", "1", "--holdout", "0.25"])
    assert code == 0, capsys.readouterr().err
    tuned = yaml.safe_load((out / "tuned.yaml").read_text())
    assert "server" not in tuned and tuned["pools"][0]["name"] == proportional_block()["pools"][0]["name"]
    assert main(["replay", "--config", str(out / "tuned.yaml"), "--trace", str(trace), "--out",
                 str(tmp_path / "replayed")]) == 0
    assert KEYS <= json.loads((tmp_path / "replayed" / "summary.json").read_text()).keys()


@pytest.mark.parametrize("tune", [False, True], ids=["replay", "tune"])
def test_an_unreadable_config_is_named_once_on_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        tune: bool) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [\n")
    trace = write_trace(tmp_path / "t.csv", surge())
    for path, what in ((bad, "not valid YAML at line 2, column 1"), (tmp_path / "missing.yaml", "cannot read")):
        code = main(["replay", *(["--tune"] if tune else []), "--config", str(path), "--trace", str(trace),
                     "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert code == 1 and err.count(str(path)) == 1 and len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"{path}: {what}"), err


def test_foresight_is_ceil_of_demand_never_below_min() -> None:
    from autoscaler.replay.report import foresight_node_hours

    assert foresight_node_hours([0.2, 1.5, 3.0, 0.0], 2) == pytest.approx((2 + 2 + 3 + 2) / 60, abs=1e-4)
    assert foresight_node_hours([0.2, 1.5, 3.0, 0.0], 0) == pytest.approx((1 + 2 + 3 + 0) / 60, abs=1e-4)
