"""Start gunicorn on a free local port for a test, and stop it (only the process we started)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

from tests.servers import ROOT, free_port


class Gunicorn:
    """``gunicorn -c gunicorn.conf.py`` with a WSGI target, env and worker count."""

    def __init__(self, target: str, env: dict[str, str], workers: int = 1, log: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        gunicorn = Path(sys.executable).parent / "gunicorn"
        cmd = [str(gunicorn), "-c", str(ROOT / "gunicorn.conf.py"), "-b", f"127.0.0.1:{self.port}",
               "-w", str(workers), "--graceful-timeout", "2", target]
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
        if log:
            with open(log, "wb") as out:
                self.proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=out, stderr=subprocess.STDOUT)
        else:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.proc.returncode}: {self.tail()}")
            try:
                if requests.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"gunicorn did not come up: {self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log and self.log.exists() else ""

    def worker_pids(self) -> set[int]:
        """PIDs of the arbiter's children (the workers)."""
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return {int(p) for p in path.read_text().split()} if path.exists() else set()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def __enter__(self) -> "Gunicorn":
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
