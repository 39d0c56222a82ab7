"""The store interface the engine and the API depend on."""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Collection

from autoscaler.models import Action, PoolState


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


_LAST_ACTED = {Action.SCALE_OUT: "last_scale_out_at", Action.SCALE_IN: "last_scale_in_at"}


@dataclass(frozen=True)
class PoolChange:
    """What one decision or operator action changes in a pool's stored state; fields left None stay as they are.

    ``at`` is when the change happened: it stamps ``acted`` (the last scale-out/in time) and a new tracked count.
    """

    at: float | None = None
    acted: Action | None = None  # a scale that went through: sets last_<action>_at
    failures: int | None = None  # with backoff_until (None: no backoff) after a failed or a good call
    backoff_until: float | None = None
    tracked_count: int | None = None  # the size we now know the pool has (providers that cannot read it)
    paused: bool | None = None  # with pause_reason
    pause_reason: str = ""
    short_until: float | None = None  # with short_reason: the cloud could not deliver (``no_capacity``)
    short_reason: str = ""

    def columns(self) -> dict[str, Any]:
        """The pool row's columns this change sets, by name."""
        out: dict[str, Any] = {}
        if self.acted is not None:
            out[_LAST_ACTED[self.acted]] = self.at
        if self.failures is not None:
            out.update(failures=self.failures, backoff_until=self.backoff_until)
        if self.tracked_count is not None:
            out["tracked_count"] = self.tracked_count
            if self.at is not None:
                out["count_changed_at"] = self.at
        if self.paused is not None:
            out.update(paused=self.paused, pause_reason=self.pause_reason)
        if self.short_until is not None:
            out.update(short_until=self.short_until, short_reason=self.short_reason)
        return out


@dataclass(frozen=True)
class PoolView:
    """A pool's cloud view as last read (by the reconciler, or by a decision): what the API and /metrics show."""

    pool: str
    current: int | None
    busy: bool
    detail: str
    in_flight: int
    error: str | None
    read_at: float


@dataclass(frozen=True)
class NodesView:
    """A node-aware pool's nodes as the reconciler last listed them (the API's node bodies, newest first), or why
    the last listing failed (``nodes`` then are the last good ones, ``read_at`` their time)."""

    pool: str
    nodes: list[dict[str, Any]]
    error: str | None
    read_at: float
    gpus: dict[str, int] | None = None  # allocatable, requested, pending (None: not counted)
    dra: str = ""  # read | not_read | unused ("" : unknown)
    dra_reason: str = ""  # why DRA was not read


@dataclass(frozen=True)
class RepairRecord:
    """A node in repair (docs/repair.md): since when, how far it got (``cordoned``, ``waiting`` for work that cannot
    move, ``draining``, ``removing``), why it started, the pool size asked for its replacement (None: none), and
    the last failure that keeps it going."""

    pool: str
    node: str
    since: float
    state: str
    reason: str = ""
    replacement: int | None = None
    error: str = ""
    updated_at: float = 0.0


@dataclass(frozen=True)
class RemovalIntent:
    """A node whose removal a decision was about to send (recorded before the cloud call): until the cloud's view
    settles it, the node may be on its way out and stays cordoned (see ``autoscaler/scale_in.py``)."""

    pool: str
    node: str
    owner: str  # the decision's lease owner, the mark of its cordons
    at: float  # when the removal was about to be sent
    from_count: int  # the pool's size the removal was decided on


@dataclass(frozen=True)
class QuickState:
    """What the cooldown short cut reads without the lease: the pool's state and the node count of its last event."""

    state: PoolState
    last_count: int | None


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
    def renew(self, pool: str, owner: str, now: float, ttl: float) -> bool:
        """Extend a lease ``owner`` still holds to ``now + ttl``; False when it is no longer theirs."""

    @abc.abstractmethod
    def finish(self, pool: str, owner: str, event: EventRecord, change: PoolChange,
               confirm: DedupConfirm | None = None) -> int:
        """In one transaction: apply the change, append the event, release the lease and (with ``confirm``)
        extend the decision's dedup keys to their full window; return the event id."""

    @abc.abstractmethod
    def quick_state(self, pool: str) -> QuickState | None:
        """The pool's state and the node count of its last event, without the lease (None: no such pool)."""

    @abc.abstractmethod
    def record_settled(self, pool: str, keys: tuple[str, ...], claim: str, now: float, expires_at: float,
                       event: EventRecord, duplicate: EventRecord) -> tuple[int, bool]:
        """In one transaction: claim ``keys`` until ``expires_at`` and append ``event`` as the pool's last, or append
        ``duplicate`` when every key was already claimed. Returns (the event id, whether it was the duplicate)."""

    @abc.abstractmethod
    def release(self, pool: str, owner: str) -> None:
        """Release the lease without recording anything."""

    @abc.abstractmethod
    def record(self, event: EventRecord) -> int:
        """Append an event that changes no pool state; return its id."""

    @abc.abstractmethod
    def update_pool(self, pool: str, event: EventRecord | None, change: PoolChange) -> int | None:
        """Change pool state outside a decision (pause, resume, count correction), with its event."""

    @abc.abstractmethod
    def events(self, pool: str | None, limit: int, before_id: int | None = None, *,
               outcomes: Collection[str] = (), source: str | None = None) -> list[EventRecord]:
        """Newest first; only ``outcomes`` (when given) and events from ``source`` (when given)."""

    @abc.abstractmethod
    def recent_events(self, since: float, per_pool: int) -> dict[str, list[EventRecord]]:
        """Each pool's events at or after ``since``, newest first, at most ``per_pool`` each, in one read (pages)."""

    @abc.abstractmethod
    def last_events(self) -> dict[str, EventRecord]:
        """Each pool's last event (the one its row points at), by pool, in one read."""

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
    def scale_outs(self, pool: str, since: float) -> list[tuple[float, int, int]]:
        """Scale-outs the cloud accepted for ``pool`` at or after ``since`` (time, from, to), and the sizes given back
        after a shortfall (``no_capacity``, to < from), oldest first."""

    @abc.abstractmethod
    def hold_lease(self, name: str, owner: str, now: float, ttl: float) -> bool:
        """Take or renew the process-wide lease ``name`` until ``now + ttl`` unless another owner holds an
        unexpired one; True when ``owner`` holds it now."""

    @abc.abstractmethod
    def release_lease(self, name: str, owner: str) -> None:
        """Give up the lease ``name`` if ``owner`` holds it (on shutdown, so another process takes over at once)."""

    @abc.abstractmethod
    def save_view(self, view: PoolView) -> None:
        """Store a pool's cloud view, replacing the one before (an older read never replaces a newer one)."""

    @abc.abstractmethod
    def views(self) -> dict[str, PoolView]:
        """Every pool's stored cloud view, by pool."""

    @abc.abstractmethod
    def save_nodes(self, view: NodesView) -> None:
        """Store a pool's node view, replacing the one before (an older read never replaces a newer one)."""

    @abc.abstractmethod
    def nodes_view(self, pool: str) -> NodesView | None:
        """A pool's stored node view (None: never listed)."""

    @abc.abstractmethod
    def intend_removals(self, intents: list[RemovalIntent]) -> None:
        """Record node removals about to be sent (replacing older ones of the same nodes)."""

    @abc.abstractmethod
    def removal_intents(self, pool: str) -> list[RemovalIntent]:
        """The pool's recorded removals that no decision has settled yet, oldest first."""

    @abc.abstractmethod
    def forget_removals(self, pool: str, nodes: list[str]) -> None:
        """Settled: the removal of these nodes went through, never did, or they are gone."""

    @abc.abstractmethod
    def add_repair(self, repair: RepairRecord) -> bool:
        """Store a node's repair unless the node is already in repair (then False, nothing written)."""

    @abc.abstractmethod
    def repairs(self, pool: str | None = None) -> list[RepairRecord]:
        """The nodes in repair (of ``pool``, or of every pool), oldest first."""

    @abc.abstractmethod
    def update_repair(self, pool: str, node: str, now: float, state: str | None = None,
                      error: str | None = None, replacement: int | None = None) -> bool:
        """Change a repair's state, last failure or replacement (None: as it is); False when it is not stored."""

    @abc.abstractmethod
    def end_repair(self, pool: str, node: str, event: EventRecord | None,
                   change: PoolChange | None = None) -> int | None:
        """In one transaction: forget the node's repair and append ``event`` as the pool's last (with ``change``);
        the event id (None without one). A repair already gone still records the event."""

    @abc.abstractmethod
    def nodes_views(self) -> dict[str, NodesView]:
        """Every pool's stored node view, by pool, in one read (pages)."""

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise StoreUnavailable unless the database answers."""

    @abc.abstractmethod
    def prune(self, older_than: float | None, now: float, batch: int = 500) -> int:
        """Delete one small batch of events older than ``older_than`` (None: keep all) and of dedup keys
        expired at ``now``; return how many rows went (0 when nothing is left to prune)."""
