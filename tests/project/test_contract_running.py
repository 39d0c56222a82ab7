"""CONTRACT "Running it": config.example.yaml runs as it is under gunicorn (`app:app`, what `make run` starts) with
SQLite in the working directory and the bearer token `${AUTOSCALER_TOKEN:-dev-token}`, so a newcomer can curl it
at once; `make run`'s HOST, PORT and AUTOSCALER_CONFIG are what the Makefile passes on."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import requests

from tests.support.servers import free_port, wait_http

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = str(Path(sys.executable).parent / "gunicorn")


def test_the_example_config_serves_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()  # `make run` makes it; the store path is relative to the working directory
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "AUTOSCALER_TOKEN"}
    env.update(PYTHONPATH=str(ROOT), AUTOSCALER_CONFIG=str(ROOT / "config.example.yaml"),
               PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "prom"))
    log = open(tmp_path / "gunicorn.log", "wb")
    proc = subprocess.Popen([GUNICORN, "-c", str(ROOT / "gunicorn.conf.py"), "-b", f"127.0.0.1:{port}", "-w", "2",
                             "app:app"], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/healthz", 30, proc=proc)
        dev = {"Authorization": "Bearer dev-token"}
        assert requests.get(f"{url}/api/v1/pools", timeout=5).status_code == 401
        pools = requests.get(f"{url}/api/v1/pools", headers=dev, timeout=5).json()["pools"]
        assert [(p["name"], p["provider"], p["current"]) for p in pools] == [("sim", "simulated", 1)]
        answer = requests.post(f"{url}/api/v1/pools/sim/scale", json={"action": "scale_out", "step": 1},
                               headers=dev, timeout=10).json()
        assert (answer["outcome"], answer["from"], answer["to"]) == ("scaled", 1, 2)
        assert requests.get(f"{url}/readyz", timeout=5).status_code == 200
        assert (tmp_path / "data" / "autoscaler.db").exists()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_make_run_passes_host_port_and_config() -> None:
    """`make -n run` shows the gunicorn command line without running it."""
    env = {**os.environ, "HOST": "0.0.0.0", "PORT": "9999", "AUTOSCALER_CONFIG": "other.yaml"}
    dry = subprocess.run(["make", "-n", "run"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert dry.returncode == 0, dry.stderr
    assert re.search(r"gunicorn .*-b 0\.0\.0\.0:9999 .*app:app", dry.stdout), dry.stdout
    assert "check-config other.yaml" in dry.stdout
    default = subprocess.run(["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True, timeout=30,
                             env={k: v for k, v in os.environ.items()
                                  if k not in ("HOST", "PORT", "AUTOSCALER_CONFIG")})
    assert re.search(r"-b 127\.0\.0\.1:8080 ", default.stdout) and "check-config config.example.yaml" in default.stdout
