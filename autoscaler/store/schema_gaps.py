"""The schema as it is, not as its revision label says: what ``store/tables.py`` needs and the database lacks.

A revision number is a label a build wrote; two builds once wrote ``0004`` for different changes (capacity columns,
then node views), so a file labelled 0004 by the first was "migrated" past the table the second created. After the
migrations, ``fill`` compares the database with the tables the code uses (tables, columns, indexes) and creates
what is missing; ``missing`` is the same comparison, for the readiness probe: a store without a table or column the
service uses answers nothing right, so it is not ready.
"""
from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import Column, Connection, false, inspect, text, true
from sqlalchemy.schema import CreateColumn

from autoscaler.store import tables

log = logging.getLogger(__name__)


def missing(conn: Connection) -> list[str]:
    """``table`` or ``table.column`` for each table and column of ``tables.metadata`` the database lacks."""
    inspector = inspect(conn)
    have = set(inspector.get_table_names())
    out: list[str] = []
    for table in tables.metadata.sorted_tables:
        if table.name not in have:
            out.append(table.name)
            continue
        columns = {c["name"] for c in inspector.get_columns(table.name)}
        out += [f"{table.name}.{c.name}" for c in table.columns if c.name not in columns]
    return out


def _server_default(column: Column[Any]) -> Any:
    """A column's scalar Python default as a server default, so that existing rows get it (None: none)."""
    default = column.default
    value = getattr(default, "arg", None) if default is not None and getattr(default, "is_scalar", False) else None
    if value is None:
        return None
    if isinstance(value, bool):
        return true() if value else false()
    return text(str(int(value))) if isinstance(value, int) else str(value)


def fill(conn: Connection) -> list[str]:
    """Create every table, column and index of ``tables.metadata`` the database lacks; return what was made.

    A missing NOT NULL column without a default cannot be given a value for the rows already there: it is left
    missing (``missing`` reports it, and the store is not ready)."""
    made: list[str] = []
    inspector = inspect(conn)
    have = set(inspector.get_table_names())
    preparer = conn.dialect.identifier_preparer
    for table in tables.metadata.sorted_tables:
        if table.name not in have:
            table.create(conn)  # with its indexes
            made.append(f"table {table.name}")
            continue
        columns = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in columns:
                continue
            server_default = _server_default(column)
            if not column.nullable and server_default is None:
                log.error("store: column %s.%s is missing and cannot be added (NOT NULL, no default)",
                          table.name, column.name)
                continue
            added = Column(column.name, column.type, nullable=column.nullable, server_default=server_default)
            ddl = CreateColumn(added).compile(dialect=conn.dialect)
            conn.execute(text(f"ALTER TABLE {preparer.format_table(table)} ADD COLUMN {ddl}"))
            made.append(f"column {table.name}.{column.name}")
        indexes = {i["name"] for i in inspector.get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in indexes:
                index.create(conn)
                made.append(f"index {index.name}")
    if made:
        log.warning("store: the schema lacked what its revision claims; created %s", ", ".join(made))
    return made

