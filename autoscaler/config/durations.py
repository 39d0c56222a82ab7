"""Time as text: durations in config (integer seconds or strings like ``90s``, ``5m``, ``1h``, ``30d``) and
timestamps as the API, the events and Alertmanager-shaped payloads write them (RFC 3339)."""
from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Annotated, Any

from pydantic import BeforeValidator

#: The longest wait passed on to a sender in ``Retry-After`` (and taken from a cloud's): a day. A cloud asking for
#: ``inf`` or 1e12 seconds asks for "much later", not for Alertmanager to wait 30,000 years.
MAX_RETRY_AFTER = 86400.0
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(value: Any) -> float:
    """Seconds from an int/float or a string such as ``5m``; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("must be a duration such as 90, 90s, 5m or 1h")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):  # YAML's .nan / .inf: nan compares false with everything, so a window
            raise ValueError("must be a finite duration")  # check against it would pass anything
        if value < 0:
            raise ValueError("must not be negative")
        return float(value)
    if isinstance(value, str):
        match = _PATTERN.match(value)
        if match:
            seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
            if not math.isfinite(seconds):
                raise ValueError("must be a finite duration")
            return seconds
    raise ValueError(f"must be a duration such as 90, 90s, 5m or 1h, not {value!r}")


Duration = Annotated[float, BeforeValidator(parse_duration)]


def rfc3339(ts: float) -> str:
    """UTC time in RFC 3339 with milliseconds."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def bounded_wait(seconds: float | None) -> float | None:
    """A wait a cloud asked for, within ``[0, MAX_RETRY_AFTER]``; None for none or NaN."""
    if seconds is None or math.isnan(seconds):
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER)


def retry_after_header(seconds: float) -> str:
    """A ``Retry-After`` value: whole seconds, at least 1 and at most :data:`MAX_RETRY_AFTER` (NaN: 1)."""
    if math.isnan(seconds):
        return "1"
    return str(math.ceil(min(max(seconds, 1.0), MAX_RETRY_AFTER)))
