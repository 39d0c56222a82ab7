"""The store's records and errors (the interface itself, by concern: ``interfaces.py``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    """Dedup keys a decision claimed, to extend to ``expires_at`` once the decision is recorded (``now``: the time
    it counts from, so that a store on the database's clock extends them by ``expires_at - now`` from its own)."""

    keys: tuple[str, ...]
    claim: str
    expires_at: float
    now: float


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
    failing_since: float | None = None  # with ``error``: when the listings began to fail (the cluster unreachable)


@dataclass(frozen=True)
class RepairMark:
    """What a held pool's record does to its stored repairs in the same transaction (``Store.finish``): the repairs
    of ``ended`` forgotten; those of ``replaced`` given ``replacement``, the pool size asked for them, at ``at``;
    ``alerts``, the firings that asked for the repairs started, remembered (``repair_alerts``)."""

    ended: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    replacement: int | None = None
    at: float = 0.0
    alerts: tuple[RepairAlert, ...] = ()


@dataclass(frozen=True)
class RepairRecord:
    """A node in repair (docs/repair.md): since when, how far it got (``cordoned``, ``waiting`` for work that cannot
    move, ``draining``, ``removing``), why it started, the pool size asked for its replacement (None: none), the
    last failure that keeps it going, and the pods it evicted."""

    pool: str
    node: str
    since: float
    state: str
    reason: str = ""
    replacement: int | None = None
    error: str = ""
    updated_at: float = 0.0
    evicted: str = ""  # the pods the repair evicted so far, ``namespace/name`` comma-separated


@dataclass(frozen=True)
class RepairAlert:
    """One firing of an alert (its fingerprint and ``startsAt``) that asked for a node's repair, and when an
    operator cancelled that repair (None: not cancelled): repeats of a cancelled firing start nothing."""

    pool: str
    node: str
    fingerprint: str
    starts_at: str
    seen_at: float
    cancelled_at: float | None = None


@dataclass(frozen=True)
class RemovalIntent:
    """A node whose removal a decision was about to send (recorded before the cloud call): until the cloud's view
    settles it, the node may be on its way out and stays cordoned (see ``autoscaler/nodes/scale_in.py``)."""

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


@dataclass(frozen=True)
class Shortcut:
    """What a decision the stored state settled writes (``DedupStore.shortcut``): its dedup keys, claimed under
    ``claim`` from ``now`` until ``expires_at``, and its event, or ``duplicate`` when every key was already claimed."""

    keys: tuple[str, ...]
    claim: str
    now: float
    expires_at: float
    event: EventRecord
    duplicate: EventRecord
