"""Which pools the status page charts: at most ``CHARTS``, the ones an operator woken at night looks for first.

A page of every pool's chart cost what the pools' history held (800 pools with 100,000 decisions in 6 h: 3.6 s,
32 MB; issue 45, item 11), and 800 charts are not read anyway. So the page charts the pools in trouble now, then
those that changed (or were paused) in the charts' window, then those that decided in it, the newest first; every
other pool is a row of the pools' table, its state in a line, linked to the page of that pool (``?pool=``), which
charts it. Chosen from the stored rows the page reads anyway: no read of its own.
"""
from __future__ import annotations

from typing import Any

from autoscaler.store import EventRecord

CHARTS = 20  # charts a page draws at most (a page of this many pools or fewer charts each, as it always did)
WINDOW = 6 * 3600.0  # a chart shows a pool's last 6 h
TROUBLE_OUTCOMES = ("failed", "no_capacity")


def trouble(pool: dict[str, Any], last: EventRecord | None, now: float) -> list[str]:
    """What is wrong with a pool now, in a few words each (empty: nothing), from its answer and its last event."""
    out = []
    if pool.get("error"):
        out.append("cloud not read")
    if pool.get("nodes_error"):
        out.append("nodes not listed")
    if pool["failures"] or pool["backoff_remaining_s"]:
        out.append(f"failing ({pool['failures']} in a row)")
    if pool.get("short_until"):
        out.append("short of capacity")
    if pool.get("repairs"):
        out.append(f"{len(pool['repairs'])} in repair")
    if last is not None and last.outcome in TROUBLE_OUTCOMES and last.time >= now - WINDOW and \
            not (pool["failures"] or pool.get("short_until")):
        out.append(f"last decision {last.outcome}")
    return out


def tier(pool: dict[str, Any], troubled: bool, last: EventRecord | None, now: float) -> int:
    """0: in trouble; 1: changed or paused within the window; 2: decided within it; 3: quiet."""
    if troubled:
        return 0
    if pool["paused"] or (pool["last_scale_at"] or 0) >= now - WINDOW:
        return 1
    return 2 if last is not None and last.time >= now - WINDOW else 3


def pick(tiers: list[int], activity: list[float], wanted: int | None, budget: int = CHARTS) -> set[int]:
    """The positions of the pools to chart: all while they fit ``budget``, else ``wanted`` (a page asked for one
    pool) and then by tier, the latest active first within one."""
    if len(tiers) <= budget:
        return set(range(len(tiers)))
    order = sorted(range(len(tiers)), key=lambda i: (i != wanted, tiers[i], -activity[i], i))
    return set(order[:budget])
