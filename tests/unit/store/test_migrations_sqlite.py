"""SQLite through the same migration path: two processes at once, adopted legacy tables, and retention."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine

from autoscaler.reconcile.retention import Pruner
from autoscaler.store import SqlStore, tables
from autoscaler.store.base import EventRecord
from autoscaler.store.migrate import head_revision
from tests.support.servers import ROOT
from tests.support import FakeClock

CODE = ("import logging, sys; logging.basicConfig(level=logging.INFO); from autoscaler.store import SqlStore; "
        "s = SqlStore(sys.argv[1]); s.ensure_pools(['gpu']); s.close()")


def _revision(store: SqlStore) -> str | None:
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn)
        assert compare_metadata(ctx, tables.metadata) == []  # migrations build what tables.py describes
        return ctx.get_current_revision()


def test_two_processes_migrate_one_sqlite_file_at_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state/autoscaler.db"
    procs = [subprocess.Popen([sys.executable, "-c", CODE, url], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outputs]
    assert sum("Running upgrade" in err for _, err in outputs) == 1, [err for _, err in outputs]
    store = SqlStore(url)
    try:
        assert _revision(store) == head_revision()
        assert list(store.pools()) == ["gpu"]
    finally:
        store.close()


def test_sqlite_tables_made_by_create_all_are_adopted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/legacy.db"
    legacy = create_engine(url)
    tables.metadata.create_all(legacy)
    with legacy.begin() as conn:
        conn.execute(tables.pools.insert().values(name="gpu", paused=True, pause_reason="kept", failures=0))
    legacy.dispose()
    store = SqlStore(url)
    try:
        assert store.pool("gpu").pause_reason == "kept"
        assert _revision(store) == head_revision()
    finally:
        store.close()


def _event(t: float) -> EventRecord:
    return EventRecord(time=t, pool="gpu", source="manual", action=None, outcome="skipped_paused", from_=None,
                       to=None, reason="test")


def test_pruner_runs_at_most_once_a_minute(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path}/prune.db")
    day = 86400.0
    clock = FakeClock(100 * day)
    try:
        for t in (10 * day, 20 * day, 69 * day, 71 * day, 99 * day):
            store.record(_event(t))
        assert store.claim_dedup("gpu", ("expired",), 0.0, 60.0, "a")
        assert store.claim_dedup("gpu", ("live",), clock.now, 600.0, "b")
        pruner = Pruner(store, 30 * day, batch=1)
        assert pruner.maybe_run(clock.now) == 4  # three events past retention, one expired key
        assert sorted(e.time for e in store.events(None, 10)) == [71 * day, 99 * day]
        assert store.claim_dedup("gpu", ("expired",), clock.now, 60.0, "c")
        assert not store.claim_dedup("gpu", ("live",), clock.now, 60.0, "c")

        store.record(_event(1.0))
        clock.now += 59
        assert pruner.maybe_run(clock.now) is None  # ran less than a minute ago
        clock.now += 1
        assert pruner.maybe_run(clock.now) == 2  # the old event, and the key claimed for a minute a minute ago
        assert 1.0 not in {e.time for e in store.events(None, 10)}
    finally:
        store.close()


def test_without_retention_only_dedup_keys_are_pruned(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path}/keep.db")
    try:
        store.record(_event(1.0))
        assert store.claim_dedup("gpu", ("expired",), 0.0, 60.0, "a")
        assert Pruner(store, None).run(1e9) == 1
        assert [e.time for e in store.events(None, 10)] == [1.0]
    finally:
        store.close()
