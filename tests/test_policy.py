"""The decision as a pure function, case by case."""
from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.models import (Action, CloudLimits, CloudStatus, DirectionPolicy, Outcome, PoolSpec, PoolState, Signal,
                               Source)
from autoscaler.policy import backoff_seconds, cooldown_remaining, decide, settled

NOW = 10_000.0
SPEC = PoolSpec(name="gpu", provider="simulated", min=1, max=6, dry_run=False,
                scale_out=DirectionPolicy(step=1, cooldown=300),
                scale_in=DirectionPolicy(step=1, cooldown=900, delay_after_scale_out=600),
                dedup_window=600)
STATE = PoolState(name="gpu")
OUT = Signal(pool="gpu", action=Action.SCALE_OUT, source=Source.ALERTMANAGER)
IN = Signal(pool="gpu", action=Action.SCALE_IN, source=Source.ALERTMANAGER)


def cloud(n: int | None, busy: bool = False) -> CloudStatus:
    return CloudStatus(current=n, busy=busy, detail="Scaling" if busy else "")


CASES = [
    pytest.param(OUT, SPEC, STATE, cloud(2), Outcome.SCALED, 3, id="scale-out-one-step"),
    pytest.param(replace(OUT, step=3), SPEC, STATE, cloud(2), Outcome.SCALED, 5, id="alert-step-label-used"),
    pytest.param(replace(OUT, step=10), SPEC, STATE, cloud(2), Outcome.SCALED, 6, id="clamped-to-max"),
    pytest.param(OUT, SPEC, STATE, cloud(6), Outcome.SKIPPED_LIMIT, 6, id="already-at-max"),
    pytest.param(IN, SPEC, STATE, cloud(1), Outcome.SKIPPED_LIMIT, 1, id="already-at-min"),
    pytest.param(OUT, SPEC, STATE, cloud(9), Outcome.SKIPPED_LIMIT, 9, id="above-max-never-moves-other-way"),
    pytest.param(IN, SPEC, STATE, cloud(0), Outcome.SKIPPED_LIMIT, 0, id="below-min-scale-in-refused"),
    pytest.param(replace(IN, step=5), SPEC, STATE, cloud(4), Outcome.SCALED, 1, id="scale-in-clamped-to-min"),
    pytest.param(OUT, SPEC, replace(STATE, last_scale_out_at=NOW - 100), cloud(2), Outcome.SKIPPED_COOLDOWN, 2,
                 id="cooldown-blocks-second-scale-out"),
    pytest.param(OUT, SPEC, replace(STATE, last_scale_out_at=NOW - 300), cloud(2), Outcome.SCALED, 3,
                 id="cooldown-over-exactly"),
    pytest.param(IN, SPEC, replace(STATE, last_scale_out_at=NOW - 400), cloud(3), Outcome.SKIPPED_COOLDOWN, 3,
                 id="delay-after-scale-out-blocks-scale-in"),
    pytest.param(IN, SPEC, replace(STATE, last_scale_out_at=NOW - 700), cloud(3), Outcome.SCALED, 2,
                 id="scale-in-after-delay"),
    pytest.param(IN, SPEC, replace(STATE, last_scale_in_at=NOW - 800), cloud(3), Outcome.SKIPPED_COOLDOWN, 3,
                 id="scale-in-cooldown"),
    pytest.param(OUT, SPEC, replace(STATE, last_scale_in_at=NOW - 10), cloud(3), Outcome.SCALED, 4,
                 id="scale-in-cooldown-does-not-block-scale-out"),
    pytest.param(replace(OUT, force=True), SPEC, replace(STATE, last_scale_out_at=NOW - 10), cloud(2), Outcome.SCALED,
                 3, id="force-skips-cooldown"),
    pytest.param(OUT, SPEC, replace(STATE, paused=True, pause_reason="maintenance"), cloud(2),
                 Outcome.SKIPPED_PAUSED, 2, id="paused"),
    pytest.param(replace(OUT, force=True), SPEC, replace(STATE, paused=True), cloud(2), Outcome.SKIPPED_PAUSED, 2,
                 id="force-never-beats-pause"),
    pytest.param(OUT, SPEC, STATE, cloud(2, busy=True), Outcome.SKIPPED_BUSY, 2, id="busy-cloud"),
    pytest.param(OUT, SPEC, replace(STATE, failures=1, backoff_until=NOW + 30), cloud(2), Outcome.SKIPPED_BACKOFF, 2,
                 id="backoff-after-failure"),
    pytest.param(replace(OUT, force=True), SPEC, replace(STATE, failures=1, backoff_until=NOW + 30), cloud(2),
                 Outcome.SCALED, 3, id="force-skips-backoff"),
    pytest.param(OUT, SPEC, replace(STATE, failures=1, backoff_until=NOW - 1), cloud(2), Outcome.SCALED, 3,
                 id="backoff-over"),
    pytest.param(OUT, replace(SPEC, dry_run=True), STATE, cloud(2), Outcome.DRY_RUN, 3, id="dry-run-acts-on-nothing"),
    pytest.param(OUT, replace(SPEC, dry_run=True), replace(STATE, last_scale_out_at=NOW - 1), cloud(2),
                 Outcome.SKIPPED_COOLDOWN, 2, id="dry-run-still-honours-cooldown"),
    pytest.param(replace(OUT, action=None, target=5), SPEC, STATE, cloud(2), Outcome.SCALED, 5, id="target-up"),
    pytest.param(replace(OUT, action=None, target=1), SPEC, STATE, cloud(4), Outcome.SCALED, 1, id="target-down"),
    pytest.param(replace(OUT, action=None, target=0), SPEC, STATE, cloud(4), Outcome.SCALED, 1,
                 id="target-clamped-to-min"),
    pytest.param(replace(OUT, action=None, target=2), SPEC, STATE, cloud(2), Outcome.SKIPPED_LIMIT, 2,
                 id="target-equals-current"),
    pytest.param(OUT, SPEC, STATE, cloud(None), Outcome.FAILED, None, id="unknown-size"),
]

EKS = CloudLimits(low=1, high=4, owner="EKS node group gpu", low_name="minSize", high_name="maxSize")
GKE = CloudLimits(low=0, high=3000, owner="GKE node pool gpu", multiple_of=3, multiple_why="3 zones")


def limited(n: int, limits: CloudLimits) -> CloudStatus:
    return CloudStatus(current=n, limits=limits)


CLOUD_LIMIT_CASES = [
    pytest.param(OUT, limited(3, EKS), Outcome.SCALED, 4, "", id="inside-node-group-limits"),
    pytest.param(OUT, limited(4, EKS), Outcome.SKIPPED_LIMIT, 4, "above the EKS node group gpu's maxSize (4)",
                 id="above-node-group-max-refused-not-widened"),
    pytest.param(replace(OUT, step=2), limited(3, EKS), Outcome.SKIPPED_LIMIT, 3, "target 5 is above",
                 id="step-past-node-group-max-refused-not-clamped"),
    pytest.param(IN, limited(2, replace(EKS, low=2)), Outcome.SKIPPED_LIMIT, 2, "below the EKS node group gpu's "
                 "minSize (2)", id="below-node-group-min-refused"),
    pytest.param(replace(OUT, step=3), limited(0, GKE), Outcome.SCALED, 3, "", id="multiple-of-zones"),
    pytest.param(OUT, limited(0, GKE), Outcome.SCALED, 3, "rounded from 1 to 3, a multiple of 3: 3 zones",
                 id="scale-out-rounded-up-to-the-zones"),
    pytest.param(IN, limited(6, GKE), Outcome.SCALED, 3, "rounded from 5 to 3", id="scale-in-rounded-down"),
    pytest.param(replace(OUT, step=2), limited(3, replace(GKE, multiple_of=2)), Outcome.SCALED, 6,
                 "rounded from 5 to 6", id="uneven-zones-after-a-removal-evened-out"),
    pytest.param(replace(OUT, step=2), limited(3, replace(GKE, multiple_of=2, high=4)), Outcome.SCALED, 4,
                 "rounded from 5 to 4", id="rounded-down-when-up-is-past-the-cloud-max"),
    pytest.param(OUT, limited(4, replace(GKE, multiple_of=4)), Outcome.SKIPPED_LIMIT, 4,
                 "target 5 is not a multiple of 4 (3 zones)", id="no-multiple-of-zones-inside-max"),
    pytest.param(IN, limited(2, replace(GKE, multiple_of=2)), Outcome.SKIPPED_LIMIT, 2,
                 "target 1 is not a multiple of 2", id="no-multiple-of-zones-above-min"),
    pytest.param(replace(OUT, force=True), limited(4, EKS), Outcome.SKIPPED_LIMIT, 4, "maxSize",
                 id="force-never-beats-cloud-limits"),
]


@pytest.mark.parametrize("signal,status,outcome,to,reason", CLOUD_LIMIT_CASES)
def test_cloud_limits(signal: Signal, status: CloudStatus, outcome: Outcome, to: int, reason: str) -> None:
    plan = decide(signal, SPEC, STATE, status, NOW)
    assert (plan.outcome, plan.to) == (outcome, to), plan.reason
    assert reason in plan.reason


@pytest.mark.parametrize("signal,spec,state,status,outcome,to", CASES)
def test_decide(signal: Signal, spec: PoolSpec, state: PoolState, status: CloudStatus, outcome: Outcome,
                to: int | None) -> None:
    plan = decide(signal, spec, state, status, NOW)
    assert plan.outcome is outcome, plan.reason
    assert plan.to == to
    assert plan.reason  # every decision says why


def test_reason_names_the_numbers() -> None:
    plan = decide(OUT, SPEC, replace(STATE, last_scale_out_at=NOW - 100), cloud(2), NOW)
    assert plan.reason == "scale out cooldown: 200s left"
    plan = decide(OUT, SPEC, STATE, cloud(6), NOW)
    assert plan.reason == "already at max (6): 6 nodes"
    plan = decide(replace(OUT, step=10), SPEC, STATE, cloud(2), NOW)
    assert "clamped to max 6" in plan.reason


def test_scale_in_names_what_holds_it() -> None:
    """delay_after_scale_out (600s) is not the scale-in cooldown (900s): the reason says which one holds."""
    IN = replace(OUT, action=Action.SCALE_IN)
    after_out = decide(IN, SPEC, replace(STATE, last_scale_out_at=NOW - 100), cloud(3), NOW)
    assert after_out.outcome is Outcome.SKIPPED_COOLDOWN
    assert after_out.reason == "scale in held after the last scale-out (delay_after_scale_out): 500s left"
    after_in = decide(IN, SPEC, replace(STATE, last_scale_in_at=NOW - 100, last_scale_out_at=NOW - 500), cloud(3),
                      NOW)
    assert after_in.reason == "scale in cooldown: 800s left"
    settled_one = settled(IN, SPEC, replace(STATE, last_scale_out_at=NOW - 100), NOW, 3)
    assert settled_one is not None and "delay_after_scale_out" in settled_one.reason


def test_backoff_doubles_to_fifteen_minutes() -> None:
    assert [backoff_seconds(n) for n in range(0, 7)] == [0, 60, 120, 240, 480, 900, 900]


def test_cooldown_remaining_per_direction() -> None:
    state = replace(STATE, last_scale_out_at=NOW - 100, last_scale_in_at=NOW - 850)
    assert cooldown_remaining(SPEC, state, NOW) == {"scale_out": 200.0, "scale_in": 500.0}
    assert cooldown_remaining(SPEC, STATE, NOW) == {"scale_out": 0.0, "scale_in": 0.0}


PROPORTIONAL = replace(SPEC, scale_out=DirectionPolicy(mode="proportional", cooldown=300))
SETTLED = [
    pytest.param(OUT, SPEC, replace(STATE, last_scale_out_at=NOW - 100), Outcome.SKIPPED_COOLDOWN,
                 id="inside-the-cooldown"),
    pytest.param(IN, SPEC, replace(STATE, last_scale_out_at=NOW - 400), Outcome.SKIPPED_COOLDOWN,
                 id="inside-delay-after-scale-out"),
    pytest.param(OUT, SPEC, replace(STATE, paused=True, pause_reason="maintenance"), Outcome.SKIPPED_PAUSED,
                 id="paused"),
    pytest.param(replace(OUT, force=True), SPEC, replace(STATE, paused=True), Outcome.SKIPPED_PAUSED,
                 id="paused-even-forced"),
    pytest.param(OUT, SPEC, replace(STATE, last_scale_out_at=NOW - 300), None, id="cooldown-over: read the cloud"),
    pytest.param(OUT, SPEC, STATE, None, id="no-cooldown: read the cloud"),
    pytest.param(replace(OUT, force=True), SPEC, replace(STATE, last_scale_out_at=NOW - 10), None,
                 id="forced: read the cloud"),
    pytest.param(OUT, SPEC, replace(STATE, last_scale_out_at=NOW - 10, failures=1, backoff_until=NOW + 30), None,
                 id="backoff: full decision answers 503"),
    pytest.param(OUT, PROPORTIONAL, replace(STATE, last_scale_out_at=NOW - 10), None,
                 id="proportional: records a recommendation"),
    pytest.param(replace(OUT, action=None, target=5), SPEC, replace(STATE, last_scale_out_at=NOW - 10), None,
                 id="manual target: full decision"),
]


@pytest.mark.parametrize("signal,spec,state,outcome", SETTLED)
def test_settled_short_cut(signal: Signal, spec: PoolSpec, state: PoolState, outcome: Outcome | None) -> None:
    plan = settled(signal, spec, state, NOW, 4)
    assert (plan.outcome if plan else None) == outcome
    if plan is not None:
        assert (plan.from_, plan.to) == (4, 4)
        full = decide(signal, spec, state, cloud(4), NOW)
        assert full.outcome == plan.outcome and full.reason == plan.reason  # the same words as the full decision


def test_a_named_scale_in_is_not_rounded_to_the_zones() -> None:
    """GKE's deleteInstances removes any number of nodes; only a resize is per zone."""
    plan = decide(IN, SPEC, STATE, limited(4, replace(GKE, multiple_of=2)), NOW, named_scale_in=True)
    assert (plan.outcome, plan.to) == (Outcome.SCALED, 3)
    plan = decide(IN, SPEC, STATE, limited(4, replace(GKE, multiple_of=2)), NOW)
    assert (plan.outcome, plan.to) == (Outcome.SCALED, 2)
    plan = decide(OUT, SPEC, STATE, limited(4, replace(GKE, multiple_of=4, high=8)), NOW, named_scale_in=True)
    assert plan.outcome is Outcome.SKIPPED_LIMIT  # a scale-out is still a resize: 5 is no multiple of 4, 8 past max
