"""The engine's door to node-aware scale-in: each step of a leased decision that touches the pool's nodes.

Where ``kubernetes:`` is configured, a pool's nodes have a selector and its provider removes named nodes, a
scale-in names its nodes (``autoscaler/nodes/scale_in.py`` over ``autoscaler/cluster/nodes.py``). This module answers,
for the engine: whether a pool names its nodes, the pool's node list (for nodes in flight), the stale-cordon sweep, a
dry run's preview and the removal itself as the ``Decision`` and ``PoolChange`` to record. A cluster that cannot be read
is logged or turned into a decision here, its message redacted.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable, Mapping, Sequence

from autoscaler.pool.attempt import Attempt
from autoscaler.pool.hold import Lease
from autoscaler.models import Decision, Outcome, PoolSpec, Source
from autoscaler.cluster.nodes import Cluster, ClusterError, NodeView
from autoscaler.pool.door import changed, failed
from autoscaler.redact import redact_text
from autoscaler.nodes.removals import Seen
from autoscaler.cluster.nodes import summary
from autoscaler.nodes.scale_in import Leased, NodeScaleIn
from autoscaler.store import PoolChange
from providers import NodePoolProvider, RemovesNamedNodes

log = logging.getLogger(__name__)

CLUSTER_RETRY = 30.0  # seconds: when a sender may retry a scale-in the Kubernetes API failed


class NodeActions:
    """Node-aware steps, each in the pool's own cluster: one :class:`NodeScaleIn` per cluster by name (none: no
    ``kubernetes:`` or ``clusters:`` configured, no pool names nodes)."""

    def __init__(self, scale_ins: Mapping[str, NodeScaleIn]) -> None:
        self.scale_ins = dict(scale_ins)

    def of(self, spec: PoolSpec) -> NodeScaleIn | None:
        """The pool's cluster's node-aware scale-in; None where no cluster is configured for the pool."""
        return self.scale_ins.get(spec.cluster)

    def names_nodes(self, spec: PoolSpec, provider: NodePoolProvider) -> bool:
        """Whether this pool's nodes can be removed by name: its cluster is configured, the pool's nodes have a
        selector and its provider declares that it removes named nodes."""
        return self.of(spec) is not None and bool(spec.node_selector) and provider.capabilities.removes_named_nodes

    def lists_marked(self, spec: PoolSpec) -> bool:
        """Whether the pool's nodes are listed GPU-ready or not, as in flight counts them (``marked``)."""
        cluster = self._cluster(spec)
        return cluster is not None and cluster.capabilities.lists_marked

    def marked(self, spec: PoolSpec) -> list[NodeView] | None:
        """The pool's nodes without their pods (one list call in its cluster), where its cluster is configured, the
        pool's nodes are selectable and the cluster lists them so; None otherwise or when it cannot be read."""
        cluster = self._cluster(spec)
        if cluster is None or not cluster.capabilities.lists_marked:
            return None
        return _read(spec, lambda: cluster.marked(dict(spec.node_selector)), "in flight from recorded scale-outs")

    def with_pods(self, spec: PoolSpec) -> list[NodeView] | None:
        """The pool's nodes with their pods (the headroom's spare GPUs), where its cluster is configured and the
        pool's nodes are selectable; None otherwise or when the cluster cannot be read (the headroom then measures
        need from the alert's value)."""
        cluster = self._cluster(spec)
        if cluster is None:
            return None
        return _read(spec, lambda: cluster.nodes(dict(spec.node_selector)), "headroom from the alert's value")

    def _cluster(self, spec: PoolSpec) -> Cluster | None:
        """The pool's cluster, where it is configured and the pool's nodes are selectable; else None."""
        scale_in = self.of(spec)
        return scale_in.cluster if scale_in is not None and spec.node_selector else None

    def sweep(self, spec: PoolSpec, since: float, views: Sequence[NodeView] | None = None,
              seen: Seen | None = None) -> None:
        """Best effort: uncordon what a stopped decision left cordoned (the next one retries on failure), except
        nodes whose removal may have been sent, until ``seen`` (the cloud's view) resolves them."""
        scale_in = self.of(spec)
        assert scale_in is not None
        try:
            scale_in.sweep(spec, since, views, seen)
        except ClusterError as exc:
            log.warning("pool=%s stale-cordon sweep: %s", spec.name, redact_text(str(exc)))

    def preview(self, attempt: Attempt, plan: Decision) -> Decision:
        """A dry-run scale-in that names its nodes: which would go and which stay (read only)."""
        scale_in = self.of(attempt.spec)
        assert scale_in is not None and plan.from_ is not None and plan.to is not None
        try:
            done = scale_in.preview(attempt.spec, plan.from_ - plan.to, attempt.signal.nodes)
        except ClusterError as exc:
            return replace(plan, reason=f"{plan.reason}; nodes unknown: {redact_text(str(exc))}")
        return replace(plan, reason=f"{plan.reason}; {done.reason}",
                       details={**plan.details, **done.details(), "cluster": attempt.spec.cluster})

    def remove(self, attempt: Attempt, plan: Decision, failures: int,
               lease: Lease) -> tuple[Decision, PoolChange]:
        """A scale-in that names its nodes: pick (or take the operator's), cordon, re-check, remove exactly those
        through the door (the provider gets ``attempt.status``, the status the plan was decided on)."""
        spec, provider, signal, now = attempt.spec, attempt.provider, attempt.signal, attempt.now
        scale_in = self.of(spec)
        assert scale_in is not None and isinstance(provider, RemovesNamedNodes)
        assert plan.from_ is not None and plan.to is not None
        job = Leased(spec, provider, plan.from_, lease.owner, lease.renew, now, attempt.status,
                     attempt.provider.capabilities.reports_count)
        try:
            if signal.source is Source.MANUAL and signal.nodes:
                done = scale_in.remove_named(job, signal.nodes, plan.from_ - plan.to, signal.force)
            else:
                done = scale_in.scale_in(job, plan.from_ - plan.to, signal.nodes)
        except ClusterError as exc:
            # The API server failed, not the cloud: nothing was asked of the cloud, so the pool does not back off
            # (a scale-out must not wait for a cordon RBAC fix); the sender's retry comes back after CLUSTER_RETRY.
            reason = (f"{plan.reason} failed [KubernetesApi]: kubernetes: {redact_text(str(exc))}; the cloud was "
                      "not asked (no backoff)")
            return (Decision(spec.name, plan.action, Outcome.FAILED, plan.from_, plan.from_, reason,
                             retry_after=CLUSTER_RETRY, details={**plan.details, "code": "KubernetesApi",
                                                                 "retryable": True, "cluster": spec.cluster}),
                    PoolChange())
        details = {**plan.details, **done.details(), "cluster": spec.cluster}  # node names repeat across clusters
        if done.error is not None:
            decision, change = failed(spec, not provider.capabilities.reports_count, failures, plan, now, done.error)
            return replace(decision, details={**decision.details, **details}), change
        if done.outcome is not Outcome.SCALED:  # nothing asked of the cloud: no cooldown, no backoff
            return Decision(spec.name, plan.action, done.outcome, plan.from_, plan.from_,
                            f"{plan.reason}; {done.reason}", details=details), PoolChange()
        return Decision(spec.name, plan.action, Outcome.SCALED, plan.from_, done.reached,
                        f"{plan.reason}; {done.reason}" + (f"; kept {summary(done.kept)}" if done.kept else ""),
                        details=details), changed(provider, now, done.reached, plan.action)


def _read(spec: PoolSpec, read: Callable[[], list[NodeView]], instead: str) -> list[NodeView] | None:
    """``read()``, or None when the cluster cannot be read (logged, with what the decision uses instead)."""
    try:
        return read()
    except ClusterError as exc:
        log.warning("pool=%s %s: cluster unreadable: %s", spec.name, instead, redact_text(str(exc)))
        return None
