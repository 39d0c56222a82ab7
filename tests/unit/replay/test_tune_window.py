"""The tuner's busy-hours headroom window: found in the history's surges, searched, written as a schedule window the
service keeps, and replayed as cheaply as a pool without one."""
from __future__ import annotations

import random
from typing import Any

import pytest
import yaml

from autoscaler.config.load import build_settings
from autoscaler.models import Headroom, Schedule
from autoscaler.replay.report import figures
from autoscaler.replay.sim import simulate
from autoscaler.replay.space import Space, apply, busy_windows, describe, window_schedule
from autoscaler.replay.trace import Trace, parse_time
from autoscaler.replay.yaml_edit import edit
from autoscaler.decide.schedules import _KNOWN, effective_headroom, last_start
from autoscaler.store.memory import MemoryStore
from tests.support.replay_cases import BASE

T0 = parse_time("2025-01-06T00:00:00Z")  # a midnight, UTC
DAY = 1440


def _day(surges: list[tuple[int, float]], level: float = 2.0) -> list[float]:
    """A flat day with a surge of ``height`` nodes (over 5 minutes, lasting 30) starting at each given minute."""
    out = [level] * DAY
    for start, height in surges:
        for m in range(start, min(DAY, start + 30)):
            out[m] += height * min(1.0, (m - start + 1) / 5)
    return out


@pytest.mark.parametrize("demand,windows", [
    pytest.param(_day([(9 * 60 + 20, 3.0), (11 * 60 + 20, 3.0), (13 * 60 + 20, 3.0), (16 * 60 + 20, 3.0)]),
                 ("09-14", "09-17"), id="office-hours-surges-three-quarters-then-all"),
    pytest.param(_day([(23 * 60 + 10, 3.0), (1 * 60 + 10, 3.0), (2 * 60 + 10, 3.0)]), ("23-03",),
                 id="a-night-window-wraps-midnight"),
    pytest.param(_day([(h * 60, 2.0) for h in range(0, 24, 2)]), (), id="surges-at-every-hour-no-window"),
    pytest.param([2.0 + 0.1 * (m % 3) for m in range(DAY)], (), id="no-surge-no-window"),
])
def test_busy_windows(demand: list[float], windows: tuple[str, ...]) -> None:
    assert busy_windows(demand, T0) == windows


@pytest.mark.parametrize("hours,cron,duration", [
    pytest.param("08-18", "0 8 * * *", "10h", id="day"),
    pytest.param("22-06", "0 22 * * *", "8h", id="across-midnight"),
])
def test_window_schedule(hours: str, cron: str, duration: str) -> None:
    assert window_schedule(hours, {"nodes": 2}) == {"cron": cron, "duration": duration, "headroom": {"nodes": 2}}


def test_a_window_candidate_is_a_schedule_the_service_keeps() -> None:
    raw = yaml.safe_load(BASE)
    base = build_settings(raw, env={})
    cand = {**describe(base, "gpu", ("08-18",)), "window.hours": "08-18", "window.headroom": {"nodes": 3}}
    spec = build_settings(apply(raw, "gpu", cand), env={}).pools["gpu"]
    assert spec.schedules == (Schedule("0 8 * * *", 36000.0, 0, "UTC", Headroom(nodes=3)),)
    assert effective_headroom(spec, T0 + 9 * 3600)[0] == Headroom(nodes=3)
    assert effective_headroom(spec, T0 + 19 * 3600)[0] is None  # outside: the pool's own (none in BASE)
    # no window (None): nothing written, the base's schedules (none) kept
    plain = build_settings(apply(raw, "gpu", describe(base, "gpu", ("08-18",))), env={})
    assert plain.pools == base.pools


def test_the_search_moves_the_window_and_every_candidate_is_valid() -> None:
    raw, settings = yaml.safe_load(BASE), build_settings(yaml.safe_load(BASE), env={})
    space, rng = Space(settings, "gpu", ("09-17", "08-18")), random.Random(3)
    seen = set()
    for _ in range(120):
        cand = space.sample(rng)
        for c in (cand, space.mutate(rng, cand)):
            spec = build_settings(apply(raw, "gpu", c), env={}).pools["gpu"]
            assert len(spec.schedules) == (c["window.headroom"] is not None)
            if c["window.headroom"] is None:
                assert c["window.hours"] is None  # one form for "no window"
            seen.add((c["window.hours"], repr(c["window.headroom"])))
    assert len(seen) > 8


def test_a_pool_with_schedules_of_its_own_gets_no_window() -> None:
    raw = yaml.safe_load(BASE)
    raw["pools"][0]["schedules"] = [{"cron": "0 9 * * 1-5", "duration": "8h", "min": 4}]
    settings = build_settings(raw, env={})
    assert Space(settings, "gpu", ("08-18",)).windows == ()
    assert "window.headroom" not in describe(settings, "gpu", ())


def test_tuned_yaml_gains_the_window_with_its_comments_kept() -> None:
    raw = yaml.safe_load(BASE)
    tuned = apply(raw, "gpu", {"window.hours": "08-18", "window.headroom": {"fraction": 0.25}})
    out = edit(BASE, tuned, "gpu", ["schedules"], [])
    assert out is not None and yaml.safe_load(out) == tuned
    assert "# the base file's own comment, kept in tuned.yaml" in out


def _replay(raw: dict[str, Any], demand: list[float]) -> tuple[dict[str, Any], int]:
    run = simulate(build_settings(raw, env={}, replay=True), Trace(T0, tuple(demand)), store=MemoryStore())
    return figures(run), run.ticks


def test_a_headroom_only_window_replays_as_the_same_headroom_all_day_without_ticks() -> None:
    """Parity: a window open all day that keeps the pool's own headroom changes no decision, and costs no
    reconciler tick (it raises no floor); a window of more headroom keeps more nodes."""
    demand = _day([(3 * 60, 4.0), (8 * 60, 5.0), (10 * 60, 4.0)])[:14 * 60]
    raw = yaml.safe_load(BASE)
    # sized by the alert's value (the utilisation; BASE's value_ref reads another), to 90%: the headroom decides
    raw["pools"][0]["scale_out"] = {"mode": "proportional", "target_utilization": 90, "max_step": 8,
                                    "cooldown": "3m", "headroom": {"nodes": 1}}
    plain, ticks = _replay(raw, demand)
    assert ticks == 0
    windowed = yaml.safe_load(yaml.safe_dump(raw))
    windowed["pools"][0]["schedules"] = [{"cron": "0 0 * * *", "duration": "24h", "headroom": {"nodes": 1}}]
    same, ticks = _replay(windowed, demand)
    assert ticks == 0 and same == plain
    windowed["pools"][0]["schedules"][0]["headroom"] = {"nodes": 3}
    more, _ = _replay(windowed, demand)
    assert more["node_hours"] > plain["node_hours"]


@pytest.mark.parametrize("cron,zone", [
    pytest.param("0 8 * * *", "UTC", id="daily-utc"),
    pytest.param("*/7 3-5 * * 1-5", "UTC", id="every-7-min-weekdays-utc"),
    pytest.param("30 2 * * *", "Europe/Warsaw", id="dst-zone-not-remembered"),
])
def test_last_start_remembered_gives_what_croniter_gives(cron: str, zone: str) -> None:
    window = Schedule(cron, 600.0, 0, zone)
    times = sorted(random.Random(7).uniform(T0, T0 + 20 * 86400) for _ in range(300))
    remembered = [last_start(window, t) for t in times]
    fresh = []
    for t in times:
        _KNOWN.clear()
        fresh.append(last_start(window, t))
    assert remembered == fresh
    assert all(start <= t for start, t in zip(remembered, times))
