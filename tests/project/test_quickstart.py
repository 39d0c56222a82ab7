"""The quick start as a newcomer meets it: config.example.yaml opens the status page in a browser, its chart has
axes and draws every count change, and a pool that provisions at once has nothing in flight."""
from __future__ import annotations

import base64
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import requests
import yaml
from flask.testing import FlaskClient

from autoscaler.app import create_app
from autoscaler.api.status import chart
from autoscaler.config.load import build_settings
from tests.support.pipeline import wait_for
from tests.support.servers import free_port
from tests.support import FakeClock, am_alert, am_payload

ROOT = Path(__file__).resolve().parents[2]
BEARER = {"Authorization": "Bearer dev-token"}
BROWSER = {"Authorization": "Basic " + base64.b64encode(b"admin:dev-password").decode()}


def example(tmp_path: Path, clock: FakeClock) -> FlaskClient:
    """config.example.yaml as `make run` serves it (no AUTOSCALER_* set), on a throw-away SQLite file."""
    raw = yaml.safe_load((ROOT / "config.example.yaml").read_text())
    raw["store"]["url"] = f"sqlite:///{tmp_path}/quick.db"
    return create_app(build_settings(raw, env={}), clock=clock, startup_check=False).test_client()


def test_a_browser_opens_the_status_page_with_the_examples_user(tmp_path: Path) -> None:
    client = example(tmp_path, FakeClock())
    assert client.get("/").status_code == 401  # the browser's prompt
    page = client.get("/", headers=BROWSER)
    assert page.status_code == 200 and 'data-pool="sim"' in page.get_data(as_text=True)
    assert client.get("/api/v1/pools", headers=BEARER).status_code == 200  # the contract's bearer token still works
    wrong = {"Authorization": "Basic " + base64.b64encode(b"admin:guess").decode()}
    assert client.get("/", headers=wrong).status_code == 401


def test_a_pool_without_provisioning_time_has_nothing_in_flight(tmp_path: Path) -> None:
    clock = FakeClock()
    client = example(tmp_path, clock)
    for fingerprint in ("a", "b"):
        client.post("/api/v1/pools/sim/scale", json={"action": "scale_out", "force": True}, headers=BEARER)
        clock.advance(1)
    pool = client.get("/api/v1/pools/sim", headers=BEARER).get_json()
    assert pool["current"] == 3 and pool["in_flight"] == 0
    assert "in flight" not in client.get("/", headers=BROWSER).get_data(as_text=True)


def test_chart_follows_the_table_through_a_count_correction(tmp_path: Path) -> None:
    clock = FakeClock()
    client = example(tmp_path, clock)
    client.post("/webhook/alertmanager", json=am_payload(am_alert(fingerprint="q1")), headers=BEARER)
    clock.advance(120)
    fixed = client.put("/api/v1/pools/sim/count", json={"count": 3}, headers=BEARER)
    assert fixed.status_code == 200 and fixed.get_json()["current"] == 3
    html = client.get("/", headers=BROWSER).get_data(as_text=True)
    assert re.search(r"node count over time, UTC \(now 3, 2 changes", html), html
    assert 'class="axis count-axis"' in html and 'class="axis time-axis"' in html


def test_chart_axes_label_counts_and_times() -> None:
    events = [{"outcome": "scaled", "from": 1, "to": 2, "_t": 1_800_000_000.0},
              {"outcome": "count_corrected", "from": 2, "to": 3, "_t": 1_800_000_600.0},
              {"outcome": "dry_run", "from": 3, "to": 4, "_t": 1_800_000_700.0}]
    drawn = chart(events, low=1, high=4, now=1_800_003_600.0)
    assert drawn is not None and drawn["last"] == 3 and drawn["changes"] == 2  # a dry run changes nothing
    assert [t["label"] for t in drawn["y_ticks"]] == ["0", "1", "2", "3", "4"]  # a tick per node of a small pool
    times = [t["label"] for t in drawn["x_ticks"]]  # 1_800_000_000 is 08:00 UTC: the first change stands just right
    assert times == ["07:57", "08:10", "08:20", "08:30", "08:40", "09:00"]  # of the axis, round times between
    ys = {t["label"]: t["y"] for t in drawn["y_ticks"]}
    assert ys["0"] > ys["1"] > ys["4"]  # counts grow upwards
    coords = [tuple(map(float, p.split(","))) for p in drawn["points"].split()]
    assert min(x for x, _ in coords) == drawn["left"] and max(x for x, _ in coords) == drawn["w"]


def test_make_traces_writes_where_it_is_told(tmp_path: Path) -> None:
    script = ROOT / "bench" / "traces" / "make_traces.py"
    out = subprocess.run([sys.executable, str(script), "--family", "training_queue", "--out", "week.csv"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60, env={**os.environ}, check=False)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "week.csv").read_text().startswith("timestamp,demand\n")
    assert not (script.parent / "week.csv").exists()


def _healthy(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


@pytest.mark.slow
def test_make_run_removes_its_metrics_directory_when_stopped(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR", "AUTOSCALER_CONFIG")}
    log = (tmp_path / "run.log").open("w+")
    proc = subprocess.Popen(["make", "-s", "run", f"PORT={port}", "WORKERS=1"], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: _healthy(f"http://127.0.0.1:{port}/healthz"), 120, "make run to serve")
        found = re.search(r"PROMETHEUS_MULTIPROC_DIR=(\S+) ", (tmp_path / "run.log").read_text())
        assert found, (tmp_path / "run.log").read_text()
        metrics = Path(found.group(1))
        assert metrics.is_dir() and str(metrics).startswith(tempfile.gettempdir())
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal
        proc.wait(timeout=60)
        log.close()
    assert not metrics.exists()


def _quick_start_calls() -> list[tuple[str, str, str | None, str]]:
    """The README quick start's curl calls in order: method, path, body, and the `# -> …` answer written under it."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quick start (60 seconds)", 1)[1].split("```sh\n", 1)[1].split("\n```", 1)[0]
    calls: list[tuple[str, str, str | None, str]] = []
    command = ""
    for line in block.splitlines():
        if command:
            command += "\n" + line
        elif line.startswith("curl "):
            command = line
        elif line.startswith("# -> ") and calls:
            calls[-1] = (*calls[-1][:3], line[5:])
            continue
        elif line.startswith("#     ") and calls and calls[-1][3]:  # the answer, continued
            calls[-1] = (*calls[-1][:3], calls[-1][3] + line[6:])
            continue
        if command and command.count("'") % 2 == 0 and not command.endswith("\\"):
            words = shlex.split(command.replace("\\\n", " "), comments=True)
            url = next(w for w in words if "localhost:8080" in w)
            body = words[words.index("-d") + 1] if "-d" in words else None
            method = words[words.index("-X") + 1] if "-X" in words else ("POST" if body is not None else "GET")
            calls.append((method, url.split("localhost:8080", 1)[1], body, ""))
            command = ""
    return calls


def test_the_quick_start_answers_as_it_says(tmp_path: Path) -> None:
    """Each curl of the README's quick start, in order, against config.example.yaml: every `# -> …` line under a
    call names the outcome and the counts the service answers; the manual scale-out right after the alert says it
    is held by the cooldown, and the next one shows `"force": true` going past it."""
    client = example(tmp_path, FakeClock())
    calls = _quick_start_calls()
    checked = []
    for method, path, body, said in calls:
        answer = client.open(path, method=method, data=body, headers={**BEARER, "Content-Type": "application/json"})
        assert answer.status_code == 200, (path, answer.get_data(as_text=True))
        if not said:
            continue
        got = answer.get_json()
        decision = got["decisions"][0] if "decisions" in got else got
        for key in ("outcome", "from", "to", "reason"):
            written = re.search(rf'"{key}":("[^"]*"|\d+)', said)
            if written:
                assert json.dumps(decision[key], separators=(",", ":")) == written.group(1), (path, said, decision)
        checked.append((path, json.loads(body or "{}"), decision["outcome"]))
    manual = [(b, o) for p, b, o in checked if p == "/api/v1/pools/sim/scale" and b.get("action") == "scale_out"]
    assert manual[0] == ({"action": "scale_out", "step": 1, "reason": "training run at 14:00"}, "skipped_cooldown")
    assert manual[1][0].get("force") is True and manual[1][1] == "scaled"
    block = (ROOT / "README.md").read_text().split("## Quick start (60 seconds)", 1)[1].split("\n## ", 1)[0]
    assert "cooldown" in block.split('"training run at 14:00"}', 1)[0].rsplit("# the manual API", 1)[1]
