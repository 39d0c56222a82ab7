"""The store in one process's memory: for replays and the tuner, never for the service.

Why it exists (measured, BENCHMARKS.md "tuning on history"): a replay spends most of its time in SQLite
transactions, and the tuner runs thousands of replays. This store keeps the same rows as ``SqlStore`` (the pool row
by column name, derived from ``tables``), with the same semantics method by method, so the engine, the policy and
the event log are the service's own and a replay decides exactly as on SQLite (tests/unit/store/test_store_memory.py
runs the same trace through both and compares every event). One lock makes each method one atomic step, like a
transaction. One process: the caller's ``now`` is the clock, as on SQLite; what is held is bounded as there
(``expiry.py``).
"""
from __future__ import annotations

import itertools
import threading
from dataclasses import replace
from typing import Callable, Collection

from autoscaler.models import PoolState
from autoscaler.store import tables
from autoscaler.store.base import (DedupConfirm, EventRecord, NodesView, PoolChange, PoolView, QuickState,
                                   RemovalIntent, RepairAlert, RepairMark, RepairRecord, Shortcut)
from autoscaler.store.gangs import MemoryGangs
from autoscaler.store.interfaces import Store
from autoscaler.store.rows import hash_key, pool_state

_DEFAULT_ROW = {c.name: None for c in tables.pools.c} | {"paused": False, "pause_reason": "", "failures": 0,
                                                     "short_reason": ""}


class MemoryStore(MemoryGangs, Store):
    """Every method holds one lock for its whole work: the in-memory counterpart of one short transaction."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[str, dict[str, object]] = {}
        self._events: dict[int, EventRecord] = {}
        self._dedup: dict[str, tuple[str, float, str]] = {}  # hashed key -> (pool, expires_at, claim)
        self._recommendations: dict[str, list[tuple[float, int]]] = {}
        self._ids = itertools.count(1)
        self._scale_outs: dict[str, list[tuple[float, int, int]]] = {}  # accepted scale-outs, give-backs
        self._leases: dict[str, tuple[str, float]] = {}  # name -> (owner, until)
        self._views: dict[str, PoolView] = {}
        self._nodes: dict[str, NodesView] = {}
        self._removals: dict[tuple[str, str], RemovalIntent] = {}  # (pool, node) -> intent
        self._repairs: dict[tuple[str, str], RepairRecord] = {}
        self._repair_alerts: dict[tuple[str, str, str, str], RepairAlert] = {}  # (pool, node, fingerprint, starts_at)

    # -- helpers (the lock is held) --------------------------------------------------------------------
    def _append(self, event: EventRecord) -> int:
        event_id = next(self._ids)
        if (event.pool is not None and event.action == "scale_out" and event.from_ is not None
                and event.to is not None and (event.outcome == "scaled"
                                              or (event.outcome == "no_capacity" and event.to < event.from_))):
            self._scale_outs.setdefault(event.pool, []).append((event.time, event.from_, event.to))
        self._events[event_id] = replace(event, id=event_id, alerts=list(event.alerts), details=dict(event.details))
        return event_id

    def _claim(self, pool: str, keys: tuple[str, ...], now: float, expires_at: float, claim: str,
               longest: float | None = None) -> int:
        """How many of the distinct keys this claim took (new, or expired at ``now``); a held key lying further ahead
        than ``now + longest`` (the clock stepped back; ``longest`` at least this claim's window) is brought back
        to it."""
        bound = max(expires_at, now + longest) if longest is not None else float("inf")
        taken = 0
        for key in sorted({hash_key(k) for k in keys}):
            held = self._dedup.get(key)
            if held is None or held[1] <= now:
                self._dedup[key] = (pool, expires_at, claim)
                taken += 1
            elif held[1] > bound:
                self._dedup[key] = (held[0], bound, held[2])
        return taken

    def _mark_repairs(self, pool: str, mark: RepairMark) -> None:
        """A final write's changes to the pool's repairs (see ``Store.finish``), under the store's lock."""
        for node in mark.ended:
            self._repairs.pop((pool, node), None)
        for alert in mark.alerts:
            self._repair_alerts.setdefault((alert.pool, alert.node, alert.fingerprint, alert.starts_at), alert)
        for node in mark.replaced if mark.replacement is not None else ():
            repair = self._repairs.get((pool, node))
            if repair is not None:
                self._repairs[(pool, node)] = replace(repair, updated_at=mark.at, replacement=mark.replacement)

    def _state(self, name: str) -> PoolState:
        row = self._pools.get(name)
        return pool_state(row) if row is not None else PoolState(name=name)

    # -- the Store interface ---------------------------------------------------------------------------
    def ensure_pools(self, names: list[str]) -> None:
        with self._lock:
            for name in names:
                self._pools.setdefault(name, dict(_DEFAULT_ROW, name=name))

    def pool(self, name: str) -> PoolState:
        with self._lock:
            return self._state(name)

    def pools(self) -> dict[str, PoolState]:
        with self._lock:
            return {name: pool_state(row) for name, row in self._pools.items()}

    def claim_dedup(self, pool: str, keys: tuple[str, ...], now: float, window: float, claim: str,
                    longest: float | None = None) -> bool:
        if not keys:
            return True
        with self._lock:
            return self._claim(pool, keys, now, now + window, claim, longest) > 0

    def release_dedup(self, keys: tuple[str, ...], claim: str) -> None:
        with self._lock:
            for key in {hash_key(k) for k in keys}:
                held = self._dedup.get(key)
                if held is not None and held[2] == claim:
                    del self._dedup[key]

    def acquire(self, pool: str, owner: str, now: float, ttl: float) -> PoolState | None:
        with self._lock:
            row = self._pools.get(pool)
            if row is None:
                return None
            until = row["lease_until"]
            if row["lease_owner"] is None or row["lease_owner"] == owner or (
                    isinstance(until, float | int) and until < now):
                row.update(lease_owner=owner, lease_until=now + ttl)
                return pool_state(row)
            if isinstance(until, float | int) and until > now + ttl:  # held: at most ``ttl`` more
                row["lease_until"] = now + ttl
            return None

    def renew(self, pool: str, owner: str, now: float, ttl: float) -> bool:
        with self._lock:
            row = self._pools.get(pool)
            if row is None or row["lease_owner"] != owner:
                return False
            row["lease_until"] = now + ttl
            return True

    def finish(self, pool: str, owner: str, event: EventRecord, change: PoolChange,
               confirm: DedupConfirm | None = None, *, release: bool = True, repairs: RepairMark | None = None) -> int:
        with self._lock:
            for node in repairs.ended if repairs is not None else ():
                self._repairs.pop((pool, node), None)
            if repairs is not None:
                self._mark_repairs(pool, repairs)
            event_id = self._append(event)
            row = self._pools.get(pool)
            if row is not None:
                row.update(change.columns(), last_event_id=event_id)
                if release and row["lease_owner"] == owner:  # a lapsed lease another decision took stays theirs
                    row.update(lease_owner=None, lease_until=None)
            if confirm is not None:
                for key in {hash_key(k) for k in confirm.keys}:
                    held = self._dedup.get(key)
                    if held is not None and held[2] == confirm.claim:
                        self._dedup[key] = (held[0], confirm.expires_at, held[2])
            return event_id

    def shortcut(self, pool: str,
               plan: Callable[[QuickState | None], Shortcut | None]) -> tuple[int, bool] | None:
        with self._lock:
            row = self._pools.get(pool)
            quick = None
            if row is not None:
                last = self._events.get(row["last_event_id"]) if isinstance(row["last_event_id"], int) else None
                quick = QuickState(pool_state(row), last.to if last is not None else None)
            settled = plan(quick)
            if settled is None:
                return None
            keys = settled.keys
            claimed = self._claim(pool, keys, settled.now, settled.expires_at, settled.claim,
                                  settled.expires_at - settled.now) if keys else 1
            event_id = self._append(settled.event if claimed else settled.duplicate)
            if claimed and row is not None:
                row["last_event_id"] = event_id
            return event_id, not claimed

    def release(self, pool: str, owner: str) -> None:
        with self._lock:
            row = self._pools.get(pool)
            if row is not None and row["lease_owner"] == owner:
                row.update(lease_owner=None, lease_until=None)

    def record(self, event: EventRecord) -> int:
        with self._lock:
            return self._append(event)

    def update_pool(self, pool: str, event: EventRecord | None, change: PoolChange) -> int | None:
        with self._lock:
            event_id = self._append(event) if event else None
            values = change.columns()
            if event_id is not None:
                values["last_event_id"] = event_id
            row = self._pools.get(pool)
            if row is not None:
                row.update(values)
            return event_id

    def events(self, pool: str | None, limit: int, before_id: int | None = None, *,
               outcomes: Collection[str] = (), source: str | None = None) -> list[EventRecord]:
        with self._lock:
            out = []
            for event_id in sorted(self._events, reverse=True):
                event = self._events[event_id]
                if ((pool is None or event.pool == pool) and (before_id is None or event_id < before_id)
                        and (not outcomes or event.outcome in outcomes) and (source is None or event.source == source)):
                    out.append(self._copy(event))
                    if len(out) >= limit:
                        break
            return out

    @staticmethod
    def _copy(event: EventRecord) -> EventRecord:
        return replace(event, alerts=list(event.alerts), details=dict(event.details))

    def recent_events(self, since: float, per_pool: int,
                      pools: Collection[str] | None = None) -> dict[str, list[EventRecord]]:
        with self._lock:
            out: dict[str, list[EventRecord]] = {}
            seen: dict[str, int] = {}
            for event_id in sorted(self._events, reverse=True):
                event = self._events[event_id]
                if event.pool is None or event.pool not in self._pools or not (pools is None or event.pool in pools):
                    continue
                seen[event.pool] = seen.get(event.pool, 0) + 1
                if event.time >= since and seen[event.pool] <= per_pool:
                    out.setdefault(event.pool, []).append(replace(event, alerts=[], details=dict(event.details)))
            return out

    def last_events(self) -> dict[str, EventRecord]:
        with self._lock:
            last = {name: self._events.get(row["last_event_id"]) for name, row in self._pools.items()
                    if isinstance(row["last_event_id"], int)}
            return {name: self._copy(event) for name, event in last.items() if event is not None}

    def event(self, event_id: int) -> EventRecord | None:
        with self._lock:
            event = self._events.get(event_id)
            return None if event is None else replace(event, alerts=list(event.alerts), details=dict(event.details))

    def recommendations(self, pool: str, since: float) -> list[tuple[float, int]]:
        with self._lock:
            return sorted((r for r in self._recommendations.get(pool, []) if r[0] >= since), key=lambda r: r[0])

    def add_recommendation(self, pool: str, time: float, desired: int, forget_before: float) -> None:
        with self._lock:
            kept = [r for r in self._recommendations.get(pool, []) if r[0] >= forget_before]
            kept.append((time, desired))
            self._recommendations[pool] = kept

    def scale_outs(self, pool: str, since: float) -> list[tuple[float, int, int]]:
        with self._lock:
            rows = self._scale_outs.get(pool, [])
            while rows and rows[0][0] < since - 86400:  # nobody asks further back than a provision_time
                rows.pop(0)
            return sorted(r for r in rows if r[0] >= since)

    def hold_lease(self, name: str, owner: str, now: float, ttl: float) -> bool:
        with self._lock:
            held = self._leases.get(name)
            if held is not None and held[0] != owner and held[1] >= now:
                self._leases[name] = (held[0], min(held[1], now + ttl))
                return False
            self._leases[name] = (owner, now + ttl)
            return True

    def release_lease(self, name: str, owner: str) -> None:
        with self._lock:
            if self._leases.get(name, ("", 0.0))[0] == owner:
                del self._leases[name]

    def save_view(self, view: PoolView) -> None:
        with self._lock:
            old = self._views.get(view.pool)
            if old is None or old.read_at <= view.read_at:
                self._views[view.pool] = view

    def views(self) -> dict[str, PoolView]:
        with self._lock:
            return dict(self._views)

    def save_nodes(self, view: NodesView) -> None:
        with self._lock:
            old = self._nodes.get(view.pool)
            if old is None or old.read_at <= view.read_at:
                self._nodes[view.pool] = view

    def nodes_view(self, pool: str) -> NodesView | None:
        with self._lock:
            return self._nodes.get(pool)

    def intend_removals(self, intents: list[RemovalIntent]) -> None:
        with self._lock:
            for intent in intents:
                self._removals[(intent.pool, intent.node)] = intent

    def removal_intents(self, pool: str) -> list[RemovalIntent]:
        with self._lock:
            return sorted((i for (p, _), i in self._removals.items() if p == pool), key=lambda i: (i.at, i.node))

    def forget_removals(self, pool: str, nodes: list[str]) -> None:
        with self._lock:
            for node in nodes:
                self._removals.pop((pool, node), None)

    def add_repair(self, repair: RepairRecord) -> bool:
        with self._lock:
            if (repair.pool, repair.node) in self._repairs:
                return False
            self._repairs[(repair.pool, repair.node)] = repair
            return True

    def repairs(self, pool: str | None = None) -> list[RepairRecord]:
        with self._lock:
            return sorted((r for r in self._repairs.values() if pool in (None, r.pool)),
                          key=lambda r: (r.since, r.node))

    def update_repair(self, pool: str, node: str, now: float, state: str | None = None,
                      error: str | None = None, replacement: int | None = None,
                      evicted: str | None = None) -> bool:
        with self._lock:
            held = self._repairs.get((pool, node))
            if held is None:
                return False
            self._repairs[(pool, node)] = replace(
                held, updated_at=now, state=held.state if state is None else state,
                error=held.error if error is None else error,
                replacement=held.replacement if replacement is None else replacement,
                evicted=held.evicted if evicted is None else evicted)
            return True

    def end_repair(self, pool: str, node: str, event: EventRecord | None,
                   change: PoolChange | None = None) -> int | None:
        with self._lock:
            self._repairs.pop((pool, node), None)
            if event is None:
                return None
            event_id = self._append(event)
            row = self._pools.get(pool)
            if row is not None:
                row.update({**(change.columns() if change is not None else {}), "last_event_id": event_id})
            return event_id

    def note_repair_alerts(self, alerts: list[RepairAlert]) -> None:
        with self._lock:
            for a in alerts:
                self._repair_alerts.setdefault((a.pool, a.node, a.fingerprint, a.starts_at), a)

    def repair_alerts(self, pool: str) -> list[RepairAlert]:
        with self._lock:
            return sorted((a for a in self._repair_alerts.values() if a.pool == pool),
                          key=lambda a: (a.seen_at, a.node))

    def cancel_repair_alerts(self, pool: str, node: str, now: float) -> int:
        with self._lock:
            keys = [k for k, a in self._repair_alerts.items()
                    if (a.pool, a.node) == (pool, node) and a.cancelled_at is None]
            for key in keys:
                self._repair_alerts[key] = replace(self._repair_alerts[key], cancelled_at=now)
            return len(keys)

    def forget_repair_alerts(self, fingerprints: list[str]) -> int:
        with self._lock:
            gone = [k for k, a in self._repair_alerts.items() if a.fingerprint in set(fingerprints)]
            for key in gone:
                del self._repair_alerts[key]
            return len(gone)

    def nodes_views(self) -> dict[str, NodesView]:
        with self._lock:
            return dict(self._nodes)

    def ping(self) -> None:
        """Memory always answers."""

    def now(self, local: float) -> float:
        return local

    def prune(self, older_than: float | None, now: float, batch: int = 500) -> int:
        with self._lock:
            removed = 0
            if older_than is not None:
                old = sorted(i for i, e in self._events.items() if e.time < older_than)[:batch]
                for event_id in old:
                    del self._events[event_id]
                removed += len(old)
            expired = sorted(k for k, held in self._dedup.items() if held[1] <= now)[:batch]
            for key in expired:
                del self._dedup[key]
            return removed + len(expired)

    def close(self) -> None:
        """Nothing to close; here so that callers can treat every store alike."""
