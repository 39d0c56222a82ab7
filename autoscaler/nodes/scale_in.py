"""Node-aware scale-in: pick the nodes, cordon them, check again, remove exactly those; leave nothing half-done.

Runs under the pool's lease (the engine calls it), with an injected clock and sleep. Every node this module
cordons carries ``gpu-autoscaler/cordoned: <owner>@<time>``; any path that does not end in a removal request
uncordons it, and :meth:`NodeScaleIn.sweep` uncordons what a dead decision left behind.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from autoscaler.clock import SYSTEM, Clock
from autoscaler.models import CloudStatus, Outcome, PoolSpec
from autoscaler.cluster.movable import Pick, pick_movable
from autoscaler.cluster.nodes import (REMOVING, REPAIR_OWNER, Cluster, ClusterError, NodeGone, NodeView, going,
                                      pick_victims, summary, with_gangs)
from autoscaler.cluster.pods import Budget
from autoscaler.nodes.drain import drain
from autoscaler.pool.door import Door
from autoscaler.nodes.removals import Seen, forget, resolve
from autoscaler.store import RemovalIntent, Store, StoreUnavailable
from providers import NodeRef, ProviderError, RemovesNamedNodes

log = logging.getLogger(__name__)

REMOVAL_GRACE = 1800.0  # a node the cloud was asked to remove and still has after this is uncordoned again
KEPT_LISTED = 100  # kept nodes listed in an event's details (a big pool's event stays small)


@dataclass(frozen=True)
class Removal:
    """What one node-aware scale-in did."""

    outcome: Outcome  # SCALED, SKIPPED_IN_USE or FAILED
    reached: int
    reason: str
    nodes: tuple[str, ...] = ()
    kept: tuple[tuple[str, str], ...] = ()  # (node, why)
    error: ProviderError | None = None
    uncordoned: tuple[str, ...] = field(default=())  # by the sweep

    def details(self) -> dict[str, Any]:
        """``nodes`` removed and ``kept`` with reasons (at most ``KEPT_LISTED``; ``kept_total`` says how many)."""
        out: dict[str, Any] = {"nodes": list(self.nodes),
                               "kept": [{"node": n, "reason": r} for n, r in self.kept[:KEPT_LISTED]]}
        if len(self.kept) > KEPT_LISTED:
            out["kept_total"] = len(self.kept)
        if self.uncordoned:
            out["uncordoned"] = list(self.uncordoned)
        return out


def _why(node: NodeView, reason: str) -> str:
    """The reason without its ``kept <node>: `` prefix (the details name the node in its own field)."""
    return reason.removeprefix(f"kept {node.name}: ")


@dataclass(frozen=True)
class Leased:
    """What a scale-in under a pool's lease works with: the pool, its provider and count, the lease's owner (the
    cordons' mark) and its renewal, and the decision's time."""

    spec: PoolSpec
    provider: RemovesNamedNodes
    current: int
    owner: str
    renew: Callable[[], bool]
    now: float
    status: CloudStatus | None = None  # the cloud's status the decision was made on, handed to the provider
    counts: bool = True  # whether that status counts the pool's machines (the provider reports its count)

    @property
    def seen(self) -> Seen:
        return Seen(self.status, self.counts)


class NodeScaleIn:
    """The orchestration between a :class:`Cluster` and a provider that removes named nodes."""

    def __init__(self, cluster: Cluster, door: Door, clock: Clock = SYSTEM, removals: Store | None = None) -> None:
        self.cluster = cluster
        self.door = door  # the removal is asked through it (autoscaler/pool/door.py)
        self.wall = clock.wall
        self.sleep = clock.sleep
        self.removals = removals  # where removals about to be sent are recorded (autoscaler/nodes/removals.py)

    # ---- leftovers -----------------------------------------------------------------------------------------------
    def sweep(self, spec: PoolSpec, now: float, views: Sequence[NodeView] | None = None,
              seen: Seen | None = None) -> tuple[list[str], set[str]]:
        """Uncordon the pool's nodes that carry our mark but were never handed to the cloud; also the nodes whose
        removal may have been sent and that stay cordoned (not to be picked now).

        Called under the pool's lease, before this decision cordons anything: so every such mark belongs to a
        decision that no longer holds the lease (its worker died, or it lost the lease and will not remove: it
        renews the lease right before the removal). A node whose removal was asked (owner ends in ``/removing``)
        is the cloud's for ``REMOVAL_GRACE``; one still there after that is uncordoned too. A node whose removal
        was recorded as about to be sent stays cordoned until ``seen``, the cloud's view, resolves it
        (:func:`autoscaler.nodes.removals.resolve`)."""
        if views is None:
            selector = dict(spec.node_selector)
            views = (self.cluster.marked(selector) if self.cluster.capabilities.lists_marked
                     else self.cluster.nodes(selector))
        held = resolve(self.cluster, self.removals, spec.name, views, seen, now, REMOVAL_GRACE)
        done = []
        for view in views:
            if view.cordoned_by_us is None or view.cordon_owner == REPAIR_OWNER or view.name in held:
                continue
            removing = view.cordon_owner.endswith(REMOVING)
            if not removing or view.cordoned_by_us < now - REMOVAL_GRACE:
                self.cluster.uncordon(view.name)
                done.append(view.name)
        if done:
            log.warning("pool=%s uncordoned nodes a stopped decision left cordoned: %s", spec.name, ", ".join(done))
        return done, held

    # ---- scale-in by alert ---------------------------------------------------------------------------------------
    def scale_in(self, job: Leased, remove: int, alerted: Sequence[str]) -> Removal:
        """Remove up to ``remove`` idle nodes (alert-named first, then newest), never below ``spec.min``; with
        ``victims: movable`` also drain one node whose pods can all move."""
        spec = job.spec
        if spec.victims == "alerted" and not alerted:
            swept, _ = self.sweep(spec, job.now, seen=job.seen)
            return Removal(Outcome.SKIPPED_IN_USE, job.current, "victims: alerted, and the alerts name no node "
                           "(label routing.node_label)", uncordoned=tuple(swept))
        views = self._views(spec)
        swept, held = self.sweep(spec, job.now, views, job.seen)
        views = [replace(v, cordoned=False, cordoned_by_us=None, cordon_owner="") if v.name in swept else v
                 for v in views if v.name in swept or (going(v) is None and v.name not in held)]
        pick = self._pick(spec, views, remove, alerted)
        kept_list = [(n.name, _why(n, r)) for n, r in pick.kept]
        drained = self._drain_all(job, [pick.drain] if pick.drain else [], kept_list)
        if pick.drain is not None and not pick.idle and not drained:
            return Removal(Outcome.FAILED, job.current, f"no node of pool {spec.name} went: {summary(kept_list)}",
                           kept=tuple(kept_list), uncordoned=tuple(swept))
        result = self._cordon_and_remove(job, pick.idle, kept_list, drained)
        return replace(result, uncordoned=tuple(swept))

    def _views(self, spec: PoolSpec) -> list[NodeView]:
        """The pool's nodes with their pods, those a waiting atomic scale-out asked for kept (``with_gangs``)."""
        views = self.cluster.nodes(dict(spec.node_selector))
        gangs = self.removals.gangs(spec.name) if self.removals is not None else []
        return with_gangs(views, ((g.id, set(g.known)) for g in gangs))

    def _pick(self, spec: PoolSpec, views: Sequence[NodeView], remove: int, alerted: Sequence[str]) -> Pick:
        """The victims of ``spec.victims``: idle (or alert-named) nodes, and with ``movable`` a node to drain."""
        if spec.victims != "movable":
            chosen, kept = pick_victims(views, remove, alerted, spec.victims, spec.min)
            return Pick(chosen, None, kept)
        cluster = self.cluster

        def budgets() -> list[Budget] | None:  # read once, and only when a busy node is weighed
            return cluster.budgets() if cluster.capabilities.lists_budgets else None

        return pick_movable(views, remove, alerted, spec.min, spec.movable_owners, budgets)

    def preview(self, spec: PoolSpec, remove: int, alerted: Sequence[str]) -> Removal:
        """What :meth:`scale_in` would pick, changing nothing (a dry-run pool)."""
        views = [v for v in self._views(spec) if going(v) is None]
        pick = self._pick(spec, views, remove, alerted)
        names = tuple(v.name for v in pick.idle) + ((pick.drain.name,) if pick.drain else ())
        said = f"would remove {', '.join(names)}" if names else "no node could go"
        if pick.drain is not None:
            said += f" (draining {pick.drain.name} first: {len(pick.drain.pods)} pods would move)"
        return Removal(Outcome.DRY_RUN, len(views) - len(names), said, names,
                       tuple((n.name, _why(n, r)) for n, r in pick.kept))

    # ---- scale-in by name (manual) -------------------------------------------------------------------------------
    def remove_named(self, job: Leased, names: Sequence[str], room: int, force: bool) -> Removal:
        """Remove the named nodes (at most ``room``); a busy one only with ``force``, after draining it (every
        pod but DaemonSets' and mirror pods, through the Eviction API)."""
        spec, current = job.spec, job.current
        force = force and spec.forced_removal  # false: the service account may not evict (docs/rbac.md)
        views = {v.name: v for v in self.cluster.nodes(dict(spec.node_selector))}
        swept, held = self.sweep(spec, job.now, list(views.values()), job.seen)
        kept: list[tuple[str, str]] = []
        chosen: list[NodeView] = []
        busy: list[NodeView] = []
        for name in names:
            view = views.get(name)
            if view is None:
                kept.append((name, f"not a node of pool {spec.name} (selector {_selector(spec)})"))
            elif (view.cordon_owner.endswith(REMOVING) and name not in swept) or name in held:
                kept.append((name, "its removal was already asked of the cloud"))
            elif view.protected:
                kept.append((name, view.protected))
            elif len(chosen) + len(busy) >= room:
                kept.append((name, f"the pool keeps at least {spec.min} nodes"))
            elif view.gpu_pods and not force:
                kept.append((name, f"{view.busy_reason()} ({_force_hint(spec)})"))
            else:
                (busy if view.gpu_pods or (force and view.pods) else chosen).append(view)
        if not chosen and not busy:
            outcome = Outcome.SKIPPED_IN_USE if any(n in views for n, _ in kept) else Outcome.FAILED
            return Removal(outcome, current, f"no named node can go: {summary(kept)}", kept=tuple(kept),
                           uncordoned=tuple(swept))
        drained = self._drain_all(job, busy, kept)
        if busy and not chosen and not drained:
            return Removal(Outcome.FAILED, current, summary(kept), kept=tuple(kept), uncordoned=tuple(swept))
        result = self._cordon_and_remove(job, chosen, kept, drained)
        return replace(result, uncordoned=tuple(swept))

    def _drain_all(self, job: Leased, views: Sequence[NodeView], kept: list[tuple[str, str]]) -> list[NodeView]:
        """Drain each node (:func:`autoscaler.nodes.drain.drain`); those drained, the others added to ``kept``."""
        spec = job.spec
        drained: list[NodeView] = []
        for view in views:
            try:
                problem = drain(self.cluster, spec, view, job.owner, job.renew, self.wall, self.sleep)
            except ClusterError as exc:
                raise self._unwind(exc, [view.name] + [v.name for v in drained]) from None
            if problem:
                kept.append((view.name, problem))
            else:
                drained.append(view)
        return drained

    # ---- the common end ------------------------------------------------------------------------------------------
    def _cordon_and_remove(self, job: Leased, chosen: Sequence[NodeView], kept: list[tuple[str, str]],
                           drained: Sequence[NodeView] = ()) -> Removal:
        spec, current, owner = job.spec, job.current, job.owner
        if not chosen and not drained:
            return Removal(Outcome.SKIPPED_IN_USE, current, f"no node of pool {spec.name} can go: {summary(kept)}",
                           kept=tuple(kept))
        mine = [v.name for v in drained]  # cordoned by _drain
        gone: set[str] = set()
        try:
            for view in chosen:
                if view.cordoned and view.cordoned_by_us is None:
                    continue  # someone else's cordon: theirs to lift
                try:
                    self.cluster.cordon(view.name, owner, self.wall())
                except NodeGone:
                    gone.add(view.name)  # deleted since the pick: kept below, as the re-read would
                    continue
                mine.append(view.name)
            survivors = list(drained)
            for view in chosen:
                again = None if view.name in gone else self.cluster.node(view.name)
                why = "gone before its removal was asked" if again is None else again.busy_reason()
                if why:
                    if view.name in mine:
                        self.cluster.uncordon(view.name)
                        mine.remove(view.name)
                    kept.append((view.name, why))
                else:
                    survivors.append(again or view)
        except ClusterError as exc:
            raise self._unwind(exc, mine) from None
        if not survivors:
            return Removal(Outcome.SKIPPED_IN_USE, current, f"no node of pool {spec.name} can go: {summary(kept)}",
                           kept=tuple(kept))
        if not job.renew():
            stuck = self._uncordon(mine)
            return Removal(Outcome.FAILED, current, "the pool's lease was lost before the removal" + _stuck(stuck),
                           kept=tuple(kept))
        refs = [NodeRef(v.name, v.provider_id) for v in survivors]
        names = tuple(r.name for r in refs)
        self._intend(job, names, mine)  # before the call: a worker killed in it leaves the record behind
        try:
            reached = self.door.remove(spec, job.provider, refs, current, self.wall(), job.status)
        except ProviderError as exc:
            if exc.applied is None:  # nothing went: the nodes are open again; else the next sweep resolves them
                forget(self.removals, spec.name, self._uncordon(mine), names)
            return Removal(Outcome.FAILED, exc.applied if exc.applied is not None else current,
                           f"removing {', '.join(names)}", names, tuple(kept), error=exc)
        unmarked = [name for name in mine  # the cloud has them now: the sweep leaves them for REMOVAL_GRACE
                    if not self._best_effort(self.cluster.cordon, name, owner + REMOVING, self.wall())]
        forget(self.removals, spec.name, unmarked, names)
        return Removal(Outcome.SCALED, reached, f"removed {', '.join(names)}", names, tuple(kept))

    def _intend(self, job: Leased, names: Sequence[str], mine: Sequence[str]) -> None:
        """Record that these nodes' removal is about to be sent (``autoscaler/nodes/removals.py``); a store that
        refuses it stops the removal before the call, the cordons lifted."""
        try:
            if self.removals is not None:
                at = self.wall()
                self.removals.intend_removals([RemovalIntent(job.spec.name, n, job.owner, at, job.current)
                                               for n in names])
        except StoreUnavailable:
            self._uncordon(mine)
            raise

    def _uncordon(self, names: Sequence[str]) -> list[str]:
        """Uncordon ``names``; those the API server would not uncordon (the sweep of a later decision retries)."""
        return [name for name in names if not self._best_effort(self.cluster.uncordon, name)]

    def _unwind(self, exc: ClusterError, names: Sequence[str]) -> ClusterError:
        """Uncordon ``names`` after ``exc``; the error, naming each node that stays cordoned and what lifts it."""
        stuck = self._uncordon(names)
        return ClusterError(f"{exc}{_stuck(stuck)}") if stuck else exc

    @staticmethod
    def _best_effort(call: Callable[..., None], *args: Any) -> bool:
        try:
            call(*args)
        except ClusterError as exc:  # the sweep of a later decision retries it
            log.warning("%s", exc)
            return False
        return True


def _stuck(names: Sequence[str]) -> str:
    """What the operator reads when an uncordon failed: which nodes stay cordoned, and what lifts the cordon."""
    if not names:
        return ""
    return (f"; left cordoned (the uncordon failed too): {', '.join(names)}: the next decision's sweep uncordons "
            f"once the API server answers, or run kubectl uncordon {' '.join(names)}")


def _selector(spec: PoolSpec) -> str:
    return ",".join(f"{k}={v}" for k, v in spec.node_selector)


def _force_hint(spec: PoolSpec) -> str:
    """What would let a busy node go by name."""
    if spec.forced_removal:
        return 'add "force": true to evict it'
    return f"pool {spec.name} has scale_in.forced_removal: false: it never evicts by hand"
