"""Write tuned values into the base config's own text, so its comments and layout stay.

Only the mappings the tuner changed are rewritten (the pool's ``scale_out`` / ``scale_in`` and the changed
``replay.rules`` entries), each in the style it had (flow ``{...}`` or block lines at its indentation); a direction
the pool did not have is added after its ``name``. The result is loaded again and must equal the config the tuner
scored; when it does not (a layout this does not know), ``edit`` returns None and the caller writes the whole
config out instead.
"""
from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode


def _get(node: Node | None, key: str) -> tuple[ScalarNode, Node] | None:
    if not isinstance(node, MappingNode):
        return None
    for k, v in node.value:
        if isinstance(k, ScalarNode) and k.value == key:
            return k, v
    return None


def _end(node: Node) -> int:
    """Where the node's own text ends (a block mapping's end mark runs on over the lines after it)."""
    if isinstance(node, MappingNode) and not node.flow_style and node.value:
        return _end(node.value[-1][1])
    if isinstance(node, SequenceNode) and not node.flow_style and node.value:
        return _end(node.value[-1])
    return int(node.end_mark.index)


def _flow(value: Any) -> str:
    return str(yaml.safe_dump(value, default_flow_style=True, width=100_000, sort_keys=False)).strip().removesuffix(
        "\n...").strip()


def _render(node: Node, value: dict[str, Any]) -> str:
    """The mapping in the node's style: flow, or block lines at the node's column."""
    if isinstance(node, MappingNode) and not node.flow_style and node.value:
        return ("\n" + " " * node.start_mark.column).join(f"{k}: {_flow(v)}" for k, v in value.items())
    return _flow(value)


def edit(text: str, tuned: dict[str, Any], pool: str, directions: list[str], rules: list[int]) -> str | None:
    """``text`` with the pool's ``directions`` and the replay ``rules`` (indexes) as in ``tuned``; None when the
    text cannot be edited in place to give exactly ``tuned``."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return None
    pools = _get(root, "pools")
    replay = _get(root, "replay")
    spec = next((p for p in tuned["pools"] if p.get("name") == pool), None)
    if pools is None or not isinstance(pools[1], SequenceNode) or spec is None:
        return None
    node = next((n for n in pools[1].value if (_get(n, "name") or (None, ScalarNode("", "")))[1].value == pool), None)
    name = _get(node, "name")
    if not isinstance(node, MappingNode) or name is None:
        return None
    edits: list[tuple[int, int, str]] = []
    for direction in directions:
        found = _get(node, direction)
        if found is not None:
            edits.append((found[1].start_mark.index, _end(found[1]), _render(found[1], spec[direction])))
        elif node.flow_style:
            edits.append((_end(name[1]), _end(name[1]), f", {direction}: {_flow(spec[direction])}"))
        else:
            indent = "\n" + " " * name[0].start_mark.column
            edits.append((_end(name[1]), _end(name[1]), f"{indent}{direction}: {_flow(spec[direction])}"))
    rule_nodes = _get(replay[1] if replay else None, "rules")
    for index in rules:
        if rule_nodes is None or not isinstance(rule_nodes[1], SequenceNode) or index >= len(rule_nodes[1].value):
            return None
        rule = rule_nodes[1].value[index]
        edits.append((rule.start_mark.index, _end(rule), _render(rule, tuned["replay"]["rules"][index])))
    out = text
    for start, end, new in sorted(edits, reverse=True):
        out = out[:start] + new + out[end:]
    try:
        return out if yaml.safe_load(out) == tuned else None
    except yaml.YAMLError:
        return None
