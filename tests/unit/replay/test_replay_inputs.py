"""Bad inputs of ``replay``, ``replay --tune`` and ``trace``: a demand no pool could hold, Prometheus answers of a
shape nobody expects. One line naming the place, exit 1, never a traceback (and no trace written with such a value)."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from autoscaler.__main__ import main
from autoscaler.replay.trace import MAX_DEMAND, parse_time

T0 = parse_time("2025-01-06T00:00:00Z")
CONFIG = {
    "server": {"auth": {"disabled": True}},
    "pools": [{"name": "gpu", "provider": "simulated", "min": 1, "max": 10,
               "scale_out": {"step": 1, "cooldown": "3m"}, "scale_in": {"step": 1, "cooldown": "10m"},
               "simulated": {"initial_count": 1, "provision_seconds": 300}}],
    "replay": {"rules": [{"alert": "GPUHigh", "above": 80, "for": "2m", "pool": "gpu", "action": "scale_out"},
                         {"alert": "GPULow", "below": 30, "for": "10m", "pool": "gpu", "action": "scale_in"}]},
}


def _trace(path: Path, demand: list[str]) -> Path:
    rows = [f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(T0 + 60 * i))},{d}" for i, d in enumerate(demand)]
    path.write_text("\n".join(["timestamp,demand", *rows]) + "\n")
    return path


@pytest.mark.parametrize("value", ["1e308", "100000", f"{MAX_DEMAND + 1:g}"])
@pytest.mark.parametrize("tune", [False, True], ids=["replay", "tune"])
def test_demand_beyond_any_pool_is_a_bad_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str,
                                               tune: bool) -> None:
    demand = ["2"] * 30
    demand[7] = value
    trace = _trace(tmp_path / "t.csv", demand)
    (tmp_path / "c.yaml").write_text(json.dumps(CONFIG))
    argv = ["replay", "--config", str(tmp_path / "c.yaml"), "--trace", str(trace), "--out", str(tmp_path / "out")]
    started = time.monotonic()
    assert main([*argv, "--tune", "--workers", "1"] if tune else argv) == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.err and time.monotonic() - started < 30
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and f"{trace} line 9: demand {value!r}" in lines[0], lines
    assert f"{MAX_DEMAND:g}" in lines[0], lines


def test_demand_at_the_bound_replays(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.csv", ["2"] * 5 + [f"{MAX_DEMAND:g}"] + ["2"] * 5)
    (tmp_path / "c.yaml").write_text(json.dumps(CONFIG))
    assert main(["replay", "--config", str(tmp_path / "c.yaml"), "--trace", str(trace),
                 "--out", str(tmp_path / "out")]) == 0


UNTIL = "2025-01-06T02:00:00Z"
START = parse_time(UNTIL) - 3600


def _matrix(values: list[list[Any]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": values}]}}


@pytest.mark.parametrize("answer,says", [
    pytest.param([1, 2, 3], "not a Prometheus answer", id="a-list"),
    pytest.param({"status": "success"}, "no `data`", id="no-data"),
    pytest.param({"status": "success", "data": {"resultType": "matrix"}}, "no `data.result`", id="no-result"),
    pytest.param({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "2"]}]}},
                 "vector", id="a-vector"),
    pytest.param(_matrix([[START, "lots"]]), "'lots' is not a number", id="not-a-number"),
    pytest.param(_matrix([["soon", "1"]]), "not a number", id="bad-timestamp"),
    pytest.param(_matrix([[START]]), "[time, value]", id="short-pair"),
    pytest.param({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}}]}},
                 "no `values`", id="series-without-values"),
    pytest.param(_matrix([[START + 60 * i, "1e308" if i == 5 else "16"] for i in range(60)]),
                 f"beyond what any pool could hold ({MAX_DEMAND:g} nodes)", id="demand-beyond-any-pool"),
])
def test_trace_refuses_unexpected_prometheus_answers_on_one_line(
        httpserver: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], answer: Any, says: str) -> None:
    httpserver.expect_request("/api/v1/query_range").respond_with_json(answer)
    out = tmp_path / "t.csv"
    code = main(["trace", "--prometheus", httpserver.url_for("/"), "--used", "sum(x)", "--gpus-per-node", "8",
                 "--since", "1h", "--until", UNTIL, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trace: ") and says in lines[0], lines
    assert not out.exists()
