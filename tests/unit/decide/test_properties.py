"""Properties of the policy, the engine and the parsers, checked with hypothesis."""
from __future__ import annotations

import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.models import Action, CloudStatus, DirectionPolicy, Outcome, PoolSpec, PoolState, Signal, Source
from autoscaler.decide.policy import decide, shortcut
from autoscaler.sources import PayloadError, alertmanager, grafana
from tests.support import AUTH, FakeClock, am_alert, am_payload, make_app

FAST = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
T0 = 1_800_000_000.0


@st.composite
def specs(draw: st.DrawFn) -> PoolSpec:
    low = draw(st.integers(0, 20))
    high = draw(st.integers(low, 40))
    direction = st.builds(DirectionPolicy, step=st.integers(1, 10), cooldown=st.floats(0, 3600),
                          delay_after_scale_out=st.floats(0, 3600))
    return PoolSpec(name="p", provider="simulated", min=low, max=high, dry_run=draw(st.booleans()),
                    scale_out=draw(direction), scale_in=draw(direction), dedup_window=600.0)


optional_time = st.one_of(st.none(), st.floats(T0 - 7200, T0 + 100))
states = st.builds(PoolState, name=st.just("p"), paused=st.booleans(), last_scale_out_at=optional_time,
                   last_scale_in_at=optional_time, failures=st.integers(0, 5), backoff_until=optional_time)
signals = st.builds(Signal, pool=st.just("p"), action=st.sampled_from(list(Action)), source=st.just(Source.MANUAL),
                    step=st.one_of(st.none(), st.integers(1, 1000)), force=st.booleans())
targets = st.builds(Signal, pool=st.just("p"), action=st.none(), source=st.just(Source.MANUAL),
                    target=st.integers(0, 1000), force=st.booleans())


@FAST
@given(spec=specs(), state=states, signal=st.one_of(signals, targets), current=st.integers(0, 60),
       busy=st.booleans(), now=st.floats(T0, T0 + 7200))
def test_a_change_always_lands_inside_min_max(spec: PoolSpec, state: PoolState, signal: Signal, current: int,
                                               busy: bool, now: float) -> None:
    plan = decide(signal, spec, state, CloudStatus(current=current, busy=busy), now)
    if plan.outcome in (Outcome.SCALED, Outcome.DRY_RUN):
        assert plan.to is not None and spec.min <= plan.to <= spec.max
        assert plan.to != current
        assert not state.paused and not busy
    else:
        assert plan.to in (current, None)


@FAST
@given(spec=specs(), state=states, signal=st.one_of(signals, targets), current=st.integers(0, 60),
       busy=st.booleans(), now=st.floats(T0, T0 + 7200), known=st.one_of(st.none(), st.integers(0, 60)))
def test_what_the_stored_state_settles_no_cloud_status_could_turn_into_a_change(
        spec: PoolSpec, state: PoolState, signal: Signal, current: int, busy: bool, now: float,
        known: int | None) -> None:
    """The cooldown/pause short cut (no lease, no cloud read) never hides a change the full decision would make."""
    quick = shortcut(signal, spec, state, now, known)
    if quick is None:
        return
    full = decide(signal, spec, state, CloudStatus(current=current, busy=busy), now)
    assert quick.outcome in (Outcome.SKIPPED_COOLDOWN, Outcome.SKIPPED_PAUSED)
    assert full.outcome not in (Outcome.SCALED, Outcome.DRY_RUN)
    assert quick.retry_after is None and (quick.from_, quick.to) == (known, known)
    if quick.outcome is Outcome.SKIPPED_PAUSED:
        assert full.outcome is Outcome.SKIPPED_PAUSED


steps = st.lists(st.tuples(st.integers(0, 1500), st.sampled_from(["scale_out", "scale_in"])), min_size=1,
                 max_size=12)


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=steps)
def test_no_sequence_of_alerts_scales_inside_a_cooldown(sequence: list[tuple[int, str]]) -> None:
    clock = FakeClock(T0)
    with tempfile.TemporaryDirectory() as tmp:
        client = make_app(f"sqlite:///{tmp}/s.db", clock).test_client()
        for i, (wait, action) in enumerate(sequence):
            clock.advance(wait)
            body = am_payload(am_alert("Load", fingerprint=f"fp{i}", autoscaler_pool="gpu", autoscaler_action=action))
            assert client.post("/webhook/alertmanager", json=body, headers=AUTH).status_code == 200
        events = client.get("/api/v1/events?pool=gpu", headers=AUTH).get_json()["events"]
    scaled = [(e["id"], e["action"], clock_of(e)) for e in reversed(events) if e["outcome"] == "scaled"]
    last: dict[str, float] = {}
    for _, action, at in scaled:  # config: out 5m; in 15m and 10m after an out
        if action == "scale_out":
            assert at - last.get("scale_out", -1e12) >= 300
        else:
            assert at - last.get("scale_in", -1e12) >= 900
            assert at - last.get("scale_out", -1e12) >= 600
        last[action] = at
    assert len(events) == len(sequence)


def clock_of(event: dict[str, Any]) -> float:
    """An event's time as Unix seconds."""
    from datetime import datetime

    return datetime.fromisoformat(event["time"].replace("Z", "+00:00")).timestamp()


@settings(max_examples=20, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(fingerprints=st.lists(st.text("abcdef0123456789", min_size=1, max_size=8), min_size=1, max_size=4,
                             unique=True),
       repeats=st.integers(2, 5), gaps=st.lists(st.integers(0, 590), min_size=5, max_size=5))
def test_dedup_is_idempotent(fingerprints: list[str], repeats: int, gaps: list[int]) -> None:
    clock = FakeClock(T0)
    body = am_payload(*[am_alert("GPUUtilizationHigh", fingerprint=f) for f in fingerprints])
    with tempfile.TemporaryDirectory() as tmp:
        client = make_app(f"sqlite:///{tmp}/s.db", clock).test_client()
        answers = []
        for i in range(repeats):
            clock.now = T0 + min(sum(gaps[:i]), 590)  # all inside the 10 min window
            answers.append(client.post("/webhook/alertmanager", json=body, headers=AUTH).get_json())
        pool = client.get("/api/v1/pools/gpu", headers=AUTH).get_json()
    assert [d["outcome"] for d in answers[0]["decisions"]] == ["scaled"]
    for later in answers[1:]:
        assert [d["outcome"] for d in later["decisions"]] == ["skipped_duplicate"]
    assert pool["current"] == 3


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=30)
ALERT_KEYS = ["status", "labels", "annotations", "startsAt", "fingerprint", "values", "valueString"]
TOP_KEYS = ["alerts", "version", "status", "ruleId", "ruleName", "state", "evalMatches", "tags", "orgId",
            "truncatedAlerts", "title"]
alerts_like = st.dictionaries(st.sampled_from(ALERT_KEYS), json_values, max_size=7)
near_valid = st.dictionaries(st.sampled_from(TOP_KEYS), json_values | st.lists(alerts_like, max_size=3),
                             max_size=8)


@pytest.mark.parametrize("parse", [alertmanager.parse, grafana.parse], ids=["alertmanager", "grafana"])
@settings(max_examples=150, deadline=None, database=None)
@given(body=json_values | near_valid)
def test_parsers_raise_nothing_but_payload_error(parse: Any, body: Any) -> None:
    try:
        note = parse(body, {})
    except PayloadError as exc:
        assert str(exc)
        return
    assert all(a.status in ("firing", "resolved", "ignored") for a in note.alerts)
