"""Start the real service under gunicorn on a free port, for tests that need real processes."""
from __future__ import annotations

import os
import re
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

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = str(Path(sys.executable).parent / "gunicorn")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 20.0, status: int = 200, proc: subprocess.Popen[Any] | None = None) -> None:
    """Poll ``url`` until it answers ``status``; RuntimeError when ``proc`` exits first, TimeoutError at the end."""
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


class Service:
    """One gunicorn instance of ``app`` with its own config file and metrics directory.

    ``config`` None writes no config file (``env`` then names AUTOSCALER_CONFIG); ``root`` is the tree served
    (its gunicorn.conf.py, cwd and PYTHONPATH); ``graceful_timeout`` overrides the config's, to stop fast;
    ``wrapper`` is a command line gunicorn is started under.
    """

    def __init__(self, config: dict[str, Any] | None, workdir: Path, workers: int = 2,
                 env: dict[str, str] | None = None, port: int | None = None, app: str = "app:app",
                 graceful_timeout: int | None = None, root: Path = ROOT, wrapper: list[str] | None = None) -> None:
        self.config = config
        self.app = app  # the WSGI target (the benchmarks start a bare Flask app too)
        self.workdir = workdir
        self.workers = workers
        self.port = port or free_port()
        self.extra_env = env or {}
        self.graceful_timeout = graceful_timeout
        self.root = root
        self.wrapper = list(wrapper or [])  # a command gunicorn runs under (e.g. setpriv, to drop capabilities)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / f"gunicorn-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "Service":
        """Start and wait until /healthz answers 200."""
        return self.spawn().wait_ready(timeout)

    def spawn(self) -> "Service":
        """Start without waiting, so that several instances can start (and migrate) at the same instant."""
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp(prefix="prom-", dir=self.workdir),
               "PYTHONPATH": str(self.root)}
        if self.config is not None:
            cfg_path = self.workdir / f"config-{self.port}.yaml"
            cfg_path.write_text(yaml.safe_dump(self.config))
            env["AUTOSCALER_CONFIG"] = str(cfg_path)
        args = [GUNICORN, "-c", str(self.root / "gunicorn.conf.py"), "-b", f"127.0.0.1:{self.port}",
                "-w", str(self.workers)]
        if self.graceful_timeout is not None:
            args += ["--graceful-timeout", str(self.graceful_timeout)]
        self.log = open(self.log_path, "ab")
        self._log_from = self.log.tell()  # this start's lines (a restart appends to the same log)
        self.proc = subprocess.Popen([*self.wrapper, *args, self.app], cwd=self.root, env={**env, **self.extra_env},
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 30.0) -> "Service":
        """Wait until /healthz answers 200 and every worker serves; stop, and raise with the log's tail, when not."""
        assert self.proc is not None, "spawn() first"
        try:
            started = time.monotonic()
            wait_http(f"{self.url}/healthz", timeout, proc=self.proc)
            if self.root == ROOT:  # an older tree's gunicorn.conf.py (bench/ab.py) does not say when a worker serves
                self.wait_workers(max(5.0, timeout - (time.monotonic() - started)))
        except (RuntimeError, TimeoutError) as exc:
            self.stop()
            raise RuntimeError(f"gunicorn: {exc}:\n{self.tail()}") from None
        except BaseException:
            self.stop()
            raise
        return self

    def wait_workers(self, timeout: float = 20.0) -> "Service":
        """Wait until every worker of this start has built its app (gunicorn.conf.py's post_worker_init says so).

        /healthz answers once the first worker has; ``wait_ready`` waits for this too, so that a test changing the
        store under the service meets no worker still booting (migrating, repairing the schema: undoing the change)."""
        deadline = time.monotonic() + timeout
        while self._serving() < self.workers:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited ({self.proc.returncode}):\n{self.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self._serving()} of {self.workers} workers serving after {timeout} s:\n"
                                   f"{self.tail()}")
            time.sleep(0.05)
        return self

    def _serving(self) -> int:
        with open(self.log_path, "rb") as log:
            log.seek(self._log_from)
            return len(re.findall(rb"worker \d+ serving: app built", log.read()))

    def restart(self, timeout: float = 30.0) -> "Service":
        """Stop gracefully and start again on the same port with the same config."""
        self.stop()
        return self.start(timeout)

    def read_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def tail(self, chars: int = 3000) -> str:
        """The log's last ``chars`` characters, for error messages."""
        return self.read_log()[-chars:]

    def worker_pids(self) -> set[int]:
        """PIDs of the arbiter's children (the workers)."""
        assert self.proc is not None, "spawn() first"
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return {int(p) for p in path.read_text().split()} if path.exists() else set()

    def stop(self) -> None:
        """SIGTERM (graceful), SIGKILL of the process group after 15 s; idempotent."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        log = getattr(self, "log", None)
        if log is not None and not log.closed:
            log.close()

    def __enter__(self) -> "Service":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
