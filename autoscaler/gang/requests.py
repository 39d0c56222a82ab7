"""ProvisioningRequests served as cluster-autoscaler serves its atomic class (docs/gang.md): once a tick for each
cluster, in that cluster's round after its pools (so a gang settled this tick is written at once, and a cluster that
hangs stalls only its own requests), served only by that cluster's pools.

For each request of the configured class that is not finished (``Failed``, ``BookingExpired`` or
``CapacityRevoked``): a new one is sized from its PodTemplates (and their DRA claim templates) and asked all at once
of the first matching pool that can hold it now (a group's order where the matching pools form one), then
``Accepted``; one that no pool can ever hold is ``Failed`` with nothing asked; when a pool fell short (rolled back)
the next matching pool is asked for its own node count; once its gang is ``provisioned`` the request is
``Provisioned`` and its nodes booked (kept from scale-in) until a pod of the request runs on each (read from the
pool's listing of this tick) or ``booking`` ends (``BookingExpired``, the marks taken off); a booked node lost (gone
from the listing, or NotReady for NOT_READY_GRACE) revokes the capacity (``CapacityRevoked``, event
``capacity_revoked``). When every pool fell short it is ``Failed``. A request whose pools are busy, paused, short or
serving another gang waits."""
from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence, cast

from autoscaler.cluster.nodes import ClusterError, NodeView, parse_time
from autoscaler.cluster.requests import (ACCEPTED, BOOKING_EXPIRED, CAPACITY_REVOKED, FAILED, PROVISIONED,
                                         PodNeed, ProvisioningRequest, condition, consumes, nodes_needed,
                                         pod_need, template_gpus)
from autoscaler.engine.parts import Parts
from autoscaler.gang.ask import Ask, Reads, ask_pool, passed_over
from autoscaler.models import Action, CloudStatus, Decision, Outcome, PoolSpec, Source
from autoscaler.store.gangs import PROVISIONED as GANG_PROVISIONED, WAITING, GangRecord

log = logging.getLogger(__name__)
FINISHED = (FAILED, BOOKING_EXPIRED, CAPACITY_REVOKED)
#: How long a booked node may be NotReady before its capacity counts as lost: Kubernetes' default toleration of
#: ``node.kubernetes.io/not-ready`` (300 s), after which it evicts the node's pods anyway. A shorter blip (a kubelet
#: that missed its heartbeats) keeps the booking; a NotReady node whose condition gives no time is lost at once.
NOT_READY_GRACE = 300.0


@dataclass(frozen=True)
class Plan:
    """Where a request goes: the pools that can ever hold it (in the order tried), the group they form ("" none),
    the group's pools that do not match (never tried), nodes by pool; or why it can never be held."""

    pools: tuple[str, ...] = ()
    group: str = ""
    unmatched: tuple[str, ...] = ()
    nodes: Mapping[str, int] | None = None
    never: str = ""
    reason_code: str = ""


@dataclass(frozen=True)
class Round:
    """One cluster's round: its name, its node-aware pools and their nodes as this tick listed them (None: not
    listed); what the requests' pre-checks read in it (each pool's cloud status and state, the gangs waiting: once,
    however many requests wait) and the requests' sizes kept across rounds (``sized``)."""

    cluster: str
    pools: Mapping[str, PoolSpec]
    listed: Mapping[str, Sequence[NodeView] | None]
    reads: Reads = field(default_factory=Reads)
    sized: dict[tuple[str, str], tuple[str, Needs]] = field(default_factory=dict)


#: A request's pod sets as counted: (pods, what one pod needs) each; empty: no GPU asked.
Needs = tuple[tuple[int, PodNeed], ...]
#: Each cluster reader's sizes of the requests it serves, by ``(namespace, name)``: the resourceVersion they were
#: counted at and the needs. A request's spec and the PodTemplates Kueue writes for it do not change (a new
#: resourceVersion is counted again): a request waiting for room costs no PodTemplate read a tick.
_SIZED: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], tuple[str, Needs]]] = weakref.WeakKeyDictionary()


def serve(parts: Parts, cluster_name: str, specs: Sequence[PoolSpec],
          listed: Mapping[str, Sequence[NodeView] | None], now: float,
          seen: Mapping[str, CloudStatus] | None = None) -> list[Decision]:
    """One round over one cluster's ProvisioningRequests (one list, within the cluster's own timeout), served by
    ``specs``, that cluster's pools; the decisions recorded. ``seen``: the pools' cloud status as their rounds of this
    tick read it (a pool not in it is read once, here, however many requests wait)."""
    config = parts.settings.config.provisioning_requests
    cluster = parts.clusters.get(cluster_name)
    if config is None or cluster is None or not cluster.capabilities.reads_requests:
        return []
    pools = {s.name: s for s in specs if s.node_selector and parts.cluster_for(s) is cluster}
    reader = cast(Any, cluster).requests
    try:
        listed_requests = reader.list()
    except ClusterError as exc:
        log.warning("cluster=%s ProvisioningRequests not listed: %s; the next tick tries again", cluster_name, exc)
        return []
    mine = [r for r in listed_requests if r.class_name == config.class_ and not any(map(r.holds, FINISHED))]
    if not mine:
        return []
    gangs: dict[str, list[GangRecord]] = {}
    for gang in parts.store.gangs(waiting=False):
        if gang.request and gang.pool in pools:  # node names and request names repeat across clusters
            gangs.setdefault(gang.request, []).append(gang)
    sized = _SIZED.setdefault(reader, {})
    for gone in set(sized) - {(r.namespace, r.name) for r in mine}:  # finished or deleted: forgotten
        del sized[gone]
    where = Round(cluster_name, pools, listed, Reads(clouds=dict(seen or {})), sized)
    out: list[Decision] = []
    for request in mine:
        try:
            out += _one(parts, reader, where, request, gangs.get(request.key, []), now, config.booking)
        except ClusterError as exc:
            log.warning("ProvisioningRequest %s: %s; the next tick tries again", request.key, exc)
    return out


def _one(parts: Parts, reader: Any, where: Round, request: ProvisioningRequest, gangs: Sequence[GangRecord],
         now: float, booking: float) -> list[Decision]:
    def write(kind: str, status: bool, reason: str, message: str) -> None:
        reader.set_condition(request, condition(kind, status, reason, message, now, request.generation))

    if request.holds(PROVISIONED):
        revoked = _hold_booking(parts, reader, where, request, gangs, now)
        if revoked is not None:
            write(CAPACITY_REVOKED, True, "NodeLost", revoked.reason)
            return [parts.events.record(revoked, Source.RECONCILE.value, [], now)]
        since = parse_time(str((request.condition(PROVISIONED) or {}).get("lastTransitionTime") or ""))
        if since is not None and now >= since + booking:
            _unbook(parts, reader, gangs, now)
            write(BOOKING_EXPIRED, True, "BookingExpired", f"the booking of {booking:.0f}s ended; the nodes may go")
        return []
    latest = gangs[-1] if gangs else None
    if latest is not None and latest.state == WAITING:
        if not request.holds(ACCEPTED):
            write(ACCEPTED, True, "Accepted", f"asked of pool {latest.pool}, all {latest.asked} node(s) at once")
        return []
    if latest is not None and latest.state == GANG_PROVISIONED:
        for node in latest.nodes:
            reader.book(node, request.key)
        write(PROVISIONED, True, "Provisioned", f"all {latest.asked} node(s) of pool {latest.pool} are GPU-ready; "
                                                f"booked for the request's pods")
        return []
    plan = _plan(parts, reader, where, request)
    if plan.never:
        write(FAILED, True, plan.reason_code, plan.never)
        return []
    tried = latest.tried if latest is not None else ()  # rolled back (or refused): the next pool, its own count
    if latest is not None and not [name for name in plan.pools if name not in tried]:
        write(FAILED, True, "CapacityIsNotFound", f"every pool tried fell short: {', '.join(latest.tried)}")
        return []
    asked = _ask(parts, where, request, plan, tried, now)
    taken = next((d for d in asked if d.outcome is Outcome.SCALED), None)
    if taken is not None and not request.holds(ACCEPTED):
        said = (f"asked of pool {taken.pool}, all {plan.nodes[str(taken.pool)]} node(s) at once" if plan.nodes
                else "asked")
        write(ACCEPTED, True, "Accepted", said)
    return asked


def _hold_booking(parts: Parts, reader: Any, where: Round, request: ProvisioningRequest,
                  gangs: Sequence[GangRecord], now: float) -> Decision | None:
    """The booked nodes as this tick's listing shows them: each that runs a pod of the request released (its mark
    off: its GPU work keeps it now); when one is gone or NotReady for NOT_READY_GRACE, every mark off and the
    ``capacity_revoked`` decision to record (None while the booking holds). A pool not listed this tick is looked at
    the next."""
    def down_for(view: NodeView) -> float:
        return now - view.ready_since if view.ready_since else NOT_READY_GRACE

    for gang in gangs:
        nodes = where.listed.get(gang.pool)
        if gang.state != GANG_PROVISIONED or not gang.nodes or nodes is None:
            continue
        views = {v.name: v for v in nodes}
        lost = [n for n in gang.nodes
                if n not in views or not views[n].ready and down_for(views[n]) >= NOT_READY_GRACE - 1e-9]
        if lost:
            _unbook(parts, reader, gangs, now, gone=[n for n in lost if n not in views])
            said = ", ".join(f"{n} (gone)" if n not in views else
                             f"{n} (NotReady for {down_for(views[n]):.0f}s)" if views[n].ready_since else
                             f"{n} (NotReady)" for n in lost)
            return Decision(gang.pool, Action.SCALE_OUT, Outcome.CAPACITY_REVOKED, None, None,
                            f"ProvisioningRequest {request.key}: booked node(s) lost before its pods came: {said}",
                            details={"atomic": True, "gang": gang.id, "request": request.key, "lost": lost,
                                     **({"group": gang.grp} if gang.grp else {})})
        used = [n for n in gang.nodes if any(consumes(p, request) for p in views[n].pods)]
        for node in used:
            reader.book(node, None)
        if used:
            log.info("ProvisioningRequest %s: its pods run on %s: booking released", request.key, ", ".join(used))
            parts.store.keep_booked(gang.id, tuple(n for n in gang.nodes if n not in used), now)
    return None


def _unbook(parts: Parts, reader: Any, gangs: Sequence[GangRecord], now: float, gone: Sequence[str] = ()) -> None:
    """Every booking mark of the request's provisioned gangs taken off (``gone``: nodes deleted, nothing to patch)."""
    for gang in gangs:
        if gang.state == GANG_PROVISIONED and gang.nodes:
            for node in gang.nodes:
                if node not in gone:
                    reader.book(node, None)
            parts.store.keep_booked(gang.id, (), now)


def _ask(parts: Parts, where: Round, request: ProvisioningRequest, plan: Plan, tried: Sequence[str],
         now: float) -> list[Decision]:
    """The request asked of the first of its pools not tried yet that can hold it now, for that pool's own node
    count (nothing recorded while none can)."""
    assert plan.nodes is not None
    for name in plan.pools:
        if name in tried:
            continue
        spec = parts.settings.pools[name]
        ask = Ask(nodes=plan.nodes[name], source=Source.RECONCILE.value, force=True, request=request.key,
                  reason=f"ProvisioningRequest {request.key}", group=plan.group,
                  tried=tuple(tried) + tuple(n for n in plan.unmatched if n not in tried))
        if passed_over(parts, spec, ask, now, where.reads):
            continue
        where.reads.forget(name)  # asked: its status, its state and the gangs change
        return [ask_pool(parts, spec, ask, now)]
    return []


def _plan(parts: Parts, reader: Any, where: Round, request: ProvisioningRequest) -> Plan:
    """The request's pools among the cluster's, or why none can ever hold it (sized by ``_needs``)."""
    needs = _needs(parts, reader, where, request)
    if not needs:
        return Plan(never="its pods ask for no GPU", reason_code="NoGPUsAsked")
    matching: dict[str, int] = {}
    for spec in where.pools.values():
        labels = dict(spec.node_selector) | dict(spec.node_labels)
        if spec.gpus_per_node and spec.node_selector and all(
                labels.get(k) == v for _, need in needs for k, v in need.selector):
            counts = [nodes_needed(count, need.gpus, spec.gpus_per_node) for count, need in needs]
            matching[spec.name] = sum(counts) if all(counts) else 0
    if not matching:
        return Plan(never="no pool's nodes match its pods' nodeSelector (pools[].node_selector and node_labels, "
                          f"with gpus_per_node, among cluster {where.cluster}'s pools)", reason_code="NoPoolMatches")
    fits = [name for name, n in matching.items() if 0 < n <= parts.settings.pools[name].max]
    if not fits:
        said = ", ".join(f"{name}: {n or 'a pod larger than a node'} of max {parts.settings.pools[name].max}"
                         for name, n in matching.items())
        return Plan(never=f"over every matching pool's max ({said}); nothing asked", reason_code="OverMax")
    groups = {parts.settings.pools[name].group for name in fits}
    if len(groups) == 1 and "" not in groups:
        group = groups.pop()
        order = tuple(n for n in parts.settings.groups[group] if n in fits)
        unmatched = tuple(n for n in parts.settings.groups[group] if n not in fits)  # other clusters' too
        return Plan(order, group, unmatched, matching)
    return Plan(tuple(fits), "", (), matching)


def _needs(parts: Parts, reader: Any, where: Round, request: ProvisioningRequest) -> Needs:
    """What each pod set of the request needs: a PodTemplate read per pod set (and a ResourceClaimTemplate read per
    DRA claim template its pod names) the first time the request is seen at its resourceVersion, then kept."""
    key = (request.namespace, request.name)
    kept = where.sized.get(key)
    if kept is not None and kept[0] == request.resource_version:
        return kept[1]
    settings = parts.settings.config.cluster_settings().get(where.cluster)
    patterns = tuple(settings.gpu_resources) if settings is not None else ("nvidia.com/gpu",)
    classes = tuple(settings.gpu_device_classes) if settings is not None else ()
    needs = []
    for pod_set in request.pod_sets:
        need = pod_need(reader.pod_template(request.namespace, pod_set.template), patterns)
        if need is not None and need.templates:
            gpus = _claimed(reader, request.namespace, need.templates, classes)
            need = None if gpus == 0 else replace(need, gpus=gpus or 0)  # None: a whole node
        if need is not None:
            needs.append((pod_set.count, need))
    where.sized[key] = (request.resource_version, tuple(needs))
    return tuple(needs)


def _claimed(reader: Any, namespace: str, templates: Sequence[str], classes: Sequence[str]) -> int | None:
    """GPUs one pod asks through its DRA claim templates (0: none of a GPU class); None when one cannot be counted
    (unreadable, or ``allocationMode: All``): the pod is then given a whole node."""
    total = 0
    for name in templates:
        try:
            gpus = template_gpus(reader.claim_template(namespace, name), classes)
        except ClusterError as exc:
            log.warning("ResourceClaimTemplate %s/%s not read (%s): its pod counted as a whole node", namespace,
                        name, exc)
            return None
        if gpus is None:
            return None
        total += gpus
    return total
