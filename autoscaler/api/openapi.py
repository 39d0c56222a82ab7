"""GET /openapi.json: the OpenAPI 3.1 document, built from the pydantic models the code validates with."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, jsonify
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from autoscaler import __version__
from autoscaler.answers import (DecisionBody, ErrorBody, EventList, GroupBody, GroupList, PoolBody, PoolList,
                                WebhookAnswer)
from autoscaler.api.event_query import MAX_PAGE, OUTCOMES, SOURCES
from autoscaler.api.pools import CountRequest, PauseRequest, ScaleRequest
from autoscaler.api.repairs import RepairRequest
from autoscaler.models import Action
from autoscaler.config import MAX_NODES
from autoscaler.sources.alertmanager import AlertmanagerPayload
from autoscaler.sources.azure_monitor import AzureMonitorPayload
from autoscaler.sources.grafana import GrafanaPayload, LegacyPayload

bp = Blueprint("openapi", __name__)
REF = "#/components/schemas/{model}"


_REQUESTS: list[type[BaseModel]] = [ScaleRequest, PauseRequest, CountRequest, RepairRequest, AlertmanagerPayload,
                                    GrafanaPayload, LegacyPayload, AzureMonitorPayload]
_RESPONSES: list[type[BaseModel]] = [ErrorBody, DecisionBody, PoolBody, PoolList, GroupBody, GroupList, EventList,
                                     WebhookAnswer]


def _schemas() -> dict[str, Any]:
    pairs = [(m, "validation") for m in _REQUESTS] + [(m, "serialization") for m in _RESPONSES]
    keys, top = models_json_schema(pairs, ref_template=REF, by_alias=True)  # type: ignore[arg-type]
    return dict(top.get("$defs", {}))


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def _json(schema: dict[str, Any], description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description, "content": {"application/json": {"schema": schema}}}
    if headers:
        out["headers"] = headers
    return out


_RETRY = {"Retry-After": {"description": "Seconds to wait before sending again.", "schema": {"type": "string"}}}
_ERRORS = {
    "400": "Malformed body (not JSON, not an object, bad query value).",
    "401": "Missing or wrong credentials.",
    "403": "The credential lacks the route's scope or the pool, or the request came from another origin.",
    "404": "Unknown pool.",
    "408": "The body did not arrive within server.read_timeout (the connection closes).",
    "409": "The provider reports the pool's real size; the count cannot be set.",
    "413": "Body over server.max_body_bytes.",
    "415": "Body is not JSON (state-changing /api routes: not declared application/json, an empty body too).",
    "422": "Valid JSON that means nothing valid.",
    "503": "A retry could help (failed scale, backoff, the pool held by a decision past lock_wait, store unavailable).",
}


def _errors(*codes: str) -> dict[str, Any]:
    return {c: _json(_ref(ErrorBody), _ERRORS[c], _RETRY if c == "503" else None) for c in codes}


def _body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _pool_param(pools: list[str]) -> dict[str, Any]:
    return {"name": "pool", "in": "path", "required": True, "schema": {"type": "string"},
            "description": "A configured pool's name.", "examples": {p: {"value": p} for p in pools[:20]}}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def _webhook(summary: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"post": {
        "summary": summary,
        "parameters": [
            _query("pool", {"type": "string"}, "Pool for alerts without routing labels or a matching rule."),
            _query("action", {"type": "string", "enum": [a.value for a in Action]}, "Action, likewise."),
            _query("step", {"type": "integer", "minimum": 1, "maximum": MAX_NODES}, "Step, likewise."),
        ],
        "requestBody": _body(body),
        "responses": {"200": _json(_ref(WebhookAnswer), "Every alert ended up in exactly one decision."),
                      **_errors("400", "401", "403", "408", "413", "415", "422", "503")},
    }}


def _also_put(path: dict[str, Any]) -> dict[str, Any]:
    """The POST operation offered as PUT too (a Grafana contact point's HTTP method may be set to PUT)."""
    put = {**path["post"], "summary": path["post"]["summary"] + " (PUT: the same as POST)"}
    if "operationId" in put:
        put["operationId"] += "Put"
    return {**path, "put": put}


def _paths(pools: list[str]) -> dict[str, Any]:
    pool = [_pool_param(pools)]
    open_: dict[str, Any] = {"security": []}
    return {
        "/webhook/alertmanager": _webhook("Alertmanager webhook (version 4)", _ref(AlertmanagerPayload)),
        "/webhook/grafana": _also_put(_webhook("Grafana unified or legacy webhook",
                                               {"anyOf": [_ref(GrafanaPayload), _ref(LegacyPayload)]})),
        "/webhook/azure-monitor": _webhook("Azure Monitor action group webhook (common alert schema)",
                                           _ref(AzureMonitorPayload)),
        "/api/v1/pools": {"get": {"summary": "Every pool", "responses": {
            "200": _json(_ref(PoolList), "The pools the credential may read."), **_errors("401", "403", "503")}}},
        "/api/v1/groups": {"get": {"summary": "Every fallback group with its pools", "responses": {
            "200": _json(_ref(GroupList), "The groups and pools the credential may read."),
            **_errors("401", "403", "503")}}},
        "/api/v1/pools/{pool}": {"get": {"summary": "One pool", "parameters": pool, "responses": {
            "200": _json(_ref(PoolBody), "The pool."), **_errors("401", "403", "404", "503")}}},
        "/api/v1/pools/{pool}/scale": {"post": {
            "summary": "Scale by hand", "parameters": pool, "requestBody": _body(_ref(ScaleRequest)),
            "responses": {"200": _json(_ref(DecisionBody), "The decision."),
                          **_errors("400", "401", "403", "404", "408", "413", "415", "422", "503")}}},
        **{f"/api/v1/pools/{{pool}}/{verb}": {"post": {
            "summary": f"{verb.capitalize()} a pool", "parameters": pool,
            "requestBody": {**_body(_ref(PauseRequest), required=False),
                            "description": "Optional, but declared application/json even when empty."},
            "responses": {"200": _json(_ref(PoolBody), "The pool."),
                          **_errors("400", "401", "403", "404", "408", "413", "415", "422", "503")}}}
           for verb in ("pause", "resume")},
        "/api/v1/pools/{pool}/repair": {"post": {
            "summary": "Repair nodes (or cancel their repairs) by hand", "parameters": pool,
            "requestBody": _body(_ref(RepairRequest)),
            "responses": {"200": _json({"anyOf": [_ref(DecisionBody), _ref(PoolBody)]},
                                       "The decision; with `cancel`, the pool."),
                          **_errors("400", "401", "403", "404", "408", "409", "413", "415", "422", "503")}}},
        "/api/v1/pools/{pool}/count": {"put": {
            "summary": "Correct the tracked count", "parameters": pool, "requestBody": _body(_ref(CountRequest)),
            "responses": {"200": _json(_ref(PoolBody), "The pool."),
                          **_errors("400", "401", "403", "404", "408", "409", "413", "415", "422", "503")}}},
        "/api/v1/events": {"get": {
            "summary": "The event log, newest first",
            "parameters": [_query("pool", {"type": "string"}, "Only this pool."),
                           _query("limit", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE}, "Default 100."),
                           _query("before", {"type": "integer", "minimum": 0, "maximum": 10**18 - 1},
                                  "Only events with a smaller id: the next page is the answer's `next`."),
                           {**_query("outcome", {"type": "array", "items": {"type": "string", "enum": list(OUTCOMES)}},
                                     "Only these outcomes: one or more, comma-separated (or the parameter repeated)."),
                            "style": "form", "explode": False},
                           _query("source", {"type": "string", "enum": list(SOURCES)},
                                  "Only events from this source.")],
            "responses": {"200": _json(_ref(EventList), "The events of pools the credential may read."),
                          **_errors("400", "401", "403", "503")}}},
        "/healthz": {"get": {**open_, "summary": "Liveness", "responses": {"200": {"description": "Serving."}}}},
        "/version": {"get": {**open_, "summary": "The running version", "responses": {"200": _json(
            {"type": "object", "required": ["version"], "properties": {"version": {"type": "string"}}},
            "The same as the image tag, the chart's appVersion and CHANGELOG.md's newest release.")}}},
        "/readyz": {"get": {**open_, "summary": "Readiness", "responses": {
            "200": {"description": "The store answers."}, "503": {"description": "The store does not answer."}}}},
        "/metrics": {"get": {**open_, "summary": "Prometheus metrics", "responses": {
            "200": {"description": "Text exposition format.",
                    "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
        "/openapi.json": {"get": {**open_, "summary": "This document", "responses": {
            "200": {"description": "OpenAPI 3.1.", "content": {"application/json": {"schema": {"type": "object"}}}}}}},
    }


def _scoped(paths: dict[str, Any], webhook_only: list[str]) -> dict[str, Any]:
    """Each authenticated operation names the credential scope it needs (OpenAPI 3.1 roles on http schemes);
    the webhook-only schemes (a Grafana HMAC signature, a query token) only for the webhooks."""
    for path, ops in paths.items():
        for method, op in ops.items():
            if "security" in op:  # open routes say so themselves
                continue
            scope = "webhook" if path.startswith("/webhook/") else "read" if method == "get" else "operate"
            op["security"] = [{"bearerAuth": [scope]}, {"basicAuth": [scope]}]
            if scope == "webhook":
                op["security"] += [{name: [scope]} for name in webhook_only]
    return paths


def document(pools: list[str], hmac_header: str | None = None, query_param: str | None = None) -> dict[str, Any]:
    """The whole OpenAPI document; ``hmac_header`` adds Grafana's signature scheme when configured, ``query_param``
    the query token's."""
    schemes: dict[str, Any] = {"bearerAuth": {"type": "http", "scheme": "bearer", "description": "A configured "
                                              "token, or an Entra ID access token (Azure Monitor secure webhook)."},
                               "basicAuth": {"type": "http", "scheme": "basic"}}
    security: list[dict[str, list[str]]] = [{"bearerAuth": []}, {"basicAuth": []}]
    webhook_only: list[str] = []
    if hmac_header:
        schemes["grafanaHmac"] = {"type": "apiKey", "in": "header", "name": hmac_header,
                                  "description": "HMAC-SHA256 of the body (Grafana contact point signing)."}
        webhook_only.append("grafanaHmac")
    if query_param:
        schemes["queryToken"] = {"type": "apiKey", "in": "query", "name": query_param,
                                 "description": "server.auth.query_token (webhooks only)."}
        webhook_only.append("queryToken")
    security += [{name: []} for name in webhook_only]
    return {
        "openapi": "3.1.0",
        "info": {"title": "gpu-pool-autoscaler", "version": __version__,
                 "description": "Alert-driven node-pool autoscaler for GPU clusters. Each operation's security "
                                "lists the scope (webhook, read, operate) a credential needs for it."},
        "paths": _scoped(_paths(pools), webhook_only),
        "components": {"schemas": _schemas(), "securitySchemes": schemes},
        "security": security,
    }


@bp.get("/openapi.json")
def openapi() -> Response:
    """The OpenAPI document (no auth: it holds no secret)."""
    settings = current_app.extensions["autoscaler"].settings
    auth = settings.config.server.auth
    return jsonify(document(list(settings.pools), auth.grafana_hmac.header if auth.grafana_hmac else None,
                            auth.query_token.param if auth.query_token else None))
