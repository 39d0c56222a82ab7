"""``"atomic": true`` on ``POST /api/v1/pools/{pool}/scale`` (a pool or a group): every node asked of one pool at
once, kept only if every one is GPU-ready within the pool's ``provision_time`` (docs/gang.md)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from flask import Response, jsonify

from autoscaler.answers import decision_json
from autoscaler.api import fail
from autoscaler.api.guards import principal
from autoscaler.gang.ask import Ask, ask_group, ask_pool, why_not
from autoscaler.models import Action, Source
from autoscaler.pool.events import acting_as
from autoscaler.service import Service


def check(req: Any) -> None:
    """422 unless the atomic request is ``action: scale_out`` with a ``step`` (how many nodes, all at once)."""
    if req.action is not Action.SCALE_OUT or req.step is None or req.nodes is not None:
        fail(422, "`atomic: true` goes with `action: scale_out` and a `step` (the nodes asked all at once)")


def atomic_scale(svc: Service, name: str, req: Any, reason: str) -> Response:
    """The atomic scale-out of pool or group ``name`` (the caller checked the credential may act on it)."""
    check(req)
    ask = Ask(nodes=req.step, source=Source.MANUAL.value, reason=reason, force=req.force)
    now = svc.wall()
    with acting_as(principal().name):
        if name in svc.settings.groups:
            specs = [svc.settings.pools[p] for p in svc.settings.groups[name]]
            if not any(principal().sees(s.name) for s in specs):
                fail(403, f"credential {principal().name!r} may not operate group {name[:80]!r} (none of its pools)")
            problems = [why_not(svc.parts, s) for s in specs]
            if all(problems):
                fail(422, f"group {name}: {problems[0]}")
            hidden = tuple(s.name for s in specs if not principal().sees(s.name))  # never chosen for this caller
            decision = ask_group(svc.parts, name, replace(ask, tried=hidden), now)
        else:
            spec = svc.settings.pools[name]
            problem = why_not(svc.parts, spec)
            if problem:
                fail(422, f"pool {spec.name}: {problem}")
            decision = ask_pool(svc.parts, spec, ask, now)
    return jsonify(decision_json(decision))
