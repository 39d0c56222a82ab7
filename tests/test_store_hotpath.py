"""The webhook's hot path in the store: the lease returns the leased state; finish can confirm dedup keys."""
from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import pytest

from autoscaler.models import PoolState
from autoscaler.store import DedupConfirm, SqlStore
from autoscaler.store.base import EventRecord
from tests import pg


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlStore]:
    if request.param == "sqlite":
        opened = SqlStore(f"sqlite:///{tmp_path / 'state.db'}")
        yield opened
        opened.close()
        return
    pg.require_postgres()
    with pg.temp_database() as name:
        opened = SqlStore(pg.url_for(name))
        yield opened
        opened.close()


def _event(t: float) -> EventRecord:
    return EventRecord(time=t, pool="gpu", source="manual", action="scale_out", outcome="skipped_cooldown",
                       from_=1, to=1, reason="test")


def test_acquire_returns_the_state_it_leased_and_none_while_taken(store: SqlStore) -> None:
    store.ensure_pools(["gpu"])
    store.update_pool("gpu", None, {"tracked_count": 4, "failures": 2, "last_scale_out_at": 50.0})
    state = store.acquire("gpu", "me", 100.0, 60.0)
    assert state is not None
    assert (state.name, state.tracked_count, state.failures, state.last_scale_out_at) == ("gpu", 4, 2, 50.0)
    assert store.acquire("gpu", "other", 101.0, 60.0) is None
    assert store.acquire("gpu", "me", 102.0, 60.0) == state  # the owner may renew
    assert store.acquire("gpu", "other", 163.0, 60.0) == state  # expired: the next one takes it


def test_acquire_reads_back_the_state_where_update_returning_is_missing(store: SqlStore,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    store.ensure_pools(["gpu"])
    store.update_pool("gpu", None, {"tracked_count": 3})
    monkeypatch.setattr(store.engine.dialect, "update_returning", False)  # as on SQLite < 3.35
    state = store.acquire("gpu", "me", 100.0, 60.0)
    assert state is not None and state.tracked_count == 3
    assert store.acquire("gpu", "other", 100.0, 60.0) is None


def test_finish_confirms_the_claimed_dedup_keys_in_its_transaction(store: SqlStore) -> None:
    store.ensure_pools(["gpu"])
    keys = ("alertmanager|fp1|2025-01-01T00:00:00Z|firing", "x" * 300)  # a long key is stored hashed
    assert store.claim_dedup("gpu", keys, 100.0, 30.0, "c1")
    assert store.acquire("gpu", "me", 100.0, 60.0) is not None
    event_id = store.finish("gpu", "me", _event(100.0), {"failures": 0}, DedupConfirm(keys, "c1", 700.0))
    assert store.pool("gpu").last_event_id == event_id
    assert store.acquire("gpu", "other", 101.0, 60.0) is not None  # the lease was released
    assert not store.claim_dedup("gpu", keys, 131.0, 30.0, "c2")  # past the short claim: still held
    assert store.claim_dedup("gpu", keys, 700.0, 30.0, "c3")  # past the full window: free again


def test_finish_without_confirm_leaves_the_short_claim(store: SqlStore) -> None:
    store.ensure_pools(["gpu"])
    keys = ("alertmanager|fp2|2025-01-01T00:00:00Z|firing",)
    assert store.claim_dedup("gpu", keys, 100.0, 30.0, "c1")
    assert store.acquire("gpu", "me", 100.0, 60.0) is not None
    store.finish("gpu", "me", _event(100.0), {})
    assert store.claim_dedup("gpu", keys, 130.0, 30.0, "c2")  # expired with the short claim


def test_an_expired_key_is_taken_over_by_exactly_one_of_concurrent_claims(store: SqlStore) -> None:
    keys = ("alertmanager|fp3|2025-01-01T00:00:00Z|firing",)
    assert store.claim_dedup("gpu", keys, 100.0, 30.0, "old")
    for round_ in range(5):
        now = 200.0 + 100 * round_  # the previous round's claim has expired
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


def _settled(t: float, outcome: str = "skipped_cooldown") -> EventRecord:
    return EventRecord(time=t, pool="gpu", source="alertmanager", action="scale_out", outcome=outcome,
                       from_=None, to=None, reason="settled", alerts=[{"alertname": "A", "fingerprint": "f"}],
                       details={"cloud": "not read"})


def _duplicate(t: float) -> EventRecord:
    return EventRecord(time=t, pool="gpu", source="alertmanager", action="scale_out", outcome="skipped_duplicate",
                       from_=None, to=None, reason="dup", alerts=[{"alertname": "A", "fingerprint": "f"}])


def test_settle_writes_nothing_when_the_state_does_not_settle_it(store: SqlStore) -> None:
    store.ensure_pools(["gpu"])
    seen = []

    def build(state: PoolState, last_count: int | None) -> EventRecord | None:
        seen.append((state, last_count))
        return None

    assert store.settle("gpu", ("k1",), "c1", 100.0, 700.0, build, _duplicate(100.0)) is None
    assert store.settle("nope", ("k1",), "c1", 100.0, 700.0, build, _duplicate(100.0)) is None  # no such row
    assert [s.name for s, _ in seen] == ["gpu"]
    assert store.events(None, 10) == []
    assert store.claim_dedup("gpu", ("k1",), 100.0, 30.0, "c2")  # the key was never claimed


def test_settle_reads_state_and_last_count_then_claims_records_and_points_the_pool_at_it(store: SqlStore) -> None:
    store.ensure_pools(["gpu"])
    first = store.update_pool("gpu", EventRecord(time=50.0, pool="gpu", source="manual", action="scale_out",
                                                  outcome="scaled", from_=2, to=3, reason="r"),
                              {"last_scale_out_at": 50.0, "paused": True, "pause_reason": "maintenance"})
    seen: list[tuple[PoolState, int | None]] = []

    def build(state: PoolState, last_count: int | None) -> EventRecord:
        seen.append((state, last_count))
        return replace(_settled(100.0), from_=last_count, to=last_count)

    keys = ("alertmanager|fp|2025-01-01T00:00:00Z|firing", "y" * 300)
    result = store.settle("gpu", keys, "c1", 100.0, 700.0, build, _duplicate(100.0))
    assert result is not None
    event, duplicate = result
    state, last_count = seen[0]
    assert (state.paused, state.pause_reason, state.last_scale_out_at, state.last_event_id) == (
        True, "maintenance", 50.0, first)
    assert last_count == 3 and not duplicate
    assert store.event(event.id or 0) == event and (event.from_, event.to, event.details) == (3, 3, {"cloud": "not read"})
    assert store.pool("gpu").last_event_id == event.id
    assert not store.claim_dedup("gpu", keys[:1], 699.0, 30.0, "c2")  # claimed for the full window at once
    assert store.claim_dedup("gpu", keys[1:], 700.0, 30.0, "c3")  # and free after it

    again = store.settle("gpu", keys[:1], "c4", 101.0, 701.0, build, _duplicate(101.0))
    assert again is not None and again[1] and again[0].outcome == "skipped_duplicate"
    assert store.event(again[0].id or 0) == again[0]
    assert store.pool("gpu").last_event_id == event.id  # a duplicate does not become the pool's last event
    assert [e.outcome for e in store.events("gpu", 10)] == ["skipped_duplicate", "skipped_cooldown", "scaled"]


def test_settle_without_keys_records_the_event(store: SqlStore) -> None:
    store.ensure_pools(["gpu"])
    result = store.settle("gpu", (), "c1", 100.0, 700.0, lambda s, n: _settled(100.0), _duplicate(100.0))
    assert result is not None and not result[1] and store.pool("gpu").last_event_id == result[0].id


def test_concurrent_settles_of_one_notification_record_one_event_and_duplicates(store: SqlStore) -> None:
    store.ensure_pools(["gpu"])
    keys = ("alertmanager|fp9|2025-01-01T00:00:00Z|firing", "alertmanager|fp10|2025-01-01T00:00:00Z|firing")
    start = threading.Barrier(6)
    results: list[bool] = []

    def settle(i: int) -> None:
        start.wait()
        got = store.settle("gpu", keys, f"c{i}", 100.0, 700.0, lambda s, n: _settled(100.0), _duplicate(100.0))
        assert got is not None
        results.append(got[1])

    threads = [threading.Thread(target=settle, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == [False] + [True] * 5
    assert sorted(e.outcome for e in store.events("gpu", 10)) == ["skipped_cooldown"] + ["skipped_duplicate"] * 5
