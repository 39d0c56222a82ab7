"""Start and stop real gunicorn instances of the service for end-to-end tests."""
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

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, timeout: float = 20.0, status: int = 200, proc: subprocess.Popen[Any] | None = None) -> None:
    """Poll ``url`` until it answers ``status``; fail early when ``proc`` died."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            resp = requests.get(url, timeout=2)
            if resp.status_code == status:
                return
            last = f"HTTP {resp.status_code}"
        except requests.RequestException as exc:
            last = type(exc).__name__
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer {status} within {timeout:.0f}s (last: {last})")


class Gunicorn:
    """One service instance: ``gunicorn app:app`` with its own port, config and metrics directory."""

    def __init__(self, config: str | Path, *, port: int | None = None, workers: int = 2,
                 env: dict[str, str] | None = None, log_dir: str | Path | None = None) -> None:
        self.config = str(config)
        self.port = port or free_port()
        self.workers = workers
        self.extra_env = dict(env or {})
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="gunicorn-logs-"))
        self.metrics_dir = tempfile.mkdtemp(prefix="prom-multiproc-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.log_dir / f"gunicorn-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "Gunicorn":
        """Start and wait until /healthz answers 200."""
        return self.spawn().wait_ready(timeout)

    def spawn(self) -> "Gunicorn":
        """Start without waiting (start several at once, then ``wait_ready`` each)."""
        env = dict(os.environ)
        env.update({"AUTOSCALER_CONFIG": self.config, "PROMETHEUS_MULTIPROC_DIR": self.metrics_dir,
                    "PYTHONUNBUFFERED": "1"}, **self.extra_env)
        cmd = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "gunicorn.conf.py"),
               "-b", f"127.0.0.1:{self.port}", "-w", str(self.workers), "app:app"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 30.0) -> "Gunicorn":
        """Wait until /healthz answers 200; stop and raise with the log's tail when it does not."""
        try:
            wait_http(self.url + "/healthz", timeout, proc=self.proc)
        except Exception as exc:
            self.stop()
            raise RuntimeError(f"gunicorn on port {self.port} did not come up: {exc}\n{self.log_tail()}") from None
        return self

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (graceful), then SIGKILL of the whole process group if it does not exit in time."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def restart(self) -> "Gunicorn":
        """Stop and start again on the same port."""
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 40) -> str:
        """The end of the instance's output, for failure messages."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> "Gunicorn":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
