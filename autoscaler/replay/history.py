"""``python -m autoscaler trace``: a history trace from Prometheus, ``demand = (used + pending) / gpus_per_node``.

Range queries go in chunks (at most ``MAX_POINTS`` steps each: Prometheus refuses a query over 11,000 points per
series), one row a minute. A minute with no ``used`` sample (scrape gaps, restarts) takes the last value before it
(the first value for a gap at the very start); a minute with no ``pending`` sample counts no pending GPUs, which is
also what a pending query answers when nothing is pending. Both are reported.
"""
from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any

import requests

from autoscaler.config.durations import parse_duration, rfc3339
from autoscaler.logjson import escape_lines
from autoscaler.redact import redact_url
from autoscaler.replay.trace import MAX_DEMAND, STEP, parse_time

MAX_POINTS = 11_000


class HistoryError(Exception):
    """Prometheus could not give the history; the message says why, for a person."""


@dataclass
class Series:
    """One query's value per minute (None where Prometheus had no sample)."""

    query: str
    values: list[float | None]

    @property
    def missing(self) -> int:
        return sum(1 for v in self.values if v is None)


@dataclass
class History:
    """The minutes of the trace, demand per minute, and what was filled where."""

    start: float
    demand: list[float]
    gaps: list[tuple[float, int]] = field(default_factory=list)  # (start, minutes) of each filled run of `used`
    pending_missing: int = 0


class Progress:
    """A one-line progress bar on a terminal; silent otherwise."""

    def __init__(self, total: int, stream: IO[str] | None = None) -> None:
        self.total, self.done = total, 0
        self.stream = stream if stream is not None else sys.stderr
        self.shown = self.stream.isatty()

    def step(self, what: str) -> None:
        self.done += 1
        if self.shown:
            filled = int(30 * self.done / max(1, self.total))
            self.stream.write(f"\r[{'#' * filled}{' ' * (30 - filled)}] {self.done}/{self.total} {what:<40.40s}")
            if self.done >= self.total:
                self.stream.write("\n")
            self.stream.flush()


def chunks(start: float, end: float, chunk: float) -> list[tuple[float, float]]:
    """[first, last] evaluation times of each range query, both inclusive, covering start..end a minute apart."""
    per = max(1, min(MAX_POINTS, int(chunk // STEP)))
    out, first = [], start
    while first <= end:
        last = min(end, first + (per - 1) * STEP)
        out.append((first, last))
        first = last + STEP
    return out


def query_range(session: requests.Session, base: str, query: str, first: float, last: float,
                timeout: float) -> dict[float, float]:
    """One range query: value by evaluation time. HistoryError when Prometheus cannot answer or the query gives
    more than one series."""
    url = base.rstrip("/") + "/api/v1/query_range"
    params: dict[str, Any] = {"query": query, "start": f"{first:.0f}", "end": f"{last:.0f}", "step": f"{STEP:.0f}"}
    try:
        resp = session.get(url, params=params, timeout=timeout)
    except requests.RequestException as exc:
        raise HistoryError(f"cannot reach Prometheus at {redact_url(base)}: {type(exc).__name__}") from None
    try:
        body = resp.json()
    except ValueError:
        raise HistoryError(f"{redact_url(url)}: HTTP {resp.status_code}, not a Prometheus answer") from None
    if not isinstance(body, dict):
        raise HistoryError(f"{redact_url(url)}: HTTP {resp.status_code}, not a Prometheus answer (a JSON "
                           f"{type(body).__name__}, not an object)")
    if resp.status_code != 200 or body.get("status") != "success":
        raise HistoryError(f"Prometheus refused {query!r}: {body.get('errorType', resp.status_code)}: "
                           f"{body.get('error', '')}".rstrip(": "))
    return _matrix_values(query, body)


def _matrix_values(query: str, body: dict[str, Any]) -> dict[float, float]:
    """The one series of a range query's answer, value by evaluation time; HistoryError naming what is amiss
    when the answer has another shape (no data, a vector, a value that is no number)."""
    data = body.get("data")
    if not isinstance(data, dict):
        raise HistoryError(f"{query!r}: Prometheus's answer has no `data` object")
    result = data.get("result")
    if not isinstance(result, list):
        raise HistoryError(f"{query!r}: Prometheus's answer has no `data.result` list")
    if data.get("resultType", "matrix") != "matrix":
        raise HistoryError(f"{query!r}: a range query answered a {str(data.get('resultType'))[:20]!r}, not a matrix")
    if len(result) > 1:
        raise HistoryError(f"{query!r} gives {len(result)} series; it must give one (wrap it in sum(...))")
    pairs = result[0].get("values") if result and isinstance(result[0], dict) else [] if not result else None
    if not isinstance(pairs, list):
        raise HistoryError(f"{query!r}: the series has no `values` list")
    values: dict[float, float] = {}
    for pair in pairs:
        if not isinstance(pair, list) or len(pair) != 2:
            raise HistoryError(f"{query!r}: a sample {str(pair)[:40]} is not a [time, value] pair")
        stamp, value = _number(query, "time", pair[0]), _number(query, "value", pair[1])
        if math.isfinite(value) and math.isfinite(stamp):
            values[stamp] = value
    return values


def _number(query: str, what: str, text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        raise HistoryError(f"{query!r}: a sample's {what} {str(text)[:30]!r} is not a number") from None


def fetch(session: requests.Session, base: str, query: str, spans: list[tuple[float, float]], start: float,
          minutes: int, progress: Progress, timeout: float) -> Series:
    """A query's values for every minute, chunk by chunk."""
    got: dict[float, float] = {}
    for first, last in spans:
        got.update(query_range(session, base, query, first, last, timeout))
        progress.step(f"{query[:20]} {rfc3339(first)[:16]}")
    return Series(query, [got.get(start + STEP * i) for i in range(minutes)])


def fill(used: Series, pending: Series | None, gpus_per_node: float, start: float) -> History:
    """Demand per minute, ``used`` gaps carried forward (backward at the start), missing ``pending`` as 0."""
    known = [v for v in used.values if v is not None]
    if not known:
        raise HistoryError(f"{used.query!r} gave no sample at all in the time asked for")
    history = History(start, [])
    last = known[0]
    run_start: int | None = None
    for i, value in enumerate(used.values):
        if value is None:
            run_start = i if run_start is None else run_start
        else:
            last = value
            if run_start is not None:
                history.gaps.append((start + STEP * run_start, i - run_start))
                run_start = None
        extra = pending.values[i] if pending is not None else 0.0
        history.pending_missing += pending is not None and extra is None
        demand = max(0.0, (last + (extra or 0.0)) / gpus_per_node)
        if not demand <= MAX_DEMAND:  # also an overflow to infinity
            raise HistoryError(f"demand at {rfc3339(start + STEP * i)[:16]}Z is {demand:g} nodes, beyond what any "
                               f"pool could hold ({MAX_DEMAND:g} nodes): check the queries and --gpus-per-node")
        history.demand.append(demand)
    if run_start is not None:
        history.gaps.append((start + STEP * run_start, len(used.values) - run_start))
    return history


def build(base: str, used: str, pending: str | None, gpus_per_node: float, since: float, until: float,
          chunk: float = 86400.0, timeout: float = 60.0, stream: IO[str] | None = None,
          token: str | None = None) -> History:
    """The history from ``until - since`` to ``until`` (both rounded down to the minute); ``token``: a bearer
    token for Prometheus (basic auth: in the URL, ``https://user:password@host``)."""
    end = math.floor(until / STEP) * STEP - STEP
    start = math.floor((until - since) / STEP) * STEP
    minutes = int((end - start) // STEP) + 1
    if minutes < 1:
        raise HistoryError("--since must be at least a minute")
    spans = chunks(start, end, chunk)
    progress = Progress(len(spans) * (2 if pending else 1), stream)
    with requests.Session() as session:
        if token:
            session.headers["Authorization"] = f"Bearer {token}"
        used_series = fetch(session, base, used, spans, start, minutes, progress, timeout)
        pending_series = fetch(session, base, pending, spans, start, minutes, progress, timeout) if pending else None
    return fill(used_series, pending_series, gpus_per_node, start)


def write(path: str, history: History) -> None:
    """The trace CSV: ``timestamp,demand``, one row a minute."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("timestamp,demand\n")
        for i, d in enumerate(history.demand):
            fh.write(f"{rfc3339(history.start + STEP * i).replace('.000Z', 'Z')},{round(d, 4):g}\n")


def gap_report(history: History) -> list[str]:
    """Lines saying what was filled where (the longest gaps first, at most five named)."""
    lines = []
    if history.gaps:
        total = sum(n for _, n in history.gaps)
        named = ", ".join(f"{rfc3339(t)[:16]}Z ({n} min)" for t, n in sorted(history.gaps, key=lambda g: -g[1])[:5])
        lines.append(f"filled {total} minute(s) without a `used` sample in {len(history.gaps)} gap(s) with the value "
                     f"before them: {named}")
    if history.pending_missing:
        lines.append(f"{history.pending_missing} minute(s) without a `pending` sample counted as no pending GPUs")
    return lines


def _token(path: str | None) -> str | None:
    """The bearer token: from ``--bearer-token-file``, else the environment's PROMETHEUS_BEARER_TOKEN (never argv)."""
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip() or None
        except OSError as exc:
            raise HistoryError(f"--bearer-token-file {path}: cannot read: {exc.strerror}") from None
    return os.environ.get("PROMETHEUS_BEARER_TOKEN") or None


def run(args: Any) -> int:
    """The CLI: exit 0 with a one-line summary (and the gaps), 1 with the problem."""
    try:
        since = parse_duration(args.since)
        chunk = parse_duration(args.chunk)
        until = parse_time(args.until) if args.until else time.time()
    except ValueError as exc:
        print(escape_lines(f"trace: {exc}"), file=sys.stderr)
        return 1
    if args.gpus_per_node <= 0:
        print("trace: --gpus-per-node must be more than 0", file=sys.stderr)
        return 1
    if chunk / STEP > MAX_POINTS:
        print(f"trace: --chunk {args.chunk} is over Prometheus's {MAX_POINTS:,} points a query at one a minute",
              file=sys.stderr)
        return 1
    try:
        token = _token(args.bearer_token_file)
        history = build(args.prometheus, args.used, args.pending, args.gpus_per_node, since, until, chunk,
                        token=token)
        write(args.out, history)
    except HistoryError as exc:  # it may quote Prometheus's answer: escaped for the terminal
        print(escape_lines(f"trace: {exc}"), file=sys.stderr)
        return 1
    except OSError as exc:
        print(escape_lines(f"{args.out}: cannot write: {exc.strerror}"), file=sys.stderr)
        return 1
    for line in gap_report(history):
        print(line)
    peak = max(history.demand)
    print(f"{args.out}: {len(history.demand)} minutes from {rfc3339(history.start)[:16]}Z, peak demand {peak:.2f} "
          f"nodes, mean {sum(history.demand) / len(history.demand):.2f}")
    return 0
