"""Leases and dedup claims on one clock, the database's, as the statements that write and judge their expiry.

PostgreSQL: an expiry is written as the database's ``now()`` plus a length and judged against ``now()``, never
against a replica's own clock; the caller's ``now`` is used only for the length it counts from (``expires_at - now``),
so a replica whose clock is a minute behind can neither take what another holds nor hold longer than its TTL.
SQLite is one host: the caller's ``now`` (the host's clock, a replay's simulated one, a test's fake) is the clock.

A clock that steps back (NTP) must not stretch what is held: a lease or a dedup claim found more than its length
ahead of ``now`` is brought back to ``now`` plus its length by the next taker that finds it held, so a dead
worker's lease lapses within its TTL and a dedup window lasts at most its length after the step.
"""
from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import ColumnElement, Float, bindparam, literal_column, text, update

from autoscaler.store import tables
from autoscaler.store.rows import hash_key

#: PostgreSQL's clock as seconds since the epoch (the transaction's start: one instant for its statements).
PG_NOW = "CAST(EXTRACT(EPOCH FROM now()) AS DOUBLE PRECISION)"


def now_sql(dialect: str) -> str:
    """The database's clock in a textual statement (SQLite: the ``:now`` parameter)."""
    return PG_NOW if dialect == "postgresql" else ":now"


def now_expr(dialect: str) -> ColumnElement[float]:
    """The database's clock in a Core statement (SQLite: the ``p_now`` parameter)."""
    if dialect == "postgresql":
        return literal_column(PG_NOW, Float)
    return bindparam("p_now", type_=Float)


def _until(dialect: str) -> ColumnElement[float]:
    return now_expr(dialect) + bindparam("p_ttl", type_=Float)


@functools.lru_cache(maxsize=8)
def lease_sql(dialect: str) -> dict[str, Any]:
    """A pool's lease statements: ``acquire`` (the lease if free, lapsed or already the owner's), ``returning``
    (the same, returning the pool's row), ``renew`` and ``bound`` (a lease held longer ahead than ``p_ttl``
    brought back to it)."""
    p = tables.pools.c
    owner: Any = bindparam("p_owner")
    acquire = (update(tables.pools)
               .where(p.name == bindparam("p_name"),
                      p.lease_owner.is_(None) | (p.lease_until < now_expr(dialect)) | (p.lease_owner == owner))
               .values(lease_owner=owner, lease_until=_until(dialect)))
    return {"acquire": acquire, "returning": acquire.returning(*tables.pools.c),
            "renew": (update(tables.pools).where(p.name == bindparam("p_name"), p.lease_owner == owner)
                      .values(lease_until=_until(dialect))),
            "bound": (update(tables.pools).where(p.name == bindparam("p_name"), p.lease_until > _until(dialect))
                      .values(lease_until=_until(dialect)))}


@functools.lru_cache(maxsize=8)
def named_lease_sql(dialect: str) -> dict[str, Any]:
    """A process-wide lease's statements (``leases``): ``bound`` (as for a pool's) and ``take`` (take or renew
    it unless another owner holds an unexpired one)."""
    t = tables.leases
    owner: Any = bindparam("p_owner")
    return {"bound": update(t).where(t.c.name == bindparam("p_name"), t.c.until > _until(dialect))
            .values(until=_until(dialect)),
            "take": update(t).where(t.c.name == bindparam("p_name"),
                                    (t.c.owner == owner) | (t.c.until < now_expr(dialect)))
            .values(owner=owner, until=_until(dialect))}


@functools.lru_cache(maxsize=64)
def claim_sql(keys: int, dialect: str) -> Any:
    """Claim ``keys`` dedup rows in one statement: a new key is inserted, an expired one taken over, an unexpired one
    left to its claim (but brought back to ``now + longest`` when it lies further ahead: the clock stepped back;
    ``longest`` is the longest window any claim of the pool holds, never the finder's own shorter one); RETURNING
    lists each key written with its claim (the caller's: claimed)."""
    now = now_sql(dialect)
    # SQLite evaluates an expression in a multi-row VALUES row by row, ten times slower than a bound value (3.3 s for
    # 10,000 keys): there, where the caller's clock is the clock anyway, the expiry comes computed (``:expires_at``).
    until = ":expires_at" if dialect == "sqlite" else f"{now} + :window"
    rows = ", ".join(f"(:k{i}, :pool, {until}, :claim)" for i in range(keys))
    expired = f"dedup.expires_at <= {now}"
    return text(f"INSERT INTO dedup (key, pool, expires_at, claim) VALUES {rows} ON CONFLICT (key) DO UPDATE "
                f"SET pool = CASE WHEN {expired} THEN excluded.pool ELSE dedup.pool END, "
                f"expires_at = CASE WHEN {expired} THEN excluded.expires_at ELSE {now} + COALESCE(:longest, 0) END, "
                f"claim = CASE WHEN {expired} THEN excluded.claim ELSE dedup.claim END "
                f"WHERE {expired} OR dedup.expires_at > {now} + :longest RETURNING key, claim"
                ).columns(tables.dedup.c.key, tables.dedup.c.claim)


def claim_params(pool: str, keys: tuple[str, ...], now: float, window: float, claim: str,
                 longest: float | None = None) -> tuple[int, dict[str, Any]]:
    """How many distinct keys, and the parameters of ``claim_sql`` for them (``longest``: at least ``window``; None:
    no bound, a held key is never brought back)."""
    hashed = sorted({hash_key(k) for k in keys})
    params: dict[str, Any] = {f"k{i}": k for i, k in enumerate(hashed)}
    params.update(pool=pool, window=window, claim=claim, now=now, expires_at=now + window,
                  longest=max(window, longest) if longest is not None else None)
    return len(hashed), params


def claimed(rows: list[Any], claim: str) -> bool:
    """Whether ``claim_sql`` claimed any key (rows it only brought back to their window are another claim's)."""
    return any(row["claim"] == claim for row in rows)


@functools.lru_cache(maxsize=8)
def confirm_sql(dialect: str) -> Any:
    """Extend a claim's keys to ``p_window`` seconds from now (a decision's record confirms them)."""
    d = tables.dedup
    return (update(d).where(d.c.key.in_(bindparam("p_keys", expanding=True)), d.c.claim == bindparam("p_claim"))
            .values(expires_at=now_expr(dialect) + bindparam("p_window", type_=Float)))
