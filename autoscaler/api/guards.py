"""What a request may do: its credential's scopes and pools, and no state change from another site's page."""
from __future__ import annotations

from typing import Collection
from urllib.parse import urlsplit

from flask import current_app, g, request

from autoscaler.api import fail
from autoscaler.auth.credentials import Principal
from autoscaler.store import EventRecord, Store

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def principal() -> Principal:
    """The credential of the current request (after ``require_auth``)."""
    return g.principal  # type: ignore[no-any-return]


def may_see(pool: str, verb: str = "read") -> None:
    """403 unless the request's credential may act on ``pool``."""
    who = principal()
    if not who.sees(pool):
        fail(403, f"credential {who.name!r} may not {verb} pool {pool[:80]!r} (not in its pools)")


def json_only() -> None:
    """415 unless the body is declared JSON: a browser can send form and text bodies to another site without
    asking it first (a CORS "simple request"), but never ``application/json``."""
    if request.mimetype != "application/json":
        got = request.mimetype or "none"
        fail(415, f"this route takes Content-Type: application/json only (an empty body too), got {got[:60]!r}")


def same_origin_only() -> None:
    """403 for a request a browser sent from another site's page (its ``Origin`` or ``Sec-Fetch-Site`` says so),
    so a page an operator visits cannot act with the browser's cached credentials."""
    allowed = current_app.extensions["autoscaler"].settings.config.server.allowed_origins
    origin = request.headers.get("Origin")
    if origin is not None and (origin.lower().rstrip("/") in allowed or _same_host(origin, request.host)):
        return
    if origin is not None:
        fail(403, f"cross-origin request refused: Origin {origin[:80]!r} is not this service "
                  "(server.allowed_origins lists other origins that may write)")
    if request.headers.get("Sec-Fetch-Site", "").lower() == "cross-site":
        fail(403, "cross-origin request refused (Sec-Fetch-Site: cross-site)")


def _same_host(origin: str, host: str) -> bool:
    """Whether ``origin`` (scheme://host[:port]) names the host and port this request was sent to."""
    try:
        sent, here = urlsplit(origin), urlsplit("//" + host)
        if sent.scheme not in _DEFAULT_PORTS or sent.path not in ("", "/") or not sent.hostname:
            return False
        sent_port = sent.port or _DEFAULT_PORTS[sent.scheme]
        here_port = here.port
    except ValueError:  # a port that is not a number
        return False
    if sent.hostname != (here.hostname or "").lower():
        return False
    return sent_port == here_port if here_port is not None else sent_port == _DEFAULT_PORTS[sent.scheme]


def visible_events(store: Store, pool: str | None, limit: int, before: int | None = None, *,
                   outcomes: Collection[str] = (), source: str | None = None) -> list[EventRecord]:
    """Newest events first, only of pools the credential may read (and none without a pool when it is limited)."""
    who = principal()
    if pool is not None:
        may_see(pool)
        return store.events(pool, limit, before, outcomes=outcomes, source=source)
    if who.pools is None:
        return store.events(None, limit, before, outcomes=outcomes, source=source)
    merged = [ev for name in sorted(who.pools)
              for ev in store.events(name, limit, before, outcomes=outcomes, source=source)]
    return sorted(merged, key=lambda ev: ev.id or 0, reverse=True)[:limit]
