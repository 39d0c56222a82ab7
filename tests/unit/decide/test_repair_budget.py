"""The repair budget's arithmetic (pure): counts, percentages rounded down, never below one node, and which named
nodes start, are duplicates or wait."""
from __future__ import annotations

import pytest

from autoscaler.models import RepairPolicy
from autoscaler.decide.repair_budget import admit, budget


@pytest.mark.parametrize("policy, nodes, expected", [
    pytest.param(RepairPolicy(max_unhealthy=1), 10, 1, id="count-one"),
    pytest.param(RepairPolicy(max_unhealthy=3), 2, 3, id="count-is-not-capped-by-pool-size"),
    pytest.param(RepairPolicy(percent=20), 10, 2, id="twenty-percent-of-ten"),
    pytest.param(RepairPolicy(percent=20), 14, 2, id="percent-rounds-down"),
    pytest.param(RepairPolicy(percent=20), 4, 1, id="percent-never-below-one"),
    pytest.param(RepairPolicy(percent=10), 0, 1, id="empty-pool-still-one"),
    pytest.param(RepairPolicy(percent=50), None, 1, id="unknown-size-one"),
    pytest.param(RepairPolicy(percent=100), 7, 7, id="whole-pool"),
    pytest.param(RepairPolicy(percent=33.3), 3, 1, id="a-third-of-three-is-not-one-by-float-error"),
    pytest.param(RepairPolicy(percent=25), 8, 2, id="exact-quarter"),
])
def test_budget(policy: RepairPolicy, nodes: int | None, expected: int) -> None:
    assert budget(policy, nodes) == expected


@pytest.mark.parametrize("names, in_repair, policy, nodes, start, duplicate, over", [
    pytest.param(["a"], [], RepairPolicy(), 4, ["a"], [], [], id="first-repair-starts"),
    pytest.param(["a"], ["a"], RepairPolicy(max_unhealthy=5), 4, [], ["a"], [], id="already-in-repair"),
    pytest.param(["b"], ["a"], RepairPolicy(), 4, [], [], ["b"], id="budget-full"),
    pytest.param(["b", "c", "d"], ["a"], RepairPolicy(percent=30), 10, ["b", "c"], [], ["d"],
                 id="percent-budget-partly-left"),
    pytest.param(["a", "b", "a"], [], RepairPolicy(max_unhealthy=2), 4, ["a", "b"], [], [], id="named-twice-once"),
    pytest.param(["a", "b"], ["a"], RepairPolicy(max_unhealthy=2), 4, ["b"], ["a"], [],
                 id="duplicate-takes-no-room"),
    pytest.param(["x", "y", "z"], ["a", "b", "c"], RepairPolicy(percent=20), 10, [], [], ["x", "y", "z"],
                 id="fleet-wide-fault-over-budget"),
])
def test_admit(names: list[str], in_repair: list[str], policy: RepairPolicy, nodes: int, start: list[str],
               duplicate: list[str], over: list[str]) -> None:
    got = admit(names, in_repair, policy, nodes)
    assert (list(got.start), list(got.duplicate), list(got.over_budget)) == (start, duplicate, over)
