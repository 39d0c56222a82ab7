"""A leased decision's final write (``Store.finish``): once the cloud acted, its record must not be lost.

The database can go away while the cloud call runs (a failover, a restart, a network cut of a few seconds). Before,
the final write failed at once: the sender got 503, the change the cloud made was recorded nowhere, and the
sender's resend was ``skipped_duplicate`` (the decision's dedup claim was still held), so the pool's stored size and
cooldown stayed behind the cloud's for good. Now:

1. The write is retried with backoff while the decision's lease is good (``until``, from ``Lease.lapses_at``):
   nobody else decides on the pool meanwhile, and the sender simply waits longer for its answer.
2. Past that, the sender gets 503, and the write is kept in this process and retried every second in the
   background until the database takes it (``finish`` records a decision whose lease lapsed and leaves a lease
   another decision took since); each decision this process starts first writes what is kept, so a resend that
   lands here finds the lost write and records it before its own dedup claim is looked at.
3. A write whose commit may have landed although its answer was lost (the connection cut during COMMIT) is looked
   for among the pool's newest events before it is written again: never recorded twice.

A write kept in memory is lost with its worker (killed before the database came back): logged as an error then.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from autoscaler.store import DedupConfirm, EventRecord, PoolChange, RepairMark, Store, StoreUnavailable

log = logging.getLogger(__name__)

FIRST_DELAY = 0.1  # the first retry's wait; doubled up to MAX_DELAY
MAX_DELAY = 1.0
KEEP_FOR = 3600.0  # a kept write is given up (logged as an error) after this long
LOOK_BACK = 50  # how many of the pool's newest events are searched for a write whose answer was lost


@dataclass(frozen=True)
class Final:
    """How a held pool's record is written (``EventLog.finish``): whose lease, until when it is retried
    (monotonic), whether the lease is released with it, the dedup keys it confirms, what it does to the repairs."""

    pool: str
    owner: str
    until: float | None
    release: bool = True
    confirm: DedupConfirm | None = None
    repairs: RepairMark | None = None


@dataclass
class Pending:
    """One decision's final write; ``publish`` logs, counts and sends its event once written (kept writes only)."""

    pool: str
    owner: str
    event: EventRecord
    change: PoolChange
    confirm: DedupConfirm | None
    publish: Callable[[int], object]
    release: bool = True  # False: a record in the middle of a hold, which keeps the lease
    repairs: RepairMark | None = None  # what the record does to the pool's repairs, in the same transaction
    since: float = 0.0  # monotonic: when it was kept
    in_doubt: bool = field(default=False)  # a try failed: its commit may have landed


class FinalWrites:
    """Writes, retries and keeps final writes for one process (one per ``EventLog``)."""

    def __init__(self, store: Store, sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.sleep = sleep
        self.monotonic = monotonic
        self._kept: list[Pending] = []
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._thread: threading.Thread | None = None

    def write(self, pending: Pending, until: float | None) -> int:
        """The event id once written; retried until ``until`` (monotonic; None: one try). StoreUnavailable when the
        database still refuses by then: the write is kept and written later (see the module's docstring)."""
        delay = FIRST_DELAY
        while True:
            try:
                return self._once(pending)
            except StoreUnavailable:
                pending.in_doubt = True
                left = (until if until is not None else float("-inf")) - self.monotonic()
                if left <= delay:
                    self._keep(pending)
                    raise
                log.warning("pool %s: the decision's record could not be written (store unavailable); retrying "
                            "for up to %.1fs while its lease holds", pending.pool, left)
                self.sleep(delay)
                delay = min(delay * 2, MAX_DELAY)

    def _once(self, pending: Pending) -> int:
        if pending.in_doubt:
            found = self._recorded(pending)
            if found is not None:
                log.warning("pool %s: the decision's record (event %d) had been committed although the database's "
                            "answer was lost", pending.pool, found)
                return found
        return self.store.finish(pending.pool, pending.owner, pending.event, pending.change, pending.confirm,
                                 release=pending.release, repairs=pending.repairs)

    def _recorded(self, pending: Pending) -> int | None:
        """The id of ``pending``'s event if its commit landed, else None."""
        ev = pending.event
        for seen in self.store.events(pending.pool, LOOK_BACK):
            if (seen.time, seen.source, seen.outcome, seen.from_, seen.to, seen.reason) == \
                    (ev.time, ev.source, ev.outcome, ev.from_, ev.to, ev.reason) and seen.id is not None:
                return seen.id
        return None

    def _keep(self, pending: Pending) -> None:
        pending.since = self.monotonic()
        with self._lock:
            self._kept.append(pending)
            start = self._thread is None or not self._thread.is_alive()
            if start:
                self._thread = threading.Thread(target=self._retry_kept, name="final-writes", daemon=True)
                self._thread.start()
        log.error("pool %s: the cloud's change is not recorded yet (store unavailable past the decision's lease); "
                  "kept in this worker and written as soon as the store answers (lost if the worker stops first)",
                  pending.pool)

    def kept(self) -> int:
        """How many writes wait for the store."""
        with self._lock:
            return len(self._kept)

    def flush(self) -> None:
        """Write what is kept, oldest first; stop at the first the store refuses (it still is away)."""
        if not self._kept:
            return
        with self._flushing:
            while True:
                with self._lock:
                    if not self._kept:
                        return
                    pending = self._kept[0]
                if self.monotonic() - pending.since > KEEP_FOR:
                    log.error("pool %s: a decision's record (%s %s->%s at %.3f) given up after %.0fs unwritten",
                              pending.pool, pending.event.outcome, pending.event.from_, pending.event.to,
                              pending.event.time, KEEP_FOR)
                else:
                    try:
                        event_id = self._once(pending)
                    except StoreUnavailable:
                        return
                    log.warning("pool %s: the decision's record written late (event %d)", pending.pool, event_id)
                    pending.publish(event_id)
                with self._lock:
                    self._kept.remove(pending)

    def _retry_kept(self) -> None:
        while self.kept():
            # A background thread waits in real time whatever clock the foreground's retries run on (a fake one in
            # tests must not make it spin).
            time.sleep(MAX_DELAY)
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - the retry thread must outlive a surprise; it tries again
                log.exception("writing a kept decision record failed")
