"""The SQL store's record of node removals about to be sent (``removal_intents``), apart from ``sql.py``.

A decision writes it before the cloud call and clears it once the node carries the ``/removing`` mark (or the call
failed and the node was uncordoned); what a killed worker leaves is settled by the next decision's sweep.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Callable

from sqlalchemy import Connection, delete, insert, select

from autoscaler.store import tables
from autoscaler.store.base import RemovalIntent


class SqlRemovals:
    """Mixed into ``SqlStore``: each method is one short transaction through its ``_tx``."""

    _tx: Callable[[], AbstractContextManager[Connection]]

    def intend_removals(self, intents: list[RemovalIntent]) -> None:
        if not intents:
            return
        t = tables.removal_intents
        rows: list[dict[str, Any]] = [{"pool": i.pool, "node": i.node, "owner": i.owner, "at": i.at,
                                       "from_count": i.from_count} for i in intents]
        with self._tx() as conn:
            for row in rows:  # replace: a node's newer removal supersedes its older one
                conn.execute(delete(t).where(t.c.pool == row["pool"], t.c.node == row["node"]))
            conn.execute(insert(t), rows)

    def removal_intents(self, pool: str) -> list[RemovalIntent]:
        t = tables.removal_intents
        with self._tx() as conn:
            found = conn.execute(select(t).where(t.c.pool == pool).order_by(t.c.at, t.c.node)).all()
        return [RemovalIntent(r.pool, r.node, r.owner, float(r.at), int(r.from_count)) for r in found]

    def forget_removals(self, pool: str, nodes: list[str]) -> None:
        if not nodes:
            return
        t = tables.removal_intents
        with self._tx() as conn:
            conn.execute(delete(t).where(t.c.pool == pool, t.c.node.in_(list(nodes))))
