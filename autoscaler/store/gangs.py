"""The ``gangs`` table: all-or-nothing scale-outs from the ask until every node is GPU-ready or the roll-back
(docs/gang.md). Stored before the cloud is asked, so a worker that dies mid-way leaves a row the reconciler carries
on (or rolls back) at its next tick. One short transaction per method, as every other store method."""
from __future__ import annotations

import abc
import json
import threading
from dataclasses import dataclass, fields, replace
from typing import Any, ContextManager

from sqlalchemy import Connection, select, update

from autoscaler.store import tables
from autoscaler.store.rows import storable

WAITING, PROVISIONED, ROLLED_BACK, FAILED = "waiting", "provisioned", "rolled_back", "failed"


@dataclass(frozen=True)
class GangRecord:
    """One all-or-nothing scale-out: ``asked`` nodes of ``pool`` at once, from ``before``; ``known`` the pool's
    node names before the ask (the nodes that came are the others); ``grp`` the group tried in turn, ``tried`` the
    pools of it already tried; ``request`` the ProvisioningRequest (``ns/name``) it serves, "" when by hand."""

    id: str
    pool: str
    before: int
    asked: int
    started: float
    deadline: float
    state: str = WAITING
    grp: str = ""
    request: str = ""
    known: tuple[str, ...] = ()
    tried: tuple[str, ...] = ()
    reason: str = ""
    updated_at: float = 0.0
    nodes: tuple[str, ...] = ()  # once provisioned: the nodes still booked for the request (those its pods do not
    # run on yet; a node drops out once they do, all of them when the booking ends or the capacity is revoked)

    @property
    def target(self) -> int:
        """The size the pool was asked for."""
        return self.before + self.asked


def _row(gang: GangRecord) -> dict[str, Any]:
    row: dict[str, Any] = {f.name: getattr(gang, f.name) for f in fields(gang)}
    row["known"] = json.dumps(list(gang.known))
    row["tried"] = ",".join(gang.tried)
    row["nodes"] = json.dumps(list(gang.nodes))
    return storable(tables.gangs, row)


def _record(row: Any) -> GangRecord:
    values = {f.name: getattr(row, f.name) for f in fields(GangRecord)}
    values["known"] = tuple(json.loads(values["known"] or "[]"))
    values["tried"] = tuple(filter(None, (values["tried"] or "").split(",")))
    values["nodes"] = tuple(json.loads(values["nodes"] or "[]"))
    return GangRecord(**values)


class GangStore(abc.ABC):
    """All-or-nothing scale-outs, shared by workers and replicas."""

    @abc.abstractmethod
    def add_gang(self, gang: GangRecord) -> None:
        """Store a new gang (its id is new)."""

    @abc.abstractmethod
    def gangs(self, pool: str | None = None, waiting: bool = True) -> list[GangRecord]:
        """The gangs (of ``pool``, or every pool; only those still waiting unless ``waiting`` is False), oldest
        first."""

    @abc.abstractmethod
    def settle_gang(self, gang_id: str, state: str, now: float, reason: str = "", nodes: tuple[str, ...] = ()) -> bool:
        """Move a waiting gang to ``state`` (``nodes``: those that came, when provisioned); False when it is not
        waiting any more (another worker settled it)."""

    @abc.abstractmethod
    def touch_gang(self, gang_id: str, now: float) -> None:
        """A waiting gang's ``updated_at`` set to ``now`` (when its refused roll-back was last said)."""

    @abc.abstractmethod
    def keep_booked(self, gang_id: str, nodes: tuple[str, ...], now: float) -> None:
        """A provisioned gang's nodes still booked, now ``nodes`` (the others released)."""


class SqlGangs(GangStore):
    """The methods over ``_tx`` of the SQL store they are mixed into."""

    def _tx(self) -> ContextManager[Connection]:
        raise NotImplementedError

    def add_gang(self, gang: GangRecord) -> None:
        with self._tx() as conn:
            conn.execute(tables.gangs.insert().values(**_row(gang)))

    def gangs(self, pool: str | None = None, waiting: bool = True) -> list[GangRecord]:
        t = tables.gangs
        query = select(t).order_by(t.c.started, t.c.id)
        if pool is not None:
            query = query.where(t.c.pool == pool)
        if waiting:
            query = query.where(t.c.state == WAITING)
        with self._tx() as conn:
            return [_record(r) for r in conn.execute(query).all()]

    def settle_gang(self, gang_id: str, state: str, now: float, reason: str = "", nodes: tuple[str, ...] = ()) -> bool:
        t = tables.gangs
        values = storable(t, {"state": state, "updated_at": now, "reason": reason, "nodes": json.dumps(list(nodes))})
        with self._tx() as conn:
            done = conn.execute(update(t).where(t.c.id == gang_id, t.c.state == WAITING).values(**values))
        return bool(done.rowcount)

    def touch_gang(self, gang_id: str, now: float) -> None:
        t = tables.gangs
        with self._tx() as conn:
            conn.execute(update(t).where(t.c.id == gang_id, t.c.state == WAITING).values(updated_at=now))

    def keep_booked(self, gang_id: str, nodes: tuple[str, ...], now: float) -> None:
        t = tables.gangs
        values = storable(t, {"nodes": json.dumps(list(nodes)), "updated_at": now})
        with self._tx() as conn:
            conn.execute(update(t).where(t.c.id == gang_id, t.c.state == PROVISIONED).values(**values))


class MemoryGangs(GangStore):
    """The same in one process's memory (the replay's store), one lock a method."""

    _gang_rows: dict[str, GangRecord]
    _gang_lock: threading.Lock

    def _gang_table(self) -> dict[str, GangRecord]:
        if "_gang_rows" not in self.__dict__:
            self._gang_rows, self._gang_lock = {}, threading.Lock()
        return self._gang_rows

    def add_gang(self, gang: GangRecord) -> None:
        rows = self._gang_table()
        with self._gang_lock:
            rows[gang.id] = gang

    def gangs(self, pool: str | None = None, waiting: bool = True) -> list[GangRecord]:
        rows = self._gang_table()
        with self._gang_lock:
            return sorted((g for g in rows.values() if pool in (None, g.pool) and (not waiting or g.state == WAITING)),
                          key=lambda g: (g.started, g.id))

    def settle_gang(self, gang_id: str, state: str, now: float, reason: str = "", nodes: tuple[str, ...] = ()) -> bool:
        rows = self._gang_table()
        with self._gang_lock:
            held = rows.get(gang_id)
            if held is None or held.state != WAITING:
                return False
            rows[gang_id] = replace(held, state=state, updated_at=now, reason=reason, nodes=tuple(nodes))
            return True

    def touch_gang(self, gang_id: str, now: float) -> None:
        rows = self._gang_table()
        with self._gang_lock:
            held = rows.get(gang_id)
            if held is not None and held.state == WAITING:
                rows[gang_id] = replace(held, updated_at=now)

    def keep_booked(self, gang_id: str, nodes: tuple[str, ...], now: float) -> None:
        rows = self._gang_table()
        with self._gang_lock:
            held = rows.get(gang_id)
            if held is not None and held.state == PROVISIONED:
                rows[gang_id] = replace(held, nodes=tuple(nodes), updated_at=now)
