"""The readiness probe's two questions (``SqlStore.ping``): does the schema hold what the service uses, and does the
database take a write?

A database that answers ``SELECT 1`` may still be of no use: a table the service reads gone (an upgrade that skipped
it, a hand-run script), or no room left to write (disk full: SQLite says "database or disk is full", PostgreSQL
SQLSTATE 53100). Alerts then get 503 while ``/readyz`` said 200 and ``store_up`` 1; the probe asks both questions
for real, so that readiness and ``store_up`` fail while writes fail, and recover with the first write that succeeds.
"""
from __future__ import annotations

import os
import shutil
import uuid
from typing import Any

from sqlalchemy import Connection, delete, false, insert, select

from autoscaler.store import tables
from autoscaler.store.schema_gaps import missing

#: One SELECT per table naming every column the service uses, returning no row: each fails unless the table and
#: all its columns exist (a few microseconds each).
SCHEMA_PROBES: list[Any] = [select(*table.c).where(false()) for table in tables.metadata.sorted_tables]

#: The write probe's rows: together larger than a database page (SQLite's 4 KiB, PostgreSQL's 8 KiB), so that a
#: database with no room to grow (no free page, no disk space for its log) refuses them as it refuses an event.
PROBE_ROWS, PROBE_KEY_BYTES = 24, 480
#: A successful probe write stands this long (an unauthenticated /readyz must not make the store write at will); a
#: store transaction that fails ends it at once.
WRITE_EVERY = 1.0
#: SQLite: the disk holding the database file must have this much room left. A full disk still takes some small
#: writes (a WAL file reused from its start after a checkpoint, pages a delete put on the free list), so a write
#: probe alone answers yes and no by turns while events fail; below this room the store is not ready, whatever the
#: probe write says.
SQLITE_MIN_FREE = 256 * 1024


def disk_room(path: str) -> str:
    """"" when the filesystem holding the SQLite file ``path`` has at least SQLITE_MIN_FREE bytes free (for this
    process: ``f_bavail``), else why not."""
    free = shutil.disk_usage(os.path.dirname(path) or ".").free
    if free >= SQLITE_MIN_FREE:
        return ""
    return f"the disk holding the SQLite file has {free} bytes free (less than {SQLITE_MIN_FREE})"


def schema_problem(conn: Connection) -> str:
    """"" when every table and column is there, else what is missing (on a connection whose probe failed, after
    its transaction was rolled back)."""
    lacks = missing(conn)
    return f"the schema lacks {', '.join(lacks)} (see docs/failures.md: restart to repair it)" if lacks else ""


def write(conn: Connection) -> None:
    """Insert rows that need fresh pages and delete them again, in the caller's transaction (which commits): the
    database took a write, or raised the error a real write would meet."""
    probe = f"readyz-probe:{uuid.uuid4().hex}:"
    keys = [f"{probe}{i:03d}".ljust(PROBE_KEY_BYTES, "x") for i in range(PROBE_ROWS)]
    dedup = tables.dedup
    conn.execute(insert(dedup), [{"key": k, "pool": "", "expires_at": 0.0, "claim": "readyz"} for k in keys])
    conn.execute(delete(dedup).where(dedup.c.key.like(f"{probe}%")))
