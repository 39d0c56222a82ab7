"""Event retention and dedup-key expiry, pruned in small batches by the reconciler's tick, off the request path."""
from __future__ import annotations

import logging
import time
from typing import Callable

from autoscaler.store import Store, StoreUnavailable

log = logging.getLogger(__name__)


class Pruner:
    """At most one run per ``interval``, called from the reconciler's tick (one process at a time: the holder of the
    reconciler's lease), in small batches (each its own short transaction) until nothing expired is left: it removes
    as much as expired, so it keeps up however many rows a large notification inserted (a fixed number of batches a
    minute did not: 10,000 rows against 45,000 inserted by one notification). ``budget`` bounds one run's time; the
    next run goes on where it stopped."""

    def __init__(self, store: Store, retain: float | None, *, interval: float = 60.0, batch: int = 500,
                 budget: float = 20.0, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.retain = retain
        self.interval = interval
        self.batch = batch
        self.budget = budget
        self.monotonic = monotonic
        self._next = 0.0

    def maybe_run(self, now: float) -> int | None:
        """Run unless one ran within ``interval`` (by ``now``); how many rows went, None when not due."""
        if now < self._next:
            return None
        self._next = now + self.interval
        return self.run(now)

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
