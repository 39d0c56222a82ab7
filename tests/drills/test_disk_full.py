"""Disk full, for real, through gunicorn (issue 34, item 8): the SQLite file on a small tmpfs that a filler file
fills to the last byte. Writes fail with the engine's own "database or disk is full" (SQLITE_FULL from ENOSPC);
alerts are 503, and /readyz is 503 and ``store_up`` 0 on every worker until a write succeeds again."""
from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
import requests

from tests.support.pipeline import wait_for
from tests.support.servers import Service
from tests.support import AUTH, am_alert, am_payload, config

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (needs root: ``mount``); skipped without it, except under CI=true, where it fails."""
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        reason = f"cannot mount a tmpfs to fill ({done.stderr.strip()[:200]}); needs root"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}; CI=true, so the disk-full drill must run")
        pytest.skip(reason)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(disk: Path) -> Path:
    """Write a filler file until the filesystem refuses another byte (ENOSPC)."""
    filler = disk / "filler"
    chunk = b"\0" * 65536
    with open(filler, "wb", buffering=0) as out:
        while True:
            try:
                out.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                chunk = chunk[: len(chunk) // 2]
                if not chunk:
                    return filler


def _readiness(server: Service) -> list[tuple[int, float]]:
    """(/readyz status, store_up) a few times over: the answers of both workers."""
    out = []
    for _ in range(6):
        ready = requests.get(f"{server.url}/readyz", timeout=30).status_code
        body = requests.get(f"{server.url}/metrics", timeout=30).text
        up = next(float(ln.split()[1]) for ln in body.splitlines() if ln.startswith("gpu_autoscaler_store_up "))
        out.append((ready, up))
    return out


def test_disk_full_fails_readiness_until_a_write_succeeds(tmp_path: Path, small_disk: Path) -> None:
    cfg = config(f"sqlite:///{small_disk}/state.db")
    cfg["defaults"] = {**cfg["defaults"], "scale_out": {"step": 1, "cooldown": 0}}
    with Service(cfg, tmp_path, workers=2) as server:
        hook = f"{server.url}/webhook/alertmanager"
        assert set(_readiness(server)) == {(200, 1.0)}
        filler = _fill(small_disk)
        sent = [requests.post(hook, json=am_payload(am_alert(fingerprint=f"full-{i}")), headers=AUTH, timeout=30)
                for i in range(3)]
        assert [s.status_code for s in sent] == [503] * 3, [s.text for s in sent]
        assert all(s.json()["error"].startswith("state store unavailable") for s in sent)
        # a worker that wrote nothing since may stand by its last probe write for up to a second (probe.WRITE_EVERY)
        wait_for(lambda: set(_readiness(server)) == {(503, 0.0)}, 5, "not ready while writes fail", interval=0.2)
        assert set(_readiness(server)) == {(503, 0.0)}  # and it stays so
        assert "database or disk is full" in server.read_log()  # the engine's own error, logged
        ready = requests.get(f"{server.url}/readyz", timeout=30)
        assert ready.json()["status"] == "unavailable" and "write" in ready.json()["error"]
        assert "bytes free" in ready.json()["error"], ready.json()  # the disk's room, not a probe write's luck

        filler.unlink()  # room again: the next write succeeds, and readiness follows
        wait_for(lambda: set(_readiness(server)) == {(200, 1.0)}, 20, "ready again once writes succeed", interval=0.5)
        again = requests.post(hook, json=am_payload(am_alert(fingerprint="after")), headers=AUTH, timeout=30)
        assert again.status_code == 200 and again.json()["decisions"][0]["outcome"] == "scaled", again.text
