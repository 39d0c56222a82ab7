"""Cron expressions as the config takes them (a schedule's ``cron``): checked when the config is loaded, and the
window starts the decisions compute from them (``decide/schedules.py``)."""
from __future__ import annotations

from datetime import datetime, timezone

from croniter import croniter  # type: ignore[import-untyped]

HORIZON = 4 * 366 * 86400.0  # a schedule must start within this (check-config): a leap day does, February 30 not


def valid_cron(expression: str) -> bool:
    """Whether ``expression`` is a five-field cron expression croniter understands."""
    return len(expression.split()) == 5 and bool(croniter.is_valid(expression))


def starts_within(expression: str, now: float, horizon: float = HORIZON) -> bool:
    """Whether the expression (UTC: a time zone shifts a start by hours, not years) starts in ``(now, now +
    horizon]``."""
    try:
        start: datetime = croniter(expression, datetime.fromtimestamp(now, tz=timezone.utc)).get_next(datetime)
    except (ValueError, OverflowError):  # croniter's errors are ValueErrors: it found no start
        return False
    return start.timestamp() <= now + horizon
