"""The store interface the engine and the API depend on."""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Callable

from autoscaler.models import PoolState


class StoreUnavailable(Exception):
    """The database cannot be reached or written; the caller answers 503 and keeps nothing half-written."""


@dataclass(frozen=True)
class EventRecord:
    """One decision as the event log keeps it."""

    time: float
    pool: str | None
    source: str
    action: str | None
    outcome: str
    from_: int | None
    to: int | None
    reason: str
    alerts: list[dict[str, str]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    id: int | None = None


@dataclass(frozen=True)
class DedupConfirm:
    """Dedup keys a decision claimed, to extend to ``expires_at`` once the decision is recorded."""

    keys: tuple[str, ...]
    claim: str
    expires_at: float


class Store(abc.ABC):
    """Short transactions only: nothing here is held open across a cloud call."""

    @abc.abstractmethod
    def ensure_pools(self, names: list[str]) -> None:
        """Create a row for each configured pool that has none."""

    @abc.abstractmethod
    def pool(self, name: str) -> PoolState:
        """The stored state of one pool."""

    @abc.abstractmethod
    def pools(self) -> dict[str, PoolState]:
        """The stored state of every pool."""

    @abc.abstractmethod
    def claim_dedup(self, pool: str, keys: tuple[str, ...], now: float, window: float, claim: str) -> bool:
        """Atomically claim the keys not already claimed inside their window; True when any was new."""

    @abc.abstractmethod
    def release_dedup(self, keys: tuple[str, ...], claim: str) -> None:
        """Forget keys this claim took, so that a retry of the same notification can act."""

    @abc.abstractmethod
    def acquire(self, pool: str, owner: str, now: float, ttl: float) -> PoolState | None:
        """Take the pool's lease unless someone else holds an unexpired one; the state just leased, else None."""

    @abc.abstractmethod
    def finish(self, pool: str, owner: str, event: EventRecord, changes: dict[str, Any],
               confirm: DedupConfirm | None = None) -> int:
        """In one transaction: apply state changes, append the event, release the lease and (with ``confirm``)
        extend the decision's dedup keys to their full window; return the event id."""

    @abc.abstractmethod
    def settle(self, pool: str, keys: tuple[str, ...], claim: str, now: float, expires_at: float,
               build: Callable[[PoolState, int | None], EventRecord | None],
               duplicate: EventRecord) -> tuple[EventRecord, bool] | None:
        """A decision the stored state alone settles, without the lease: read the pool's state and the node count
        of its last event, ``build`` the event from them (None: not settled, nothing written, the caller takes the
        full path), then in one transaction claim ``keys`` until ``expires_at`` and append that event, or
        ``duplicate`` when every key was already claimed. Returns (the event as stored, whether it was the
        duplicate)."""

    @abc.abstractmethod
    def release(self, pool: str, owner: str) -> None:
        """Release the lease without recording anything."""

    @abc.abstractmethod
    def record(self, event: EventRecord) -> int:
        """Append an event that changes no pool state; return its id."""

    @abc.abstractmethod
    def update_pool(self, pool: str, event: EventRecord | None, changes: dict[str, Any]) -> int | None:
        """Change pool state outside a decision (pause, resume, count correction), with its event."""

    @abc.abstractmethod
    def events(self, pool: str | None, limit: int, before_id: int | None = None) -> list[EventRecord]:
        """Newest first."""

    @abc.abstractmethod
    def event(self, event_id: int) -> EventRecord | None:
        """One event by id."""

    @abc.abstractmethod
    def recommendations(self, pool: str, since: float) -> list[tuple[float, int]]:
        """Proportional recommendations (time, desired nodes) of a pool made at or after ``since``, oldest first."""

    @abc.abstractmethod
    def add_recommendation(self, pool: str, time: float, desired: int, forget_before: float) -> None:
        """Remember one recommendation and forget the pool's ones older than ``forget_before``."""

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise StoreUnavailable unless the database answers."""

    @abc.abstractmethod
    def prune(self, older_than: float | None, now: float, batch: int = 500) -> int:
        """Delete one small batch of events older than ``older_than`` (None: keep all) and of dedup keys
        expired at ``now``; return how many rows went (0 when nothing is left to prune)."""
