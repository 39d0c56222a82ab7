"""One way to hold a pool (``lease.PoolHold``): this process's lock, the store lease, renewal, record-and-release.
Nothing else takes a pool's lease, and no module reaches into the engine's private attributes."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from autoscaler.pool.attempt import Attempt, DedupClaim
from autoscaler.config.load import build_settings
from autoscaler.pool.events import EventLog
from autoscaler.pool.hold import PoolHeld, PoolHold
from autoscaler.models import Action, Decision, Outcome, Signal, Source
from autoscaler.store import PoolChange
from autoscaler.store.memory import MemoryStore
from providers import build
from tests.support import FakeClock, config

ROOT = Path(__file__).resolve().parents[3]


def _hold(clock: FakeClock) -> tuple[PoolHold, MemoryStore]:
    store = MemoryStore()
    store.ensure_pools(["gpu"])
    return PoolHold(store, EventLog(store, clock=clock), lock_wait=0.5, lease_ttl=30.0, clock=clock), store


def test_a_hold_left_unrecorded_gives_the_lease_back_and_frees_the_lock() -> None:
    clock = FakeClock()
    hold, store = _hold(clock)
    held = hold.take("gpu", hold.owner("a"), hold.deadline())
    assert held is not None
    with held:
        assert hold.take("gpu", hold.owner("b"), hold.deadline()) is None  # this process's lock: waited lock_wait
        assert store.acquire("gpu", "another-replica", clock(), 30.0) is None  # the store lease
    assert store.acquire("gpu", "another-replica", clock(), 30.0) is not None  # both given back


def test_finish_records_the_outcome_and_releases_the_lease_in_one_step() -> None:
    clock = FakeClock()
    hold, store = _hold(clock)
    spec = build_settings(config("sqlite:///unused.db"), env={}).pools["gpu"]
    signal = Signal(pool="gpu", action=Action.SCALE_OUT, source=Source.MANUAL)
    owner = hold.owner("c")
    held = hold.take("gpu", owner, hold.deadline())
    assert held is not None
    attempt = Attempt(signal, spec, build("simulated", "gpu", spec.provider_settings, clock),
                      DedupClaim(store, "gpu", ()), owner, clock(), hold.deadline())
    with held:
        recorded = held.finish(attempt, Decision("gpu", Action.SCALE_OUT, Outcome.SCALED, 2, 3, "test"),
                               PoolChange(at=clock(), acted=Action.SCALE_OUT))
    assert recorded.outcome is Outcome.SCALED
    assert store.pool("gpu").last_scale_out_at == clock()
    assert [e.outcome for e in store.events("gpu", 5)] == ["scaled"]
    assert store.acquire("gpu", "next", clock(), 30.0) is not None  # released with the record


def test_an_operator_act_on_a_held_pool_is_refused_with_our_own_name() -> None:
    clock = FakeClock()
    hold, _ = _hold(clock)
    held = hold.take("gpu", hold.owner("decision"), hold.deadline())
    assert held is not None
    with held, pytest.raises(PoolHeld) as caught, hold.holding("gpu"):
        pass
    assert caught.value.retry_after == 5.0 and "still running" in str(caught.value)


def _sources() -> list[tuple[Path, str]]:
    return [(p, p.read_text()) for p in sorted((ROOT / "autoscaler").rglob("*.py"))]


def test_only_the_hold_takes_or_gives_back_a_pools_lease() -> None:
    """``Store.acquire``/``renew``/``release`` and ``Lease`` are called in pool/hold.py alone (the store implements
    them)."""
    calls = re.compile(r"\.(acquire|renew|release)\(\s*(pool|spec\.name|self\.pool|name)\b|\bLease\(")
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p, text in _sources() if p.name != "hold.py"
                 and "/store/" not in str(p) for n, line in enumerate(text.splitlines(), 1) if calls.search(line)]
    assert offenders == []


def test_no_module_reaches_into_the_engines_private_attributes() -> None:
    offenders = []
    for path, text in _sources():
        for node in ast.walk(ast.parse(text)):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Attribute) and node.value.attr == "engine"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} .engine.{node.attr}")
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and node.value.id == "engine"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} engine.{node.attr}")
    assert offenders == []
