"""``POST /api/v1/pools/{pool}/repair``: start or cancel the repair of named nodes by hand (docs/repair.md).

A route of the pools blueprint (its guard applies: the ``operate`` scope, a JSON body, no other site's Origin).
"""
from __future__ import annotations

from typing import Annotated

from flask import Response, jsonify
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from autoscaler.repair import carry as repair_carry
from autoscaler.answers import decision_json
from autoscaler.api import fail
from autoscaler.api.guards import principal
from autoscaler.api.pools import NODE_NAME, _body, _on_behalf_of, _spec, _svc, bp
from autoscaler.pool.events import acting_as
from autoscaler.models import Action, Signal, Source
from autoscaler.config import MAX_NODES


class RepairRequest(BaseModel):
    """Body of POST /api/v1/pools/{pool}/repair."""

    model_config = ConfigDict(extra="ignore")

    nodes: list[Annotated[str, Field(pattern=NODE_NAME, max_length=253)]] = Field(
        min_length=1, max_length=MAX_NODES, description="The nodes to repair (or whose repair to cancel).")
    reason: str = Field(default="", max_length=500)
    cancel: StrictBool = Field(default=False, description="End the nodes' repairs: each is uncordoned; the "
                               "replacement stays.")


@bp.post("/pools/<pool>/repair")
def repair_nodes(pool: str) -> Response:
    spec = _spec(pool)
    req: RepairRequest = _body(RepairRequest)
    svc = _svc()
    if spec.repair is None and not req.cancel:  # a cancel still ends repairs stored before `repair:` was removed
        fail(422, f"pool {spec.name} has no `repair:` section: its nodes are not repaired")
    if svc.parts.cluster_for(spec) is None:
        fail(422, "a repair needs the `kubernetes:` section (or the pool's cluster in `clusters:`)")
    who = _on_behalf_of()
    nodes = tuple(dict.fromkeys(req.nodes))
    if req.cancel:
        try:
            repair_carry.cancel(svc.parts.repairs, spec, nodes, principal().name, req.reason, who)
        except ValueError as exc:
            fail(409, str(exc))
        return jsonify(svc.pool_json(spec))
    reason = (f"manual request by {principal().name}" + (f" (on behalf of {who})" if who else "")
              + (f": {req.reason}" if req.reason else ""))
    signal = Signal(pool=spec.name, action=Action.REPAIR, source=Source.MANUAL, reason=reason, nodes=nodes)
    with acting_as(principal().name):
        decision = svc.engine.handle(signal)
    return jsonify(decision_json(decision))
