"""The running service's parts, shared by the API, the metrics and the status page."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from autoscaler.auth.credentials import Authenticator
from autoscaler.config.load import Settings
from autoscaler.engine.core import Engine
from autoscaler.engine.parts import Parts
from autoscaler.answers import Cooldown, PoolBody, RepairBody, dump, event_body
from autoscaler.config.durations import rfc3339
from autoscaler.pool.events import EventLog
from autoscaler.pool.stamps import pulled_back
from autoscaler.metrics import Metrics
from autoscaler.models import PoolSpec, PoolState
from autoscaler.decide.policy import cooldown_remaining
from autoscaler.redact import redact_text
from autoscaler.decide.schedules import effective_min
from autoscaler.store import EventRecord, NodesView, PoolView, RepairRecord, Store
from providers import NodePoolProvider, ProviderError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stored:
    """Every pool's stored state, cloud view, last event and (for pages) node view, each read once for all pools:
    what a list of pools reads, so its cost in reads does not grow with the number of pools (issue 34, item 9)."""

    states: dict[str, PoolState]
    views: dict[str, PoolView]
    last_events: dict[str, EventRecord]
    nodes: dict[str, NodesView] | None = None
    repairs: dict[str, list[RepairRecord]] | None = None

    @classmethod
    def read(cls, store: Store, last_events: bool = True, nodes: bool = False,
             repairs: bool = False) -> "Stored":
        by_pool: dict[str, list[RepairRecord]] = {}
        for repair in store.repairs() if repairs else ():
            by_pool.setdefault(repair.pool, []).append(repair)
        return cls(store.pools(), store.views(), store.last_events() if last_events else {},
                   store.nodes_views() if nodes else None, by_pool if repairs else None)


@dataclass
class Service:
    """Everything one app instance needs; built by ``create_app``."""

    settings: Settings
    store: Store
    providers: dict[str, NodePoolProvider]
    engine: Engine
    parts: Parts
    events: EventLog
    auth: Authenticator
    metrics: Metrics
    wall: Callable[[], float]  # the wall clock: the store's and the events' time
    sinks: list[Any] = field(default_factory=list)

    def pool_json(self, spec: PoolSpec, with_last_event: bool = True, with_nodes: bool = False,
                  views: dict[str, PoolView] | None = None,
                  stored: Stored | None = None) -> dict[str, Any]:  # long: one answer's fields, built in one place
        """A pool as the API shows it: configured limits, stored state and the stored cloud view (and with
        ``with_nodes``, where a cluster is configured, the pool's nodes as the reconciler last listed them).

        Never calls the cloud: a provider that tracks its count is read from the store (that is all its status
        does); any other shows the view the reconciler (or the last decision) stored, with its age. ``stored``:
        every pool's stored rows read once by the caller (lists and pages), else this pool's are read here.
        """
        if stored is not None:
            state, views = stored.states.get(spec.name) or PoolState(name=spec.name), stored.views
        else:
            state = self.store.pool(spec.name)
        provider = self.providers[spec.name]
        now = self.wall()
        state = pulled_back(state, now, spec.short_for)[1]  # shown as the next decision will read it (stamps.py)
        view = (self.store.views() if views is None else views).get(spec.name)
        current: int | None = None
        busy = False
        error = None
        detail = ""
        tracks = not provider.capabilities.reports_count
        if tracks:
            try:
                cloud = provider.status(state.tracked(), now)
                current, busy, detail = cloud.current, cloud.busy, cloud.detail
            except ProviderError as exc:
                error = redact_text(exc.message)
        elif view is not None:
            current, busy, detail, error = view.current, view.busy, view.detail, view.error
        else:
            detail = "not read yet: the reconciler stores the cloud's view every server.reconcile_interval"
        floor, floor_how = effective_min(spec, now)
        remaining = cooldown_remaining(spec, state, now)
        last_event = None
        if with_last_event and state.last_event_id is not None:
            ev = stored.last_events.get(spec.name) if stored is not None else self.store.event(state.last_event_id)
            last_event = event_body(ev) if ev else None
        last_scale = max([t for t in (state.last_scale_out_at, state.last_scale_in_at) if t is not None],
                         default=None)
        extra: dict[str, Any] = self._nodes(spec, stored) if with_nodes else {}
        if error:
            extra["error"] = error
        if spec.repair is not None:
            held = stored.repairs.get(spec.name, []) if stored is not None and stored.repairs is not None \
                else self.store.repairs(spec.name)
            extra["repairs"] = [repair_body(r) for r in held]
        short = state.short_until is not None and state.short_until > now
        body = PoolBody(
            name=spec.name,
            provider=spec.provider,
            current=current,
            count_source="tracked" if tracks else "cloud",
            min=spec.min,
            max=spec.max,
            paused=state.paused,
            pause_reason=state.pause_reason or None,
            busy=busy,
            busy_detail=detail or None,
            dry_run=spec.dry_run,
            cooldown=Cooldown(scale_out_remaining_s=round(remaining["scale_out"], 1),
                              scale_in_remaining_s=round(remaining["scale_in"], 1)),
            failures=state.failures,
            backoff_remaining_s=round(max(0.0, (state.backoff_until or 0) - now), 1),
            last_scale_at=last_scale,
            last_event=last_event,
            effective_min=floor,
            effective_min_reason=floor_how or None,
            in_flight=view.in_flight if view is not None else None,
            view_read_at=view.read_at if view is not None else None,
            view_age_s=round(max(0.0, now - view.read_at), 1) if view is not None else None,
            short_until=rfc3339(state.short_until) if short and state.short_until is not None else None,
            short_reason=state.short_reason or None if short else None,
            short_for_s=spec.short_for,
            group=spec.group or None,
            cluster=spec.cluster if self.parts.cluster_for(spec) is not None else None,
            **extra,
        )
        return dump(body)

    def pools_json(self, specs: list[PoolSpec], with_last_event: bool = True, with_nodes: bool = False,
                   stored: Stored | None = None) -> list[dict[str, Any]]:
        """Several pools, with one read of each kind of stored row for all of them."""
        stored = stored or Stored.read(self.store, last_events=with_last_event, nodes=with_nodes,
                                       repairs=any(spec.repair is not None for spec in specs))
        return [self.pool_json(spec, with_last_event, with_nodes, stored=stored) for spec in specs]

    def _nodes(self, spec: PoolSpec, stored: Stored | None = None) -> dict[str, Any]:
        """The pool's stored node view (the reconciler lists the nodes; a request never waits on the API server)."""
        if self.parts.cluster_for(spec) is None or not spec.node_selector:
            return {}
        view = stored.nodes.get(spec.name) if stored is not None and stored.nodes is not None \
            else self.store.nodes_view(spec.name)
        if view is None:
            return {"nodes_error": "not listed yet: the reconciler lists the pool's nodes every "
                                   "server.reconcile_interval"}
        out: dict[str, Any] = {"nodes_read_at": view.read_at,
                               "nodes_age_s": round(max(0.0, self.wall() - view.read_at), 1)}
        if view.nodes or not view.error:  # a failed first listing shows no nodes, not "none"
            out["nodes"] = view.nodes
        if view.error:
            out["nodes_error"] = view.error
        out["cluster_reachable"] = not view.error
        if view.error and view.failing_since is not None:
            out["cluster_unreachable_since"] = rfc3339(view.failing_since)
        if view.gpus is not None:
            out["gpus"] = view.gpus
        if view.dra:
            out["dra"] = view.dra
            if view.dra_reason:
                out["dra_reason"] = view.dra_reason
        return out

    def groups_json(self, visible: Callable[[str], bool]) -> list[dict[str, Any]]:
        """Each fallback group with the pools of it the caller may see, most preferred first."""
        pools = self.settings.pools
        stored = Stored.read(self.store, repairs=any(spec.repair is not None for spec in pools.values()))
        return [{"name": name, "pools": [self.pool_json(pools[p], stored=stored) for p in members if visible(p)]}
                for name, members in self.settings.groups.items() if any(visible(p) for p in members)]

    def pool_rows(self) -> list[dict[str, Any]]:
        """Every pool, for /metrics (no last event, no cloud call), with its GPUs from the stored node view."""
        specs = list(self.settings.pools.values())
        rows = self.pools_json(specs, with_last_event=False)
        views = self.store.nodes_views() if self.parts.clusters and any(s.node_selector for s in specs) \
            else {}
        for row in rows:
            view = views.get(row["name"]) if self.settings.pools[row["name"]].node_selector else None
            if view is not None and view.gpus is not None:
                row["gpus"] = view.gpus
            if view is not None and row.get("cluster"):
                row["cluster_reachable"] = not view.error
        return rows


def repair_body(repair: RepairRecord) -> RepairBody:
    """A stored repair as the pool answer lists it."""
    return RepairBody(node=repair.node, since=rfc3339(repair.since), state=repair.state, reason=repair.reason,
                      replacement=repair.replacement, error=repair.error or None)
