"""Event retention and dedup-key expiry, pruned in small batches off the request path."""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from autoscaler.store import Store, StoreUnavailable

log = logging.getLogger(__name__)


class Pruner:
    """At most one run per ``interval`` per process, on a background thread, in small batches (each its own short
    transaction) until nothing expired is left: it removes as much as expired, so it keeps up however many rows a
    large notification inserted (a fixed number of batches a minute did not: 10,000 rows against 45,000 inserted
    by one notification). ``budget`` bounds one run's time; the next run goes on where it stopped."""

    def __init__(self, store: Store, retain: float | None, clock: Callable[[], float] = time.time, *,
                 interval: float = 60.0, batch: int = 500, budget: float = 20.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.retain = retain
        self.clock = clock
        self.interval = interval
        self.batch = batch
        self.budget = budget
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._next = 0.0
        self._thread: threading.Thread | None = None

    def maybe_start(self) -> threading.Thread | None:
        """Start a run unless one ran within ``interval`` or is still going; never blocks."""
        now = self.clock()
        with self._lock:
            if now < self._next or (self._thread is not None and self._thread.is_alive()):
                return None
            self._next = now + self.interval
            self._thread = threading.Thread(target=self.run, args=(now,), name="autoscaler-prune", daemon=True)
            self._thread.start()
            return self._thread

    def join(self, timeout: float | None = None) -> None:
        """Wait for a run in progress (before closing the store, and in tests)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def run(self, now: float) -> int:
        """Prune until nothing is left or ``budget`` seconds went; return how many rows went."""
        older_than = now - self.retain if self.retain else None
        total = 0
        stop = self.monotonic() + self.budget
        try:
            while self.monotonic() < stop:
                removed = self.store.prune(older_than, now, self.batch)
                total += removed
                if removed == 0:
                    break
        except StoreUnavailable as exc:
            log.warning("prune skipped: %s", exc)  # next run will try again
        except Exception:  # a pruning bug must never take a worker down
            log.exception("prune failed")
        if total:
            log.info("pruned %d rows (events older than %s s, expired dedup keys)", total, self.retain)
        return total
