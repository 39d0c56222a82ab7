"""The webhook's hot path in the store: the lease returns the leased state; finish can confirm dedup keys."""
from __future__ import annotations

import sqlite3
import threading
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator

import pytest
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError, IntegrityError

from autoscaler.models import Action
from autoscaler.store import DedupConfirm, PoolChange, QuickState, Shortcut, SqlStore
from autoscaler.store.base import EventRecord
from tests.support import pg
from tests.support import quick_state, record_settled


@pytest.fixture(params=["sqlite", "postgresql"])
def clocked(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[SqlStore, Callable[[float], None]]]:
    """A store and what sets its clock (PostgreSQL's: leases and dedup claims expire on it, not the caller's)."""
    with pg.each_clocked_store(request.param, tmp_path) as (made, at):
        assert isinstance(made, SqlStore)
        yield made, at


@pytest.fixture
def store(clocked: tuple[SqlStore, Callable[[float], None]]) -> SqlStore:
    return clocked[0]


@pytest.fixture
def at(clocked: tuple[SqlStore, Callable[[float], None]]) -> Callable[[float], None]:
    """Set the store's clock to the caller's ``now`` of the calls that follow."""
    return clocked[1]


def _event(t: float) -> EventRecord:
    return EventRecord(time=t, pool="gpu", source="manual", action="scale_out", outcome="skipped_cooldown",
                       from_=1, to=1, reason="test")


def test_acquire_returns_the_state_it_leased_and_none_while_taken(store: SqlStore,
                                                                  at: Callable[[float], None]) -> None:
    store.ensure_pools(["gpu"])
    store.update_pool("gpu", None, PoolChange(tracked_count=4))
    store.update_pool("gpu", None, PoolChange(failures=2, at=50.0, acted=Action.SCALE_OUT))
    at(100.0)
    state = store.acquire("gpu", "me", 100.0, 60.0)
    assert state is not None
    assert (state.name, state.tracked_count, state.failures, state.last_scale_out_at) == ("gpu", 4, 2, 50.0)
    at(101.0)
    assert store.acquire("gpu", "other", 101.0, 60.0) is None
    at(102.0)
    assert store.acquire("gpu", "me", 102.0, 60.0) == state  # the owner may renew
    at(163.0)
    assert store.acquire("gpu", "other", 163.0, 60.0) == state  # expired: the next one takes it


def test_acquire_reads_back_the_state_where_update_returning_is_missing(store: SqlStore,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    store.ensure_pools(["gpu"])
    store.update_pool("gpu", None, PoolChange(tracked_count=3))
    monkeypatch.setattr(store.engine.dialect, "update_returning", False)  # as on SQLite < 3.35
    state = store.acquire("gpu", "me", 100.0, 60.0)
    assert state is not None and state.tracked_count == 3
    assert store.acquire("gpu", "other", 100.0, 60.0) is None


def test_finish_confirms_the_claimed_dedup_keys_in_its_transaction(store: SqlStore,
                                                                   at: Callable[[float], None]) -> None:
    store.ensure_pools(["gpu"])
    keys = ("alertmanager|fp1|2025-01-01T00:00:00Z|firing", "x" * 300)  # a long key is stored hashed
    at(100.0)
    assert store.claim_dedup("gpu", keys, 100.0, 30.0, "c1")
    assert store.acquire("gpu", "me", 100.0, 60.0) is not None
    event_id = store.finish("gpu", "me", _event(100.0), PoolChange(failures=0), DedupConfirm(keys, "c1", 700.0, 100.0))
    assert store.pool("gpu").last_event_id == event_id
    at(101.0)
    assert store.acquire("gpu", "other", 101.0, 60.0) is not None  # the lease was released
    at(131.0)
    assert not store.claim_dedup("gpu", keys, 131.0, 30.0, "c2")  # past the short claim: still held
    at(700.0)
    assert store.claim_dedup("gpu", keys, 700.0, 30.0, "c3")  # past the full window: free again


def test_finish_without_confirm_leaves_the_short_claim(store: SqlStore, at: Callable[[float], None]) -> None:
    store.ensure_pools(["gpu"])
    keys = ("alertmanager|fp2|2025-01-01T00:00:00Z|firing",)
    at(100.0)
    assert store.claim_dedup("gpu", keys, 100.0, 30.0, "c1")
    assert store.acquire("gpu", "me", 100.0, 60.0) is not None
    store.finish("gpu", "me", _event(100.0), PoolChange())
    at(130.0)
    assert store.claim_dedup("gpu", keys, 130.0, 30.0, "c2")  # expired with the short claim


def test_an_expired_key_is_taken_over_by_exactly_one_of_concurrent_claims(store: SqlStore,
                                                                          at: Callable[[float], None]) -> None:
    keys = ("alertmanager|fp3|2025-01-01T00:00:00Z|firing",)
    at(100.0)
    assert store.claim_dedup("gpu", keys, 100.0, 30.0, "old")
    for round_ in range(5):
        now = 200.0 + 100 * round_  # the previous round's claim has expired
        at(now)
        start = threading.Barrier(4)
        results: list[bool] = []

        def claim(i: int, now: float = now, start: threading.Barrier = start) -> None:
            start.wait()
            results.append(store.claim_dedup("gpu", keys, now, 30.0, f"c{round_}-{i}"))

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(results) == [False, False, False, True]


def _shortcut_event(t: float, outcome: str = "skipped_cooldown") -> EventRecord:
    return EventRecord(time=t, pool="gpu", source="alertmanager", action="scale_out", outcome=outcome,
                       from_=None, to=None, reason="settled", alerts=[{"alertname": "A", "fingerprint": "f"}],
                       details={"cloud": "not read"})


def _duplicate(t: float) -> EventRecord:
    return EventRecord(time=t, pool="gpu", source="alertmanager", action="scale_out", outcome="skipped_duplicate",
                       from_=None, to=None, reason="dup", alerts=[{"alertname": "A", "fingerprint": "f"}])


def test_the_quick_read_writes_nothing_and_knows_no_unknown_pool(store: SqlStore) -> None:
    store.ensure_pools(["gpu"])
    quick = quick_state(store, "gpu")
    assert quick is not None and quick.state.name == "gpu" and quick.last_count is None
    assert quick_state(store, "nope") is None  # no such row
    assert store.events(None, 10) == []
    assert store.claim_dedup("gpu", ("k1",), 100.0, 30.0, "c2")  # no key was claimed


def test_settle_reads_state_and_last_count_then_claims_records_and_points_the_pool_at_it(
        store: SqlStore, at: Callable[[float], None]) -> None:
    store.ensure_pools(["gpu"])
    first = store.update_pool("gpu", EventRecord(time=50.0, pool="gpu", source="manual", action="scale_out",
                                                  outcome="scaled", from_=2, to=3, reason="r"),
                              PoolChange(at=50.0, acted=Action.SCALE_OUT, paused=True, pause_reason="maintenance"))
    quick = quick_state(store, "gpu")
    assert quick is not None
    state, last_count = quick.state, quick.last_count
    assert (state.paused, state.pause_reason, state.last_scale_out_at, state.last_event_id) == (
        True, "maintenance", 50.0, first)
    assert last_count == 3

    keys = ("alertmanager|fp|2025-01-01T00:00:00Z|firing", "y" * 300)
    settled = replace(_shortcut_event(100.0), from_=last_count, to=last_count)
    at(100.0)
    event_id, duplicate = record_settled(store, "gpu", keys, "c1", 100.0, 700.0, settled, _duplicate(100.0))
    event = replace(settled, id=event_id)
    assert not duplicate
    assert store.event(event_id) == event and (event.from_, event.to, event.details) == (3, 3, {"cloud": "not read"})
    assert store.pool("gpu").last_event_id == event.id
    at(699.0)
    assert not store.claim_dedup("gpu", keys[:1], 699.0, 30.0, "c2")  # claimed for the full window at once
    at(700.0)
    assert store.claim_dedup("gpu", keys[1:], 700.0, 30.0, "c3")  # and free after it

    at(101.0)
    again_id, again_duplicate = record_settled(store, "gpu", keys[:1], "c4", 101.0, 701.0, settled, _duplicate(101.0))
    again = store.event(again_id)
    assert again_duplicate and again is not None and again.outcome == "skipped_duplicate"
    assert again == replace(_duplicate(101.0), id=again_id)
    assert store.pool("gpu").last_event_id == event.id  # a duplicate does not become the pool's last event
    assert [e.outcome for e in store.events("gpu", 10)] == ["skipped_duplicate", "skipped_cooldown", "scaled"]


def test_a_plan_that_fails_leaves_nothing_written(store: SqlStore) -> None:
    store.ensure_pools(["gpu"])

    def plan(quick: QuickState | None) -> Shortcut | None:
        assert quick is not None and quick.state.name == "gpu"
        raise RuntimeError("a bug in the decision")

    with pytest.raises(RuntimeError, match="a bug in the decision"):
        store.shortcut("gpu", plan)
    assert store.events(None, 10) == []  # the read, the decision and the write are one transaction
    assert store.pool("gpu").last_event_id is None
    assert store.claim_dedup("gpu", ("k1",), 100.0, 30.0, "c2")  # and the store goes on


def test_settle_without_keys_records_the_event(store: SqlStore) -> None:
    store.ensure_pools(["gpu"])
    event_id, duplicate = record_settled(store, "gpu", (), "c1", 100.0, 700.0, _shortcut_event(100.0),
                                         _duplicate(100.0))
    assert not duplicate and store.pool("gpu").last_event_id == event_id


def test_concurrent_settles_of_one_notification_record_one_event_and_duplicates(store: SqlStore) -> None:
    store.ensure_pools(["gpu"])
    keys = ("alertmanager|fp9|2025-01-01T00:00:00Z|firing", "alertmanager|fp10|2025-01-01T00:00:00Z|firing")
    start = threading.Barrier(6)
    results: list[bool] = []

    def shortcut(i: int) -> None:
        start.wait()
        _, duplicate = record_settled(store, "gpu", keys, f"c{i}", 100.0, 700.0, _shortcut_event(100.0),
                                      _duplicate(100.0))
        results.append(duplicate)

    threads = [threading.Thread(target=shortcut, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == [False] + [True] * 5
    assert sorted(e.outcome for e in store.events("gpu", 10)) == ["skipped_cooldown"] + ["skipped_duplicate"] * 5


def test_a_driver_error_in_settle_is_what_the_execution_layer_makes_of_it(tmp_path: Path) -> None:
    """Settle runs its statements on the DBAPI cursor (``store/compiled.py``); a driver error there must meet
    SQLAlchemy's own handling as ``conn.execute`` would: the ``handle_error`` rule that drops a SQLite connection
    opened read-only (``connections.broken_sqlite_connection``), the same exception, nothing written. A trigger
    raises that driver error on the event's insert, for ``settle`` and for ``record`` (through ``conn.execute``)."""
    store = SqlStore(f"sqlite:///{tmp_path / 'state.db'}")
    fail = ("CREATE TRIGGER fail BEFORE INSERT ON events "
            "BEGIN SELECT RAISE(ABORT, 'attempt to write a readonly database'); END")
    try:
        store.ensure_pools(["gpu"])
        dropped: list[BaseException | None] = []
        event.listen(store.engine, "invalidate", lambda _conn, _record, exc: dropped.append(exc))

        def failure(write: Callable[[], object]) -> tuple[type, str, bool]:
            with pytest.raises(DBAPIError) as info:
                write()
            return type(info.value), str(info.value.orig), info.value.connection_invalidated

        def shortcut() -> tuple[int, bool]:
            return record_settled(store, "gpu", ("k1",), "me", 1.0, 600.0, _event(1.0), _event(1.0))

        with store.engine.begin() as conn:
            conn.exec_driver_sql(fail)
        # Twice: the first failure left no lock behind (its cursor is closed before its connection is dropped), so
        # the second meets the same error, not "database is locked".
        seen = [failure(shortcut), failure(shortcut)]
        assert seen == [(IntegrityError, "attempt to write a readonly database", True)] * 2
        assert len(dropped) == 2
        with store.engine.begin() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM dedup").scalar() == 0  # the claim rolled back
            conn.exec_driver_sql("DROP TRIGGER fail")
        event_id, duplicate = shortcut()
        assert not duplicate and store.pool("gpu").last_event_id == event_id
        with store.engine.begin() as conn:
            conn.exec_driver_sql(fail)
        # The reference, last: the same failure through conn.execute (its lock: the test below).
        assert failure(lambda: store.record(_event(2.0))) == seen[0]
        assert len(dropped) == 3
    finally:
        store.close()


def test_a_dropped_sqlite_connection_takes_its_write_lock_with_it_on_every_write_path(tmp_path: Path) -> None:
    """Any write (here ``record``, through ``conn.execute``) that meets a driver error meaning its SQLite connection
    is broken (``connections.broken_sqlite_connection``: a file opened read-only, a disk I/O error) drops that
    connection, and its failed statement's cursor is closed first: else the closed connection and its open
    transaction live on until the garbage collector takes the cursor, and every other writer waits its busy timeout
    (30 s) and fails with "database is locked". The error is still held here, as a caller logging it holds it."""
    path = tmp_path / "state.db"
    store = SqlStore(f"sqlite:///{path}")
    try:
        store.ensure_pools(["gpu"])
        with store.engine.begin() as conn:
            conn.exec_driver_sql("CREATE TRIGGER fail BEFORE INSERT ON events "
                                 "BEGIN SELECT RAISE(ABORT, 'attempt to write a readonly database'); END")
        with pytest.raises(DBAPIError) as info:
            store.record(_event(2.0))
        assert info.value.connection_invalidated and "readonly database" in str(info.value.orig)
        other = sqlite3.connect(path, timeout=0.2, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # the file's write lock, at once
            other.execute("DROP TRIGGER fail")
            other.execute("COMMIT")
        finally:
            other.close()
        store.record(_event(3.0))  # and the store writes again, on a new connection
        assert [e.time for e in store.events("gpu", 10)] == [3.0]
    finally:
        store.close()
