"""The manual API: pools, scale, pause/resume, count, events."""
from __future__ import annotations

from typing import Annotated, Any

from flask import Blueprint, Response, current_app, jsonify, request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, model_validator

from autoscaler.api import fail, gang, read_json, request_body, require_auth
from autoscaler.answers import EventList, decision_json, dump, event_body
from autoscaler.api.event_query import page as event_page, parse as parse_events
from autoscaler.api.guards import WRITES, json_only, may_see, principal, same_origin_only
from autoscaler.pool.events import OperatorAct, acting_as
from autoscaler.models import Action, OperatorOutcome, Signal, Source, usable_value
from autoscaler.service import Service
from autoscaler.config import MAX_NODES
from autoscaler.store import PoolChange
from autoscaler.sources import validation_message

bp = Blueprint("pools", __name__, url_prefix="/api/v1")
NODE_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"  # a Kubernetes node name (DNS subdomain)


class ScaleRequest(BaseModel):
    """Body of POST /api/v1/pools/{pool}/scale."""

    model_config = ConfigDict(extra="ignore")

    action: Action | None = None
    step: int | None = Field(default=None, ge=1, le=MAX_NODES, strict=True)
    target: int | None = Field(default=None, ge=0, le=MAX_NODES, strict=True)
    reason: str = Field(default="", max_length=500)
    force: StrictBool = False
    atomic: StrictBool = Field(default=False, description="scale_out only: every node of `step` asked of one pool "
                               "at once, kept only if all are GPU-ready within its provision_time (docs/gang.md).")
    value: float | None = None
    nodes: list[Annotated[str, Field(pattern=NODE_NAME, max_length=253)]] | None = Field(
        default=None, min_length=1, max_length=MAX_NODES, description="scale_in: remove exactly these nodes.")

    @model_validator(mode="after")
    def _one_kind(self) -> "ScaleRequest":
        if (self.action is None) == (self.target is None):
            raise ValueError("give either `action` (scale_out|scale_in, with optional `step`) or `target`")
        if self.target is not None and self.step is not None:
            raise ValueError("`step` goes with `action`, not with `target`")
        if self.action is Action.REPAIR:
            raise ValueError("`action: repair` has its own route: POST /api/v1/pools/{pool}/repair with "
                             "{\"nodes\": [...]}")
        if self.nodes is not None and (self.action is not Action.SCALE_IN or self.step is not None):
            raise ValueError("`nodes` goes with `action: scale_in` and no `step` (the step is how many are named)")
        return self


class PauseRequest(BaseModel):
    """Body of pause/resume (optional)."""

    model_config = ConfigDict(extra="ignore")
    reason: str = Field(default="", max_length=500)


class CountRequest(BaseModel):
    """Body of PUT /api/v1/pools/{pool}/count."""

    model_config = ConfigDict(extra="ignore")
    count: int = Field(ge=0, le=MAX_NODES, strict=True)


def _svc() -> Service:
    return current_app.extensions["autoscaler"]  # type: ignore[no-any-return]


@bp.before_request
def _guard() -> None:
    """Reads need the ``read`` scope; writes the ``operate`` scope, a JSON body and no other site's Origin."""
    write = request.method in WRITES
    require_auth("operate" if write else "read")
    if write:
        same_origin_only()
        json_only()


def _spec(pool: str) -> Any:
    spec = _svc().settings.pools.get(pool)
    if spec is None:
        fail(404, f"no pool named {pool[:80]!r}")
    may_see(spec.name, "operate" if request.method in WRITES else "read")
    return spec


def _on_behalf_of() -> str:
    """``X-Autoscaler-User``, printable and short: a note from the caller, never the actor (anyone can write it)."""
    text = "".join(c for c in request.headers.get("X-Autoscaler-User", "") if c.isprintable())
    return text.strip()[:64]


def _operator(spec: Any, change: PoolChange, action: str, outcome: OperatorOutcome, reason: str,
              **values: Any) -> None:
    """Apply an operator's change with its event (who, what, why); the caller holds the pool."""
    svc = _svc()
    who = _on_behalf_of()
    act = OperatorAct(spec.name, action, outcome, reason, principal().name,
                      details={"on_behalf_of": who} if who else None, **values)
    svc.events.operator(act, change, svc.wall())


def _body(model: type[BaseModel], optional: bool = False) -> Any:
    if optional and not request_body().strip():
        return model()
    body = read_json()
    if not isinstance(body, dict):
        fail(400, "body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        fail(422, validation_message(exc))


@bp.get("/pools")
def list_pools() -> Response:
    svc = _svc()
    specs = [spec for spec in svc.settings.pools.values() if principal().sees(spec.name)]
    pools = svc.pools_json(specs)
    if any(spec.node_selector and svc.parts.cluster_for(spec) is not None for spec in specs):
        views = svc.store.nodes_views()  # each pool's GPUs and whether DRA was read (`status` shows them), not its
        for spec, pool in zip(specs, pools):  # nodes: those are GET of one pool's
            view = views.get(spec.name) if spec.node_selector else None
            if view is not None and view.gpus is not None:
                pool["gpus"] = view.gpus
            if view is not None and view.dra:
                pool.update({"dra": view.dra, **({"dra_reason": view.dra_reason} if view.dra_reason else {})})
    return jsonify({"pools": pools})


@bp.get("/groups")
def list_groups() -> Response:
    return jsonify({"groups": _svc().groups_json(principal().sees)})


@bp.get("/pools/<pool>")
def get_pool(pool: str) -> Response:
    return jsonify(_svc().pool_json(_spec(pool), with_nodes=True))


@bp.post("/pools/<pool>/scale")
def scale(pool: str) -> Response:
    group = pool in _svc().settings.groups
    spec = None if group else _spec(pool)
    req: ScaleRequest = _body(ScaleRequest)
    who = _on_behalf_of()
    reason = (f"manual request by {principal().name}" + (f" (on behalf of {who})" if who else "")
              + (f": {req.reason}" if req.reason else ""))
    if group and not req.atomic:
        fail(422, f"{pool[:80]!r} is a group: a group is scaled by hand only with `atomic: true` (its alerts route "
                  "to it as to a pool)")
    if req.atomic:
        return gang.atomic_scale(_svc(), pool, req, reason)
    assert spec is not None
    nodes = tuple(dict.fromkeys(req.nodes or ()))
    if nodes and not _svc().parts.nodes.names_nodes(spec, _svc().providers[spec.name]):
        fail(422, f"nodes: pool {spec.name} cannot remove named nodes: that needs the `kubernetes:` section, the "
                  f"pool's node_selector and a provider that removes named nodes (not {spec.provider})")
    value, problem = usable_value([] if req.value is None else [req.value])
    signal = Signal(pool=spec.name, action=req.action, source=Source.MANUAL, step=len(nodes) or req.step,
                    target=req.target, force=req.force, reason=reason, value=value, value_problem=problem,
                    nodes=nodes)
    with acting_as(principal().name):
        decision = _svc().engine.handle(signal)
    return jsonify(decision_json(decision))


def _set_pause(pool: str, paused: bool) -> Response:
    spec = _spec(pool)
    req: PauseRequest = _body(PauseRequest, optional=True)
    verb = "paused" if paused else "resumed"
    reason = f"{verb} by {principal().name}" + (f": {req.reason}" if req.reason else "")
    change = PoolChange(paused=paused, pause_reason=req.reason if paused else "")
    outcome = OperatorOutcome.PAUSED if paused else OperatorOutcome.RESUMED
    with _svc().parts.hold.holding(spec.name):  # "paused" holds from the answer on: no decision is still running
        _operator(spec, change, "pause" if paused else "resume", outcome, reason)
    return jsonify(_svc().pool_json(spec))


@bp.post("/pools/<pool>/pause")
def pause(pool: str) -> Response:
    return _set_pause(pool, True)


@bp.post("/pools/<pool>/resume")
def resume(pool: str) -> Response:
    return _set_pause(pool, False)


@bp.put("/pools/<pool>/count")
def set_count(pool: str) -> Response:
    spec = _spec(pool)
    svc = _svc()
    if svc.providers[spec.name].capabilities.reports_count:
        fail(409, f"provider {spec.provider} reports the pool's real size; the count cannot be set by hand")
    req: CountRequest = _body(CountRequest)
    with svc.parts.hold.holding(spec.name):  # a decision in flight records its count first, never after this one
        before = svc.pool_json(spec, with_last_event=False)["current"]  # tracked, or the provider's initial one
        was = before if before is not None else "unknown"
        reason = f"tracked count corrected from {was} to {req.count} by {principal().name}"
        _operator(spec, PoolChange(tracked_count=req.count), "set_count", OperatorOutcome.COUNT_CORRECTED, reason,
                  from_=before, to=req.count)
    return jsonify(svc.pool_json(spec))


@bp.get("/events")
def events() -> Response:
    rows, after = event_page(_svc().store, parse_events(request.args))
    return jsonify(dump(EventList(events=[event_body(ev) for ev in rows], next=after)))
