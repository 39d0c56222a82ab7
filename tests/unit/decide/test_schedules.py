"""Schedule floors: ``effective_min(spec, now)`` as a table, across DST changes (Europe/Warsaw), windows that span
midnight and overlapping windows."""
from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from autoscaler.models import DirectionPolicy, PoolSpec, Schedule
from autoscaler.decide.schedules import effective_min

WAW = "Europe/Warsaw"
OFFICE = Schedule("0 8 * * 1-5", 11 * 3600, 4, WAW)
NIGHT = Schedule("0 22 * * *", 8 * 3600, 2, WAW)
FRIDAY_NIGHT = Schedule("0 22 * * 5", 8 * 3600, 3, WAW)
SKIPPED_HOUR = Schedule("30 2 * * *", 3600, 3, WAW)
REPEATED_HOUR = Schedule("30 2 * * *", 1800, 3, WAW)
BATCH = Schedule("0 12 * * *", 4 * 3600, 6, WAW)


def spec(*windows: Schedule, low: int = 1, high: int = 10) -> PoolSpec:
    return PoolSpec(name="gpu", provider="simulated", min=low, max=high, dry_run=False, scale_out=DirectionPolicy(),
                    scale_in=DirectionPolicy(), dedup_window=60, schedules=windows)


def local(text: str) -> float:
    """A Warsaw wall-clock time that exists once (not in a DST gap or fold)."""
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(WAW)).timestamp()


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(("pool", "now", "floor"), [
    pytest.param(spec(OFFICE), local("2025-01-06 07:59"), 1, id="monday-before-office-hours"),
    pytest.param(spec(OFFICE), local("2025-01-06 08:00"), 4, id="monday-at-the-window-start"),
    pytest.param(spec(OFFICE), local("2025-01-06 18:59"), 4, id="monday-evening-inside"),
    pytest.param(spec(OFFICE), local("2025-01-06 19:00"), 1, id="monday-at-the-window-end"),
    pytest.param(spec(OFFICE), local("2025-01-11 10:00"), 1, id="saturday-no-window"),
    pytest.param(spec(OFFICE), local("2025-07-07 08:00"), 4, id="summer-time-opens-at-local-8"),
    pytest.param(spec(OFFICE), utc("2025-07-07 05:30"), 1, id="summer-before-local-8"),
    pytest.param(spec(OFFICE), utc("2025-03-31 06:00"), 4, id="first-monday-after-spring-change-local-8"),
    pytest.param(spec(OFFICE), utc("2025-03-31 05:59"), 1, id="spring-monday-local-7-59-is-not-open"),
    pytest.param(spec(OFFICE), utc("2025-10-27 07:00"), 4, id="first-monday-after-autumn-change-local-8"),
    pytest.param(spec(OFFICE), utc("2025-10-27 06:30"), 1, id="autumn-monday-utc-6-30-is-local-7-30"),
    pytest.param(spec(SKIPPED_HOUR), utc("2025-03-30 01:10"), 3, id="spring-start-in-skipped-hour-runs-at-3"),
    pytest.param(spec(SKIPPED_HOUR), utc("2025-03-30 02:05"), 1, id="spring-skipped-hour-window-ends-at-4"),
    pytest.param(spec(REPEATED_HOUR), utc("2025-10-26 00:45"), 3, id="autumn-first-2-30-opens"),
    pytest.param(spec(REPEATED_HOUR), utc("2025-10-26 01:10"), 1, id="autumn-between-the-two-2-30s"),
    pytest.param(spec(REPEATED_HOUR), utc("2025-10-26 01:45"), 3, id="autumn-second-2-30-opens-again"),
    pytest.param(spec(NIGHT), local("2025-01-06 23:00"), 2, id="night-before-midnight"),
    pytest.param(spec(NIGHT), local("2025-01-07 05:59"), 2, id="night-after-midnight"),
    pytest.param(spec(NIGHT), local("2025-01-07 06:00"), 1, id="night-ends-at-6"),
    pytest.param(spec(FRIDAY_NIGHT), local("2025-01-11 03:00"), 3, id="friday-window-still-open-saturday"),
    pytest.param(spec(FRIDAY_NIGHT), local("2025-01-12 03:00"), 1, id="saturday-night-has-none"),
    pytest.param(spec(NIGHT), utc("2025-03-30 04:30"), 2, id="night-across-spring-change-is-8h-elapsed"),
    pytest.param(spec(NIGHT), utc("2025-03-30 05:00"), 1, id="night-across-spring-change-ends-at-local-7"),
    pytest.param(spec(NIGHT), utc("2025-10-26 03:30"), 2, id="night-across-autumn-change-is-8h-elapsed"),
    pytest.param(spec(NIGHT), utc("2025-10-26 03:59"), 2, id="night-across-autumn-change-open-at-local-4-59"),
    pytest.param(spec(NIGHT), utc("2025-10-26 04:00"), 1, id="night-across-autumn-change-ends-at-local-5"),
    pytest.param(spec(OFFICE, BATCH), local("2025-01-06 13:00"), 6, id="overlap-takes-the-highest-min"),
    pytest.param(spec(OFFICE, BATCH), local("2025-01-06 17:00"), 4, id="overlap-after-the-higher-one-ends"),
    pytest.param(spec(OFFICE, BATCH), local("2025-01-11 13:00"), 6, id="overlap-only-the-daily-one"),
    pytest.param(spec(OFFICE, low=5), local("2025-01-06 09:00"), 5, id="pool-min-above-the-schedule"),
    pytest.param(spec(BATCH, high=4), local("2025-01-06 13:00"), 4, id="never-above-max"),
    pytest.param(spec(), local("2025-01-06 13:00"), 1, id="no-schedule"),
])
def test_effective_min(pool: PoolSpec, now: float, floor: int) -> None:
    assert effective_min(pool, now)[0] == floor


def test_reason_names_the_window_in_local_time() -> None:
    floor, how = effective_min(spec(OFFICE), local("2025-07-07 09:00"))
    assert floor == 4
    assert how == ("schedule '0 8 * * 1-5' (Europe/Warsaw) opened 2025-07-07 08:00 CEST, "
                   "min 4 until 2025-07-07 19:00 CEST")
