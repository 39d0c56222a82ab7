"""Core statements run on the DBAPI cursor of a SQLAlchemy connection, for the settled short cut (``Store.shortcut``).

SQLAlchemy's execution layer (execution context, compiled-cache lookup, result set-up, events) cost about three
times what the database's own calls do on the settled path (BENCHMARKS.md, issue 35). Here a Core statement is
compiled once per dialect by SQLAlchemy itself (its SQL, its parameter order or names, its types' bind and result
processors), then run on the cursor of the connection SQLAlchemy checked out and began, so the transaction, the
writer gate, ``BEGIN IMMEDIATE`` and the pool are unchanged. A driver error goes through SQLAlchemy's own handling
(``Connection._handle_dbapi_exception``): the ``handle_error`` listeners run, a broken connection is invalidated,
and the error is raised as the ``DBAPIError`` that ``conn.execute`` would have raised.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect


@dataclass
class Compiled:
    """A statement as one dialect runs it."""

    sql: str
    names: tuple[str, ...]  # the parameters, in the statement's order (positional paramstyles) or by name
    positional: bool
    binds: tuple[tuple[str, Callable[[Any], Any]], ...]  # parameters whose type converts the value
    keys: tuple[str, ...]  # the result's column names (empty: no result)
    types: tuple[Any, ...]  # the result's column types, as the dialect reads them
    results: tuple[Callable[[Any], Any] | None, ...] | None = None  # per column: its conversion (set at first run)

    @classmethod
    def of(cls, statement: Any, dialect: Dialect, column_keys: Sequence[str] | None = None) -> Compiled:
        compiled = statement.compile(dialect=dialect, column_keys=list(column_keys) if column_keys else None)
        escaped = getattr(compiled, "escaped_bind_names", None) or {}
        if escaped:  # a parameter name the driver could not take as written; none of ours
            raise ValueError(f"parameter names need escaping: {sorted(escaped)}")
        positional = bool(compiled.positional)
        names = tuple(compiled.positiontup) if positional else tuple(p.key for p in compiled.binds.values())
        binds = tuple((p.key, proc) for p in compiled.binds.values()
                      if (proc := p.type.dialect_impl(dialect).bind_processor(dialect)) is not None)
        columns = list(getattr(statement, "exported_columns", ()))  # a SELECT's columns, or what RETURNING lists
        keys = tuple(c.key for c in columns)
        return cls(compiled.string, names, positional, binds, keys,
                   tuple(c.type.dialect_impl(dialect) for c in columns))

    def parameters(self, values: dict[str, Any]) -> Any:
        if self.binds:
            values = dict(values)
            for name, proc in self.binds:
                values[name] = proc(values[name])
        if self.positional:
            return tuple(values[n] for n in self.names)
        return {n: values[n] for n in self.names}

    def row(self, raw: Sequence[Any] | None, cursor: Any, dialect: Dialect) -> dict[str, Any] | None:
        """A result row by column name, each value as its type reads it (the conversion chosen, as SQLAlchemy
        chooses it, by the driver's type code of the column the first time)."""
        if raw is None:
            return None
        if self.results is None:
            codes = [d[1] for d in cursor.description or ()] or [None] * len(self.types)
            self.results = tuple(t.result_processor(dialect, code) for t, code in zip(self.types, codes))
        return {k: (p(v) if p is not None else v) for k, p, v in zip(self.keys, self.results, raw)}


def execute(conn: Connection, compiled: Compiled, values: dict[str, Any],
            fetch: str = "") -> Any:
    """Run ``compiled`` in ``conn``'s transaction; ``fetch``: "one" (the first row, or None), "all" (the rows),
    or "" (nothing). A failure is handled and raised as SQLAlchemy's ``conn.execute`` handles and raises it."""
    params: Any = None
    cursor = None
    try:
        params = compiled.parameters(values)
        cursor = conn.connection.cursor()
        cursor.execute(compiled.sql, params)
        if fetch == "one":
            result: Any = compiled.row(cursor.fetchone(), cursor, conn.dialect)
        elif fetch == "all":
            result = [compiled.row(r, cursor, conn.dialect) for r in cursor.fetchall()]
        else:
            result = None
        cursor.close()
        return result
    except BaseException as exc:
        # Closed first: an invalidated connection is closed without its cursors, and on SQLite an open statement
        # keeps a closed connection (and its write lock) alive until the cursor is collected.
        if cursor is not None:
            try:
                cursor.close()
            except Exception:  # the connection may be gone already: SQLAlchemy's handling below says what happened
                pass
        # SQLAlchemy's own path for a failed statement: handle_error listeners (``is_disconnect`` for a broken
        # SQLite file), invalidation, rollback, and the driver error wrapped as the DBAPIError conn.execute raises.
        conn._handle_dbapi_exception(exc, compiled.sql, params, cursor, None)
