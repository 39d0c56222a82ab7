"""``pools[].repair``: replace a node that alerts report unhealthy (see docs/repair.md)."""
from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from autoscaler.config.durations import Duration
from autoscaler.config.common import MAX_NODES, Frozen

_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


class RepairConfig(Frozen):
    """How a pool's unhealthy nodes are repaired: at most ``max_unhealthy`` at once, each waiting up to ``grace``
    for GPU work that cannot move, a replacement asked for first unless ``replace`` is false."""

    max_unhealthy: int | str = Field(default=1, description="Nodes in repair at once: a count (at least 1) or a "
                                     "percentage of the pool's nodes such as 20% (rounded down, at least 1).")
    grace: Duration = Field(default=3600.0, description="How long a node in repair waits for GPU work that cannot "
                            "move (a Job's pod, a protected pod) before it is drained anyway (default 1h).")
    replace: bool = Field(default=True, description="Ask the cloud for one more node (within max) when a repair "
                          "starts (default true).")

    @field_validator("max_unhealthy", mode="before")
    @classmethod
    def _count_or_percent(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError("a whole number or a percentage such as 20%, not true/false")
        if isinstance(v, int):
            if not 1 <= v <= MAX_NODES:
                raise ValueError(f"must be from 1 to {MAX_NODES} (a budget of 0 would repair nothing)")
            return v
        if isinstance(v, str):
            match = _PERCENT.match(v)
            if match and 0 < float(match.group(1)) <= 100:
                return f"{float(match.group(1)):g}%"
        raise ValueError(f"must be a whole number (1 or more) or a percentage from 0 to 100% such as 20%, "
                         f"not {str(v)[:40]!r}")

    @field_validator("grace")
    @classmethod
    def _grace(cls, v: float) -> float:
        if v > 7 * 86400:
            raise ValueError("must be at most 7d")
        return v

    def percent(self) -> float | None:
        """The percentage, when ``max_unhealthy`` was written as one."""
        return float(self.max_unhealthy[:-1]) if isinstance(self.max_unhealthy, str) else None


def repair_policy(config: RepairConfig | None, where: str, provider: str, removes: bool,
                  has_cluster: bool) -> tuple[Any, list[str]]:
    """The core's ``RepairPolicy`` for a pool's ``repair:`` (None without one), and why it cannot work here: a
    repair reads the node's pods (``kubernetes:``) and removes exactly that node (a provider that names nodes)."""
    from autoscaler.models import RepairPolicy

    if config is None:
        return None, []
    problems = []
    if not has_cluster:
        problems.append(f"{where}: needs the top-level `kubernetes:` section (a repair cordons the node and waits "
                        "for its pods)")
    if not removes:
        problems.append(f"{where}: needs a provider that removes named nodes; {provider} can't name a node (it only "
                        "changes the count), so the unhealthy node could not be removed")
    percent = config.percent()
    count = config.max_unhealthy if isinstance(config.max_unhealthy, int) else 1
    return RepairPolicy(max_unhealthy=count, percent=percent, grace=config.grace, replace=config.replace), problems
