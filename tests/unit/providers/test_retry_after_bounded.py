"""A cloud's ``Retry-After`` reaches the sender finite and at most a day (issue 45, item 8): ``inf``, ``1e400`` ms or
``1e12`` from a webhook endpoint is a 503 with ``Retry-After: 86400``, never a 500 or a wait of 30,000 years; the
real webhook provider over HTTP, the real app."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.config.durations import MAX_RETRY_AFTER, retry_after_header
from providers.errors import TemporaryError
from providers.retry import Transient, parse_retry_after
from tests.support.fakes.ack_hook import Answer, FakeHookServer
from tests.support.fakes.clients import make_webhook
from tests.support import FakeClock, am_alert, am_payload, make_app, post


@pytest.fixture
def endpoint() -> Iterator[FakeHookServer]:
    server = FakeHookServer().start()
    yield server
    server.stop()


@pytest.mark.parametrize(("status", "headers", "expected"), [
    pytest.param(503, {"Retry-After": "inf"}, "86400", id="inf-503"),
    pytest.param(429, {"Retry-After": "Infinity"}, "86400", id="infinity-429"),
    pytest.param(503, {"retry-after-ms": "1e400"}, "86400", id="ms-overflow"),
    pytest.param(429, {"Retry-After": "1e12"}, "86400", id="huge"),
    pytest.param(503, {"Retry-After": "nan"}, "60", id="nan-is-no-hint"),
    pytest.param(429, {"Retry-After": "90"}, "90", id="plain"),
])
def test_the_sender_gets_a_finite_clamped_retry_after(tmp_path: Path, endpoint: FakeHookServer, status: int,
                                                      headers: dict[str, str], expected: str) -> None:
    endpoint.then(*[Answer(status=status, body={"error": "later"}, headers=headers)] * 5)
    clock = FakeClock()
    app = make_app(f"sqlite:///{tmp_path}/s.db", clock, {"gpu": make_webhook(endpoint, clock.sleeps)})
    answer = post(app.test_client(), "/webhook/alertmanager", am_payload(am_alert(fingerprint="ra")))
    assert answer.status_code == 503, answer.get_data(as_text=True)
    assert answer.headers["Retry-After"] == expected
    assert answer.get_json()["decisions"][0]["outcome"] == "failed"
    assert all(s <= MAX_RETRY_AFTER for s in clock.sleeps), clock.sleeps  # the provider never waits past a day


@pytest.mark.parametrize(("headers", "expected"), [
    ({"Retry-After": "inf"}, MAX_RETRY_AFTER), ({"Retry-After": "-inf"}, 0.0), ({"Retry-After": "nan"}, None),
    ({"retry-after-ms": "1e400"}, MAX_RETRY_AFTER), ({"x-ms-retry-after-ms": "nan"}, None),
    ({"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}, MAX_RETRY_AFTER), ({"Retry-After": "1.5"}, 1.5),
])
def test_parse_retry_after_is_finite_and_at_most_a_day(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(headers) == expected


def test_every_retry_after_is_bounded_where_it_is_made_and_where_it_is_written() -> None:
    """An SDK's hint (ACK's ThrottlingException) becomes a TemporaryError or a Transient without passing through
    ``parse_retry_after``: both keep it within a day; the answer header is whole seconds in ``[1, a day]``."""
    assert TemporaryError("x", retry_after=float("inf")).retry_after == MAX_RETRY_AFTER
    assert TemporaryError("x", retry_after=float("nan")).retry_after is None
    assert Transient("x", 503, float("inf")).retry_after == MAX_RETRY_AFTER
    assert [retry_after_header(s) for s in (float("inf"), 1e12, 0.2, -5.0, 89.1, float("nan"))] == [
        "86400", "86400", "1", "1", "90", "1"]
