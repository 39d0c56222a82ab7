"""How many nodes a pool may have in repair at once, and which named nodes a repair may start on (pure).

A fleet-wide fault (a bad driver rollout, a broken DCGM exporter) makes every node look unhealthy at once; the
budget is what keeps the service from emptying the pool for it. Percentages round down, as Kubernetes' own
``maxUnavailable`` does, and the budget is never below one node.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Sequence

from autoscaler.models import RepairPolicy


def budget(policy: RepairPolicy, nodes: int | None) -> int:
    """Nodes that may be in repair at once in a pool of ``nodes`` (None: unknown; a percentage then allows 1)."""
    if policy.percent is None:
        return max(1, policy.max_unhealthy)
    return max(1, math.floor(policy.percent * max(nodes or 0, 0) / 100 + 1e-9))


@dataclass(frozen=True)
class Admission:
    """Which named nodes start a repair now, which are already in repair, which the budget holds back."""

    start: tuple[str, ...]
    duplicate: tuple[str, ...]
    over_budget: tuple[str, ...]
    budget: int
    in_repair: int  # before these

    def describe(self) -> str:
        """The budget as a reason says it."""
        return f"{self.in_repair} of at most {self.budget} node(s) already in repair"


def admit(names: Sequence[str], in_repair: Collection[str], policy: RepairPolicy, nodes: int | None) -> Admission:
    """The nodes of ``names`` (in order, each once) that start a repair within the budget; the others, and why."""
    allowed = budget(policy, nodes)
    room = max(allowed - len(in_repair), 0)
    start: list[str] = []
    duplicate: list[str] = []
    over: list[str] = []
    for name in dict.fromkeys(names):
        if name in in_repair:
            duplicate.append(name)
        elif len(start) < room:
            start.append(name)
        else:
            over.append(name)
    return Admission(tuple(start), tuple(duplicate), tuple(over), allowed, len(in_repair))
