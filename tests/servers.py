"""Start the real service under gunicorn on a free port, for tests that need real processes."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests
import yaml

ROOT = Path(__file__).resolve().parent.parent
GUNICORN = str(Path(sys.executable).parent / "gunicorn")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Service:
    """One gunicorn instance of app:app with its own config file and metrics directory."""

    def __init__(self, config: dict[str, Any], workdir: Path, workers: int = 2, env: dict[str, str] | None = None,
                 port: int | None = None) -> None:
        self.config = config
        self.workdir = workdir
        self.workers = workers
        self.port = port or free_port()
        self.extra_env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / f"gunicorn-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "Service":
        cfg_path = self.workdir / f"config-{self.port}.yaml"
        cfg_path.write_text(yaml.safe_dump(self.config))
        metrics_dir = tempfile.mkdtemp(prefix="prom-", dir=self.workdir)
        env = {**os.environ, "AUTOSCALER_CONFIG": str(cfg_path), "PROMETHEUS_MULTIPROC_DIR": metrics_dir,
               "PYTHONPATH": str(ROOT), **self.extra_env}
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [GUNICORN, "-c", str(ROOT / "gunicorn.conf.py"), "-b", f"127.0.0.1:{self.port}", "-w", str(self.workers),
             "app:app"], cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.proc.returncode}:\n{self.read_log()[-3000:]}")
            try:
                if requests.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"gunicorn did not answer within {timeout}s:\n{self.read_log()[-3000:]}")

    def read_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        self.log.close()

    def __enter__(self) -> "Service":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
