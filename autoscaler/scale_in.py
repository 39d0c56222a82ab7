"""Node-aware scale-in: pick the nodes, cordon them, check again, remove exactly those; leave nothing half-done.

Runs under the pool's lease (the engine calls it), with an injected clock and sleep. Every node this module
cordons carries ``gpu-autoscaler/cordoned: <owner>@<time>``; any path that does not end in a removal request
uncordons it, and :meth:`NodeScaleIn.sweep` uncordons what a dead decision left behind.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from autoscaler.models import Outcome, PoolSpec
from autoscaler.cluster.nodes import (REMOVING, Cluster, ClusterError, MarkedNodes, NodeGone, NodeView, kept_reason,
                                      pick_victims)
from providers import NodeRef, ProviderError, RemovesNamedNodes

log = logging.getLogger(__name__)

REMOVAL_GRACE = 1800.0  # a node the cloud was asked to remove and still has after this is uncordoned again
RETRY_EVERY = 5.0  # seconds between eviction rounds of a forced removal
SHOWN = 4  # kept nodes named in a reason (the details list more)
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


def summary(kept: Sequence[tuple[str, str]]) -> str:
    shown = "; ".join(f"{n}: {r}" for n, r in kept[:SHOWN])
    more = len(kept) - SHOWN
    return shown + (f"; and {more} more" if more > 0 else "")


class NodeScaleIn:
    """The orchestration between a :class:`Cluster` and a provider that removes named nodes."""

    def __init__(self, cluster: Cluster, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.cluster = cluster
        self.clock = clock
        self.sleep = sleep

    # ---- leftovers -----------------------------------------------------------------------------------------------
    def sweep(self, spec: PoolSpec, now: float, views: Sequence[NodeView] | None = None) -> list[str]:
        """Uncordon the pool's nodes that carry our mark but were never handed to the cloud.

        Called under the pool's lease, before this decision cordons anything: so every such mark belongs to a
        decision that no longer holds the lease (its worker died, or it lost the lease and will not remove: it
        renews the lease right before the removal). A node whose removal was asked (owner ends in ``/removing``)
        is the cloud's for ``REMOVAL_GRACE``; one still there after that is uncordoned too."""
        if views is None:
            selector = dict(spec.node_selector)
            views = (self.cluster.marked(selector) if isinstance(self.cluster, MarkedNodes)
                     else self.cluster.nodes(selector))
        done = []
        for view in views:
            if view.cordoned_by_us is None:
                continue
            removing = view.cordon_owner.endswith(REMOVING)
            if not removing or view.cordoned_by_us < now - REMOVAL_GRACE:
                self.cluster.uncordon(view.name)
                done.append(view.name)
        if done:
            log.warning("pool=%s uncordoned nodes a stopped decision left cordoned: %s", spec.name, ", ".join(done))
        return done

    # ---- scale-in by alert ---------------------------------------------------------------------------------------
    def scale_in(self, spec: PoolSpec, provider: RemovesNamedNodes, current: int, remove: int,
                 alerted: Sequence[str], owner: str, now: float, renew: Callable[[], bool]) -> Removal:
        """Remove up to ``remove`` idle nodes (alert-named first, then newest), never below ``spec.min``."""
        if spec.victims == "alerted" and not alerted:
            swept = self.sweep(spec, now)
            return Removal(Outcome.SKIPPED_IN_USE, current, "victims: alerted, and the alerts name no node "
                           "(label routing.node_label)", uncordoned=tuple(swept))
        views = self.cluster.nodes(dict(spec.node_selector))
        swept = self.sweep(spec, now, views)
        views = [replace(v, cordoned=False, cordoned_by_us=None, cordon_owner="") if v.name in swept else v
                 for v in views if v.name in swept or not v.cordon_owner.endswith(REMOVING)]  # already going
        chosen, kept = pick_victims(views, remove, alerted, spec.victims, spec.min)
        kept_list = [(n.name, _why(n, r)) for n, r in kept]
        result = self._cordon_and_remove(spec, provider, current, chosen, kept_list, owner, renew)
        return replace(result, uncordoned=tuple(swept))

    def preview(self, spec: PoolSpec, remove: int, alerted: Sequence[str]) -> Removal:
        """What :meth:`scale_in` would pick, changing nothing (a dry-run pool)."""
        views = [v for v in self.cluster.nodes(dict(spec.node_selector)) if not v.cordon_owner.endswith(REMOVING)]
        chosen, kept = pick_victims(views, remove, alerted, spec.victims, spec.min)
        names = tuple(v.name for v in chosen)
        said = f"would remove {', '.join(names)}" if names else "no node could go"
        return Removal(Outcome.DRY_RUN, len(views) - len(names), said, names,
                       tuple((n.name, _why(n, r)) for n, r in kept))

    # ---- scale-in by name (manual) -------------------------------------------------------------------------------
    def remove_named(self, spec: PoolSpec, provider: RemovesNamedNodes, current: int, names: Sequence[str],
                     room: int, force: bool, owner: str, now: float, renew: Callable[[], bool]) -> Removal:
        """Remove the named nodes (at most ``room``); a busy one only with ``force``, after evicting its GPU pods."""
        views = {v.name: v for v in self.cluster.nodes(dict(spec.node_selector))}
        swept = self.sweep(spec, now, list(views.values()))
        kept: list[tuple[str, str]] = []
        chosen: list[NodeView] = []
        busy: list[NodeView] = []
        for name in names:
            view = views.get(name)
            if view is None:
                kept.append((name, f"not a node of pool {spec.name} (selector {_selector(spec)})"))
            elif view.cordon_owner.endswith(REMOVING) and name not in swept:
                kept.append((name, "its removal was already asked of the cloud"))
            elif view.protected:
                kept.append((name, view.protected))
            elif len(chosen) + len(busy) >= room:
                kept.append((name, f"the pool keeps at least {spec.min} nodes"))
            elif view.gpu_pods and not force:
                kept.append((name, f"{view.busy_reason()} (add \"force\": true to evict it)"))
            else:
                (busy if view.gpu_pods else chosen).append(view)
        if not chosen and not busy:
            outcome = Outcome.SKIPPED_IN_USE if any(n in views for n, _ in kept) else Outcome.FAILED
            return Removal(outcome, current, f"no named node can go: {summary(kept)}", kept=tuple(kept),
                           uncordoned=tuple(swept))
        drained: list[NodeView] = []
        for view in busy:
            problem = self._drain(spec, view, owner, renew)
            if problem:
                kept.append((view.name, problem))
            else:
                drained.append(view)
        if busy and not chosen and not drained:
            return Removal(Outcome.FAILED, current, summary(kept), kept=tuple(kept), uncordoned=tuple(swept))
        result = self._cordon_and_remove(spec, provider, current, chosen, kept, owner, renew, drained)
        return replace(result, uncordoned=tuple(swept))

    def _drain(self, spec: PoolSpec, view: NodeView, owner: str, renew: Callable[[], bool]) -> str | None:
        """Cordon and evict the node's GPU pods until they are gone; None when drained, else why not (uncordoned)."""
        self.cluster.cordon(view.name, owner, self.clock())
        deadline = self.clock() + spec.drain_timeout
        pending = view.gpu_pods
        refused: dict[str, str] = {}
        try:
            while True:
                for pod in pending:
                    answer = self.cluster.evict(pod.namespace, pod.name)
                    if answer:
                        refused[f"{pod.namespace}/{pod.name}"] = answer
                again = self.cluster.node(view.name)
                pending = again.gpu_pods if again else ()
                if not pending:
                    return None
                if self.clock() >= deadline or not renew():
                    blocking = pending[0]
                    key = f"{blocking.namespace}/{blocking.name}"
                    said = refused.get(key, "still running after its eviction")
                    why = "its lease was lost" if self.clock() < deadline else \
                        f"gave up after drain_timeout {spec.drain_timeout:.0f}s"
                    self.cluster.uncordon(view.name)
                    return f"{why}: GPU pod {key} blocks the drain ({said})"
                self.sleep(RETRY_EVERY)
        except ClusterError as exc:
            raise self._unwind(exc, [view.name]) from None

    # ---- the common end ------------------------------------------------------------------------------------------
    def _cordon_and_remove(self, spec: PoolSpec, provider: RemovesNamedNodes, current: int,
                           chosen: Sequence[NodeView], kept: list[tuple[str, str]], owner: str,
                           renew: Callable[[], bool], drained: Sequence[NodeView] = ()) -> Removal:
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
                    self.cluster.cordon(view.name, owner, self.clock())
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
        if not renew():
            stuck = self._uncordon(mine)
            return Removal(Outcome.FAILED, current, "the pool's lease was lost before the removal" + _stuck(stuck),
                           kept=tuple(kept))
        refs = [NodeRef(v.name, v.provider_id) for v in survivors]
        try:
            reached = provider.remove_nodes(refs, current, self.clock())
        except ProviderError as exc:
            self._uncordon(mine)
            return Removal(Outcome.FAILED, exc.applied if exc.applied is not None else current,
                           f"removing {', '.join(r.name for r in refs)}", tuple(r.name for r in refs), tuple(kept),
                           error=exc)
        except Exception:
            self._uncordon(mine)
            raise
        for name in mine:  # the cloud has them now: the sweep leaves them for REMOVAL_GRACE
            self._best_effort(self.cluster.cordon, name, owner + REMOVING, self.clock())
        names = tuple(r.name for r in refs)
        return Removal(Outcome.SCALED, reached, f"removed {', '.join(names)}", names, tuple(kept))

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
