"""``groups:`` (pools that stand in for each other, in order of preference) and a pool's ``capacity:`` settings."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from autoscaler.config.durations import Duration
from autoscaler.config.common import POOL_NAME, Frozen

#: How long a pool that could not deliver is passed over when its config does not say.
SHORT_FOR = 600.0


class CapacityConfig(Frozen):
    """What the service does when a pool's cloud accepted a size and could not create the nodes."""

    short_for: Duration = Field(default=SHORT_FOR, gt=0, le=86400, description="How long a pool that could not "
                                "deliver (a stockout, a quota) is passed over by its group's scale-outs.")


class GroupConfig(Frozen):
    """Pools that stand in for each other: a scale-out goes to the first that can take it, a scale-in takes from
    the last that has nodes above its min. Routed to by name, like a pool."""

    name: str = Field(pattern=POOL_NAME)
    pools: list[str] = Field(min_length=1, description="The group's pools, most preferred first.")


def group_problems(groups: list[Any], pools: list[Any]) -> list[str]:
    """A group naming an unknown pool or another group (groups hold pools, so a group inside a group, a cycle
    included, is refused), a pool in two groups or twice in one, a group named like a pool or another group."""
    names = {p for p in pools if isinstance(p, str)}
    group_names = [g.get("name") if isinstance(g, dict) else getattr(g, "name", None) for g in groups]
    problems: list[str] = []
    owner: dict[str, str] = {}
    for i, group in enumerate(groups):
        name = group_names[i]
        members = group.get("pools") if isinstance(group, dict) else getattr(group, "pools", None)
        if name in names:
            problems.append(f"groups[{i}].name: {name!r} is already a pool's name (a route must name one thing)")
        if isinstance(name, str) and group_names.index(name) != i:
            problems.append(f"groups[{i}].name: duplicate group name {name!r}")
        for j, pool in enumerate(members if isinstance(members, list) else []):
            where = f"groups[{i}].pools[{j}]"
            if not isinstance(pool, str):
                continue
            if pool in group_names:
                cycle = " (a cycle)" if pool == name or _names_back(groups, group_names, pool, name) else ""
                problems.append(f"{where}: {pool!r} is a group{cycle}; a group holds pools, not groups")
            elif pool not in names:
                problems.append(f"{where}: no pool named {pool!r}")
            elif pool in owner:
                problems.append(f"{where}: pool {pool!r} is already in {owner[pool]} (a pool is in at most one group)")
            else:
                owner[pool] = f"group {name!r}"
    return problems


def _names_back(groups: list[Any], group_names: list[Any], start: str, target: Any) -> bool:
    """Whether group ``start`` names ``target`` (directly or through other groups)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        group = groups[group_names.index(current)]
        members = group.get("pools") if isinstance(group, dict) else getattr(group, "pools", None)
        for member in members if isinstance(members, list) else []:
            if member == target:
                return True
            if member in group_names:
                todo.append(member)
    return False
