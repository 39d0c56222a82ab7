"""Fallback groups: which pool a group's decision goes to (pure), and the config's group checks."""
from __future__ import annotations

import pytest

from autoscaler.decide.groups import Member, choose
from autoscaler.models import Action
from autoscaler.config.groups import group_problems

NOW = 1_000_000.0
SPOT = Member("a100-spot", current=2, min=0, max=8)
ONDEMAND = Member("a100-ondemand", current=1, min=0, max=4)
OTHER_ZONE = Member("a100-westus", current=0, min=0, max=4)


@pytest.mark.parametrize("members, action, candidates, passed", [
    pytest.param([SPOT, ONDEMAND], Action.SCALE_OUT, ("a100-spot", "a100-ondemand"), (),
                 id="scale-out-prefers-the-first-pool"),
    pytest.param([Member("a100-spot", 2, 0, 8, short_until=NOW + 300, short_reason="ZonalAllocationFailed"), ONDEMAND],
                 Action.SCALE_OUT, ("a100-ondemand",),
                 (("a100-spot", "short of capacity for another 300s: ZonalAllocationFailed"),),
                 id="short-pool-is-passed-over"),
    pytest.param([Member("a100-spot", 2, 0, 8, short_until=NOW - 1), ONDEMAND], Action.SCALE_OUT,
                 ("a100-spot", "a100-ondemand"), (), id="short-mark-ended-preferred-pool-tried-again"),
    pytest.param([Member("a100-spot", 2, 0, 8, paused=True), ONDEMAND], Action.SCALE_OUT, ("a100-ondemand",),
                 (("a100-spot", "paused"),), id="paused-pool-is-passed-over"),
    pytest.param([Member("a100-spot", 2, 0, 8, backoff_until=NOW + 60), ONDEMAND], Action.SCALE_OUT,
                 ("a100-ondemand",), (("a100-spot", "backing off after failures for another 60s"),),
                 id="backing-off-pool-is-passed-over"),
    pytest.param([Member("a100-spot", 8, 0, 8), ONDEMAND], Action.SCALE_OUT, ("a100-ondemand",),
                 (("a100-spot", "at max (8)"),), id="pool-at-max-is-passed-over"),
    pytest.param([Member("a100-spot", None, 0, 8), ONDEMAND], Action.SCALE_OUT, ("a100-ondemand",),
                 (("a100-spot", "its count is unknown (the cloud could not be read)"),), id="unknown-count-passed"),
    pytest.param([Member("a100-spot", 8, 0, 8), Member("a100-ondemand", 4, 0, 4)], Action.SCALE_OUT, (),
                 (("a100-spot", "at max (8)"), ("a100-ondemand", "at max (4)")), id="every-pool-at-max"),
    pytest.param([SPOT, ONDEMAND, OTHER_ZONE], Action.SCALE_IN, ("a100-ondemand", "a100-spot"),
                 (("a100-westus", "at min (0)"),), id="scale-in-takes-from-the-least-preferred-first"),
    pytest.param([Member("a100-spot", 2, 0, 8, short_until=NOW + 300), ONDEMAND], Action.SCALE_IN,
                 ("a100-ondemand", "a100-spot"), (), id="a-short-pool-may-still-scale-in"),
    pytest.param([SPOT, Member("a100-ondemand", 1, 0, 4, paused=True)], Action.SCALE_IN, ("a100-spot",),
                 (("a100-ondemand", "paused"),), id="scale-in-passes-over-a-paused-pool"),
    pytest.param([Member("a100-spot", 2, 0, 8, in_scope=False), ONDEMAND], Action.SCALE_OUT, ("a100-ondemand",),
                 (("a100-spot", "outside the credential's pools"),), id="scale-out-keeps-to-the-credentials-pools"),
    pytest.param([SPOT, Member("a100-ondemand", 1, 0, 4, in_scope=False)], Action.SCALE_IN, ("a100-spot",),
                 (("a100-ondemand", "outside the credential's pools"),), id="scale-in-keeps-to-the-credentials-pools"),
])
def test_choose(members: list[Member], action: Action, candidates: tuple[str, ...],
                passed: tuple[tuple[str, str], ...]) -> None:
    choice = choose(members, action, NOW)
    assert choice.candidates == candidates
    assert choice.passed == passed
    assert choice.first == (candidates[0] if candidates else None)


def test_no_candidate_says_why_for_each_pool() -> None:
    choice = choose([Member("a", 1, 0, 1), Member("b", 2, 0, 2, paused=True)], Action.SCALE_OUT, NOW)
    assert choice.why_none() == "a: at max (1); b: paused"


POOLS = ["a100-spot", "a100-ondemand", "t4"]


@pytest.mark.parametrize("groups, problems", [
    pytest.param([{"name": "a100", "pools": ["a100-spot", "a100-ondemand"]}], [], id="valid"),
    pytest.param([{"name": "a100", "pools": ["a100-spot", "h100"]}],
                 ["groups[0].pools[1]: no pool named 'h100'"], id="unknown-pool"),
    pytest.param([{"name": "a", "pools": ["a100-spot"]}, {"name": "b", "pools": ["t4", "a100-spot"]}],
                 ["groups[1].pools[1]: pool 'a100-spot' is already in group 'a' (a pool is in at most one group)"],
                 id="pool-in-two-groups"),
    pytest.param([{"name": "a", "pools": ["a100-spot", "a100-spot"]}],
                 ["groups[0].pools[1]: pool 'a100-spot' is already in group 'a' (a pool is in at most one group)"],
                 id="pool-twice-in-one-group"),
    pytest.param([{"name": "a", "pools": ["b"]}, {"name": "b", "pools": ["a"]}],
                 ["groups[0].pools[0]: 'b' is a group (a cycle); a group holds pools, not groups",
                  "groups[1].pools[0]: 'a' is a group (a cycle); a group holds pools, not groups"], id="cycle"),
    pytest.param([{"name": "a", "pools": ["a"]}],
                 ["groups[0].pools[0]: 'a' is a group (a cycle); a group holds pools, not groups"], id="self-cycle"),
    pytest.param([{"name": "a", "pools": ["t4"]}, {"name": "b", "pools": ["a"]}],
                 ["groups[1].pools[0]: 'a' is a group; a group holds pools, not groups"], id="group-in-a-group"),
    pytest.param([{"name": "t4", "pools": ["a100-spot"]}],
                 ["groups[0].name: 't4' is already a pool's name (a route must name one thing)"],
                 id="group-named-like-a-pool"),
    pytest.param([{"name": "a", "pools": ["t4"]}, {"name": "a", "pools": ["a100-spot"]}],
                 ["groups[1].name: duplicate group name 'a'"], id="duplicate-group-name"),
])
def test_group_problems(groups: list[dict[str, object]], problems: list[str]) -> None:
    assert group_problems(groups, POOLS) == problems
