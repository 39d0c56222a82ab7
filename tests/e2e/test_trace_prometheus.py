"""`python -m autoscaler trace` against a real Prometheus holding 8 days of backfilled DCGM-like samples."""
from __future__ import annotations

import io
import math
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from autoscaler.__main__ import main
from autoscaler.config.durations import rfc3339
from autoscaler.replay.history import MAX_POINTS, Progress, chunks
from autoscaler.replay.trace import load_trace, parse_time
from tests.support.pipeline import PROMETHEUS, PROMTOOL, Process, require_binary
from tests.support.servers import free_port

DAYS = 8  # 11,520 minutes: more than one range query may hold
HOSTS, GPUS = 2, 4
GAP = (3000, 3040)  # minutes without any DCGM sample (an exporter down for 40 minutes)
PENDING_GAP = (6000, 6060)  # minutes without the pending series
USED = 'sum(DCGM_FI_DEV_GPU_UTIL{autoscaler_pool="gpu"}) / 100'
PENDING = 'sum(autoscaler_test_pending_gpus{autoscaler_pool="gpu"})'


def util(minute: int, host: int, gpu: int) -> int:
    return (minute * 7 + gpu * 13 + host * 29) % 101


def pending(minute: int) -> int:
    return (minute // 30) % 5


def _openmetrics(start: int, minutes: int) -> str:
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for host in range(HOSTS):
        for gpu in range(GPUS):
            labels = f'Hostname="node-{host}",gpu="{gpu}",autoscaler_pool="gpu"'
            lines += [f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {util(m, host, gpu)} {start + 60 * m}"
                      for m in range(minutes) if not GAP[0] <= m < GAP[1]]
    lines.append("# TYPE autoscaler_test_pending_gpus gauge")
    lines += [f'autoscaler_test_pending_gpus{{autoscaler_pool="gpu"}} {pending(m)} {start + 60 * m}'
              for m in range(minutes) if not PENDING_GAP[0] <= m < PENDING_GAP[1]]
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Prometheus on 127.0.0.1 with its own data dir, holding blocks made by promtool from OpenMetrics text."""
    binary, promtool = require_binary(*PROMETHEUS), require_binary(*PROMTOOL)
    work = tmp_path_factory.mktemp("prom")
    until = (int(time.time()) // 3600 - 3) * 3600  # whole hours, clear of the head block
    minutes = DAYS * 1440
    start = until - 60 * minutes
    (work / "samples.om").write_text(_openmetrics(start, minutes))
    made = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(work / "samples.om"),
                           str(work / "data")], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    (work / "prometheus.yml").write_text(yaml.safe_dump({"global": {"scrape_interval": "1m"}}))
    port = free_port()
    proc = Process("prometheus", [binary, f"--config.file={work / 'prometheus.yml'}",
                                  f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                                  "--storage.tsdb.retention.time=30d", "--log.level=warn"],
                   work, f"http://127.0.0.1:{port}")
    try:
        proc.wait_ready("/-/ready")
        yield {"url": proc.base_url, "start": start, "until": until, "minutes": minutes, "dir": work}
    finally:
        proc.stop()


def _until(prom: dict[str, Any]) -> str:
    return rfc3339(prom["until"]).replace(".000Z", "Z")


def test_trace_from_prometheus_fills_gaps_and_matches_the_samples(prometheus: dict[str, Any], tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "history.csv"
    code = main(["trace", "--prometheus", prometheus["url"], "--used", USED, "--pending", PENDING,
                 "--gpus-per-node", "4", "--since", f"{DAYS}d", "--until", _until(prometheus), "--out", str(out)])
    text = capsys.readouterr()
    assert code == 0, text.err
    trace = load_trace(str(out))  # the replay's own reader: header, one row a minute, RFC 3339 UTC
    assert trace.start == prometheus["start"] and len(trace.demand) == prometheus["minutes"]

    def expected(m: int) -> float:
        used = sum(util(m, h, g) for h in range(HOSTS) for g in range(GPUS)) / 100
        return (used + pending(m)) / 4

    for m in (0, 1, 59, 1440, 2999, 5000, 11519):
        assert trace.demand[m] == pytest.approx(expected(m), abs=1e-3), m
    # Inside the gap Prometheus's 5-minute lookback still answers for a few minutes; after that the command
    # carries the last value forward, and says so.
    for m in range(GAP[0], GAP[1]):
        assert trace.demand[m] == pytest.approx(expected(GAP[0] - 1) - pending(GAP[0] - 1) / 4 + pending(m) / 4,
                                                abs=1e-3), m
    assert "filled 3" in text.out and "in 1 gap(s)" in text.out  # 35 or 36 minutes, by where lookback ends
    filled = int(text.out.split("filled ")[1].split(" ")[0])
    assert GAP[1] - GAP[0] - 6 <= filled <= GAP[1] - GAP[0] - 4
    missing = int(text.out.split(" minute(s) without a `pending` sample")[0].rsplit("\n", 1)[-1])
    assert PENDING_GAP[1] - PENDING_GAP[0] - 6 <= missing <= PENDING_GAP[1] - PENDING_GAP[0] - 4
    for m in range(PENDING_GAP[0] + 6, PENDING_GAP[1]):
        assert trace.demand[m] == pytest.approx(expected(m) - pending(m) / 4, abs=1e-3), m


@pytest.mark.parametrize("argv,message", [
    pytest.param(["--used", 'DCGM_FI_DEV_GPU_UTIL{gpu="0"}'], "gives 2 series; it must give one",
                 id="many-series"),
    pytest.param(["--used", "sum(rate(nope[5m]"], "Prometheus refused", id="bad-promql"),
    pytest.param(["--used", "sum(no_such_metric)"], "gave no sample at all", id="no-data"),
    pytest.param(["--used", USED, "--chunk", "8d"], "over Prometheus's 11,000 points", id="chunk-too-long"),
    pytest.param(["--used", USED, "--gpus-per-node", "0"], "--gpus-per-node must be more than 0", id="no-gpus"),
])
def test_bad_requests_exit_1_with_a_reason(prometheus: dict[str, Any], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    base = ["trace", "--prometheus", prometheus["url"], "--gpus-per-node", "4", "--since", "1d", "--until",
            _until(prometheus), "--out", str(tmp_path / "t.csv")]
    assert main(base + argv) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "t.csv").exists()


def test_unreachable_prometheus_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    assert main(["trace", "--prometheus", f"http://127.0.0.1:{port}", "--used", USED, "--gpus-per-node", "8",
                 "--out", str(tmp_path / "t.csv")]) == 1
    assert f"cannot reach Prometheus at http://127.0.0.1:{port}" in capsys.readouterr().err


def test_chunks_cover_every_minute_once_within_the_point_limit() -> None:
    start = parse_time("2025-01-01T00:00:00Z")
    end = start + 60 * (30 * 1440 - 1)  # 30 days, last minute included
    for size in (86400.0, 60.0 * MAX_POINTS, 3600.0 * 7):
        spans = chunks(start, end, size)
        stamps = [t for first, last in spans for t in range(int(first), int(last) + 1, 60)]
        assert stamps == list(range(int(start), int(end) + 1, 60))
        assert max(int((last - first) / 60) + 1 for first, last in spans) <= MAX_POINTS
    assert len(chunks(start, end, 86400.0)) == 30 and math.isclose(chunks(start, start, 86400.0)[0][1], start)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal_only() -> None:
    term, pipe = _Terminal(), io.StringIO()
    for stream in (term, pipe):
        bar = Progress(4, stream)
        for i in range(4):
            bar.step(f"chunk {i}")
    assert term.getvalue().count("\r[") == 4 and "4/4" in term.getvalue() and term.getvalue().endswith("\n")
    assert pipe.getvalue() == ""


def test_bearer_token_from_a_file_and_no_password_in_messages(httpserver: Any, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A Prometheus behind auth (a stand-in that answers only with the token); the URL's password never printed."""
    until = parse_time("2025-01-06T02:00:00Z")
    start = until - 3600
    values = [[start + 60 * i, "16"] for i in range(60)]
    answer = {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": values}]}}
    httpserver.expect_request("/api/v1/query_range",
                              headers={"Authorization": "Bearer s3cret-token"}).respond_with_json(answer)
    (tmp_path / "token").write_text("s3cret-token\n")
    argv = ["trace", "--used", "sum(x)", "--gpus-per-node", "8", "--since", "1h", "--until",
            "2025-01-06T02:00:00Z", "--out", str(tmp_path / "t.csv")]
    assert main([*argv, "--prometheus", httpserver.url_for("/"), "--bearer-token-file", str(tmp_path / "token")]) == 0
    assert load_trace(str(tmp_path / "t.csv")).demand == (2.0,) * 60
    capsys.readouterr()
    port = free_port()
    assert main([*argv, "--prometheus", f"http://admin:pa55word@127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert f"cannot reach Prometheus at http://127.0.0.1:{port}" in err and "pa55word" not in err
