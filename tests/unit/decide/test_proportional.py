"""Proportional mode: the HPA formula as a table, then through the engine with a real store."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoscaler.config.load import build_settings
from autoscaler.engine.core import Engine
from autoscaler.engine.parts import Parts
from autoscaler.pool.events import EventLog
from autoscaler.models import Action, CloudStatus, DirectionPolicy, Outcome, PoolSpec, PoolState, Signal, Source
from autoscaler.decide.policy import decide
from autoscaler.sources import grafana
from autoscaler.store import SqlStore
from providers import build
from tests.support import FakeClock

NOW = 10_000.0
SPEC = PoolSpec(
    name="gpu", provider="simulated", min=1, max=16, dry_run=False,
    scale_out=DirectionPolicy(step=1, cooldown=0, mode="proportional", target_utilization=70, max_step=4),
    scale_in=DirectionPolicy(step=1, cooldown=0, mode="proportional", target_utilization=70, max_step=2,
                             stabilization_window=300),
    dedup_window=60,
)
OUT, IN = Action.SCALE_OUT, Action.SCALE_IN


@pytest.mark.parametrize(("action", "value", "current", "recent", "outcome", "to", "words"), [
    pytest.param(OUT, 95.0, 4, [], Outcome.SCALED, 6, "ceil(4 x 95 / 70) = 6", id="out-formula"),
    pytest.param(OUT, 76.0, 4, [], Outcome.SKIPPED_LIMIT, 4, "within the 10% tolerance", id="out-within-tolerance"),
    pytest.param(IN, 65.0, 4, [], Outcome.SKIPPED_LIMIT, 4, "within the 10% tolerance", id="in-within-tolerance"),
    pytest.param(OUT, 100.0, 10, [], Outcome.SCALED, 14, "limited by max_step 4 to 14", id="out-max-step"),
    pytest.param(OUT, 100.0, 14, [], Outcome.SCALED, 16, "clamped to max 16", id="out-clamped-to-max"),
    pytest.param(OUT, 100.0, 16, [], Outcome.SKIPPED_LIMIT, 16, "already at max (16)", id="out-already-at-max"),
    pytest.param(OUT, 40.0, 4, [], Outcome.SKIPPED_LIMIT, 4, "never scales in", id="out-alert-never-scales-in"),
    pytest.param(OUT, None, 4, [], Outcome.SCALED, 5, "no usable value: fixed step", id="out-missing-value"),
    pytest.param(OUT, -3.0, 4, [], Outcome.SCALED, 5, "is negative: fixed step", id="out-negative-value"),
    pytest.param(IN, 30.0, 8, [], Outcome.SCALED, 6, "ceil(8 x 30 / 70) = 4, limited by max_step 2 to 6",
                 id="in-formula-max-step"),
    pytest.param(IN, 5.0, 2, [], Outcome.SCALED, 1, "ceil(2 x 5 / 70) = 1", id="in-to-min"),
    pytest.param(IN, 5.0, 1, [], Outcome.SKIPPED_LIMIT, 1, "already at min (1)", id="in-already-at-min"),
    pytest.param(IN, 40.0, 2, [], Outcome.SKIPPED_LIMIT, 2, "the formula keeps the pool at 2 nodes",
                 id="in-rounding-up-keeps-size"),
    pytest.param(IN, 90.0, 4, [], Outcome.SKIPPED_LIMIT, 4, "never scales out", id="in-alert-never-scales-out"),
    pytest.param(IN, None, 4, [], Outcome.SCALED, 3, "no usable value: fixed step", id="in-missing-value"),
    pytest.param(IN, 30.0, 8, [(NOW - 100, 7)], Outcome.SCALED, 7, "stabilized to 7", id="in-stabilized"),
    pytest.param(IN, 30.0, 8, [(NOW - 100, 9)], Outcome.SKIPPED_COOLDOWN, 8, "stabilization window",
                 id="in-held-by-stabilization"),
    pytest.param(IN, 30.0, 8, [(NOW - 301, 9)], Outcome.SCALED, 6, "max_step 2 to 6",
                 id="in-old-recommendation-expired"),
])
def test_formula(action: Action, value: float | None, current: int, recent: list[tuple[float, int]],
                 outcome: Outcome, to: int, words: str) -> None:
    signal = Signal(pool="gpu", action=action, source=Source.ALERTMANAGER, value=value)
    plan = decide(signal, SPEC, PoolState(name="gpu"), CloudStatus(current=current), NOW, recent)
    assert (plan.outcome, plan.to) == (outcome, to), plan.reason
    assert words in plan.reason


def test_details_record_value_target_and_formula() -> None:
    signal = Signal(pool="gpu", action=OUT, source=Source.ALERTMANAGER, value=95.0)
    plan = decide(signal, SPEC, PoolState(name="gpu"), CloudStatus(current=4), NOW)
    assert plan.details == {"in_flight": 0, "mode": "proportional", "value": 95.0, "target_utilization": 70.0,
                            "formula": "ceil(4 x 95 / 70) = 6", "desired": 6, "recommendation": 6, "result": 6}


def test_manual_target_and_step_mode_ignore_the_formula() -> None:
    target = Signal(pool="gpu", action=None, source=Source.MANUAL, target=9, value=10.0)
    assert decide(target, SPEC, PoolState(name="gpu"), CloudStatus(current=4), NOW).to == 9
    step_spec = PoolSpec(**{**SPEC.__dict__, "scale_out": DirectionPolicy(step=2, cooldown=0)})
    signal = Signal(pool="gpu", action=OUT, source=Source.ALERTMANAGER, value=100.0)
    plan = decide(signal, step_spec, PoolState(name="gpu"), CloudStatus(current=4), NOW)
    assert (plan.to, plan.details) == (6, {"in_flight": 0})  # every decision says what was in flight


def _engine(tmp_path: Path, clock: FakeClock, pool: dict[str, Any]) -> tuple[Engine, SqlStore]:
    raw = {"server": {"auth": {"disabled": True}}, "pools": [{
        "name": "gpu", "provider": "simulated", "min": 1, "max": 16,
        "simulated": {"initial_count": 8, "provision_seconds": 0}, **pool}]}
    settings = build_settings(raw, env={})
    store = SqlStore(f"sqlite:///{tmp_path}/state.db")
    store.ensure_pools(["gpu"])
    providers = {"gpu": build("simulated", "gpu", settings.pools["gpu"].provider_settings)}
    return Engine(Parts.build(settings, store, providers, EventLog(store, clock=clock), clock)), store


def test_stabilization_window_uses_stored_recommendations(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    engine, store = _engine(tmp_path, clock, {
        "scale_in": {"mode": "proportional", "target_utilization": 70, "max_step": 2, "cooldown": 0,
                     "delay_after_scale_out": 0, "stabilization_window": "5m"}})

    def scale_in(value: float) -> tuple[str, int | None]:
        d = engine.handle(Signal(pool="gpu", action=IN, source=Source.MANUAL, value=value))
        return d.outcome.value, d.to

    assert scale_in(60.0) == ("scaled", 7)  # ceil(8 x 60 / 70) = 7
    clock.now = 1060.0
    assert scale_in(10.0) == ("skipped_cooldown", 7)  # wants 1, but 7 was recommended 60 s ago
    clock.now = 1301.0
    assert scale_in(10.0) == ("scaled", 5)  # 7 left the window; 1 recommended at 1060, max_step 2
    assert [t for t, _ in store.recommendations("gpu", 0)] == [1060.0, 1301.0]  # 1000 pruned
    details = store.events("gpu", 1)[0].details
    assert details["formula"] == "ceil(7 x 10 / 70) = 1" and details["value"] == 10.0
    assert details["target_utilization"] == 70.0 and details["result"] == 5


def test_grafana_value_ref_picks_the_configured_query(tmp_path: Path) -> None:
    engine, _ = _engine(tmp_path, FakeClock(5000.0), {
        "scale_out": {"mode": "proportional", "target_utilization": 70, "cooldown": 0, "value_ref": "B"}})
    body = {"alerts": [{"status": "firing", "labels": {"alertname": "Hot", "autoscaler_pool": "gpu",
                                                       "autoscaler_action": "scale_out"},
                        "values": {"A": 20.0, "B": 105.0}, "startsAt": "2025-01-06T00:00:00Z"}]}
    [decision] = engine.handle_notification(grafana.parse(body, {}))
    assert (decision.outcome, decision.from_, decision.to) == (Outcome.SCALED, 8, 12)  # ceil(8 x 105 / 70)
