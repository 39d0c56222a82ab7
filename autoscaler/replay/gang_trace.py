"""The gang trace: one row per all-or-nothing request, ``time,nodes,duration[,gpus_per_node]`` (docs/gang.md).

``time`` RFC 3339 UTC, not before the previous row's; ``nodes`` the nodes the job needs at once (1 or more);
``duration`` how long it runs once every node is ready (``90``, ``90s``, ``45m``, ``2h``); ``gpus_per_node`` the GPUs
each of its pods asks for (a pod a node; default: the group's first pool's ``gpus_per_node``). A bad row is refused
naming its line; nothing after it is read."""
from __future__ import annotations

import csv
from dataclasses import dataclass
from typing import Iterable

from autoscaler.config.common import MAX_NODES
from autoscaler.config.durations import parse_duration
from autoscaler.replay.trace import MAX_LINE, MAX_MINUTES, ReplayError, bounded_lines, parse_time

HEADER = ["time", "nodes", "duration"]
OPTIONAL = "gpus_per_node"
ROW_IS = "a row is a time, a node count, a duration and maybe GPUs per node"


@dataclass(frozen=True)
class GangRow:
    """One request of the trace: at ``time`` (Unix seconds), ``nodes`` at once, then running ``duration`` s."""

    line: int
    time: float
    nodes: int
    duration: float
    gpus_per_node: int | None = None


def _int(where: str, key: str, text: str, top: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ReplayError(f"{where}: {key} {text!r} is not a whole number") from None
    if not 1 <= value <= top:
        raise ReplayError(f"{where}: {key} {text!r} must be from 1 to {top}")
    return value


def _row(path: str, line: int, row: list[str], width: int, previous: float | None) -> GangRow:
    where = f"{path} line {line}"
    if len(row) != width:
        raise ReplayError(f"{where}: expected {width} columns ({','.join(HEADER + [OPTIONAL][:width - 3])}), got "
                          f"{len(row)}")
    try:
        when = parse_time(row[0])
    except ValueError as exc:
        raise ReplayError(f"{where}: time {row[0]!r} is not an RFC 3339 UTC time ({exc})") from None
    if previous is not None and when < previous:
        raise ReplayError(f"{where}: time {row[0].strip()} is before the previous row's (rows in time order)")
    nodes = _int(where, "nodes", row[1], MAX_NODES)
    try:
        duration = parse_duration(row[2].strip())
    except ValueError as exc:
        raise ReplayError(f"{where}: duration {row[2]!r}: {exc}") from None
    if duration <= 0:
        raise ReplayError(f"{where}: duration {row[2]!r} must be more than 0")
    gpus = _int(where, OPTIONAL, row[3], 1024) if width == 4 else None
    return GangRow(line, when, nodes, duration, gpus)


def parse_gangs(lines: Iterable[str], path: str) -> list[GangRow]:
    """The rows, checked as they come: the first bad one is refused naming its line."""
    rows: list[GangRow] = []
    width = 0
    for line, text in enumerate(lines, start=1):
        if len(text) > MAX_LINE + 2:
            raise ReplayError(f"{path} line {line}: longer than {MAX_LINE} bytes ({ROW_IS})")
        try:
            row = next(csv.reader([text]), [])
        except csv.Error as exc:
            raise ReplayError(f"{path} line {line}: not a CSV row: {exc}") from None
        if line == 1:
            header = [c.strip() for c in row]
            if header not in (HEADER, HEADER + [OPTIONAL]):
                raise ReplayError(f"{path} line 1: expected the header time,nodes,duration[,gpus_per_node], got "
                                  f"{','.join(row)!r}")
            width = len(header)
            continue
        if not row or all(not c.strip() for c in row):
            continue
        if len(rows) == MAX_MINUTES:
            raise ReplayError(f"{path} line {line}: more than {MAX_MINUTES:,} requests (one a minute for a leap "
                              "year); replay a shorter span of it")
        rows.append(_row(path, line, row, width, rows[-1].time if rows else None))
    if not width:
        raise ReplayError(f"{path} line 1: expected the header time,nodes,duration[,gpus_per_node], got 'an empty "
                          "file'")
    if not rows:
        raise ReplayError(f"{path}: no rows after the header")
    return rows


def load_gangs(path: str) -> list[GangRow]:
    """Read and check a gang trace, line by line (each read with the demand trace's bound, ``MAX_LINE``)."""
    try:
        with open(path, "rb") as fh:
            return parse_gangs(bounded_lines(fh, path, ROW_IS), path)
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read: {exc.strerror}") from None
