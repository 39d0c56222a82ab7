"""A decision's hold on its pool: take the store lease, keep it while the decision runs, give it back.

The lease (``Store.acquire`` / ``renew`` / ``release``) is what makes one decision per pool across workers and
replicas; the engine's per-process lock only spares the database the polling of threads of the same process.
"""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from autoscaler.models import PoolState
from autoscaler.store import Store, StoreUnavailable

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Sleep = Callable[[float], None]


class PoolBusy(Exception):
    """A pool stayed held by a decision past ``lock_wait``; ``retry_after`` seconds is when to try again (503)."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Lease:
    """One owner's lease on one pool (``ttl`` seconds from each take or renewal, by ``clock``, the store's time).

    ``monotonic`` measures the waits (``take``'s deadline, ``kept``'s ``max_decision``) and ``sleep`` paces
    ``take``'s polling; both are injected, so that tests run on a fake clock."""

    store: Store
    pool: str
    owner: str
    clock: Clock
    ttl: float
    monotonic: Clock = time.monotonic
    sleep: Sleep = time.sleep
    _lapses: list[float] = field(default_factory=lambda: [float("-inf")], compare=False, repr=False)

    def take(self, deadline: float) -> PoolState | None:
        """The pool's state once the lease is ours; None when it stays taken until ``deadline`` (by ``monotonic``)."""
        delay = 0.005
        while True:
            started = self.monotonic()
            state = self.store.acquire(self.pool, self.owner, self.clock(), self.ttl)
            if state is not None:
                self._lapses[0] = started + self.ttl
                return state
            if self.monotonic() >= deadline:
                return None
            self.sleep(delay)
            delay = min(delay * 2, 0.05)

    def renew(self) -> bool:
        """Extend the lease now; False when it is no longer ours."""
        started = self.monotonic()
        if self.store.renew(self.pool, self.owner, self.clock(), self.ttl):
            self._lapses[0] = started + self.ttl
            return True
        return False

    def lapses_at(self) -> float:
        """When (by ``monotonic``) the lease lapses unless renewed: ``ttl`` after the last take or renewal began."""
        return self._lapses[0]

    def release(self) -> None:
        """Best effort: give the pool's lease back (it expires by itself when the store is away)."""
        try:
            self.store.release(self.pool, self.owner)
        except StoreUnavailable:
            log.warning("lease of pool %s left to expire by itself: store unavailable", self.pool)

    @contextmanager
    def kept(self, max_decision: float) -> Iterator[None]:
        """Keep the lease while the decision runs (the cloud call may outlast ``ttl``): a small thread bound to this
        decision extends it every third of the TTL, so only a dead worker's lease ever lapses. A decision still
        running after ``max_decision`` seconds (a call that hangs for good) is let go: its lease lapses, so a hung
        worker cannot hold its pool forever."""
        stop = threading.Event()
        give_up = self.monotonic() + max_decision

        def renew() -> None:
            while not stop.wait(max(self.ttl / 3, 0.05)):
                if self.monotonic() >= give_up:
                    log.error("decision on pool %s still running after %.0fs: its lease is left to lapse",
                              self.pool, max_decision)
                    return
                try:
                    if not self.renew():
                        log.error("lease of pool %s was lost while its decision ran (held past lease_ttl?)",
                                  self.pool)
                        return
                except StoreUnavailable:
                    log.warning("could not renew the lease of pool %s: store unavailable; retrying", self.pool)

        thread = threading.Thread(target=renew, name=f"lease-{self.pool}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()  # a renewal racing the release is harmless: it only touches a lease this owner still holds
