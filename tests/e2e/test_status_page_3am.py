"""The status page as an operator reads it at 3 a.m., on a laptop and on a phone: a group, a short pool with no
group, a node in repair (its XID, replacement and grace), the pools' GPUs and whether DRA was read, relative times,
the version; served by gunicorn over the fake Kubernetes API, looked at by a real headless Chromium at 1280 and 390
CSS pixels, and the CLI's ``status`` and ``nodes`` against the same service."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.support.fakes.kube import FakeKube
from tests.support.pipeline import require_binary, wait_for
from tests.support.servers import ROOT, Service
from tests.support.status_scenario import chromium, cluster_config, seed_cluster, write_cluster_night
from tests.support import AUTH, TOKEN

ARTIFACTS = ROOT / "test-artifacts"


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def _section(html: str, pool: str) -> str:
    found = re.search(rf'<section class="pool" data-pool="{pool}">.*?</section>', html, re.S)
    assert found is not None, pool
    return found.group(0)


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoscaler", *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "AUTOSCALER_URL": url,
                                         "AUTOSCALER_TOKEN": TOKEN}, check=False)


def _shoot(flags: list[str], url: str, shot: Path) -> None:
    shot.unlink(missing_ok=True)
    subprocess.run([*flags, f"--screenshot={shot}", url], capture_output=True, timeout=90, check=False)
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20000


def _dump(flags: list[str], url: str) -> str:
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=90, check=False)
    assert dom.returncode == 0 and "</html>" in dom.stdout, dom.stderr[-2000:]
    return dom.stdout


@pytest.mark.slow
def test_the_page_at_3am_on_a_laptop_and_a_phone(tmp_path: Path) -> None:
    browser = require_binary("chromium", "chromium-browser")
    ARTIFACTS.mkdir(exist_ok=True)
    db_url = f"sqlite:///{tmp_path}/s.db"
    with FakeKube() as kube:
        seed_cluster(kube)
        write_cluster_night(db_url, time.time(), kube).extensions["autoscaler"].store.close()
        cfg: dict[str, Any] = cluster_config(db_url, kube)
        cfg["server"]["reconcile_interval"] = "1s"
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(cfg))
        with Service(None, tmp_path, workers=1, env={"AUTOSCALER_CONFIG": str(path)}, graceful_timeout=2) as server:
            base = server.url.replace("http://", "http://grafana:pw-7@") + "/"
            laptop = chromium(browser, tmp_path / "chrome", 1280, 2600)
            phone = chromium(browser, tmp_path / "chrome", 390, 7000)
            html = _dump(laptop, base)
            _shoot(laptop, base, ARTIFACTS / "status-3am-1280.png")
            _shoot(phone, base, ARTIFACTS / "status-3am-390.png")
            status = _cli(server.url, "status")
            nodes = _cli(server.url, "nodes", "h100")
            kube.dra.status = 403  # RBAC takes DRA away: the next listing says so
            seen: list[Any] = []
            try:
                wait_for(lambda: seen.append(requests.get(f"{server.url}/api/v1/pools/h100", headers=AUTH,
                                                          timeout=5).json()) or seen[-1].get("dra") == "not_read",
                         30, "the reconciler's listing after DRA was refused")
            except TimeoutError:
                raise AssertionError(f"{seen[-1]}\n{server.read_log()[-3000:]}") from None
            refused = _dump(laptop, base)
            _shoot(laptop, base, ARTIFACTS / "status-3am-dra-refused-1280.png")
            refused_nodes = _cli(server.url, "nodes", "h100")
    text = _text(html)
    assert re.search(r"gpu-pool-autoscaler \d+\.\d+\.\d+", text)
    h100 = _text(_section(html, "h100"))
    assert "GPUs: 32 allocatable, 9 requested, 2 pending" in h100 and "DRA read (resource.k8s.io/v1)" in h100
    row = re.search(r'<tr class="repair" data-node="h100-0">(.*?)</tr>', html, re.S)
    assert row is not None, html
    cells = [_text(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)]
    assert cells[0:2] == ["h100-0", "waiting"] and cells[3:5] == ["79", "pool size 5"], cells
    assert re.fullmatch(r"1[12] min ago", cells[2]) and re.fullmatch(r"in 4[89] min", cells[5]), cells
    assert re.search(r'<td class="when" title="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z">1[12] min ago</td>',
                     row.group(1))
    l4 = _text(_section(html, "l4"))
    assert re.search(r"short of capacity for another 1[012] min : SimulatedStockout", l4), l4
    assert "passed over" not in l4 and "group" not in l4
    assert re.search(r'short of capacity for another <span title="\d{4}-[^"]+Z">1[012] min</span>', html)
    assert 'class="mark replace"' in _section(html, "h100")  # the repair's replacement on the chart
    assert "DRA not read" in _text(_section(refused, "h100")) and "403" in _text(_section(refused, "h100"))
    assert status.returncode == 0, status.stderr
    head, *rows = status.stdout.splitlines()
    assert head.split()[6:9] == ["SHORT", "GPUS(alloc/req/pend)", "DRA"]
    h100_row = next(r.split() for r in rows if r.startswith("h100 "))
    assert h100_row[6:9] == ["no", "32/9/2", "read"], h100_row
    assert nodes.returncode == 0 and nodes.stdout.splitlines()[0] == (
        "pool h100: GPUs 32 allocatable, 9 requested, 2 pending; DRA read"), nodes.stdout
    assert refused_nodes.stdout.startswith("pool h100: ") and "DRA NOT read (" in refused_nodes.stdout
    assert "403" in refused_nodes.stdout.splitlines()[0]
