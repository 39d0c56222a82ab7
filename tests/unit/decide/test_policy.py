"""The decision as a pure function, case by case."""
from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.models import (Action, CloudLimits, CloudStatus, DirectionPolicy, Headroom, Mode, Outcome, PoolFacts,
                               PoolSpec, PoolState, Schedule, Signal, Source)
from autoscaler.decide.policy import backoff_seconds, cooldown_remaining, decide, shortcut

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
    settled_one = shortcut(IN, SPEC, replace(STATE, last_scale_out_at=NOW - 100), NOW, 3)
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
    plan = shortcut(signal, spec, state, NOW, 4)
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


# -- headroom: spare ready capacity kept above need ------------------------------------------------------------
WIDE = replace(SPEC, max=12, gpus_per_node=8)
ROOM2 = Headroom(nodes=2)
DEMAND_OUT = replace(WIDE, scale_out=DirectionPolicy(mode=Mode.DEMAND, cooldown=60, headroom=ROOM2))
PROP_OUT = replace(WIDE, scale_out=DirectionPolicy(mode=Mode.PROPORTIONAL, target_utilization=80, cooldown=60,
                                                   headroom=ROOM2))
STEP_ROOM = replace(WIDE, scale_out=DirectionPolicy(step=1, cooldown=60, headroom=ROOM2))
FACTS = PoolFacts()
WINDOW = "schedule '0 8 * * *' (UTC) opened 2025-01-06 08:00 UTC"


def room(spec: PoolSpec, headroom: Headroom) -> PoolSpec:
    return replace(spec, scale_out=replace(spec.scale_out, headroom=headroom))


HEADROOM_CASES = [
    # demand mode: target = need + headroom (need: the ready nodes, all taken, + the pending GPUs)
    pytest.param(replace(OUT, value=16), DEMAND_OUT, cloud(4), FACTS, Outcome.SCALED, 8, True,
                 id="demand: 4 ready + 16 GPUs (2 nodes) + 2 spare"),
    pytest.param(replace(OUT, value=16), replace(DEMAND_OUT, scale_out=DirectionPolicy(mode=Mode.DEMAND)),
                 cloud(4), FACTS, Outcome.SCALED, 6, False, id="demand without headroom: need only"),
    pytest.param(replace(OUT, value=16), room(DEMAND_OUT, Headroom(gpus=12)), cloud(4), FACTS, Outcome.SCALED, 8,
                 True, id="demand: 12 GPUs of headroom round up to 2 nodes"),
    pytest.param(replace(OUT, value=16), room(DEMAND_OUT, Headroom(fraction=0.5)), cloud(4), FACTS,
                 Outcome.SCALED, 9, True, id="demand: half of the need of 6 nodes spare"),
    pytest.param(replace(OUT, value=16), DEMAND_OUT, cloud(6), PoolFacts(in_flight=2), Outcome.SCALED, 8, True,
                 id="demand: nodes in flight cover the need, not the headroom"),
    pytest.param(replace(OUT, value=16), DEMAND_OUT, cloud(8), PoolFacts(in_flight=4), Outcome.SKIPPED_LIMIT, 8,
                 False, id="demand: in flight cover need and headroom"),
    pytest.param(replace(OUT, value=80), DEMAND_OUT, cloud(4), FACTS, Outcome.SCALED, 12, False,
                 id="demand: clamped at max, never above it"),
    # utilisation modes: the floor under the target (need: ready x utilisation)
    pytest.param(replace(OUT, value=90), PROP_OUT, cloud(4), FACTS, Outcome.SCALED, 6, True,
                 id="proportional: formula 5, floor 3.6 + 2 = 6"),
    pytest.param(replace(OUT, value=90), room(PROP_OUT, Headroom(nodes=0)), cloud(4), FACTS, Outcome.SCALED, 5,
                 False, id="proportional: the formula alone without headroom"),
    pytest.param(replace(OUT, value=100), STEP_ROOM, cloud(4), FACTS, Outcome.SCALED, 6, True,
                 id="step: +1 is 5, floor 4 + 2 = 6"),
    pytest.param(replace(OUT, value=100), replace(STEP_ROOM, max=5), cloud(4), FACTS, Outcome.SCALED, 5, False,
                 id="step: floor clamped at max"),
    pytest.param(OUT, STEP_ROOM, cloud(4), FACTS, Outcome.SCALED, 5, False,
                 id="step: no value, need unknown: the step alone"),
    # scale-in stops at it
    pytest.param(replace(IN, value=60), STEP_ROOM, cloud(5), FACTS, Outcome.SKIPPED_LIMIT, 5, True,
                 id="scale-in: need 3 + 2 spare = 5 stops it"),
    pytest.param(replace(IN, value=30, step=3), STEP_ROOM, cloud(6), FACTS, Outcome.SCALED, 4, True,
                 id="scale-in: step 3 to 3 stopped at 1.8 + 2 -> 4"),
    pytest.param(replace(IN, value=20), STEP_ROOM, cloud(6), FACTS, Outcome.SCALED, 5, False,
                 id="scale-in: far above the floor, untouched"),
    pytest.param(replace(IN, value=60), STEP_ROOM, cloud(5), PoolFacts(used=1.0, used_how="the cluster: …"),
                 Outcome.SCALED, 4, False, id="scale-in: the cluster's 1 node of requested GPUs + 2 = 3"),
    pytest.param(replace(IN, value=60), STEP_ROOM, cloud(5), PoolFacts(used=3.5, used_how="the cluster: …"),
                 Outcome.SKIPPED_LIMIT, 5, True, id="scale-in: the cluster's 3.5 nodes requested + 2 stops it"),
    # per schedule window: a window's headroom replaces the pool's
    pytest.param(replace(IN, value=60), STEP_ROOM, cloud(5), PoolFacts(headroom=Headroom(nodes=0),
                                                                      headroom_how=WINDOW),
                 Outcome.SCALED, 4, False, id="window lowers headroom to 0: scale-in goes on"),
    pytest.param(replace(IN, value=20), STEP_ROOM, cloud(6), PoolFacts(headroom=Headroom(nodes=5),
                                                                      headroom_how=WINDOW),
                 Outcome.SKIPPED_LIMIT, 6, True, id="window raises headroom to 5: scale-in stops"),
    pytest.param(replace(OUT, value=16), DEMAND_OUT, cloud(4), PoolFacts(headroom=Headroom(nodes=4),
                                                                        headroom_how=WINDOW),
                 Outcome.SCALED, 10, True, id="window raises demand mode's headroom to 4"),
]


@pytest.mark.parametrize("signal,spec,status,facts,outcome,to,shaped", HEADROOM_CASES)
def test_headroom(signal: Signal, spec: PoolSpec, status: CloudStatus, facts: PoolFacts, outcome: Outcome,
                  to: int, shaped: bool) -> None:
    plan = decide(signal, spec, STATE, status, NOW, facts=facts)
    assert (plan.outcome, plan.to) == (outcome, to), plan.reason
    assert ("headroom" in plan.reason) is shaped, plan.reason  # the reason says when headroom shaped it
    if shaped and facts.headroom_how:
        assert WINDOW in plan.reason


# the scale-in's floor held at the highest floor seen within scale_in.stabilization_window (default 300 s): the
# reconciler remembers each floor it reads from the cluster; STEP_ROOM scales in by step 1 from 5, need 1 + 2 = 3
USED1 = PoolFacts(used=1.0, used_how="the cluster: …")
STABILIZED_CASES = [
    pytest.param((), Outcome.SCALED, 4, id="no floor remembered: step 1 to 4, above the floor 3"),
    pytest.param(((NOW - 120, 5),), Outcome.SKIPPED_LIMIT, 5,
                 id="floor 5 two minutes ago, need since dipped: held at 5"),
    pytest.param(((NOW - 120, 4), (NOW - 60, 3)), Outcome.SCALED, 4,
                 id="highest in the window 4: step 1 to 4 goes on"),
    pytest.param(((NOW - 301, 6), (NOW - 200, 3)), Outcome.SCALED, 4,
                 id="floor 6 just out of the 300 s window: forgotten"),
    pytest.param(((NOW - 10, 20),), Outcome.SKIPPED_LIMIT, 5, id="a floor above max is held at max, above current"),
]


@pytest.mark.parametrize("recent,outcome,to", STABILIZED_CASES)
def test_scale_in_holds_the_highest_headroom_floor_of_its_window(recent: tuple[tuple[float, int], ...],
                                                                  outcome: Outcome, to: int) -> None:
    plan = decide(replace(IN, value=60), STEP_ROOM, STATE, cloud(5), NOW, recent, USED1)
    assert (plan.outcome, plan.to) == (outcome, to), plan.reason
    held = outcome is Outcome.SKIPPED_LIMIT
    assert ("stabilization window" in plan.reason) is held, plan.reason
    if held:
        assert plan.details["headroom"]["stabilized_from"] == 3  # what the cluster alone would have kept


def test_scale_out_is_not_held_by_remembered_floors() -> None:
    """Only a scale-in is held: a scale-out sizes to the floor of now (the higher floor of minutes ago is gone)."""
    plan = decide(replace(OUT, value=100), STEP_ROOM, STATE, cloud(2), NOW, ((NOW - 60, 9),), USED1)
    assert (plan.outcome, plan.to) == (Outcome.SCALED, 3), plan.reason


def test_a_manual_target_is_not_raised_by_headroom() -> None:
    plan = decide(replace(OUT, action=None, target=3, value=100), STEP_ROOM, STATE, cloud(6), NOW)
    assert (plan.outcome, plan.to) == (Outcome.SCALED, 3)


def test_window_headroom_in_force_only_inside_the_window() -> None:
    from autoscaler.decide.schedules import effective_headroom

    window = Schedule(cron="0 8 * * *", duration=3600, min=0, headroom=Headroom(nodes=5))
    spec = replace(STEP_ROOM, schedules=(window,))
    at_eight_thirty = 1736152200.0  # 2025-01-06 08:30 UTC
    assert effective_headroom(spec, at_eight_thirty)[0] == Headroom(nodes=5)
    assert effective_headroom(spec, at_eight_thirty + 3600) == (ROOM2, "")
