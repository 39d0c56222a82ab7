"""HTTP API: JSON errors, body reading, auth, and the blueprints."""
from __future__ import annotations


import json
import logging
import re
from typing import Any, NoReturn

from flask import Flask, Response, abort, current_app, g, jsonify, request
from werkzeug.exceptions import HTTPException

from autoscaler.api.body import BodyError, UnauthenticatedReads, read_body
from autoscaler.auth.credentials import AuthError, AuthUnavailable, Principal
from autoscaler.config.durations import retry_after_header
from autoscaler.pool.hold import PoolHeld
from autoscaler.store import StoreUnavailable

log = logging.getLogger(__name__)

# A JSON string may escape a UTF-16 surrogate (\ud800-\udfff); one without its pair is no Unicode text at all.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class ApiError(Exception):
    """An error answered as JSON with a status code."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def fail(status: int, message: str, headers: dict[str, str] | None = None) -> NoReturn:
    raise ApiError(status, message, headers)


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    resp = jsonify({"error": message})
    resp.status_code = status
    for k, v in (headers or {}).items():
        resp.headers[k] = v
    return resp


def read_json() -> Any:
    """The request body as JSON, or an ApiError with 413/415/400."""
    ctype = request.mimetype or ""
    if request.content_type and "json" not in ctype:
        fail(415, f"expected a JSON body (Content-Type: application/json), got {ctype[:60]!r}")
    raw = request_body()
    if not raw.strip():
        fail(400, "empty body: expected a JSON object")
    try:
        value = json.loads(raw.decode("utf-8"))
        if _SURROGATE_ESCAPE.search(raw):  # rare: only then is the whole tree checked
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        return value
    except UnicodeEncodeError:  # a lone surrogate escape: nothing could hash, log or store that string
        fail(400, "body is not valid JSON text: a \\u escape names a lone UTF-16 surrogate (\\ud800-\\udfff)")
    except UnicodeDecodeError:
        fail(400, "body is not UTF-8")
    except RecursionError:
        fail(400, "body is nested too deeply")
    except ValueError as exc:
        fail(400, f"body is not valid JSON: {str(exc)[:120]}")


def request_body() -> bytes:
    """The request body, read once within ``server.max_body_bytes`` and ``server.read_timeout`` (413 / 408)."""
    server = current_app.extensions["autoscaler"].settings.config.server
    try:
        return read_body(server.max_body_bytes, server.read_timeout)
    except BodyError as exc:
        messages = {413: "body larger than server.max_body_bytes"}
        fail(exc.status, messages.get(exc.status, exc.message), {"Connection": "close"})


def _unauthenticated_body() -> bytes:
    """The body, read in one of the few slots for senders not yet known (503 + Retry-After when all are taken)."""
    reads: UnauthenticatedReads = current_app.extensions["autoscaler_unauthenticated_reads"]
    try:
        return reads.read(request_body)
    except BodyError as exc:
        fail(exc.status, exc.message, {"Retry-After": "1", "Connection": "close"})


def require_auth(scope: str) -> Principal:
    """The request's credential; 401 unless it carries a valid one, 403 unless that one has ``scope``."""
    auth = current_app.extensions["autoscaler"].auth
    headers = {k: v for k, v in request.headers.items()}
    try:  # the body is read only for an HMAC signature, once every check that needs no body has passed
        who: Principal = auth.authenticate(headers, _unauthenticated_body, request.args)
    except AuthError as exc:
        fail(401, str(exc),
             {"WWW-Authenticate": 'Bearer realm="gpu-pool-autoscaler", Basic realm="gpu-pool-autoscaler"'})
    except AuthUnavailable as exc:  # Azure retries a 503; the keys may be back by then
        log.warning("credentials could not be checked: %s", exc)
        fail(503, "credentials cannot be checked right now (identity provider keys unavailable); retry later",
             {"Retry-After": "30"})
    if not who.may(scope):
        fail(403, f"credential {who.name!r} has no {scope!r} scope (it has: {', '.join(sorted(who.scopes))})")
    g.principal = who
    return who


def register_errors(app: Flask) -> None:
    """Every error as JSON; no traceback ever reaches the caller."""

    @app.errorhandler(ApiError)
    def _api(exc: ApiError) -> Response:
        return error_response(exc.status, exc.message, exc.headers)

    @app.errorhandler(StoreUnavailable)
    def _store(exc: StoreUnavailable) -> Response:
        log.error("store unavailable: %s", exc)
        return error_response(503, "state store unavailable; retry later", {"Retry-After": "10"})

    @app.errorhandler(PoolHeld)
    def _held(exc: PoolHeld) -> Response:
        return error_response(503, str(exc), {"Retry-After": retry_after_header(exc.retry_after)})

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Response:
        messages = {404: "no such route", 405: "method not allowed for this route",
                    413: "body larger than server.max_body_bytes"}
        resp = error_response(exc.code or 500, messages.get(exc.code or 0, exc.description or exc.name))
        allowed = getattr(exc, "valid_methods", None)
        if exc.code == 405 and allowed:
            resp.headers["Allow"] = ", ".join(allowed)
        return resp

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal error; see the service log")


__all__ = ["ApiError", "abort", "fail", "read_json", "request_body", "require_auth", "register_errors",
           "error_response"]
