"""The one YAML loader of the service, the replay and the tuner: PyYAML's safe loader, stricter in two ways.

- **Duplicate keys are an error** naming the key and both lines (as promtool does): a second ``pools:`` silently
  replacing the first, or ``max: 4, max: 400`` keeping 400, is a config that says something other than it reads.
  A merge key (``<<: *defaults``) may still be overridden by the mapping's own keys: that is what it is for.
- **Aliases may expand to at most ``MAX_ALIASED`` values** in all: a 647-byte "billion laughs" file (9 levels of 9
  aliases) expands to ~387 million strings once the config is walked, and PyYAML shares the nodes but everything
  after it (substitution, validation) does not. Counted while composing, memoised per node, so the check is linear.
"""
from __future__ import annotations

from typing import Any, TextIO

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode

MAX_ALIASED = 10_000  # values that aliases may repeat, in all, in one document
_MERGE = "tag:yaml.org,2002:merge"


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate keys and alias expansions past ``MAX_ALIASED`` values."""

    def __init__(self, stream: TextIO | str) -> None:
        super().__init__(stream)
        self._sizes: dict[int, int] = {}
        self._aliased = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if not self.check_event(AliasEvent):
            return super().compose_node(parent, index)
        mark = self.peek_event().start_mark
        node = super().compose_node(parent, index)
        self._aliased += self._size(node, mark, set()) if node is not None else 0
        if self._aliased > MAX_ALIASED:
            raise ComposerError(None, None, f"aliases expand to more than {MAX_ALIASED} values (an alias bomb?); "
                                "write the values out or use fewer aliases", mark)
        return node

    def _size(self, node: Node, mark: Any, open_: set[int]) -> int:
        """How many values ``node`` stands for once every alias in it is expanded (memoised per node)."""
        key = id(node)
        if key in self._sizes:
            return self._sizes[key]
        if key in open_:
            raise ComposerError(None, None, "an alias refers to a node that contains it (a recursive alias)", mark)
        open_.add(key)
        if isinstance(node, ScalarNode):
            size = 1
        elif isinstance(node, MappingNode):
            size = 1 + sum(self._size(k, mark, open_) + self._size(v, mark, open_) for k, v in node.value)
        else:
            size = 1 + sum(self._size(child, mark, open_) for child in node.value)
        open_.discard(key)
        if size > MAX_ALIASED:  # no need to go on counting: it is refused anyway
            raise ComposerError(None, None, f"aliases expand to more than {MAX_ALIASED} values (an alias bomb?); "
                                "write the values out or use fewer aliases", mark)
        self._sizes[key] = size
        return size

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            first: dict[Any, Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    earlier = first.setdefault(key, key_node)
                except TypeError:  # an unhashable key: the base class says so
                    continue
                if earlier is not key_node:
                    raise ConstructorError(None, None, f"duplicate key {key!r} (first at line "
                                           f"{earlier.start_mark.line + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep)  # type: ignore[no-any-return]


def load(stream: TextIO | str) -> Any:
    """The one document in ``stream``, parsed by :class:`StrictLoader`."""
    loader = StrictLoader(stream)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
