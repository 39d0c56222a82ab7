"""ProvisioningRequests served as cluster-autoscaler serves its atomic class (docs/gang.md): once a tick, after the
pools' round (so a gang settled this tick is written at once).

For each request of the configured class that is not finished (``Failed`` or ``BookingExpired``): a new one is
sized from its PodTemplates and asked all at once of the first matching pool that can hold it now (a group's order
where the matching pools form one; :func:`autoscaler.gang.ask.ask_group`), then ``Accepted``; one that no pool can
ever hold is ``Failed`` with nothing asked; once its gang is ``provisioned`` the request is ``Provisioned`` and its
nodes booked (kept from scale-in) until ``booking`` ends (``BookingExpired``, the marks taken off); when every pool
tried fell short it is ``Failed``. A request whose pool is busy, paused or short now waits for a later tick."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, cast

from autoscaler.cluster.nodes import ClusterError, parse_time
from autoscaler.cluster.requests import (ACCEPTED, BOOKING_EXPIRED, FAILED, PROVISIONED, ProvisioningRequest,
                                         condition, nodes_needed, pod_need)
from autoscaler.engine.parts import Parts
from autoscaler.gang.ask import Ask, ask_group, ask_pool, passed_over
from autoscaler.models import Decision, Outcome, Source
from autoscaler.store.gangs import PROVISIONED as GANG_PROVISIONED, WAITING, GangRecord

log = logging.getLogger(__name__)


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


def serve(parts: Parts, now: float) -> list[Decision]:
    """One round over the cluster's ProvisioningRequests; the decisions recorded (asks)."""
    config = parts.settings.config.provisioning_requests
    specs = list(parts.settings.pools.values())
    cluster = next((c for c in map(parts.cluster_for, specs) if c is not None), None)
    if config is None or cluster is None or not cluster.capabilities.reads_requests:
        return []
    reader = cast(Any, cluster).requests
    try:
        listed = reader.list()
    except ClusterError as exc:
        log.warning("ProvisioningRequests not listed: %s; the next tick tries again", exc)
        return []
    mine = [r for r in listed if r.class_name == config.class_
            and not r.holds(FAILED) and not r.holds(BOOKING_EXPIRED)]
    if not mine:
        return []
    gangs: dict[str, list[GangRecord]] = {}
    for gang in parts.store.gangs(waiting=False):
        if gang.request:
            gangs.setdefault(gang.request, []).append(gang)
    out: list[Decision] = []
    for request in mine:
        try:
            out += _one(parts, reader, request, gangs.get(request.key, []), now, config.booking)
        except ClusterError as exc:
            log.warning("ProvisioningRequest %s: %s; the next tick tries again", request.key, exc)
    return out


def _one(parts: Parts, reader: Any, request: ProvisioningRequest, gangs: Sequence[GangRecord], now: float,
         booking: float) -> list[Decision]:
    def write(kind: str, status: bool, reason: str, message: str) -> None:
        reader.set_condition(request, condition(kind, status, reason, message, now, request.generation))

    if request.holds(PROVISIONED):
        since = parse_time(str((request.condition(PROVISIONED) or {}).get("lastTransitionTime") or ""))
        if since is not None and now >= since + booking:
            for node in _booked(gangs):
                reader.book(node, None)
            write(BOOKING_EXPIRED, True, "BookingExpired", f"the booking of {booking:.0f}s ended; the nodes may go")
        return []
    latest = gangs[-1] if gangs else None
    if latest is not None and latest.state == WAITING:
        if not request.holds(ACCEPTED):
            write(ACCEPTED, True, "Accepted", f"asked of pool {latest.pool}, all {latest.asked} node(s) at once")
        return []
    if latest is not None and latest.state == GANG_PROVISIONED:
        for node in _booked([latest]):
            reader.book(node, request.key)
        write(PROVISIONED, True, "Provisioned", f"all {latest.asked} node(s) of pool {latest.pool} are GPU-ready; "
                                                f"booked for the request's pods")
        return []
    if latest is not None:  # rolled back (and no next pool took it) or refused
        write(FAILED, True, "CapacityIsNotFound", f"every pool tried fell short: {', '.join(latest.tried)}")
        return []
    plan = _plan(parts, reader, request)
    if plan.never:
        write(FAILED, True, plan.reason_code, plan.never)
        return []
    asked = _ask(parts, request, plan, now)
    taken = next((d for d in asked if d.outcome is Outcome.SCALED), None)
    if taken is not None:
        write(ACCEPTED, True, "Accepted", f"asked of pool {taken.pool}, all {plan.nodes[str(taken.pool)]} node(s) at once"
              if plan.nodes else "asked")
    return asked


def _ask(parts: Parts, request: ProvisioningRequest, plan: Plan, now: float) -> list[Decision]:
    """The request asked of the first of its pools that can hold it now (nothing recorded while none can)."""
    assert plan.nodes is not None
    for name in plan.pools:
        spec = parts.settings.pools[name]
        ask = Ask(nodes=plan.nodes[name], source=Source.RECONCILE.value, force=True, request=request.key,
                  reason=f"ProvisioningRequest {request.key}", tried=plan.unmatched)
        if passed_over(parts, spec, ask, now):
            continue
        if plan.group:
            return [ask_group(parts, plan.group, ask, now)]
        return [ask_pool(parts, spec, ask, now)]
    return []


def _plan(parts: Parts, reader: Any, request: ProvisioningRequest) -> Plan:
    """The request's pools, or why none can ever hold it (a PodTemplate read per pod set)."""
    cluster_config = parts.settings.config.kubernetes
    patterns = tuple(cluster_config.gpu_resources) if cluster_config is not None else ("nvidia.com/gpu",)
    needs = []
    for pod_set in request.pod_sets:
        need = pod_need(reader.pod_template(request.namespace, pod_set.template), patterns)
        if need is not None:
            needs.append((pod_set.count, need))
    if not needs:
        return Plan(never="its pods ask for no GPU", reason_code="NoGPUsAsked")
    matching: dict[str, int] = {}
    for spec in parts.settings.pools.values():
        labels = dict(spec.node_selector) | dict(spec.node_labels)
        if spec.gpus_per_node and spec.node_selector and all(
                labels.get(k) == v for _, need in needs for k, v in need.selector):
            counts = [nodes_needed(count, need.gpus, spec.gpus_per_node) for count, need in needs]
            matching[spec.name] = sum(counts) if all(counts) else 0
    if not matching:
        return Plan(never="no pool's nodes match its pods' nodeSelector (pools[].node_selector and node_labels, "
                          "with gpus_per_node)", reason_code="NoPoolMatches")
    fits = [name for name, n in matching.items() if 0 < n <= parts.settings.pools[name].max]
    if not fits:
        said = ", ".join(f"{name}: {n or 'a pod larger than a node'} of max {parts.settings.pools[name].max}"
                         for name, n in matching.items())
        return Plan(never=f"over every matching pool's max ({said}); nothing asked", reason_code="OverMax")
    groups = {parts.settings.pools[name].group for name in fits}
    if len(groups) == 1 and "" not in groups:
        group = groups.pop()
        order = tuple(n for n in parts.settings.groups[group] if n in fits)
        unmatched = tuple(n for n in parts.settings.groups[group] if n not in fits)
        return Plan(order, group, unmatched, matching)
    return Plan(tuple(fits), "", (), matching)


def _booked(gangs: Sequence[GangRecord]) -> list[str]:
    """The nodes that came for the provisioned gangs."""
    return [node for gang in gangs if gang.state == GANG_PROVISIONED for node in gang.nodes]

