"""Headers a browser obeys: the status page cannot be framed by another site (clickjacking), no answer is sniffed
into another type, and no answer for a credential is kept in a cache (a shared proxy's or the browser's disk)."""
from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.support import AUTH, am_alert, am_payload

NOSNIFF = ("X-Content-Type-Options", "nosniff")


def _header(resp: Any, name: str) -> str:
    return str(resp.headers.get(name, ""))


def test_the_status_page_cannot_be_framed(client: FlaskClient) -> None:
    resp = client.get("/", headers=AUTH)
    assert resp.status_code == 200 and resp.mimetype == "text/html"
    assert _header(resp, "X-Frame-Options") == "DENY"
    assert "frame-ancestors 'none'" in _header(resp, "Content-Security-Policy")
    assert _header(resp, NOSNIFF[0]) == NOSNIFF[1]
    assert _header(resp, "Cache-Control") == "no-store"


def test_the_sign_in_answer_cannot_be_framed_either(client: FlaskClient) -> None:
    resp = client.get("/")  # no credentials: the page that asks for them
    assert resp.status_code == 401
    assert _header(resp, "X-Frame-Options") == "DENY"
    assert "frame-ancestors 'none'" in _header(resp, "Content-Security-Policy")
    assert _header(resp, NOSNIFF[0]) == NOSNIFF[1]


@pytest.mark.parametrize(("method", "path", "body"), [
    pytest.param("GET", "/api/v1/pools", None, id="pools"),
    pytest.param("GET", "/api/v1/pools/gpu", None, id="one-pool"),
    pytest.param("GET", "/api/v1/events", None, id="events"),
    pytest.param("GET", "/api/v1/groups", None, id="groups"),
    pytest.param("GET", "/api/v1/pools/nope", None, id="unknown-pool-404"),
    pytest.param("POST", "/webhook/alertmanager", am_payload(am_alert()), id="webhook"),
    pytest.param("POST", "/api/v1/pools/gpu/pause", {"reason": "maintenance"}, id="pause"),
])
def test_authenticated_answers_are_never_stored(client: FlaskClient, method: str, path: str, body: Any) -> None:
    resp = client.open(path, method=method, json=body, headers=AUTH)
    assert resp.status_code < 500, resp.get_data(as_text=True)
    assert _header(resp, "Cache-Control") == "no-store"
    assert _header(resp, NOSNIFF[0]) == NOSNIFF[1]


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/no-such-route", "/api/v1/pools"])
def test_every_answer_says_nosniff(client: FlaskClient, path: str) -> None:
    """Authenticated or not, found or not (``/api/v1/pools`` here without credentials: 401)."""
    resp = client.get(path)
    assert _header(resp, NOSNIFF[0]) == NOSNIFF[1], (path, dict(resp.headers))

