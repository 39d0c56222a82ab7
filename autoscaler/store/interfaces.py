"""The store's interface, split by concern: pools and their leases, dedup keys, the event log, the reconciler's
views, node removals, repairs; ``Store`` is all of them (``SqlStore``, ``MemoryStore``)."""
from __future__ import annotations

import abc
from typing import Callable, Collection

from autoscaler.models import PoolState
from autoscaler.store.gangs import GangStore
from autoscaler.store.base import (DedupConfirm, EventRecord, NodesView, PoolChange, PoolView, QuickState,
                                   RemovalIntent, RepairAlert, RepairMark, RepairRecord, Shortcut)


class PoolStore(abc.ABC):
    """Pools and their leases: the state a decision reads, holds, changes and gives back."""

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
    def acquire(self, pool: str, owner: str, now: float, ttl: float) -> PoolState | None:
        """Take the pool's lease unless someone else holds an unexpired one; the state just leased, else None.
        Expiry is on the store's clock (``expiry.py``): ``now`` is the caller's, for SQLite and memory only."""

    @abc.abstractmethod
    def renew(self, pool: str, owner: str, now: float, ttl: float) -> bool:
        """Extend a lease ``owner`` still holds to ``ttl`` from now; False when it is no longer theirs."""

    @abc.abstractmethod
    def release(self, pool: str, owner: str) -> None:
        """Release the lease without recording anything."""

    @abc.abstractmethod
    def finish(self, pool: str, owner: str, event: EventRecord, change: PoolChange,
               confirm: DedupConfirm | None = None, *, release: bool = True, repairs: RepairMark | None = None) -> int:
        """In one transaction: apply the change, append the event, release the lease (unless ``release`` is False:
        a record in the middle of a hold) and (with ``confirm``) extend the decision's dedup keys to their full
        window; ``repairs``: what the record does to the pool's stored repairs (ended, replacement asked), in the
        same transaction. Return the event id."""

    @abc.abstractmethod
    def update_pool(self, pool: str, event: EventRecord | None, change: PoolChange) -> int | None:
        """Change pool state outside a decision (pause, resume, count correction), with its event."""


class DedupStore(abc.ABC):
    """Dedup keys: claimed per delivery, released for a retry, or settled with the decision's record."""

    @abc.abstractmethod
    def claim_dedup(self, pool: str, keys: tuple[str, ...], now: float, window: float, claim: str,
                    longest: float | None = None) -> bool:
        """Atomically claim the keys not already claimed inside their window (on the store's clock, as leases);
        True when any was new. A held key further ahead than ``longest`` (the longest window a claim of the pool
        holds; at least ``window``) is brought back to it: the clock stepped back (None: never)."""

    @abc.abstractmethod
    def release_dedup(self, keys: tuple[str, ...], claim: str) -> None:
        """Forget keys this claim took, so that a retry of the same notification can act."""

    @abc.abstractmethod
    def shortcut(self, pool: str,
               plan: Callable[[QuickState | None], Shortcut | None]) -> tuple[int, bool] | None:
        """The short cut, in one transaction: read the pool's state and the node count of its last event, without
        the lease (None: no such pool), and hand them to ``plan``, which says what they settle. None from it: nothing
        is written, and None is returned. Else claim its keys until ``expires_at`` and append its ``event`` as the
        pool's last, or append its ``duplicate`` when every key was already claimed; return (the event id, whether
        it was the duplicate). ``plan`` runs inside the transaction: it must be quick and must not use the store."""


class EventStore(abc.ABC):
    """The event log and what is derived from it (recommendations, scale-outs), and its pruning."""

    @abc.abstractmethod
    def record(self, event: EventRecord) -> int:
        """Append an event that changes no pool state; return its id."""

    @abc.abstractmethod
    def events(self, pool: str | None, limit: int, before_id: int | None = None, *,
               outcomes: Collection[str] = (), source: str | None = None) -> list[EventRecord]:
        """Newest first; only ``outcomes`` (when given) and events from ``source`` (when given)."""

    @abc.abstractmethod
    def recent_events(self, since: float, per_pool: int,
                      pools: Collection[str] | None = None) -> dict[str, list[EventRecord]]:
        """Each pool's events at or after ``since`` among its ``per_pool`` newest, newest first, in one read (pages):
        the work is bounded by pools x ``per_pool``, however many events the store or the window holds. ``pools``:
        only these (None: every pool). As the charts read them: without their alerts (an empty list; ``events``
        has them)."""

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
    def prune(self, older_than: float | None, now: float, batch: int = 500) -> int:
        """Delete one small batch of events older than ``older_than`` (None: keep all) and of dedup keys
        expired at ``now``; return how many rows went (0 when nothing is left to prune)."""


class ViewStore(abc.ABC):
    """What the reconciler read (the cloud's view of each pool, each pool's nodes) and its own lease."""

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
    def nodes_views(self) -> dict[str, NodesView]:
        """Every pool's stored node view, by pool, in one read (pages)."""

    @abc.abstractmethod
    def hold_lease(self, name: str, owner: str, now: float, ttl: float) -> bool:
        """Take or renew the process-wide lease ``name`` until ``now + ttl`` unless another owner holds an
        unexpired one; True when ``owner`` holds it now."""

    @abc.abstractmethod
    def release_lease(self, name: str, owner: str) -> None:
        """Give up the lease ``name`` if ``owner`` holds it (on shutdown, so another process takes over at once)."""


class RemovalStore(abc.ABC):
    """Node removals about to be asked of the cloud, recorded first, until a decision settles them."""

    @abc.abstractmethod
    def intend_removals(self, intents: list[RemovalIntent]) -> None:
        """Record node removals about to be sent (replacing older ones of the same nodes)."""

    @abc.abstractmethod
    def removal_intents(self, pool: str) -> list[RemovalIntent]:
        """The pool's recorded removals that no decision has settled yet, oldest first."""

    @abc.abstractmethod
    def forget_removals(self, pool: str, nodes: list[str]) -> None:
        """Settled: the removal of these nodes went through, never did, or they are gone."""


class RepairStore(abc.ABC):
    """Node repairs in progress, shared by replicas."""

    @abc.abstractmethod
    def add_repair(self, repair: RepairRecord) -> bool:
        """Store a node's repair unless the node is already in repair (then False, nothing written)."""

    @abc.abstractmethod
    def repairs(self, pool: str | None = None) -> list[RepairRecord]:
        """The nodes in repair (of ``pool``, or of every pool), oldest first."""

    @abc.abstractmethod
    def update_repair(self, pool: str, node: str, now: float, state: str | None = None,  # 7: each field that
                      error: str | None = None, replacement: int | None = None,  # may change, None: as it is
                      evicted: str | None = None) -> bool:
        """Change a repair's state, last failure, replacement or evicted pods (None: as it is); False when it is
        not stored."""

    @abc.abstractmethod
    def end_repair(self, pool: str, node: str, event: EventRecord | None,
                   change: PoolChange | None = None) -> int | None:
        """In one transaction: forget the node's repair and append ``event`` as the pool's last (with ``change``);
        the event id (None without one). A repair already gone still records the event."""

    @abc.abstractmethod
    def note_repair_alerts(self, alerts: list[RepairAlert]) -> None:
        """Remember the firings that asked for nodes' repairs (a firing already known is left as it is)."""

    @abc.abstractmethod
    def repair_alerts(self, pool: str) -> list[RepairAlert]:
        """The pool's remembered firings, cancelled or not."""

    @abc.abstractmethod
    def cancel_repair_alerts(self, pool: str, node: str, now: float) -> int:
        """Mark the node's remembered firings cancelled (those not cancelled yet); how many."""

    @abc.abstractmethod
    def forget_repair_alerts(self, fingerprints: list[str]) -> int:
        """Forget every pool's firings of these alerts (they resolved); how many."""


class Store(PoolStore, DedupStore, EventStore, ViewStore, RemovalStore, RepairStore, GangStore):
    """The whole store: one implementation of each small interface above (code that needs one concern names that
    one). Short transactions only: nothing here is held open across a cloud call."""

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise StoreUnavailable unless the database answers."""

    @abc.abstractmethod
    def now(self, local: float) -> float:
        """The store's clock, for what every replica must time alike (a repair's grace): PostgreSQL's ``now()``;
        ``local`` (the caller's wall clock) on SQLite, one host, and in memory."""
