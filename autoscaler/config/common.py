"""Pieces every settings section uses: the frozen base model, the shared bounds, the pattern risk check."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

POOL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
#: The most nodes any count or step may name: in the config, the API, a routing label or a query parameter.
MAX_NODES = 1000
#: A node count in the config (min, max, a schedule's floor): 0..MAX_NODES.
Count = Annotated[int, Field(ge=0, le=MAX_NODES)]
#: A step in nodes (a direction's step and max_step, a rule's step): 1..MAX_NODES.
Step = Annotated[int, Field(ge=1, le=MAX_NODES)]
#: Resource names that count as GPU work when the config names none.
DEFAULT_GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-*")
#: DRA DeviceClasses whose devices are GPUs (NVIDIA's DRA driver: full GPUs and MIG devices).
DEFAULT_GPU_DEVICE_CLASSES = ("gpu.nvidia.com", "mig.nvidia.com")
#: Owner kinds whose pods ``victims: movable`` may move (their controller recreates them elsewhere).
DEFAULT_MOVABLE_OWNERS = ("ReplicaSet", "StatefulSet")

MAX_PATTERN = 512
#: Longest label value a ``match_re`` pattern is tried on; a longer one never matches (label values that route
#: alerts are short; a long one is what makes a backtracking regex slow).
MAX_MATCHED_LABEL = 128
MAX_OPEN_REPEATS = 3  # unbounded repeats (``.*``, ``x+``) in one pattern: each multiplies the worst case by n


def regex_risk(pattern: str) -> str:
    """Why ``pattern`` could backtrack for exponential time (a repeated group holding another repeat or an
    alternation, such as ``(a+)+`` or ``(a|ab)*``), or "" when it cannot. Python's ``re`` backtracks; refusing
    these shapes at load, and capping the label length, keeps one match fast."""
    import importlib

    c: Any = importlib.import_module("re._constants")  # the stdlib's own parse of the pattern
    parser: Any = importlib.import_module("re._parser")

    if len(pattern) > MAX_PATTERN:
        return f"pattern longer than {MAX_PATTERN} characters"
    repeats = (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", c.MAX_REPEAT))

    def items(node: Any) -> Any:
        for part in node if isinstance(node, (list, tuple, parser.SubPattern)) else ():
            if isinstance(part, tuple) and len(part) == 2 and isinstance(part[0], type(c.LITERAL)):
                yield part
            elif isinstance(part, (list, tuple, parser.SubPattern)):
                yield from items(part)

    def risky(node: Any, inside_repeat: bool) -> bool:
        for op, av in items(node):
            if op in repeats:
                low, high, sub = av
                if inside_repeat and low != high:
                    return True
                if risky(sub, inside_repeat or high > 1):
                    return True
            elif op is c.BRANCH:
                if inside_repeat:
                    return True
                if any(risky(b, inside_repeat) for b in av[1]):
                    return True
            elif isinstance(av, (list, tuple, parser.SubPattern)) and risky(av, inside_repeat):
                return True
        return False

    parsed = parser.parse(pattern)
    if risky(parsed, False):
        return ("a repeated group holds another repeat or an alternation (like (a+)+ or (a|ab)*), which can take "
                "exponential time; use a character class or an unrepeated group")

    def open_repeats(node: Any) -> int:
        total = 0
        for op, av in items(node):
            if op in repeats:
                total += (av[1] == c.MAXREPEAT) + open_repeats(av[2])
            elif isinstance(av, (list, tuple, parser.SubPattern)):
                total += open_repeats(av)
        return total

    if open_repeats(parsed) > MAX_OPEN_REPEATS:
        return f"more than {MAX_OPEN_REPEATS} unbounded repeats (.*, +): split the rule or anchor the pattern"
    return ""


class Frozen(BaseModel):
    """A settings section: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
