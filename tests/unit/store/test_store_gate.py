"""The SQLite writer gate: one writer at a time across threads and processes, never left held."""
from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from autoscaler.store.gate import WriterGate
from autoscaler.store.sql import SqlStore

TRY_LOCK = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY)\n"
            "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(3)\n")


def _other_process_can_lock(path: str) -> bool:
    return subprocess.run([sys.executable, "-c", TRY_LOCK, path], timeout=30).returncode == 0


def test_gate_excludes_other_processes_only_while_held(tmp_path: Path) -> None:
    gate = WriterGate(str(tmp_path / "state.db"))
    with gate.hold():
        assert not _other_process_can_lock(gate.path)
    assert _other_process_can_lock(gate.path)


def test_gate_serialises_threads(tmp_path: Path) -> None:
    gate = WriterGate(str(tmp_path / "state.db"))
    inside, overlaps = [0], [0]
    start = threading.Barrier(8)

    def writer() -> None:
        start.wait()
        for _ in range(200):
            with gate.hold():
                inside[0] += 1
                overlaps[0] += inside[0] > 1
                inside[0] -= 1

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert overlaps == [0]


def test_sqlite_store_uses_a_gate_next_to_its_file_and_releases_it(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.ensure_pools(["gpu"])
    assert store.gate is not None and store.gate.path == str(tmp_path / "state.db.lock")
    assert store.acquire("gpu", "me", 100.0, 60.0)
    assert _other_process_can_lock(store.gate.path)  # held per transaction, not per lease
    assert SqlStore("sqlite://").gate is None  # in memory: nothing to share
