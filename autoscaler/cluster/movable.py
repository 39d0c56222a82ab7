"""``victims: movable``: idle nodes first, then at most one node whose pods may all move and fit elsewhere (pure).

cluster-autoscaler's scale-down, narrowed to one non-empty node per decision: of the busy nodes whose every pod
may move (:func:`autoscaler.cluster.pods.move_blocker`), take the cheapest to empty (fewest GPU pods, then fewest
pods; alert-named first, then the newest among equals) whose pods fit on the nodes that stay (Ready, schedulable,
not cordoned, not going themselves; the pods of cordoned and not Ready ones still count for topology spread and
pod (anti-)affinity).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Collection, Sequence

from autoscaler.cluster.fit import place_all
from autoscaler.cluster.nodes import NodeView, kept_reason, pick_victims
from autoscaler.cluster.pods import Budget, move_blocker
from autoscaler.config.common import DEFAULT_MOVABLE_OWNERS

ONE_PER_DECISION = "its pods could move, but one node with work goes per decision"
#: Busy nodes whose pods a decision tries to place elsewhere (each try is pods x nodes checks; a big pool whose
#: cheapest candidates do not fit is not searched to the end, as cluster-autoscaler bounds its candidates too).
MAX_TRIED = 20
NOT_TRIED = f"not weighed in this decision (its {MAX_TRIED} cheapest busy nodes were tried first)"


@dataclass(frozen=True)
class Pick:
    """What a ``movable`` scale-in takes: idle nodes to remove, at most one node to drain first, the rest kept."""

    idle: list[NodeView]
    drain: NodeView | None
    kept: list[tuple[NodeView, str]]


def cannot_move(node: NodeView, owners: Sequence[str], budgets: Sequence[Budget] | None) -> str | None:
    """Why the node's work keeps it (protection, or the first pod that may not move), None when all may move."""
    if node.protected:
        return node.protected
    if node.claims_unread:  # what its claims hold is unknown: no fit can say they would find room elsewhere
        return f"{node.claims_unread}: cannot move"
    if node.cordoned and node.cordoned_by_us is None:
        return "cordoned by someone else (theirs to drain)"
    for pod in node.pods:
        why = move_blocker(pod, owners, budgets)
        if why:
            return f"{why}: cannot move"
    return None


def pick_movable(nodes: Sequence[NodeView], remove: int, alerted: Collection[str], floor: int,
                 owners: Sequence[str] = DEFAULT_MOVABLE_OWNERS,
                 budgets: Callable[[], Sequence[Budget] | None] = lambda: None) -> Pick:
    """Idle nodes as ``victims: idle`` picks them; then, while the step and the floor leave room, the one busy
    node that is cheapest to empty and whose pods fit on the nodes that stay. ``budgets`` reads the
    PodDisruptionBudgets (None: unknown), called at most once and only when a busy node is weighed."""
    idle, kept = pick_victims(nodes, remove, alerted, "idle", floor)
    room = max(min(remove, len(nodes) - floor), 0)
    busy = [node for node, _ in kept if node.busy_reason()]
    if len(idle) >= room or not busy:
        return Pick(idle, None, kept)
    going = {n.name for n in idle}
    named = set(alerted)
    order = sorted(busy, key=lambda n: (len(n.gpu_pods), len(n.pods), n.name not in named, -n.created, n.name))
    reasons: dict[str, str] = {}
    chosen: NodeView | None = None
    known = budgets()
    tried = 0
    for node in order:
        why = cannot_move(node, owners, known)
        if why is None and chosen is not None:
            why = ONE_PER_DECISION
        elif why is None and tried >= MAX_TRIED:
            why = NOT_TRIED
        if why is None:
            tried += 1
            stay = [n.room(takes=n.ready and not n.cordoned) for n in nodes
                    if n.name not in going and n.name != node.name]
            why = place_all(node.pods, stay)
            if why is None:
                chosen = node
                continue
        reasons[node.name] = why
    kept = [(n, kept_reason(n, reasons[n.name])) if n.name in reasons else (n, why) for n, why in kept
            if chosen is None or n.name != chosen.name]
    return Pick(idle, chosen, kept)
