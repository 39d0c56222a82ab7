"""The demand trace: ``timestamp,demand`` rows, one a minute, RFC 3339 UTC, demand in nodes' worth of work."""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import IO, Iterable, Iterator

from autoscaler.config.common import MAX_NODES

HEADER = ["timestamp", "demand"]
STEP = 60.0
#: The most demand a trace may hold, in nodes: the largest ``max`` a pool may have (``settings.common.MAX_NODES``).
#: More is no pool's demand but a unit mistake, and the replay's cluster has a pod per GPU of it.
MAX_DEMAND = float(MAX_NODES)
#: The longest line a trace may have, in bytes (its line ending aside): a row (``2025-01-06T00:00:00Z,12.5``) is
#: about 30.
MAX_LINE = 1024
#: The most rows (minutes) a trace may hold: a leap year. A replay keeps every minute's figures and the tuner
#: replays its span hundreds of times, so a longer file is a mistake (or a file that never ends) to refuse at its
#: first row over the cap, not a history to read whole: tune on a week or a few (docs/tuning.md).
MAX_DAYS = 366
MAX_MINUTES = MAX_DAYS * 1440
#: What a row holds, as a line too long says it.
ROW_IS = "a row is a timestamp and a number"


class ReplayError(Exception):
    """A bad trace or config: the message names the file and the line or key."""


@dataclass(frozen=True)
class Trace:
    """Demand per minute from ``start`` (Unix seconds)."""

    start: float
    demand: tuple[float, ...]

    @property
    def end(self) -> float:
        return self.start + STEP * len(self.demand)

    def at(self, t: float) -> float:
        """Demand of the minute that holds ``t`` (0 outside the trace)."""
        index = int((t - self.start) // STEP)
        return self.demand[index] if 0 <= index < len(self.demand) else 0.0


def parse_time(text: str) -> float:
    """Unix seconds from an RFC 3339 UTC time such as ``2025-01-01T00:00:00Z``; ValueError otherwise."""
    parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if parsed.tzinfo is None or parsed.utcoffset() != timezone.utc.utcoffset(None):
        raise ValueError("must be UTC (end it with Z)")
    return parsed.timestamp()


def _row(path: str, line: int, row: list[str], previous: float | None) -> tuple[float, float]:
    where = f"{path} line {line}"
    if len(row) != 2:
        raise ReplayError(f"{where}: expected 2 columns (timestamp,demand), got {len(row)}")
    try:
        ts = parse_time(row[0])
    except ValueError as exc:
        raise ReplayError(f"{where}: timestamp {row[0]!r} is not an RFC 3339 UTC time ({exc})") from None
    try:
        demand = float(row[1])
    except ValueError:
        raise ReplayError(f"{where}: demand {row[1]!r} is not a number") from None
    if not math.isfinite(demand) or demand < 0:
        raise ReplayError(f"{where}: demand {row[1]!r} must be a finite number >= 0")
    if demand > MAX_DEMAND:
        raise ReplayError(f"{where}: demand {row[1]!r} is beyond what any pool could hold ({MAX_DEMAND:g} nodes; "
                          "demand is in nodes' worth of work, not GPUs)")
    if previous is not None and ts - previous != STEP:
        raise ReplayError(f"{where}: timestamp {row[0]} is not 60 s after the previous row (one row a minute)")
    return ts, demand


def bounded_lines(fh: IO[bytes], path: str, row: str = ROW_IS) -> Iterator[str]:
    """The file's lines as text, each read with a bound: a line longer than MAX_LINE bytes is refused once that much
    is read, never held whole (a 300 MB line took 574 MiB before the error); ``row`` says what a row holds."""
    line = 1
    while True:
        raw = fh.readline(MAX_LINE + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
            raise _too_long(path, line, row)
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ReplayError(f"{path} line {line}: not UTF-8 text ({exc.reason})") from None
        line += 1


def _too_long(path: str, line: int, row: str = ROW_IS) -> ReplayError:
    return ReplayError(f"{path} line {line}: longer than {MAX_LINE} bytes ({row})")


def parse_trace(lines: Iterable[str], path: str) -> Trace:
    """Check rows as they come and keep only their demand: the first bad row is refused at once, naming its line,
    without reading what follows (a 1.5-million-row trace whose line 2 was bad took 276 MiB before the error)."""
    start: float | None = None
    previous: float | None = None
    demand: list[float] = []
    line = 0
    for line, text in enumerate(lines, start=1):
        if len(text) > MAX_LINE + 2:  # + a line ending; a file's lines were bounded as they were read
            raise _too_long(path, line)
        try:
            row = next(csv.reader([text]), [])
        except csv.Error as exc:
            raise ReplayError(f"{path} line {line}: not a CSV row: {exc}") from None
        if line == 1:
            if [c.strip() for c in row] != HEADER:
                raise ReplayError(f"{path} line 1: expected the header timestamp,demand, got {','.join(row)!r}")
            continue
        if not row or all(not c.strip() for c in row):
            continue
        if len(demand) == MAX_MINUTES:
            raise ReplayError(f"{path} line {line}: more than {MAX_MINUTES:,} rows ({MAX_DAYS} days of minutes); "
                              "replay or tune a shorter span of it")
        previous, value = _row(path, line, row, previous)
        start = previous if start is None else start
        demand.append(value)
    if line == 0:
        raise ReplayError(f"{path} line 1: expected the header timestamp,demand, got 'an empty file'")
    if start is None:
        raise ReplayError(f"{path}: no rows after the header")
    return Trace(start=start, demand=tuple(demand))


def load_trace(path: str) -> Trace:
    """Read and check a trace, row by row; ReplayError names the line of the first problem."""
    try:
        with open(path, "rb") as fh:
            return parse_trace(bounded_lines(fh, path), path)
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read: {exc.strerror}") from None
