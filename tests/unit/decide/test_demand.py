"""Demand sizing: the formula (current - in flight + ceil(GPUs / gpus per node)) as a table, in flight in
proportional mode, the schedule floor as a policy input, and the config keys."""
from __future__ import annotations

import math

import pytest

from autoscaler.config.load import ConfigError, build_settings
from autoscaler.models import (Action, CloudStatus, DirectionPolicy, Mode, Outcome, PoolFacts, PoolSpec, PoolState,
                               Signal, Source)
from autoscaler.decide.policy import decide

NOW = 50_000.0
SPEC = PoolSpec(
    name="gpu", provider="simulated", min=1, max=12, dry_run=False,
    scale_out=DirectionPolicy(step=1, cooldown=300, mode=Mode.DEMAND),
    scale_in=DirectionPolicy(step=1, cooldown=0),
    dedup_window=60, gpus_per_node=8, provision_time=480,
)
OUT, IN = Action.SCALE_OUT, Action.SCALE_IN


def _decide(value: float | None, current: int, in_flight: int, spec: PoolSpec = SPEC, **state: float) -> object:
    signal = Signal(pool="gpu", action=OUT, source=Source.ALERTMANAGER, value=value)
    return decide(signal, spec, PoolState(name="gpu", **state), CloudStatus(current=current), NOW, (),  # type: ignore[arg-type]
                  PoolFacts(in_flight=in_flight, in_flight_how="scale-outs of the last 8m"))


@pytest.mark.parametrize(("value", "current", "in_flight", "outcome", "to", "words"), [
    pytest.param(16.0, 2, 0, Outcome.SCALED, 4, "2 - 0 in flight + ceil(16 GPUs / 8) = 4", id="two-nodes-of-demand"),
    pytest.param(17.0, 2, 0, Outcome.SCALED, 5, "ceil(17 GPUs / 8) = 5", id="partial-node-rounds-up"),
    pytest.param(1.0, 3, 0, Outcome.SCALED, 4, "ceil(1 GPUs / 8) = 4", id="one-gpu-one-node"),
    pytest.param(16.0, 4, 2, Outcome.SKIPPED_LIMIT, 4, "2 node(s) in flight already cover it",
                 id="in-flight-covers-same-demand"),
    pytest.param(24.0, 4, 2, Outcome.SCALED, 5, "4 - 2 in flight + ceil(24 GPUs / 8) = 5",
                 id="in-flight-covers-part"),
    pytest.param(64.0, 2, 8, Outcome.SCALED, 8, "2 - 2 in flight", id="in-flight-capped-at-current"),
    pytest.param(0.0, 3, 0, Outcome.SKIPPED_LIMIT, 3, "nothing is waiting", id="no-demand-no-change"),
    pytest.param(200.0, 3, 0, Outcome.SCALED, 12, "clamped to max 12", id="clamped-to-max"),
    pytest.param(8.0, 12, 0, Outcome.SKIPPED_LIMIT, 12, "already at max (12)", id="already-at-max"),
    pytest.param(8.0, 0, 0, Outcome.SCALED, 1, "0 - 0 in flight + ceil(8 GPUs / 8) = 1", id="from-zero-nodes"),
    pytest.param(None, 3, 0, Outcome.SCALED, 4, "demand mode, but the alert carried no usable value: fixed step",
                 id="no-value-falls-back-to-step"),
    pytest.param(-8.0, 3, 0, Outcome.SCALED, 4, "is negative: fixed step", id="negative-falls-back-to-step"),
    pytest.param(math.nan, 3, 0, Outcome.SCALED, 4, "no usable value: fixed step", id="nan-falls-back-to-step"),
    pytest.param(math.inf, 3, 0, Outcome.SCALED, 4, "no usable value: fixed step", id="inf-falls-back-to-step"),
])
def test_demand_formula(value: float | None, current: int, in_flight: int, outcome: Outcome, to: int,
                        words: str) -> None:
    plan = _decide(value, current, in_flight)
    assert (plan.outcome, plan.to, words in plan.reason) == (outcome, to, True), plan.reason  # type: ignore[attr-defined]
    assert plan.details["in_flight"] == min(in_flight, current)  # type: ignore[attr-defined]


def test_demand_respects_cooldown_and_max_step() -> None:
    held = _decide(32.0, 2, 0, last_scale_out_at=NOW - 60)
    assert held.outcome is Outcome.SKIPPED_COOLDOWN and "cooldown: 240s left" in held.reason  # type: ignore[attr-defined]
    stepped = _decide(80.0, 2, 0, spec=PoolSpec(**{**SPEC.__dict__, "scale_out": DirectionPolicy(
        step=1, cooldown=0, mode=Mode.DEMAND, max_step=3)}))
    assert (stepped.outcome, stepped.to) == (Outcome.SCALED, 5) and "max_step 3" in stepped.reason  # type: ignore[attr-defined]


PROP = PoolSpec(
    name="gpu", provider="simulated", min=1, max=16, dry_run=False,
    scale_out=DirectionPolicy(step=1, cooldown=0, mode=Mode.PROPORTIONAL, target_utilization=70, max_step=8),
    scale_in=DirectionPolicy(step=1, cooldown=0), dedup_window=60,
)


@pytest.mark.parametrize(("value", "current", "in_flight", "outcome", "to", "words"), [
    pytest.param(95.0, 4, 0, Outcome.SCALED, 6, "ceil(4 x 95 / 70) = 6", id="nothing-in-flight"),
    pytest.param(95.0, 6, 2, Outcome.SKIPPED_LIMIT, 6, "already asked for: 6 requested, 2 of them in flight",
                 id="in-flight-already-cover-the-formula"),
    pytest.param(100.0, 5, 1, Outcome.SCALED, 6, "ceil(4 ready x 100 / 70) = 6", id="in-flight-counted-off"),
    pytest.param(100.0, 3, 3, Outcome.SKIPPED_LIMIT, 3, "no node is ready yet and 3 in flight",
                 id="only-in-flight-waits"),
])
def test_proportional_counts_ready_nodes(value: float, current: int, in_flight: int, outcome: Outcome, to: int,
                                         words: str) -> None:
    plan = _decide(value, current, in_flight, spec=PROP)
    assert (plan.outcome, plan.to, words in plan.reason) == (outcome, to, True), plan.reason  # type: ignore[attr-defined]


@pytest.mark.parametrize(("action", "current", "floor", "outcome", "to", "words"), [
    pytest.param(IN, 4, 4, Outcome.SKIPPED_LIMIT, 4, "already at min (4)", id="alert-cannot-go-below-floor"),
    pytest.param(IN, 6, 4, Outcome.SCALED, 5, "scale in 6 -> 5", id="alert-may-go-down-to-floor"),
    pytest.param(OUT, 1, 4, Outcome.SCALED, 4, "clamped to min 4", id="scale-out-lifted-to-floor"),
])
def test_schedule_floor_limits_alerts(action: Action, current: int, floor: int, outcome: Outcome, to: int,
                                      words: str) -> None:
    spec = PoolSpec(**{**PROP.__dict__, "scale_out": DirectionPolicy(step=1, cooldown=0)})
    plan = decide(Signal(pool="gpu", action=action, source=Source.ALERTMANAGER), spec, PoolState(name="gpu"),
                  CloudStatus(current=current), NOW, (), PoolFacts(floor=floor, floor_how="schedule 0 8 * * 1-5"))
    assert (plan.outcome, plan.to, words in plan.reason) == (outcome, to, True), plan.reason
    assert plan.details["floor"] == floor and plan.details["floor_how"] == "schedule 0 8 * * 1-5"


def test_a_floor_signal_skips_cooldown_but_not_backoff() -> None:
    floor = Signal(pool="gpu", action=None, source=Source.SCHEDULE, target=4, floor=True)
    state = PoolState(name="gpu", last_scale_out_at=NOW - 10)
    plan = decide(floor, PROP, state, CloudStatus(current=2), NOW, (), PoolFacts(floor=4))
    assert (plan.outcome, plan.to) == (Outcome.SCALED, 4)
    backing_off = PoolState(name="gpu", failures=1, backoff_until=NOW + 30)
    assert decide(floor, PROP, backing_off, CloudStatus(current=2), NOW).outcome is Outcome.SKIPPED_BACKOFF


BASE = {"server": {"auth": {"bearer_tokens": ["t"]}},
        "pools": [{"name": "gpu", "provider": "simulated", "min": 0, "max": 8}]}


def _pool(**keys: object) -> dict[str, object]:
    return {**BASE, "pools": [{**BASE["pools"][0], **keys}]}  # type: ignore[index]


def test_config_keys_reach_the_spec() -> None:
    spec = build_settings(_pool(gpus_per_node=8, provision_time="8m", scale_out={"mode": "demand"},
                                schedules=[{"cron": "0 8 * * 1-5", "duration": "11h", "min": 4,
                                            "timezone": "Europe/Warsaw"}]), env={}).pools["gpu"]
    assert (spec.gpus_per_node, spec.provision_time, spec.scale_out.mode) == (8, 480.0, Mode.DEMAND)
    assert spec.schedules[0].duration == 11 * 3600 and spec.schedules[0].timezone == "Europe/Warsaw"
    webhook = {"provider": "webhook", "webhook": {"url": "http://127.0.0.1:9/scale"}}
    default = build_settings(_pool(**webhook), env={}).pools["gpu"]
    assert (default.gpus_per_node, default.provision_time, default.schedules) == (None, 600.0, ())
    # a simulated pool boots its nodes in its own provision_seconds (0: at once), unless provision_time is set
    assert build_settings(_pool(), env={}).pools["gpu"].provision_time == 0.0
    booting = build_settings(_pool(simulated={"provision_seconds": "2m"}), env={}).pools["gpu"]
    assert booting.provision_time == 120.0
    assert build_settings(_pool(provision_time="8m"), env={}).pools["gpu"].provision_time == 480.0


@pytest.mark.parametrize(("keys", "problem"), [
    pytest.param({"scale_in": {"mode": "demand"}}, "pools[0].scale_in.mode: `demand` sizes scale-outs only",
                 id="demand-is-scale-out-only"),
    pytest.param({"gpus_per_node": 0}, "pools[0].gpus_per_node", id="gpus-per-node-positive"),
    pytest.param({"scale_out": {"mode": "demand"}},
                 "pools[0].gpus_per_node: required with scale_out.mode demand", id="demand-needs-gpus-per-node"),
    pytest.param({"schedules": [{"cron": "0 8 * *", "duration": "1h", "min": 1}]},
                 "pools[0].schedules[0].cron: '0 8 * *' is not a five-field cron expression", id="bad-cron"),
    pytest.param({"schedules": [{"cron": "0 8 * * *", "duration": "1h", "min": 1, "timezone": "Mars/Olympus"}]},
                 "pools[0].schedules[0].timezone: 'Mars/Olympus' is not an IANA time zone", id="bad-zone"),
    pytest.param({"schedules": [{"cron": "0 8 * * *", "duration": 0, "min": 1}]},
                 "pools[0].schedules[0].duration: must be more than 0", id="zero-duration"),
    pytest.param({"schedules": [{"cron": "0 8 * * *", "duration": "1h", "min": 9}]},
                 "pools[0].schedules[0].min: must be <= max (8)", id="floor-above-max"),
])
def test_config_problems_name_their_path(keys: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_settings(_pool(**keys), env={})
    assert any(problem in p for p in err.value.problems), err.value.problems
