"""A cross-process writer gate for SQLite: waiters block in the kernel instead of SQLite's sleep-and-retry."""
from __future__ import annotations

import fcntl
import os
import threading
from contextlib import contextmanager
from typing import Iterator

from autoscaler.store.base import StoreUnavailable


class WriterGate:
    """Serialises write transactions on one SQLite file across threads (a lock) and processes (flock).

    SQLite already allows one writer at a time, but a blocked writer polls with sleeps of 1, 2, 5, 10… ms; under
    concurrent webhooks most of a worker's time went to those sleeps. Here the next writer wakes the moment the
    previous one commits. The kernel drops a dead process's flock, so a killed worker never wedges the others.
    """

    def __init__(self, db_path: str, timeout: float = 30.0) -> None:
        self.path = db_path + ".lock"
        self.timeout = timeout
        self._thread_lock = threading.Lock()
        self._fd: int | None = None
        self._pid = 0

    def _file(self) -> int:
        if self._fd is None or self._pid != os.getpid():  # a forked child needs its own open file
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            self._pid = os.getpid()
        return self._fd

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the gate for one transaction."""
        if not self._thread_lock.acquire(timeout=self.timeout):
            raise StoreUnavailable("store unavailable: writer gate busy")
        try:
            fd = self._file()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()
