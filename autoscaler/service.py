"""The running service's parts, shared by the API, the metrics and the status page."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from autoscaler.auth import Authenticator
from autoscaler.config import Settings
from autoscaler.engine import Engine
from autoscaler.answers import Cooldown, PoolBody, dump, event_body, node_body
from autoscaler.events import EventLog
from autoscaler.metrics import Metrics
from autoscaler.models import PoolSpec
from autoscaler.nodes import ClusterError
from autoscaler.policy import cooldown_remaining
from autoscaler.redact import redact_text
from autoscaler.store import Store
from providers import NodePoolProvider, ProviderError, Tracked

log = logging.getLogger(__name__)


@dataclass
class Service:
    """Everything one app instance needs; built by ``create_app``."""

    settings: Settings
    store: Store
    providers: dict[str, NodePoolProvider]
    engine: Engine
    events: EventLog
    auth: Authenticator
    metrics: Metrics
    clock: Callable[[], float]
    sinks: list[Any] = field(default_factory=list)

    def pool_json(self, spec: PoolSpec, with_last_event: bool = True, with_nodes: bool = False) -> dict[str, Any]:
        """A pool as the API shows it: configured limits, stored state and the cloud's view (and with
        ``with_nodes``, where a cluster is configured, the pool's nodes: one node list, one pod list per node)."""
        state = self.store.pool(spec.name)
        provider = self.providers[spec.name]
        now = self.clock()
        current: int | None = None
        busy = False
        error = None
        detail = ""
        try:
            cloud = provider.status(Tracked(state.tracked_count, state.count_changed_at), now)
            current, busy, detail = cloud.current, cloud.busy, cloud.detail
        except ProviderError as exc:
            error = redact_text(exc.message)
        remaining = cooldown_remaining(spec, state, now)
        last_event = None
        if with_last_event and state.last_event_id is not None:
            ev = self.store.event(state.last_event_id)
            last_event = event_body(ev) if ev else None
        last_scale = max([t for t in (state.last_scale_out_at, state.last_scale_in_at) if t is not None],
                         default=None)
        extra: dict[str, Any] = self._nodes(spec) if with_nodes else {}
        if error:
            extra["error"] = error
        body = PoolBody(
            name=spec.name,
            provider=spec.provider,
            current=current,
            count_source="tracked" if provider.tracks_count else "cloud",
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
            **extra,
        )
        return dump(body)

    def _nodes(self, spec: PoolSpec) -> dict[str, Any]:
        cluster = self.engine.nodes.cluster if self.engine.nodes is not None else None
        if cluster is None or not spec.node_selector:
            return {}
        try:
            views = cluster.nodes(dict(spec.node_selector))
        except ClusterError as exc:
            return {"nodes_error": redact_text(str(exc))}
        return {"nodes": [node_body(v) for v in sorted(views, key=lambda v: (-v.created, v.name))]}

    def pool_rows(self) -> list[dict[str, Any]]:
        """Every pool, for /metrics (no last event)."""
        return [self.pool_json(spec, with_last_event=False) for spec in self.settings.pools.values()]
