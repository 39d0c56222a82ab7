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
    concurrent webhooks a third of a worker's time went to those sleeps. Here the next writer wakes the moment the
    previous one commits. The lock file is open only while held (read-only is enough for flock), so the gate never
    keeps the disk busy, and the kernel drops a dead process's flock, so a killed worker never wedges the others.
    """

    def __init__(self, db_path: str, timeout: float = 30.0) -> None:
        self.path = db_path + ".lock"
        self.timeout = timeout
        self._thread_lock = threading.Lock()

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the gate for one transaction; without it (lock file unusable) SQLite's own locking still holds."""
        if not self._thread_lock.acquire(timeout=self.timeout):
            raise StoreUnavailable("store unavailable: writer gate busy")
        try:
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o600)
            except OSError:
                fd = -1  # e.g. a read-only disk: let SQLite report what is wrong
            try:
                if fd >= 0:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                if fd >= 0:
                    os.close(fd)  # releases the flock
        finally:
            self._thread_lock.release()
