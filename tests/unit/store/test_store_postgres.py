"""The store on a real PostgreSQL: races, bounded lock waits, migrations, pruning, connection loss."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any, Callable, Iterator

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from autoscaler.store import SqlStore, StoreOptions, StoreUnavailable, tables
from autoscaler.store.base import EventRecord
from autoscaler.store.migrate import head_revision
from tests.support import pg
from tests.support.servers import ROOT
from tests.support.fakes.tcpproxy import TcpProxy
from tests.support import quick_state, record_settled

pytestmark = pytest.mark.slow
FAST = StoreOptions(lock_wait=0.5, statement_timeout=5.0, connect_timeout=2.0)


@pytest.fixture
def dbname() -> Iterator[str]:
    pg.require_postgres()
    with pg.temp_database() as name:
        yield name


@pytest.fixture
def clocked() -> Iterator[tuple[SqlStore, pg.DbClock]]:
    """A store on a database whose clock the test sets (dedup keys and leases expire on it)."""
    pg.require_postgres()
    with pg.temp_database(clock=True) as name:
        store = SqlStore(pg.url_for(name), FAST)
        try:
            yield store, pg.DbClock(name)
        finally:
            store.close()


@pytest.fixture
def open_stores(dbname: str) -> Iterator[Callable[..., SqlStore]]:
    opened: list[SqlStore] = []

    def make(url: str | None = None, options: StoreOptions = FAST) -> SqlStore:
        store = SqlStore(url or pg.url_for(dbname), options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def _event(t: float, pool: str = "gpu") -> EventRecord:
    return EventRecord(time=t, pool=pool, source="manual", action="scale_out", outcome="skipped_cooldown",
                       from_=1, to=1, reason="test")


def _race(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run ``fn(i)`` in n threads released at the same instant."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = fn(i)
        except Exception as exc:  # surfaced by the assertions below
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_plain_postgresql_url_is_served_by_psycopg3(open_stores: Callable[..., SqlStore]) -> None:
    store = open_stores()
    assert store.engine.url.drivername == "postgresql+psycopg"
    assert store.dialect == "postgresql"
    store.ping()


def test_lease_is_taken_by_exactly_one_of_many_replicas(open_stores: Callable[..., SqlStore]) -> None:
    replicas = [open_stores(options=StoreOptions(lock_wait=2.0, pool_size=8, max_overflow=0)) for _ in range(2)]
    replicas[0].ensure_pools(["gpu"])
    for round_ in range(10):
        now = 1000.0 + round_
        results = _race(16, lambda i: replicas[i % 2].acquire("gpu", f"owner-{i}", now, 60) is not None)
        assert results.count(True) == 1, results
        winner = results.index(True)
        replicas[0].release("gpu", f"owner-{winner}")


def test_dedup_key_is_claimed_by_exactly_one_of_many_replicas(open_stores: Callable[..., SqlStore]) -> None:
    replicas = [open_stores(options=StoreOptions(lock_wait=2.0, pool_size=8, max_overflow=0)) for _ in range(2)]
    for round_ in range(10):
        keys = (f"alertmanager|fp{round_}|2025-01-01T00:00:00Z|firing", f"other{round_}")
        results = _race(16, lambda i: replicas[i % 2].claim_dedup("gpu", keys, 1000.0, 600, f"claim-{i}"))
        assert results.count(True) == 1, results


def test_lock_wait_is_bounded_by_lock_timeout(open_stores: Callable[..., SqlStore], dbname: str) -> None:
    store = open_stores()
    store.ensure_pools(["gpu"])
    with psycopg.connect(f"host={pg.HOST} port={pg.PORT} user={pg.USER} dbname={dbname}") as holder:
        holder.execute("SELECT * FROM pools WHERE name = 'gpu' FOR UPDATE")  # a stuck transaction holds the row
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="LockNotAvailable"):
            store.acquire("gpu", "me", 1000.0, 60)
        waited = time.monotonic() - started
        holder.rollback()
    assert 0.4 <= waited < 2.0, waited
    assert store.acquire("gpu", "me", 1000.0, 60)


def test_settle_waiting_on_a_claim_is_bounded_by_lock_timeout(open_stores: Callable[..., SqlStore],
                                                              dbname: str) -> None:
    """Settle's statements run on the DBAPI cursor (``store/compiled.py``): a lock wait there still ends at
    lock_timeout as StoreUnavailable, the transaction rolled back, and the pooled connection still usable."""
    store = open_stores()
    store.ensure_pools(["gpu"])
    with psycopg.connect(f"host={pg.HOST} port={pg.PORT} user={pg.USER} dbname={dbname}") as holder:
        holder.execute("INSERT INTO dedup (key, pool, expires_at, claim) VALUES ('k1', 'gpu', 0, 'other')")  # open
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="LockNotAvailable"):
            record_settled(store, "gpu", ("k1", "k2"), "me", 1000.0, 1600.0, _event(1000.0), _event(1000.0))
        waited = time.monotonic() - started
        holder.rollback()
    assert 0.4 <= waited < 2.0, waited
    assert store.pool("gpu").last_event_id is None  # nothing written
    event_id, duplicate = record_settled(store, "gpu", ("k1", "k2"), "me", 1000.0, 1600.0, _event(1000.0),
                                         _event(1000.0))
    assert not duplicate and store.pool("gpu").last_event_id == event_id


def test_migrations_run_once_when_replicas_start_together(dbname: str) -> None:
    code = ("import logging, sys; from autoscaler.store import SqlStore; logging.basicConfig(level=logging.INFO); "
            "s = SqlStore(sys.argv[1]); s.ensure_pools(['gpu']); s.close(); print('ok')")
    procs = [subprocess.Popen([sys.executable, "-c", code, pg.url_for(dbname)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [err[-2000:] for _, err in outputs]
    assert sum("Running upgrade" in err for _, err in outputs) == 1, [err for _, err in outputs]
    store = SqlStore(pg.url_for(dbname), FAST)
    try:
        with store.engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_revision() == head_revision()
            # The migrations build exactly the tables tables.py describes.
            assert compare_metadata(MigrationContext.configure(conn), tables.metadata) == []
    finally:
        store.close()


def test_tables_made_before_migrations_are_adopted(dbname: str) -> None:
    from sqlalchemy import create_engine

    legacy = create_engine(pg.url_for(dbname).replace("postgresql://", "postgresql+psycopg://"))
    tables.metadata.create_all(legacy)
    with legacy.begin() as conn:
        conn.execute(tables.pools.insert().values(name="gpu", paused=True, pause_reason="kept", failures=0))
    legacy.dispose()
    store = SqlStore(pg.url_for(dbname), FAST)
    try:
        assert store.pool("gpu").paused is True
        with store.engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_revision() == head_revision()
            assert inspect(conn).has_table("alembic_version")
    finally:
        store.close()


def test_prune_goes_in_batches_and_expires_dedup_by_its_own_expiry(clocked: tuple[SqlStore, pg.DbClock]) -> None:
    store, clock = clocked  # dedup keys expire on the database's clock, set here to each caller's ``now``
    for t in range(25):
        store.record(_event(1000.0 + t))
    clock.set(0.0)
    assert store.claim_dedup("gpu", ("old",), 0.0, 100.0, "a")        # expires at 100
    clock.set(900.0)
    assert store.claim_dedup("gpu", ("live",), 900.0, 600.0, "b")     # expires at 1500
    clock.set(1010.0)
    # Events before 1020 go (20 of them), 10 at a time; the dedup key that expired goes, the live one stays.
    assert store.prune(1020.0, 1010.0, batch=10) == 11
    assert store.prune(1020.0, 1010.0, batch=10) == 10
    assert store.prune(1020.0, 1010.0, batch=10) == 0
    assert sorted(e.time for e in store.events(None, 100)) == [1020.0 + i for i in range(5)]
    assert not store.claim_dedup("gpu", ("live",), 1010.0, 600.0, "c")
    assert store.claim_dedup("gpu", ("old",), 1010.0, 600.0, "c")
    assert store.prune(None, 1010.0) == 0  # no retention: events stay


def test_connection_loss_raises_store_unavailable_and_recovers(open_stores: Callable[..., SqlStore],
                                                               dbname: str) -> None:
    open_stores().ensure_pools(["gpu"])
    with TcpProxy(pg.HOST, pg.PORT) as proxy:
        store = open_stores(pg.url_for(dbname, port=proxy.port))
        store.ping()
        proxy.close()
        for call in (store.ping, lambda: store.claim_dedup("gpu", ("k",), 0.0, 60.0, "c"),
                     lambda: store.acquire("gpu", "me", 0.0, 60.0), lambda: store.record(_event(1.0)),
                     lambda: quick_state(store, "gpu"),
                     lambda: record_settled(store, "gpu", ("k",), "c", 0.0, 60.0, _event(1.0), _event(1.0)),
                     lambda: store.events(None, 10), lambda: store.prune(0.0, 0.0)):
            with pytest.raises(StoreUnavailable):
                call()
        proxy.open()
        store.ping()
        assert store.claim_dedup("gpu", ("k",), 0.0, 60.0, "c")  # nothing was half-written while down
        assert store.acquire("gpu", "me", 0.0, 60.0)
        assert store.events(None, 10) == []
        assert quick_state(store, "gpu") is not None
        _, duplicate = record_settled(store, "gpu", ("k2",), "c", 0.0, 60.0, _event(1.0), _event(1.0))
        assert not duplicate  # the hot path's raw connections recover too
