"""Holding a pool: the only way anything changes one.

:class:`PoolHold` takes this process's lock on the pool (threads of one process queue on it, woken by the kernel,
rather than polling the database), then the pool's store lease (``Store.acquire`` / ``renew`` / ``release``: one
holder across workers and replicas), keeps the lease renewed while the holder works (a cloud call may outlast the
lease's TTL), and records the outcome and gives the lease back in one step (:meth:`Held.finish`, one store
transaction) or lets it go unrecorded. The engine's decisions, the operator's acts (pause, resume, count), the
reconciler's shortage handling and its floor and headroom top-ups (decisions too) all go through it.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Iterator, Mapping

from autoscaler.clock import SYSTEM, Clock
from autoscaler.models import Alert, Decision, PoolState
from autoscaler.pool.final_write import Final
from autoscaler.pool.stamps import settled
from autoscaler.store import DedupConfirm, PoolChange, PoolStore, RepairMark, Store, StoreUnavailable

if TYPE_CHECKING:
    from autoscaler.pool.attempt import Attempt
    from autoscaler.pool.events import EventLog

log = logging.getLogger(__name__)

MAX_DECISION = 3600.0  # a hold's lease is renewed for at most this long (drains included)
HELD_RETRY = 5.0  # Retry-After (at most) when the pool is held by another holder of ours
FINAL_MARGIN = 1.0  # the final write's retries stop this long before the lease lapses


class PoolHeld(Exception):
    """A pool stayed held (by a decision, an operator's act, the reconciler) past ``lock_wait``; ``retry_after``
    seconds is when to try again (503). Not the cloud's busy (``providers.BusyError``, code ``PoolBusy``)."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Lease:
    """One owner's lease on one pool (``ttl`` seconds from each take or renewal, on the store's clock: PostgreSQL's
    for every replica, the wall clock on SQLite). The monotonic clock measures ``take``'s deadline and ``sleep`` paces
    its polling."""

    store: PoolStore
    pool: str
    owner: str
    ttl: float
    clock: Clock = SYSTEM
    _lapses: list[float] = field(default_factory=lambda: [float("-inf")], compare=False, repr=False)

    def take(self, deadline: float) -> PoolState | None:
        """The pool's state once the lease is ours; None when it stays taken until ``deadline`` (monotonic)."""
        delay = 0.005
        while True:
            started = self.clock.monotonic()
            state = self.store.acquire(self.pool, self.owner, self.clock.wall(), self.ttl)
            if state is not None:
                self._lapses[0] = started + self.ttl
                return state
            if self.clock.monotonic() >= deadline:
                return None
            self.clock.sleep(delay)
            delay = min(delay * 2, 0.05)

    def renew(self) -> bool:
        """Extend the lease now; False when it is no longer ours."""
        started = self.clock.monotonic()
        if self.store.renew(self.pool, self.owner, self.clock.wall(), self.ttl):
            self._lapses[0] = started + self.ttl
            return True
        return False

    def lapses_at(self) -> float:
        """When (monotonic) the lease lapses unless renewed: ``ttl`` after the last take or renewal began."""
        return self._lapses[0]

    def release(self) -> None:
        """Best effort: give the pool's lease back (it expires by itself when the store is away)."""
        try:
            self.store.release(self.pool, self.owner)
        except StoreUnavailable:
            log.warning("lease of pool %s left to expire by itself: store unavailable", self.pool)


@dataclass
class Held:
    """One hold on one pool: its state as leased, and the lease, renewed until the hold ends. Used as a context
    manager: leaving it stops the renewal, gives the lease back unless :meth:`finish` recorded (and released) it,
    and frees this process's lock."""

    state: PoolState
    lease: Lease
    events: EventLog
    lock: threading.Lock
    max_decision: float
    renewed: bool = True
    _stop: threading.Event = field(default_factory=threading.Event)
    _finished: bool = False

    def __post_init__(self) -> None:
        if self.renewed:
            threading.Thread(target=self._renew, name=f"lease-{self.lease.pool}", daemon=True).start()

    def _renew(self) -> None:
        """Extend the lease every third of its TTL while the hold lasts, so only a dead worker's lease ever lapses.
        A hold still running after ``max_decision`` seconds (a call that hangs for good) is let go: its lease
        lapses, so a hung worker cannot hold its pool forever."""
        lease = self.lease
        give_up = lease.clock.monotonic() + self.max_decision
        while not self._stop.wait(max(lease.ttl / 3, 0.05)):
            if lease.clock.monotonic() >= give_up:
                log.error("decision on pool %s still running after %.0fs: its lease is left to lapse", lease.pool,
                          self.max_decision)
                return
            try:
                if not lease.renew():
                    log.error("lease of pool %s was lost while its decision ran (held past lease_ttl?)", lease.pool)
                    return
            except StoreUnavailable:
                log.warning("could not renew the lease of pool %s: store unavailable; retrying", lease.pool)

    def finish(self, attempt: Attempt, decision: Decision, change: PoolChange,
               confirm: DedupConfirm | None = None) -> Decision:
        """Record a decision's outcome, apply its change to the pool and give the lease back, in one transaction
        (see :meth:`record`); ``attempt.owner`` must be this hold's owner."""
        return self.record(decision, attempt.source, attempt.alerts, attempt.now, change, confirm=confirm)

    def record(self, decision: Decision, source: str, alerts: list[Alert], now: float, change: PoolChange, *,
               confirm: DedupConfirm | None = None, release: bool = True,
               repairs: RepairMark | None = None) -> Decision:
        """Record an event of this hold with its change to the pool, through the final write (``EventLog.finish``:
        retried while the lease holds, since the cloud may have acted and its record must not be lost, then kept).
        ``release`` (the default) gives the lease back in the same transaction and ends the hold's renewal; False
        records in the middle of a hold (a repair step), which keeps the pool. ``repairs``: what the record does to
        the pool's stored repairs (a repair ended, a replacement asked), in the same transaction."""
        if release:
            self._stop.set()  # a renewal racing the release is harmless: it only touches a lease this owner holds
        final = Final(self.lease.pool, self.lease.owner, self.lease.lapses_at() - FINAL_MARGIN, release, confirm,
                      repairs)
        recorded = self.events.finish(final, decision, source, alerts, now, change)
        self._finished = self._finished or release
        return recorded

    def __enter__(self) -> Held:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        try:
            if not self._finished:
                self.lease.release()
        finally:
            self.lock.release()


class PoolHold:
    """Hands out holds on pools, one at a time per pool (see the module). ``lock_wait``: how long a holder waits
    for a pool another holds; ``lease_ttl``: the lease's TTL, renewed every third of it."""

    def __init__(self, store: Store, events: EventLog, lock_wait: float, lease_ttl: float,
                 clock: Clock = SYSTEM, short_for: Mapping[str, float] | None = None) -> None:
        self.store = store
        self.short_for = dict(short_for or {})  # each pool's capacity.short_for (stamps.settled)
        self.events = events
        self.clock = clock
        self.lock_wait = lock_wait
        self.lease_ttl = lease_ttl
        self.max_decision = MAX_DECISION
        # The thread that renews a hold's lease; a replay turns it off: its clock stands still while it holds a
        # pool, so no lease can lapse (and a thread per decision is a third of a replay's CPU).
        self.renew = True
        self.owner_prefix = f"{socket.gethostname()}:{os.getpid()}"
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def owner(self, tag: str) -> str:
        """The lease's owner for one holder of this process (``tag``: a claim's id, ``operator:<uuid>``)."""
        return f"{self.owner_prefix}:{tag}"

    def deadline(self) -> float:
        """When a holder starting now gives up waiting (monotonic)."""
        return self.clock.monotonic() + self.lock_wait

    @property
    def retry_after(self) -> float:
        """Retry-After for a pool that stayed held."""
        return min(self.lease_ttl, HELD_RETRY)

    def take(self, pool: str, owner: str, deadline: float) -> Held | None:
        """Hold ``pool`` as ``owner``: this process's lock, then the lease, waiting until ``deadline`` (monotonic);
        None when it stays held. StoreUnavailable (nothing held) when the store is away."""
        with self._guard:
            lock = self._locks.setdefault(pool, threading.Lock())
        if not lock.acquire(timeout=max(0.0, deadline - self.clock.monotonic())):
            return None
        lease = Lease(self.store, pool, owner, self.lease_ttl, self.clock)
        try:
            state = lease.take(deadline)
        except BaseException:
            lock.release()
            raise
        if state is None:
            lock.release()
            return None
        try:  # stamps written ahead of this clock brought back before anything is decided on them
            state = settled(self.store, pool, state, self.clock.wall(), self.short_for.get(pool))
        except BaseException:
            lease.release()
            lock.release()
            raise
        return Held(state, lease, self.events, lock, self.max_decision, self.renew)

    @contextmanager
    def holding(self, pool: str, who: str = "operator") -> Iterator[Held]:
        """Hold ``pool`` for a change recorded on its own (an operator's pause, resume or count correction, a
        repair's step; ``who`` names the holder in the lease's owner): a decision in flight finishes first and none
        starts meanwhile; PoolHeld when it stays held past ``lock_wait``."""
        held = self.take(pool, self.owner(f"{who}:{uuid.uuid4().hex}"), self.deadline())
        if held is None:
            raise PoolHeld(f"another decision on pool {pool} is still running after {self.lock_wait:g}s; try again",
                           self.retry_after)
        with held:
            yield held
