"""The status page at /: rendered by the server, behind auth, and shown by a real headless Chromium."""
from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest
import requests
import yaml

from autoscaler.api.status import chart
from tests.servers import ROOT, Service
from tests.support import AUTH, FakeClock, am_alert, am_payload, config, make_app

ARTIFACTS = ROOT / "test-artifacts"
BASIC = {"Authorization": "Basic " + base64.b64encode(b"grafana:pw-7").decode()}


def test_page_needs_auth_and_asks_the_browser_for_basic(tmp_path: Path) -> None:
    client = make_app(f"sqlite:///{tmp_path}/s.db", FakeClock()).test_client()
    denied = client.get("/")
    assert denied.status_code == 401 and denied.mimetype == "text/html"
    assert denied.headers["WWW-Authenticate"].startswith("Basic ")
    page = client.get("/", headers=BASIC)
    assert page.status_code == 200 and '<meta http-equiv="refresh" content="10">' in page.get_data(as_text=True)
    assert "<script" not in page.get_data(as_text=True)


def test_page_shows_pools_chart_events_and_escapes_html(tmp_path: Path) -> None:
    clock = FakeClock()
    client = make_app(f"sqlite:///{tmp_path}/s.db", clock).test_client()
    client.post("/webhook/alertmanager", json=am_payload(am_alert(fingerprint="a")), headers=AUTH)
    clock.advance(400)
    client.post("/webhook/alertmanager", json=am_payload(am_alert(fingerprint="b")), headers=AUTH)
    client.post("/api/v1/pools/spare/pause", json={"reason": "<b>maintenance</b>"}, headers=AUTH)
    html = client.get("/", headers=AUTH).get_data(as_text=True)
    assert html.count('class="pool"') == 2 and "<polyline" in html
    assert "&lt;b&gt;maintenance&lt;/b&gt;" in html and "<b>maintenance" not in html
    assert "scale out 3 -&gt; 4" in html


def test_chart_is_a_step_line_within_the_box() -> None:
    events = [{"outcome": "scaled", "from": 2, "to": 3, "_t": 0.0}, {"outcome": "skipped_cooldown", "from": 3,
              "to": 3, "_t": 5.0}, {"outcome": "scaled", "from": 3, "to": 1, "_t": 10.0}]
    drawn = chart(events, low=1, high=6, now=20.0)
    assert drawn is not None and drawn["last"] == 1
    coords = [tuple(map(float, p.split(","))) for p in drawn["points"].split()]
    assert all(0 <= x <= drawn["w"] and 0 <= y <= drawn["h"] for x, y in coords)
    assert len(coords) == 7  # 4 points, each change drawn as a step
    assert chart([], 0, 4, 1.0) is None


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
def test_headless_chromium_renders_the_page(tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("Debian's chromium is not installed (make system-deps)")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config(f"sqlite:///{tmp_path}/s.db")))
    with Service(None, tmp_path, workers=1, env={"AUTOSCALER_CONFIG": str(path)}, graceful_timeout=2) as server:
        hook = f"{server.url}/webhook/alertmanager"
        requests.post(hook, json=am_payload(am_alert(fingerprint="x1")), headers=AUTH, timeout=5)
        requests.post(f"{server.url}/api/v1/pools/spare/scale", json={"action": "scale_out", "step": 2},
                      headers=AUTH, timeout=5)
        requests.post(f"{server.url}/api/v1/pools/spare/pause", json={"reason": "driver upgrade"}, headers=AUTH,
                      timeout=5)
        url = server.url.replace("http://", "http://grafana:pw-7@") + "/"
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "status-page.png"
        flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chrome'}", "--window-size=1400,900"]
        dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=60)
        subprocess.run([*flags, f"--screenshot={shot}", url], capture_output=True, timeout=60)
    html = dom.stdout
    assert 'data-pool="gpu"' in html and 'data-pool="spare"' in html, dom.stderr[-2000:]
    assert "driver upgrade" in html and "<polyline" in html
    assert html.count('class="event"') == 3  # the alert's, the manual scale's and the operator's pause
    assert shot.exists() and shot.stat().st_size > 5000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
