"""The SQLite file under foot: is the file at the path still the one the store opened, and still writable?

A deleted file (or directory) lives on as long as a pooled connection holds it open: writes succeed into a file
nobody will ever read again, and a new connection would create a fresh, empty database at the path. A file that
turns read-only keeps working through connections opened before, while every connection opened meanwhile is
read-only for good. So before each transaction the store compares the path's device and inode with the file it
opened (one ``stat``, a few microseconds), and at most every ``probe_interval`` seconds asks the kernel whether
this process could open it for writing (``access(W_OK)``, which also sees read-only mounts and immutable files).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable

from autoscaler.store.base import StoreUnavailable

log = logging.getLogger(__name__)

#: Set by the gunicorn master (``pin``) before it forks: ``<device>:<inode>:<path>`` of the file it opened, so that a
#: worker started later (after a crash or a timeout) checks that file, and never creates a fresh one at the path.
PIN_ENV = "AUTOSCALER_SQLITE_FILE"


def pin(path: str) -> None:
    """Create the database file (and its directory) if missing and pin its identity for the workers to come."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "ab"):  # an empty file is an empty SQLite database
        pass
    st = os.stat(path)
    os.environ[PIN_ENV] = f"{st.st_dev}:{st.st_ino}:{path}"


def pinned(path: str) -> tuple[int, int] | None:
    """The identity the master pinned for ``path``; None when there is none (no gunicorn, another file)."""
    dev, _, rest = os.environ.get(PIN_ENV, "").partition(":")
    ino, _, where = rest.partition(":")
    if where != path or not (dev.isdigit() and ino.isdigit()):
        return None
    return int(dev), int(ino)


class SqliteFile:
    """The identity (device, inode) of the database file at start, and its checks; ``on_change`` runs when the
    verdict changes (the store drops its pooled connections then: they hold the old file, or were opened
    read-only)."""

    def __init__(self, path: str, probe_interval: float, on_change: Callable[[], None]) -> None:
        self.path = path
        self.probe_interval = probe_interval
        self.on_change = on_change
        identity = pinned(path)
        self.pinned = identity is not None  # by the gunicorn master: this is a worker it forked
        if identity is None:
            st = os.stat(path)
            identity = (st.st_dev, st.st_ino)
        self.identity = identity
        self._lock = threading.Lock()
        self._probed_at = float("-inf")
        self._problem = ""  # what the last check found wrong ("" when fine)

    def check(self) -> None:
        """Raise StoreUnavailable unless the path still holds the file opened at start and it is writable."""
        try:
            st = os.stat(self.path)
            problem = "" if (st.st_dev, st.st_ino) == self.identity else "was replaced by another file"
        except FileNotFoundError:
            problem = "was removed"
        except OSError as exc:
            problem = f"cannot be read ({exc.strerror})"
        if not problem:
            problem = self._writable()
        self._verdict(problem)
        if problem:
            raise StoreUnavailable(f"store unavailable: the database file {problem}")

    def _writable(self) -> str:
        """"" or why not; asked of the kernel at most every ``probe_interval`` seconds, the answer cached."""
        now = time.monotonic()
        if now - self._probed_at < self.probe_interval:
            return self._problem if self._problem == "is read-only" else ""
        with self._lock:
            if now - self._probed_at >= self.probe_interval:
                writable = os.access(self.path, os.W_OK, effective_ids=os.access in os.supports_effective_ids)
                self._probed_at = now
                return "" if writable else "is read-only"
            return self._problem if self._problem == "is read-only" else ""

    def _verdict(self, problem: str) -> None:
        if problem == self._problem:
            return
        with self._lock:
            if problem == self._problem:
                return
            was, self._problem = self._problem, problem
        if problem:
            hint = " (restart the service to open the file now at the path)" if "read-only" not in problem else ""
            log.error("store %s %s%s", self.path, problem, hint)
        else:
            log.warning("store %s is writable again (was: %s)", self.path, was)
        self.on_change()
