"""Node repair, its start: a GPU node that alerts report unhealthy is cordoned at once, a replacement
is asked for, and the reconciler carries the repair on (``autoscaler/repair/carry.py``) until exactly that node is
removed (and cancelled). See docs/repair.md.

Both run under the pool's hold (``lease.PoolHold.holding``: this process's lock, then the store lease, renewed),
as every change to a pool does. The repair is stored before the node is cordoned and forgotten only after the
cordon is lifted or the node's removal was asked of the cloud, so no node is ever left cordoned by a repair the
store does not know.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from autoscaler.repair import alerts as repair_alerts
from autoscaler.cluster.nodes import ClusterError, NodeView
from autoscaler.pool.door import changed
from autoscaler.pool.hold import PoolHeld
from autoscaler.repair.parts import RepairParts
from autoscaler.models import Action, CloudStatus, Decision, Outcome, PoolSpec, PoolState, Signal
from autoscaler.redact import redact_text
from autoscaler.decide.repair_budget import Admission, admit
from autoscaler.cluster.nodes import REPAIR_OWNER, summary
from autoscaler.store import PoolChange, RepairMark, RepairRecord, StoreUnavailable
from providers import NoCapacityError, ProviderError

log = logging.getLogger(__name__)

CLUSTER_RETRY = 30.0  # Retry-After when the Kubernetes API failed before anything was touched
UNEXPECTED_RETRY = 30.0  # Retry-After for a start that failed on an unexpected error


@dataclass
class Started:
    """What a repair's start did, for its decision: the nodes cordoned, those left alone and why."""

    nodes: list[str] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)
    duplicate: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)  # not in the cluster (any more): a repeat of a finished repair
    replacement: str = ""  # what became of the replacement, for the reason
    reached: int | None = None
    marked: int | None = None  # the pool size stored on the repairs as their replacement's (with the record)
    pass_on: int = 0  # nodes the pool's group is asked for instead (the pool is short or at max)
    cordon_failed: bool = False  # the API server refused a cordon: a retry of the sender can act


def start(parts: RepairParts, signal: Signal, pass_on: Callable[[Signal], Decision]) -> Decision:
    """Start the repair of the nodes ``signal`` names (``repair_started``), or say why not; one event. An error no
    path expects fails this decision with a retry (the sender's retry finds the repair stored, if it was).
    ``pass_on``: how a replacement the pool cannot take is asked of its group (the engine's ``handle``)."""
    try:
        return _start(parts, signal, pass_on)
    except StoreUnavailable:
        raise  # the request is answered 503
    except Exception as exc:  # a bug or a library's surprise: this decision fails, the others go on
        log.exception("unexpected error starting a repair on pool %s", signal.pool)
        decision = Decision(signal.pool, Action.REPAIR, Outcome.FAILED, None, None,
                            _said(signal, f"unexpected error ({type(exc).__name__}) while starting the repair; see "
                                          "the service log. A retry can act"),
                            retry_after=UNEXPECTED_RETRY, details={"code": "internal"})
        return parts.events.record(decision, signal.source.value, list(signal.alerts), parts.wall())


def _start(parts: RepairParts, signal: Signal, pass_on: Callable[[Signal], Decision]) -> Decision:
    spec, why = _pool_of(parts, signal)
    if spec is None:
        decision = Decision(signal.pool, Action.REPAIR, why[0], None, None, _said(signal, why[1]))
        return parts.events.record(decision, signal.source.value, list(signal.alerts), parts.wall())
    try:
        with parts.hold.holding(spec.name, "repair") as held:
            now = parts.wall()  # the decision's time: read once the pool is held
            decision, change, done, noted = repair_alerts.start_held(parts, spec, signal, held.state, now,
                                                                     _start_held, Started())
            mark = RepairMark(replaced=tuple(done.nodes), replacement=done.marked, at=now, alerts=tuple(noted))
            recorded = held.record(decision, signal.source.value, list(signal.alerts), now, change, repairs=mark)
        passed = done.pass_on
    except PoolHeld as exc:
        decision = Decision(spec.name, Action.REPAIR, Outcome.SKIPPED_BUSY, None, None, _said(signal, str(exc)),
                            retry_after=exc.retry_after, details={"busy": "lease"})
        return parts.events.record(decision, signal.source.value, list(signal.alerts), parts.wall())
    if passed and spec.group:  # like any scale-out of a group's pool that cannot take it: the group's next pool
        pass_on(Signal(pool=spec.group, action=Action.SCALE_OUT, source=signal.source, step=passed,
                       force=True, fallback=True, within=signal.within,  # the sender's scope holds for the group
                       reason=f"replacement for {passed} node(s) in repair in "
                             f"pool {spec.name}, which is short or at max; asked of group {spec.group}"))
    return recorded


def _said(signal: Signal, reason: str) -> str:
    return f"{signal.reason}: {reason}" if signal.reason else reason


def _pool_of(parts: RepairParts, signal: Signal) -> tuple[PoolSpec | None, tuple[Outcome, str]]:
    """The pool the repair is for (a group's member with ``repair:``), else the outcome and reason of why none."""
    spec = parts.settings.pools.get(signal.pool)
    if spec is None and signal.pool in parts.settings.groups:  # the member whose nodes the named node is of, among
        members = [parts.settings.pools[m] for m in parts.settings.groups[signal.pool]  # those the sender may act on
                   if signal.within is None or m in signal.within]
        spec = _member_of(parts, [m for m in members if m.repair is not None], signal.nodes)
    if spec is None:
        return None, (Outcome.UNKNOWN_POOL, f"pool {signal.pool!r} is not configured")
    if spec.repair is None:
        return None, (Outcome.UNROUTED, f"pool {spec.name} has no `repair:` section: its nodes are not repaired")
    if parts.cluster_for(spec) is None:
        return None, (Outcome.UNROUTED, "a repair needs the `kubernetes:` section (or the pool's cluster in "
                                        "`clusters:`)")
    if not signal.nodes:
        return None, (Outcome.UNROUTED, "a repair names its node (label routing.node_label "
                                        f"{parts.settings.config.routing.node_label!r}); none was named")
    return spec, (Outcome.SCALED, "")


def members_of(parts: RepairParts, group: str, node: str) -> list[PoolSpec]:
    """The members of ``group`` (with ``repair:``) that have a node named ``node`` in their own cluster (node names
    may repeat across clusters): what a repair alert for the group could act on, for the webhook's check of a scoped
    credential. A cluster that cannot be read says nothing."""
    members = [parts.settings.pools[name] for name in parts.settings.groups.get(group, ())]
    return _holders(parts, [m for m in members if m.repair is not None], node)


def _member_of(parts: RepairParts, members: list[PoolSpec], nodes: Sequence[str]) -> PoolSpec | None:
    """The group's member (with ``repair:``) the first named node belongs to; else its first such member (the
    repair then says the node is not the pool's), None when no member repairs nodes."""
    if not nodes or len(members) < 2:
        return members[0] if members else None
    return next(iter(_holders(parts, members, nodes[0])), members[0])


def _holders(parts: RepairParts, members: list[PoolSpec], node: str) -> list[PoolSpec]:
    """The ``members`` whose nodes ``node`` is of, each member's cluster asked once (node names repeat across
    clusters); a cluster that cannot be read says nothing (logged)."""
    read: dict[str, NodeView | None] = {}
    found = []
    for member in members:
        cluster = parts.cluster_for(member)
        if cluster is None:
            continue
        if member.cluster not in read:
            try:
                read[member.cluster] = cluster.node(node)
            except ClusterError as exc:
                read[member.cluster] = None
                log.warning("group repair: node %s unreadable in cluster %s: %s", node, member.cluster,
                            redact_text(str(exc)))
        view = read[member.cluster]
        if view is not None and _in_pool(view, member):
            found.append(member)
    return found


def _in_pool(view: NodeView, spec: PoolSpec) -> bool:
    labels = dict(view.labels)
    return all(labels.get(k) == v if v else k in labels for k, v in spec.node_selector)


def _start_held(parts: RepairParts, spec: PoolSpec, signal: Signal, state: PoolState,
                now: float) -> tuple[Decision, PoolChange, Started]:
    """The start under the pool's hold: the decision, the pool's change and what it did (how many nodes to ask of
    its group, the replacement's size to store on the repairs)."""
    cluster = parts.cluster_for(spec)
    assert spec.repair is not None and cluster is not None
    plan = Decision(spec.name, Action.REPAIR, Outcome.SKIPPED_PAUSED, None, None, "")
    done = Started()
    if state.paused:
        said = f"pool {spec.name} is paused: repairs wait until it is resumed"
        return _with(plan, signal, said), PoolChange(), done
    provider = parts.providers[spec.name]
    try:
        cloud = provider.status(state.tracked(), now)
    except ProviderError as exc:
        return _failed(plan, signal, f"pool status: {redact_text(exc.message)}; nothing was touched",
                       (exc.retry_after or 30.0) if exc.retryable else None), PoolChange(), done
    in_repair = {r.node for r in parts.store.repairs(spec.name)}
    named: list[str] = []
    for name in signal.nodes:
        try:
            view = None if name in in_repair else cluster.node(name)
        except ClusterError as exc:
            return _failed(plan, signal, f"kubernetes: {redact_text(str(exc))}; nothing was touched",
                           CLUSTER_RETRY), PoolChange(), done
        if name not in in_repair and view is None:
            done.gone.append(name)
        elif view is not None and not _in_pool(view, spec):
            done.kept.append((name, f"not a node of pool {spec.name}"))
        else:
            named.append(name)
    admission = admit(named, in_repair, spec.repair, cloud.current)
    done.duplicate = list(admission.duplicate)
    done.kept += [(n, f"over the repair budget ({admission.describe()})") for n in admission.over_budget]
    plan = Decision(spec.name, Action.REPAIR, Outcome.REPAIR_STARTED, cloud.current, cloud.current, "")
    if not admission.start:
        return _nothing(plan, signal, admission, done), PoolChange(), done
    if spec.dry_run:
        return _dry_run(plan, signal, spec, admission, done), PoolChange(), done
    reason = f"{signal.reason or 'repair'}"[:300]
    for name in admission.start:
        _cordon(parts, spec, name, now, reason, done)
    if not done.nodes:
        return _nothing(plan, signal, admission, done), PoolChange(), done
    change = _replace(parts, spec, state, cloud, now, done)
    bits = [f"repair of {', '.join(done.nodes)} started: cordoned", done.replacement]
    if done.kept:
        bits.append(f"left alone: {summary(done.kept)}")
    details = {**_details(admission, done), "replacement": done.reached}
    return (Decision(spec.name, Action.REPAIR, Outcome.REPAIR_STARTED, cloud.current,
                     done.reached if done.reached is not None else cloud.current, _said(signal, "; ".join(bits)),
                     details=details), change, done)


def _with(plan: Decision, signal: Signal, reason: str) -> Decision:
    return Decision(plan.pool, plan.action, plan.outcome, plan.from_, plan.to, _said(signal, reason))


def _failed(plan: Decision, signal: Signal, reason: str, retry: float | None) -> Decision:
    return Decision(plan.pool, plan.action, Outcome.FAILED, None, None, _said(signal, reason), retry_after=retry)


def _details(admission: Admission, done: Started) -> dict[str, Any]:
    return {"nodes": list(done.nodes), "duplicate": list(done.duplicate), "gone": list(done.gone),
            "budget": admission.budget,
            "kept": [{"node": n, "reason": r} for n, r in done.kept]}


def _nothing(plan: Decision, signal: Signal, admission: Admission, done: Started) -> Decision:
    """No repair started: over the budget, already in repair, or no node of the pool named."""
    if admission.over_budget:
        outcome, said = Outcome.SKIPPED_REPAIR_BUDGET, (f"no repair started: {admission.describe()} (repair."
                                                        f"max_unhealthy); nothing was touched")
    elif (done.duplicate or done.gone) and not done.kept:
        bits = ([f"already in repair: {', '.join(done.duplicate)}"] if done.duplicate else []) + (
            [f"no longer in the cluster (repaired or removed already): {', '.join(done.gone)}"] if done.gone else [])
        outcome, said = Outcome.SKIPPED_DUPLICATE, "; ".join(bits)
    else:
        outcome, said = Outcome.FAILED, f"no repair started: {summary(done.kept)}"
    if done.kept and outcome is not Outcome.FAILED:
        said += f"; {summary(done.kept)}"
    retry = CLUSTER_RETRY if outcome is Outcome.FAILED and done.cordon_failed else None
    return Decision(plan.pool, plan.action, outcome, plan.from_, plan.to, _said(signal, said), retry_after=retry,
                    details=_details(admission, done))


def _dry_run(plan: Decision, signal: Signal, spec: PoolSpec, admission: Admission, done: Started) -> Decision:
    assert spec.repair is not None
    current = plan.from_
    target = min(spec.max, current + len(admission.start)) if current is not None else None
    asks = (f"ask for a replacement ({current} -> {target})" if spec.repair.replace and target != current
            else "ask for no replacement")
    said = (f"dry run: would cordon {', '.join(admission.start)}, {asks}, then drain and remove "
            f"{'them' if len(admission.start) > 1 else 'it'} (GPU work that cannot move waits up to "
            f"{spec.repair.grace:.0f}s)")
    return Decision(plan.pool, plan.action, Outcome.DRY_RUN, current, current, _said(signal, said),
                    details={**_details(admission, done), "would_repair": list(admission.start)})


def _cordon(parts: RepairParts, spec: PoolSpec, name: str, now: float, reason: str, done: Started) -> None:
    """Store the repair, then cordon the node; a cordon that fails forgets the repair again."""
    cluster = parts.cluster_for(spec)
    assert cluster is not None
    since = parts.store.now(now)  # the store's clock: every replica times the grace alike (repair/carry.py _step)
    if not parts.store.add_repair(RepairRecord(spec.name, name, since, "cordoned", reason, None, "", now)):
        done.duplicate.append(name)  # another replica's start stored it a moment ago
        return
    try:
        cluster.cordon(name, REPAIR_OWNER, now)
    except ClusterError as exc:
        parts.store.end_repair(spec.name, name, None)
        done.kept.append((name, f"cordon failed: {redact_text(str(exc))[:200]}"))
        done.cordon_failed = True
        return
    done.nodes.append(name)


def _replace(parts: RepairParts, spec: PoolSpec, state: PoolState, cloud: CloudStatus, now: float,
             done: Started) -> PoolChange:
    """Ask for one more node per repair started, within max (no scale-out cooldown holds it back); the change to
    record. A pool short of capacity or at max leaves it to its group (``done.pass_on``)."""
    assert spec.repair is not None
    count, current = len(done.nodes), cloud.current
    if not spec.repair.replace:
        done.replacement = "no replacement asked (repair.replace: false)"
        return PoolChange()
    if current is None:
        done.replacement = "no replacement asked: the pool's size is unknown"
        return PoolChange()
    target = min(spec.max, current + count)
    short = state.short_until is not None and state.short_until > now
    if short or target == current:
        why = "the pool is short of capacity" if short else f"the pool is at max ({spec.max})"
        done.pass_on = count if spec.group else 0
        done.replacement = (f"{why}: replacement asked of group {spec.group}" if spec.group
                            else f"no replacement: {why}")
        done.marked = current
        return PoolChange()
    provider = parts.providers[spec.name]
    try:
        reached = parts.door.scale(spec, provider, current, target, now, cloud)
    except NoCapacityError as exc:
        done.pass_on = count if spec.group else 0
        done.replacement = f"replacement refused for capacity: {redact_text(exc.message)}"
        done.marked = current
        return PoolChange()
    except ProviderError as exc:  # the reconciler asks again on its next tick
        done.replacement = f"replacement not asked yet ({redact_text(exc.message)}); the reconciler retries"
        return PoolChange()
    done.reached = reached
    done.replacement = f"replacement asked: {current} -> {reached}"
    done.marked = reached
    return changed(provider, now, reached, Action.SCALE_OUT)
