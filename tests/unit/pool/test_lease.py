"""A pool busy because of *our* lease or lock answers 503 + Retry-After (a retry can act); a pool the cloud reports
busy stays 200 ``skipped_busy``. A running decision renews its lease, so a slow cloud call never lets a second
decision in beside it."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from autoscaler.engine.core import LEASE_TTL
from autoscaler.pool.hold import Lease
from autoscaler.models import Action, CloudStatus
from autoscaler.store import EventRecord, PoolChange, SqlStore, Store
from autoscaler.store.memory import MemoryStore
from providers import Tracked
from tests.support.fakes.scripted_cloud import ScriptedCloud
from tests.support.pipeline import wait_for
from tests.support import AUTH, FakeClock, am_alert, am_payload, config


class SlowCloud(ScriptedCloud):
    """A cloud whose scale call takes as long as the test holds it."""

    def __init__(self) -> None:
        super().__init__(count=2)
        self.entered = threading.Event()
        self.gate = threading.Event()

    def scale(self, current: int, target: int, now: float, status: CloudStatus | None = None) -> int:
        self.entered.set()
        assert self.gate.wait(20), "the test never let the cloud answer"
        return super().scale(current, target, now, status)


def _replica(db: str, cloud: Any, clock: FakeClock | None = None, **server: Any) -> Any:
    """One app instance on the shared store (another gunicorn worker or replica), on ``clock`` (else the real one)."""
    cfg = config(db)
    cfg["server"].update(server)
    return create_app(build_settings(cfg, env={}), providers={"gpu": cloud}, clock=clock, startup_check=False)


def _send(app: Any, fp: str) -> Any:
    return app.test_client().post("/webhook/alertmanager", json=am_payload(am_alert(fingerprint=fp)), headers=AUTH)


def test_the_default_lease_is_short() -> None:
    assert LEASE_TTL <= 30
    assert build_settings(config("sqlite:///x.db"), env={}).config.server.lease_ttl == LEASE_TTL


def test_a_slow_decision_keeps_its_lease_and_the_other_replica_answers_503(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    slow = SlowCloud()
    # the store's time: the lease lapses by it, never by the machine's speed; the waits are real, since the pool
    # is held by a real peer (the other replica's thread, renewing its lease on the machine's time)
    clock = FakeClock(real_waits=True)
    first = _replica(db, slow, clock, lease_ttl="150ms", lock_wait="100ms")
    other = _replica(db, slow, clock, lease_ttl="150ms", lock_wait="100ms")
    answers: list[Any] = []
    holder = threading.Thread(target=lambda: answers.append(_send(first, "fp-slow")))
    holder.start()
    try:
        assert slow.entered.wait(10)
        busy: list[Any] = []
        for _ in range(9):  # three times the lease: without renewal it would have lapsed
            clock.advance(0.05)  # each answer below waits lock_wait (100 ms), in which the lease renews twice
            busy.append(_send(other, f"fp-{len(busy)}"))
    finally:
        slow.gate.set()
        holder.join(20)
    assert len(busy) >= 5
    for resp in busy:
        decision = resp.get_json()["decisions"][0]
        assert (resp.status_code, decision["outcome"]) == (503, "skipped_busy"), decision
        assert 1 <= int(resp.headers["Retry-After"]) <= 30
    assert answers[0].status_code == 200 and answers[0].get_json()["decisions"][0]["outcome"] == "scaled"
    assert slow.calls == [(2, 3)]  # nothing acted beside it
    retry = _send(other, "fp-0")  # a busy answer released its claim: the retry is decided (here: the cooldown)
    assert retry.status_code == 200 and retry.get_json()["decisions"][0]["outcome"] == "skipped_cooldown"


def test_our_lock_is_503_the_clouds_busy_is_200(tmp_path: Path) -> None:
    slow = SlowCloud()
    app = _replica(f"sqlite:///{tmp_path}/state.db", slow, lock_wait="100ms")
    holder = threading.Thread(target=lambda: _send(app, "fp-a"))
    holder.start()
    try:
        assert slow.entered.wait(10)
        ours = _send(app, "fp-b")  # another thread of this worker holds the pool's lock
    finally:
        slow.gate.set()
        holder.join(20)
    assert ours.status_code == 503 and ours.headers["Retry-After"]
    assert ours.get_json()["decisions"][0]["outcome"] == "skipped_busy"

    class BusyCloud(ScriptedCloud):
        def status(self, tracked: Tracked, now: float) -> CloudStatus:
            return CloudStatus(current=self.count, busy=True, detail="Scaling")

    cloudy = _replica(f"sqlite:///{tmp_path}/other.db", BusyCloud())
    resp = _send(cloudy, "fp-c")
    assert resp.status_code == 200 and "Retry-After" not in resp.headers
    assert resp.get_json()["decisions"][0]["outcome"] == "skipped_busy"


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    made: Store = SqlStore(f"sqlite:///{tmp_path}/s.db") if request.param == "sqlite" else MemoryStore()
    made.ensure_pools(["gpu"])
    return made


def test_finishing_after_the_lease_lapsed_leaves_the_new_holders_lease(store: Store) -> None:
    """A decision whose lease lapsed (its renewals failed) still records what it did, but must not free the lease
    another decision took meanwhile: that one would then run beside a third."""
    assert store.acquire("gpu", "old", 100.0, 10.0) is not None
    assert store.acquire("gpu", "new", 111.0, 10.0) is not None  # lapsed: taken over
    event = EventRecord(time=112.0, pool="gpu", source="manual", action="scale_out", outcome="scaled", from_=2, to=3,
                        reason="late")
    store.finish("gpu", "old", event, PoolChange(at=112.0, acted=Action.SCALE_OUT))
    assert store.pool("gpu").last_scale_out_at == 112.0  # what it did is recorded
    assert store.acquire("gpu", "third", 113.0, 10.0) is None  # and the new holder still holds the pool
    assert not store.renew("gpu", "old", 113.0, 10.0) and store.renew("gpu", "new", 113.0, 10.0)


def test_a_hung_decision_is_let_go_after_max_decision(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    slow = SlowCloud()
    first = _replica(db, slow, lease_ttl="300ms", lock_wait="100ms")
    first.extensions["autoscaler"].parts.hold.max_decision = 0.5  # a cloud call that never returns, in short
    other = _replica(db, ScriptedCloud(count=2), lease_ttl="300ms", lock_wait="100ms")
    holder = threading.Thread(target=lambda: _send(first, "fp-hung"))
    holder.start()
    try:
        assert slow.entered.wait(10)
        assert _send(other, "fp-0").status_code == 503  # renewed past its TTL: still held
        # the real clock: max_decision (0.5 s) and then the TTL (0.3 s) must pass
        answer = wait_for(lambda: (lambda a: a if a.status_code == 200 else None)(_send(other, "fp-1")), 5.0,
                          "the hung decision's lease to lapse", interval=0.1)
    finally:
        slow.gate.set()
        holder.join(20)
    assert answer.status_code == 200 and answer.get_json()["decisions"][0]["outcome"] == "scaled"


def test_take_polls_a_held_lease_until_its_deadline_on_the_fake_clock(store: Store) -> None:
    clock = FakeClock()
    sleeps = clock.sleeps
    assert store.acquire("gpu", "other", clock(), 30.0) is not None
    lease = Lease(store, "gpu", "me", 30.0, clock)
    assert lease.take(clock.monotonic() + 0.5) is None
    assert sleeps[:4] == [0.005, 0.01, 0.02, 0.04] and set(sleeps[4:]) == {0.05}  # backing off, then steady
    assert 0.5 <= sum(sleeps) < 0.55
    assert store.acquire("gpu", "third", clock(), 30.0) is None  # the other's lease is untouched


def test_take_gets_the_lease_once_the_holders_lapses(store: Store) -> None:
    clock = FakeClock()
    sleeps = clock.sleeps
    assert store.acquire("gpu", "dead-worker", clock(), 1.0) is not None
    lease = Lease(store, "gpu", "me", 30.0, clock)
    assert lease.take(clock.monotonic() + 5.0) is not None
    assert 1.0 <= sum(sleeps) < 1.06  # taken at the first poll after it lapsed
    assert store.acquire("gpu", "dead-worker", clock(), 1.0) is None  # ours now
    lease.release()
    assert store.acquire("gpu", "dead-worker", clock(), 1.0) is not None
