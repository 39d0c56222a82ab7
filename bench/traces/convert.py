"""Public production traces -> the replay's demand trace (``timestamp,demand``, one row a minute, nodes' worth of work).

Two kinds of source, one method each (docs/tuning.md, "Real weeks"):

- requests (a serving trace: each request's arrival and its GPU time): **GPUs busy**. A request holds one GPU from
  its arrival for its execution time (a GPU serves one request at a time: batch 1, as diffusion serving runs); the
  minute's demand is the GPU-seconds of all requests inside it / 60.
- jobs (a cluster's pods or instances: creation, deletion, GPUs): **GPUs requested**. A job asks for its GPUs from
  its creation (pending or running: both are demand) to its deletion; the minute's demand is the GPU-seconds asked
  for inside it / 60.

Then nodes = GPUs / ``gpus_per_node`` (8). Each reader refuses a malformed row with its file and line number
(``ConvertError``) and reads nothing it does not need.
"""
from __future__ import annotations

import csv
import gzip
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import IO, Iterable, Iterator, Sequence

#: Where traces whose times are offsets (seconds from the trace's start) are put: a Monday, as bench.tune's weeks.
EPOCH = datetime(2025, 1, 6, tzinfo=timezone.utc).timestamp()
STEP = 60
DAY = 86400


class ConvertError(Exception):
    """A raw row that cannot be read: the message names the file and the line."""


@dataclass(frozen=True)
class Interval:
    """GPUs held or asked for from ``begin`` to ``end`` (Unix seconds; ``end`` None: past the trace's end)."""

    begin: float
    end: float | None
    gpus: float


def _rows(fh: IO[str], path: str, need: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) for each data row; the header must hold every column in ``need``."""
    reader = csv.reader(fh)
    try:
        header = next(reader)
    except StopIteration:
        raise ConvertError(f"{path} line 1: empty file, expected a header") from None
    missing = [c for c in need if c not in header]
    if missing:
        raise ConvertError(f"{path} line 1: header lacks {', '.join(missing)}")
    for row in reader:
        if not row:
            continue
        if len(row) != len(header):
            raise ConvertError(f"{path} line {reader.line_num}: {len(row)} columns, the header has {len(header)}")
        yield reader.line_num, dict(zip(header, row))


def _number(path: str, line: int, name: str, text: str, empty: float | None = None) -> float | None:
    text = text.strip()
    if not text and empty is not None:
        return empty
    if not text or text.lower() == "nan":
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConvertError(f"{path} line {line}: {name} {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ConvertError(f"{path} line {line}: {name} {text!r} must be a finite number >= 0")
    return value


def requests(fh: IO[str], path: str, time: str = "gmt_create", seconds: str = "exec_time_seconds") -> list[Interval]:
    """A request log (``time``: ``YYYY-MM-DD HH:MM:SS``, taken as UTC; ``seconds``: its GPU time) -> one GPU per
    request for its execution time."""
    out = []
    for line, row in _rows(fh, path, (time, seconds)):
        try:
            begin = datetime.fromisoformat(row[time].strip()).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            raise ConvertError(f"{path} line {line}: {time} {row[time]!r} is not a time (YYYY-MM-DD HH:MM:SS)") \
                from None
        held = _number(path, line, seconds, row[seconds])
        if held is None:
            raise ConvertError(f"{path} line {line}: {seconds} is empty")
        out.append(Interval(begin, begin + held, 1.0))
    return out


def jobs(fh: IO[str], path: str, gpus: Sequence[str], keep: dict[str, str] | None = None,
         begin: str = "creation_time", end: str = "deletion_time", scale: float = 1.0) -> list[Interval]:
    """Pods or instances (``begin``/``end``: seconds from the trace's start, empty: before the start / after the
    end) -> the GPUs each asks for over its life: the product of the ``gpus`` columns times ``scale`` (Alibaba's
    v2023 pods: ``num_gpu`` x ``gpu_milli`` / 1000). ``keep``: only rows whose columns hold these values."""
    keep = keep or {}
    out = []
    for line, row in _rows(fh, path, (*gpus, begin, end, *keep)):
        if any(row[k] != v for k, v in keep.items()):
            continue
        asked = scale
        for column in gpus:
            value = _number(path, line, column, row[column])
            if value is None:
                raise ConvertError(f"{path} line {line}: {column} is empty")
            asked *= value
        first = _number(path, line, begin, row[begin], empty=-1.0)
        last = _number(path, line, end, row[end])
        if asked == 0:
            continue
        start = EPOCH + first if first is not None and first >= 0 else -math.inf
        stop = None if last is None else EPOCH + last
        if stop is not None and stop < start:
            raise ConvertError(f"{path} line {line}: {end} {row[end]!r} is before {begin} {row[begin]!r}")
        out.append(Interval(start, stop, asked))
    return out


def per_minute(intervals: Iterable[Interval], start: float, minutes: int) -> list[float]:
    """GPUs per minute from ``start``: each interval's GPU-seconds inside the minute / 60 (an interval open at
    either end runs to that end of the span)."""
    total = [0.0] * minutes
    stop_all = start + STEP * minutes
    for iv in intervals:
        begin, end = max(iv.begin, start), min(stop_all if iv.end is None else iv.end, stop_all)
        if end <= begin:
            continue
        first, last = int((begin - start) // STEP), int(math.ceil((end - start) / STEP))
        for m in range(first, min(last, minutes)):
            lo, hi = start + STEP * m, start + STEP * (m + 1)
            total[m] += iv.gpus * (min(hi, end) - max(lo, begin))
    return [g / STEP for g in total]


def nodes(gpus: Sequence[float], gpus_per_node: int = 8) -> list[float]:
    """Nodes' worth of work (the replay's unit), to 3 decimals (an eighth of a node is 0.125)."""
    return [round(g / gpus_per_node, 3) for g in gpus]


def write(path: str, start: float, demand: Sequence[float]) -> None:
    """The replay's trace, gzipped when ``path`` ends in .gz."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8", newline="") as fh:  # type: ignore[operator]
        fh.write("timestamp,demand\n")
        for i, d in enumerate(demand):
            stamp = datetime.fromtimestamp(start + STEP * i, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            fh.write(f"{stamp},{d:g}\n")


__all__ = ["ConvertError", "DAY", "EPOCH", "Interval", "jobs", "nodes", "per_minute", "requests", "write"]
