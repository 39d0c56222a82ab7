"""The service's one source of time: the wall clock, the monotonic clock and sleep.

The wall clock is the events' time and the cooldowns' (and, on SQLite, one host, the time leases and dedup claims
expire on; on PostgreSQL they expire on the database's clock: ``store/expiry.py``); the monotonic clock
measures waits and budgets (a lock wait, a cloud call's retry budget, a drain's timeout); ``sleep`` paces polling and
retries. ``create_app`` makes one and hands it to the engine, its pool hold, the reconciler and, through
``ProviderFactory.build``, every provider and its retry loop (``providers.retry.call``). Tests hand in one fake
(``tests.support.FakeClock``), so that no test waits out a real backoff.
"""
from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Where the service reads the time and waits."""

    def wall(self) -> float:
        """Seconds since the epoch (the store's time)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for waits and budgets)."""

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""


class SystemClock:
    """The machine's clocks and a real sleep."""

    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM: Clock = SystemClock()


class ManualClock:
    """A wall clock its owner moves (a replay's simulated time, ``now``); the machine's monotonic clock; no
    sleeping (nothing in a simulation waits for a peer)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        return None
