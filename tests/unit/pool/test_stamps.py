"""Times stamped ahead of this clock (a replica's clock ahead, or this one stepped back) are brought back by whoever
reads the pool to decide (``pool/stamps.py``): no cooldown, backoff or pass-over lasts longer than its length. The
cooldown through the app: tests/unit/decide/test_clock_step.py."""
from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.config.load import build_settings
from autoscaler.decide.policy import backoff_seconds
from autoscaler.engine.fallback import member
from autoscaler.models import PoolState
from autoscaler.pool.events import EventLog
from autoscaler.pool.hold import PoolHold
from autoscaler.pool.stamps import TOLERANCE, pulled_back
from autoscaler.store import PoolChange
from autoscaler.store.memory import MemoryStore
from providers import build
from tests.support import FakeClock, config

NOW = 1_800_000_000.0
STATE = PoolState(name="gpu")
SHORT_FOR = 600.0


@pytest.mark.parametrize("state,want", [
    pytest.param(STATE, {}, id="nothing-stamped"),
    pytest.param(replace(STATE, last_scale_out_at=NOW - 30, last_scale_in_at=NOW - 300), {}, id="stamps-behind-kept"),
    pytest.param(replace(STATE, last_scale_out_at=NOW + TOLERANCE), {}, id="within-the-tolerance-kept"),
    pytest.param(replace(STATE, last_scale_out_at=NOW + 600), {"last_scale_out_at": NOW}, id="scale-out-ahead-to-now"),
    pytest.param(replace(STATE, last_scale_in_at=NOW + 5), {"last_scale_in_at": NOW}, id="scale-in-ahead-to-now"),
    pytest.param(replace(STATE, failures=1, backoff_until=NOW + 30), {}, id="backoff-within-its-length-kept"),
    pytest.param(replace(STATE, failures=2, backoff_until=NOW + 3600), {"backoff_until": NOW + backoff_seconds(2)},
                 id="backoff-past-its-length-to-its-length"),
    pytest.param(replace(STATE, short_until=NOW + 300, short_reason="ZonalAllocationFailed"), {},
                 id="pass-over-within-short-for-kept"),
    pytest.param(replace(STATE, short_until=NOW + 4000, short_reason="ZonalAllocationFailed"),
                 {"short_until": NOW + SHORT_FOR}, id="pass-over-past-short-for-to-short-for"),
])
def test_pulled_back(state: PoolState, want: dict[str, float]) -> None:
    changes, fixed = pulled_back(state, NOW, SHORT_FOR)
    assert fixed == replace(state, **want)
    assert bool(changes) == bool(want)
    store = MemoryStore()
    store.ensure_pools(["gpu"])
    for change in changes:  # the changes write what the fixed state says
        store.update_pool("gpu", None, change)
    for name, value in want.items():
        assert getattr(store.pool("gpu"), name) == value


def test_without_short_for_a_pass_over_is_left_as_it_is() -> None:
    state = replace(STATE, short_until=NOW + 4000)
    assert pulled_back(state, NOW) == ((), state)


def test_the_hold_brings_a_backoff_stamped_ahead_back_in_the_store_too() -> None:
    clock = FakeClock()
    store = MemoryStore()
    store.ensure_pools(["gpu"])
    store.update_pool("gpu", None, PoolChange(failures=1, backoff_until=clock() + 3600))
    hold = PoolHold(store, EventLog(store, clock=clock), lock_wait=0.5, lease_ttl=30.0, clock=clock,
                    short_for={"gpu": SHORT_FOR})
    held = hold.take("gpu", hold.owner("a"), hold.deadline())
    assert held is not None
    with held:
        assert held.state.backoff_until == clock() + backoff_seconds(1)
    assert store.pool("gpu").backoff_until == clock() + backoff_seconds(1)  # for every replica that reads it next


def test_a_group_member_passed_over_ahead_of_the_clock_is_passed_over_for_short_for_at_most() -> None:
    clock = FakeClock()
    settings = build_settings(config("sqlite://", pools=[
        {"name": "gpu", "provider": "simulated", "min": 0, "max": 6, "capacity": {"short_for": "10m"},
         "simulated": {"initial_count": 1}}]), env={})
    spec = settings.pools["gpu"]
    store = MemoryStore()
    store.ensure_pools([spec.name])
    store.update_pool(spec.name, None, PoolChange(short_until=clock() + 7200, short_reason="ZonalAllocationFailed"))
    seen = member(store, build("simulated", spec.name, spec.provider_settings, clock), spec, clock())
    assert seen.short_until == clock() + 600 and seen.short_reason == "ZonalAllocationFailed"
    assert store.pool(spec.name).short_until == clock() + 600
