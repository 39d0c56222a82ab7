"""The status page at /: rendered by the server, behind auth, and shown by a real headless Chromium."""
from __future__ import annotations

import base64
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from autoscaler.api.status import chart
from tests.support.pipeline import require_binary
from tests.support.servers import ROOT, Service
from tests.support.status_scenario import scenario_config, write_night
from tests.support import AUTH, FakeClock, am_alert, am_payload, make_app

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
    assert len(coords) == 9  # 5 points, each change drawn as a step: the count before the first change held from
    assert coords[0] == (drawn["left"], coords[2][1])  # the chart's left edge (10 min before now at least)
    assert chart([], 0, 4, 1.0) is None


def _dump(flags: list[str], url: str) -> str:
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=90)
    assert dom.returncode == 0 and "</html>" in dom.stdout, dom.stderr[-2000:]
    return dom.stdout


def _text(html: str) -> str:
    """The page's words as a person reads them: tags gone, entities kept, spaces squeezed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.mark.slow
def test_headless_chromium_renders_the_page_for_3am(tmp_path: Path) -> None:
    """Five hours of a group with a stockout, a demand-mode pool and a 2 -> 3 -> 2 step, served by gunicorn and
    read by Debian's Chromium: the groups' choice, the charts, relative times, filtered and paged events."""
    browser = require_binary("chromium", "chromium-browser")
    db_url = f"sqlite:///{tmp_path}/s.db"
    write_night(db_url, time.time()).extensions["autoscaler"].store.close()
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(scenario_config(db_url)))
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "status-page.png"
    shot.unlink(missing_ok=True)
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chrome'}", "--window-size=1400,1900"]
    with Service(None, tmp_path, workers=1, env={"AUTOSCALER_CONFIG": str(path)}, graceful_timeout=2) as server:
        base = server.url.replace("http://", "http://grafana:pw-7@") + "/"
        html = _dump(flags, base)
        paged = _dump(flags, base + "?pool=a100-ondemand&outcome=scaled&limit=1")
        subprocess.run([*flags, f"--screenshot={shot}", base], capture_output=True, timeout=90)
        older = re.search(r'href="\?([^"]*before=\d+[^"]*)#events">older', paged)
        assert older is not None, paged[-3000:]
        second = _dump(flags, base + "?" + older.group(1).replace("&amp;", "&"))
    print(f"status page screenshot: {shot}")
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20000
    text = _text(html)
    assert "<script" not in html and "&lt;script&gt;alert('x')&lt;/script&gt; driver upgrade" in html
    group = _text(re.search(r'<tr class="group" data-group="a100">.*?</tr>', html, re.S).group(0))  # type: ignore[union-attr]
    assert re.search(r"a100 1\. a100-spot 2/6 paused short → 2\. a100-ondemand 2/6 a100-ondemand "
                     r"a100-spot passed over: paused a100-ondemand 4 of 12 nodes \(32 GPUs\)", group), group
    assert re.search(r"short of capacity for another (2 h 5\d min|3 h) : SimulatedStockout: .* passed over by group "
                     r"a100 until then", text), text
    assert re.search(r"last: paused 3 min ago", text) and "cooldown: scale-out ready, scale-in 6 min" in text
    assert re.search(r"train simulated \(tracked\) 6 nodes \(min 1, max 40\) 1 in flight "
                     r"cloud read (just now|\d+s ago)", text)  # the server's reconciler has read it since
    assert html.count("<svg") == 3 and html.count('class="short"') == 1 and ">no capacity</text>" in html
    assert "demand (GPUs) (right axis, last 8)" in text and "no_capacity (1)" in text and "in flight" in text
    assert 'class="mark up"' in html and 'class="mark down"' in html  # the 2 -> 3 -> 2 step, both ways marked
    assert 'href="?pool=a100-spot#events">events of a100-spot' in html
    assert html.count('class="event"') == 12 and "3 min ago" in text and "4 h 59 min ago" in text
    rows = re.findall(r'<tr class="event">(.*?)</tr>', paged, re.S)
    assert len(rows) == 1 and "a100-ondemand" in rows[0] and ">scaled<" in rows[0] and "3 → 2" in rows[0]
    assert 'href="api/v1/events?pool=a100-ondemand&amp;outcome=scaled&amp;limit=1">this page as JSON' in paged
    rows = re.findall(r'<tr class="event">(.*?)</tr>', second, re.S)
    assert len(rows) == 1 and "2 → 3" in rows[0] and "« newest" in second


def test_page_filters_events_like_the_api_and_says_a_bad_filter(tmp_path: Path) -> None:
    clock = FakeClock()
    client = make_app(f"sqlite:///{tmp_path}/s.db", clock).test_client()
    client.post("/webhook/alertmanager", json=am_payload(am_alert(fingerprint="a")), headers=AUTH)
    clock.advance(60)
    client.post("/webhook/alertmanager", json=am_payload(am_alert(fingerprint="b")), headers=AUTH)  # cooldown
    client.post("/api/v1/pools/spare/pause", json={"reason": "<i>x</i>"}, headers=AUTH)
    html = client.get("/?outcome=skipped_cooldown,paused", headers=AUTH).get_data(as_text=True)
    rows = re.findall(r'<tr class="event">(.*?)</tr>', html, re.S)
    assert [re.search(r'class="outcome-(\w+)"', r).group(1) for r in rows] == ["paused", "skipped_cooldown"]  # type: ignore[union-attr]
    assert 'value="paused" checked' in html and 'value="scaled">' in html
    assert 'href="?pool=gpu&amp;outcome=skipped_cooldown%2Cpaused#events">events of gpu' in html
    assert "&lt;i&gt;x&lt;/i&gt;" in html and "<i>x" not in html
    paged = client.get("/?pool=gpu&limit=1", headers=AUTH).get_data(as_text=True)
    assert paged.count('class="event"') == 1 and "older »" in paged and "1 min ago" in paged
    bad = client.get("/?outcome=<b>nope", headers=AUTH)
    text = bad.get_data(as_text=True)
    assert bad.status_code == 400 and "outcome: unknown outcome &#39;&lt;b&gt;nope&#39;" in text
    assert text.count('class="event"') == 0 and text.count('class="pool"') == 2
