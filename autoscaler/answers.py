"""The shapes of the API's answers, as pydantic models: every answer is built (and so checked) through them, and
``api/openapi.py`` publishes them. The core's records (decisions, events) become answers here, in one place."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from autoscaler.config.durations import rfc3339
from autoscaler.models import Action, Decision, OperatorOutcome, Outcome, Source
from autoscaler.cluster.nodes import NodeView, why_kept
from autoscaler.store import EventRecord


class ErrorBody(BaseModel):
    """Every error answer."""

    error: str = Field(description="What is wrong, for a person.")


class AlertRef(BaseModel):
    """An alert as an event lists it."""

    alertname: str
    fingerprint: str


class EventBody(BaseModel):
    """One decision in the event log."""

    model_config = ConfigDict(populate_by_name=True)

    id: int | None
    time: str = Field(description="RFC 3339, UTC.")
    pool: str | None
    source: Source
    action: str | None = Field(description="scale_out, scale_in; for source `operator`: pause, resume, set_count.")
    outcome: Outcome | OperatorOutcome
    from_: int | None = Field(alias="from")
    to: int | None
    reason: str
    alerts: list[AlertRef]
    details: dict[str, Any] | None = None
    actor: str | None = Field(default=None, description="The credential's name, where a person or tool acted.")


class DecisionBody(BaseModel):
    """The answer to one signal."""

    model_config = ConfigDict(populate_by_name=True)

    pool: str | None
    action: Action | None
    outcome: Outcome
    from_: int | None = Field(alias="from")
    to: int | None
    reason: str
    event_id: int | None


class Cooldown(BaseModel):
    """Seconds until each direction may act again."""

    scale_out_remaining_s: float
    scale_in_remaining_s: float


class GpuPodBody(BaseModel):
    """A pod that counts as GPU work on a node."""

    namespace: str
    name: str
    resource: str = Field(description="e.g. nvidia.com/gpu, nvidia.com/mig-1g.10gb")
    count: int


class NodeBody(BaseModel):
    """One of the pool's Kubernetes nodes, as a node-aware scale-in sees it."""

    name: str
    ready: bool
    gpu_pods: list[GpuPodBody]
    protected: str | None = Field(description="Why it must not go (an annotation); null when not protected.")
    cordoned: bool
    cordoned_by_us: bool = Field(description="Carries our gpu-autoscaler/cordoned annotation.")
    removable: bool = Field(description="A scale-in could take it now (no GPU work, not protected, not going).")
    why: str | None = Field(default=None, description="Why a scale-in keeps it (GPU work, protection, a GPU claim "
                            "not read, its removal or repair under way); null when removable. The decision's own "
                            "answer, as the status page and the CLI show it.")


class PoolGpus(BaseModel):
    """The pool's GPUs as the last listing counted them (device plugin or DRA; docs/dra.md)."""

    allocatable: int = Field(description="GPUs of the pool's nodes.")
    requested: int = Field(description="GPUs requested or allocated on them (a shared claim once).")
    pending: int | None = Field(default=None, description="GPUs the pool's unscheduled pods wait for (requests "
                                "and unallocated claims).")


class RepairBody(BaseModel):
    """A node in repair (docs/repair.md)."""

    node: str
    since: str = Field(description="RFC 3339: when its repair started.")
    state: str = Field(description="cordoned | waiting (for work that cannot move, within grace) | draining | "
                       "removing")
    reason: str
    replacement: int | None = Field(default=None, description="The pool size asked for its replacement (null: none "
                                    "asked yet).")
    error: str | None = Field(default=None, description="The last failure; the reconciler tries again next tick.")


class PoolBody(BaseModel):
    """A pool: configured limits, stored state and the cloud's view."""

    name: str
    provider: str
    current: int | None = Field(description="Null where the size is unknown.")
    count_source: str = Field(description="`cloud` when read from the cloud, `tracked` when kept by us.")
    min: int
    max: int
    paused: bool
    pause_reason: str | None
    busy: bool
    busy_detail: str | None
    dry_run: bool
    cooldown: Cooldown
    failures: int
    backoff_remaining_s: float
    last_scale_at: float | None = Field(description="Unix time (seconds, UTC) of the last accepted scale, as "
                                        "gpu_autoscaler_pool_last_scale_timestamp_seconds.")
    last_event: EventBody | None
    effective_min: int = Field(description="The floor now: the highest open schedule window's min, else `min`.")
    effective_min_reason: str | None = Field(default=None, description="The schedule window that raised it.")
    in_flight: int | None = Field(default=None, description="Nodes asked for within provision_time, not ready yet.")
    view_read_at: float | None = Field(default=None, description="Unix time the stored cloud view was read.")
    view_age_s: float | None = Field(default=None, description="Seconds since then (null: never read).")
    error: str | None = None
    nodes: list[NodeBody] | None = Field(default=None, description="With `kubernetes:` and a node selector: the "
                                         "pool's nodes, newest first (GET of one pool and the status page).")
    nodes_error: str | None = Field(default=None, description="Why the nodes could not be read (the last listing).")
    nodes_read_at: float | None = Field(default=None, description="Unix time the stored node view was listed.")
    nodes_age_s: float | None = Field(default=None, description="Seconds since then.")
    gpus: PoolGpus | None = Field(default=None, description="With the stored node view: the pool's GPUs.")
    dra: str | None = Field(default=None, description="Whether the last listing read DRA (resource.k8s.io/v1): "
                            "`read`, `not_read` (see `dra_reason`) or `unused` (every node had device-plugin "
                            "GPUs and no pod a claim).")
    dra_reason: str | None = Field(default=None, description="Why DRA was not read (404: no API; 403: RBAC).")
    short_until: str | None = Field(default=None, description="RFC 3339: until when the pool is passed over by its "
                                    "group because its cloud could not deliver (null: not short).")
    short_reason: str | None = Field(default=None, description="The cloud's code and message, nodes asked for and "
                                     "delivered.")
    short_for_s: float | None = Field(default=None, description="capacity.short_for: how long a shortfall marks "
                                      "the pool short.")
    group: str | None = Field(default=None, description="The fallback group the pool is in.")
    cluster: str | None = Field(default=None, description="The cluster the pool's nodes join (`clusters:` name; "
                                "`kubernetes:` is \"default\"); null without one.")
    cluster_reachable: bool | None = Field(default=None, description="Whether the reconciler's last listing of the "
                                           "pool's nodes reached its cluster (null: not listed yet, or not "
                                           "node-aware).")
    cluster_unreachable_since: str | None = Field(default=None, description="Since when (RFC 3339) the pool's "
                                                  "cluster has not answered its listings.")
    repairs: list[RepairBody] | None = Field(default=None, description="With `repair:`: the pool's nodes in "
                                             "repair, oldest first.")


class PoolList(BaseModel):
    """GET /api/v1/pools."""

    pools: list[PoolBody]


class GroupBody(BaseModel):
    """A fallback group: its pools, most preferred first."""

    name: str
    pools: list[PoolBody]


class GroupList(BaseModel):
    """GET /api/v1/groups."""

    groups: list[GroupBody]


class EventList(BaseModel):
    """GET /api/v1/events."""

    events: list[EventBody]
    next: int | None = Field(description="The `before` of the next page (older events matching the same "
                             "filters); null when none is left.")


class WebhookAnswer(BaseModel):
    """What a webhook answers."""

    received: int = Field(description="Alerts in the notification.")
    decisions: list[DecisionBody]


def node_body(view: NodeView) -> NodeBody:
    why = why_kept(view)
    return NodeBody(name=view.name, ready=view.ready, protected=view.protected, cordoned=view.cordoned,
                    cordoned_by_us=view.cordoned_by_us is not None, removable=why is None, why=why,
                    gpu_pods=[GpuPodBody(namespace=p.namespace, name=p.name, resource=p.resource, count=p.count)
                              for p in view.gpu_pods])


def dump(model: BaseModel) -> dict[str, Any]:
    """An answer as JSON-ready data: wire names (``from``), and optional members only where they were set."""
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


def event_body(ev: EventRecord) -> EventBody:
    """An event as the API shows it (``details`` only when it has any)."""
    extra: dict[str, Any] = {"from": ev.from_}
    details = dict(ev.details)
    actor = details.pop("actor", None)  # kept with the details in the store; its own field in the API
    if details:
        extra["details"] = details
    if actor:
        extra["actor"] = actor
    outcome = OperatorOutcome(ev.outcome) if ev.source == Source.OPERATOR.value else Outcome(ev.outcome)
    return EventBody(id=ev.id, time=rfc3339(ev.time), pool=ev.pool, source=Source(ev.source), action=ev.action,
                     outcome=outcome, to=ev.to, reason=ev.reason,
                     alerts=[AlertRef(**a) for a in ev.alerts], **extra)


def event_json(ev: EventRecord) -> dict[str, Any]:
    """An event as the API, the JSON log and the sinks show it."""
    return dump(event_body(ev))


def decision_body(d: Decision) -> DecisionBody:
    """A decision as a webhook or the manual API answers it."""
    return DecisionBody(pool=d.pool, action=d.action, outcome=d.outcome, to=d.to, reason=d.reason,
                        event_id=d.event_id, **{"from": d.from_})


def decision_json(d: Decision) -> dict[str, Any]:
    """``decision_body`` as JSON-ready data."""
    return dump(decision_body(d))
