"""The replay's in-memory store keeps the SQL store's semantics: the same trace gives the same events on both."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from autoscaler.config.load import build_settings
from autoscaler.models import Action
from autoscaler.replay.sim import simulate
from autoscaler.replay.trace import Trace, load_trace, parse_time
from autoscaler.store import EventRecord, PoolChange, SqlStore, Store
from autoscaler.store.base import DedupConfirm
from autoscaler.store.memory import MemoryStore
from tests.support import quick_state, record_settled
from bench.traces.make_traces import generate

ROOT = Path(__file__).resolve().parents[3]
T0 = parse_time("2025-01-06T00:00:00Z")


def _raw(scale_out: dict[str, object], scale_in: dict[str, object]) -> dict[str, object]:
    return {
        "server": {"auth": {"disabled": True}},
        "defaults": {"dedup_window": "1m"},
        "pools": [{"name": "gpu", "provider": "simulated", "min": 1, "max": 32, "scale_out": scale_out,
                   "scale_in": scale_in, "simulated": {"initial_count": 3, "provision_seconds": 300}}],
        "replay": {"evaluation_interval": "30s", "group_wait": "30s", "group_interval": "1m", "repeat_interval": "5m",
                   "rules": [{"alert": "High", "above": 80, "for": "1m", "pool": "gpu", "action": "scale_out"},
                             {"alert": "Low", "below": 40, "for": "5m", "pool": "gpu", "action": "scale_in"}]},
    }


PROPORTIONAL = _raw({"mode": "proportional", "target_utilization": 40, "max_step": 4, "cooldown": "3m"},
                    {"mode": "proportional", "target_utilization": 60, "max_step": 1, "cooldown": "10m",
                     "stabilization_window": "5m", "delay_after_scale_out": "10m"})
STEP = _raw({"mode": "step", "step": 2, "cooldown": "3m"}, {"mode": "step", "step": 1, "cooldown": "10m"})


def _events(store: Store) -> list[tuple[object, ...]]:
    return [(e.id, e.time, e.pool, e.source, e.action, e.outcome, e.from_, e.to, e.reason,
             json.dumps(e.alerts), json.dumps(e.details, sort_keys=True, default=str))
            for e in store.events(None, 100_000)]


@pytest.mark.parametrize("raw,family", [
    pytest.param(PROPORTIONAL, "training_queue", id="proportional-training-day"),
    pytest.param(PROPORTIONAL, "diurnal_inference", id="proportional-inference-day"),
    pytest.param(STEP, "training_queue", id="step-training-day"),
])
def test_same_trace_same_events_on_sqlite_and_memory(raw: dict[str, object], family: str) -> None:
    settings = build_settings(raw, env={})
    trace = Trace(T0, tuple(round(d, 2) for d in generate(family, days=1, seed=3)))
    sql, memory = SqlStore("sqlite://"), MemoryStore()
    on_sql, on_memory = simulate(settings, trace, store=sql), simulate(settings, trace, store=memory)
    assert len(on_sql.decisions) > 20
    assert on_sql.decisions == on_memory.decisions and on_sql.minutes == on_memory.minutes
    assert _events(sql) == _events(memory)
    assert sql.pools() == memory.pools()
    sql.close()


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    made: Store = SqlStore("sqlite://") if request.param == "sqlite" else MemoryStore()
    made.ensure_pools(["gpu"])
    yield made


def _event(t: float, outcome: str = "scaled", to: int | None = 4) -> EventRecord:
    return EventRecord(time=t, pool="gpu", source="alertmanager", action="scale_out", outcome=outcome, from_=2,
                       to=to, reason="r", alerts=[{"alertname": "High", "fingerprint": "f"}], details={"k": 1})


def test_dedup_claims_expire_and_confirm_alike(store: Store) -> None:
    assert store.claim_dedup("gpu", ("a", "b"), 100.0, 60.0, "c1")
    assert not store.claim_dedup("gpu", ("a",), 130.0, 60.0, "c2")  # held until 160
    assert store.claim_dedup("gpu", ("a",), 160.0, 60.0, "c3")  # expired at 160: taken over
    store.release_dedup(("b",), "other")  # not this claim's: stays
    assert not store.claim_dedup("gpu", ("b",), 150.0, 60.0, "c4")
    store.release_dedup(("b",), "c1")
    assert store.claim_dedup("gpu", ("b",), 150.0, 60.0, "c5")
    state = store.acquire("gpu", "me", 150.0, 120.0)
    assert state is not None
    store.finish("gpu", "me", _event(150.0), PoolChange(at=150.0, acted=Action.SCALE_OUT, tracked_count=4),
                 DedupConfirm(("b",), "c5", 1000.0, 150.0))
    assert not store.claim_dedup("gpu", ("b",), 900.0, 60.0, "c6")  # confirmed to 1000


def test_lease_and_quick_state_alike(store: Store) -> None:
    assert store.acquire("gpu", "a", 100.0, 120.0) is not None
    assert store.acquire("gpu", "b", 150.0, 120.0) is None  # a holds it until 220
    assert store.acquire("gpu", "a", 150.0, 120.0) is not None  # its own lease: renewed
    assert store.acquire("gpu", "b", 271.0, 120.0) is not None  # expired at 270
    assert store.renew("gpu", "b", 300.0, 120.0) and not store.renew("gpu", "a", 300.0, 120.0)
    assert store.acquire("gpu", "c", 400.0, 120.0) is None  # renewed to 420
    event_id = store.finish("gpu", "b", _event(271.0), PoolChange(at=271.0, acted=Action.SCALE_OUT, tracked_count=4))
    quick = quick_state(store, "gpu")
    assert quick is not None and quick.last_count == 4 and quick.state.last_scale_out_at == 271.0
    assert quick.state.tracked_count == 4 and quick.state.last_event_id == event_id
    assert quick_state(store, "nope") is None
    assert store.acquire("gpu", "c", 272.0, 120.0) is not None  # finish released it
    ids = [record_settled(store, "gpu", ("k",), "c1", 300.0, 360.0, _event(300.0, "skipped_cooldown", None),
                                _event(300.0, "skipped_duplicate", None)) for _ in range(2)]
    assert [dup for _, dup in ids] == [False, True]
    assert [e.outcome for e in store.events("gpu", 2)] == ["skipped_duplicate", "skipped_cooldown"]


def test_recommendations_and_prune_alike(store: Store) -> None:
    for t, desired in ((10.0, 3), (20.0, 5), (30.0, 4)):
        store.add_recommendation("gpu", t, desired, forget_before=15.0)
    assert store.recommendations("gpu", 0.0) == [(20.0, 5), (30.0, 4)]
    assert store.recommendations("gpu", 25.0) == [(30.0, 4)]
    for t in (1.0, 2.0, 3.0):
        store.record(_event(t))
    store.claim_dedup("gpu", ("x",), 0.0, 10.0, "c")
    assert store.prune(2.5, now=20.0, batch=500) == 3  # two events and the expired key
    assert [e.time for e in store.events(None, 10)] == [3.0]
    paused = store.update_pool("gpu", _event(5.0, "paused", None), PoolChange(paused=True, pause_reason="why"))
    assert store.pool("gpu").paused and store.pool("gpu").last_event_id == paused
    assert store.event(paused or 0) is not None and store.event(10_000) is None


def test_generator_keeps_the_committed_day_and_grows_from_it(tmp_path: Path) -> None:
    committed = load_trace(str(ROOT / "bench" / "traces" / "training_queue.csv")).demand
    week = generate("training_queue", days=7)
    assert len(week) == 7 * 1440 and tuple(round(d, 2) for d in week[:1440]) == committed
    assert generate("training_queue", days=2, seed=5) != generate("training_queue", days=2, seed=6)
    assert generate("diurnal_inference", days=3, seed=9) == generate("diurnal_inference", days=3, seed=9)
