"""The generic webhook provider against a local fake endpoint, over real HTTP."""
from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

import providers
from providers.base import ProviderError, Tracked
from providers.webhook import WebhookSettings, render
from tests.support.fakes.ack_hook import Answer, FakeHookServer
from tests.support.fakes.clients import WEBHOOK_TOKEN as TOKEN
from tests.support.fakes.clients import make_webhook as make
from tests.support import FakeClock



@pytest.fixture
def endpoint() -> Iterator[FakeHookServer]:
    server = FakeHookServer().start()
    yield server
    server.stop()


@pytest.fixture
def sleeps() -> list[float]:
    return []


def test_default_body_is_json_with_every_value(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    assert make(endpoint, sleeps).scale(3, 5, now=0.0) == 5
    call = endpoint.calls[0]
    assert call.method == "POST" and call.path == "/runs"
    assert json.loads(call.body) == {"pool": "gpu-a100", "action": "scale_out", "from": 3, "to": 5, "step": 2}
    assert call.headers["content-type"] == "application/json"


def test_headers_are_sent(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    make(endpoint, sleeps).scale(3, 2, now=0.0)
    assert endpoint.calls[0].headers["authorization"] == f"Bearer {TOKEN}"
    assert endpoint.calls[0].headers["x-team"] == "gpu"


def test_custom_template_is_rendered(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    template = '{"data": {"attributes": {"message": "{action} {pool}: {from} -> {to}"}, "vars": {"n": {to}}}}'
    make(endpoint, sleeps, method="PUT", body_template=template).scale(4, 1, now=0.0)
    assert endpoint.calls[0].method == "PUT"
    assert json.loads(endpoint.calls[0].body) == {
        "data": {"attributes": {"message": "scale_in gpu-a100: 4 -> 1"}, "vars": {"n": 1}}}


def test_plain_text_template_and_get_with_url_placeholders(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    make(endpoint, sleeps, content_type="text/plain", body_template="{pool} to {to}").scale(1, 2, now=0.0)
    assert endpoint.calls[0].body == b"gpu-a100 to 2"
    make(endpoint, sleeps, method="GET", url=endpoint.hook_url("/scale/{pool}", "to={to}&step={step}")).scale(2, 6, 0.0)
    call = endpoint.calls[1]
    assert (call.method, call.path, call.param("to"), call.param("step"), call.body) == (
        "GET", "/scale/gpu-a100", "6", "4", b"")


def test_render_escapes_for_json_and_leaves_other_braces() -> None:
    assert render('{"p": "{pool}", "x": {}}', {"pool": 'a"b'}) == '{"p": "a\\"b", "x": {}}'


def test_5xx_is_retried_then_succeeds(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    endpoint.then(Answer(status=500, body="no"), Answer(status=504, body="gateway"))
    assert make(endpoint, sleeps).scale(3, 4, now=0.0) == 4
    assert len(endpoint.calls) == 3 and len(sleeps) == 2


def test_4xx_fails_at_once_and_401_is_not_retryable(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    endpoint.then(Answer(status=401, body={"errors": ["unauthorized"]}))
    with pytest.raises(ProviderError) as caught:
        make(endpoint, sleeps).scale(3, 4, now=0.0)
    assert caught.value.retryable is False and caught.value.cloud_code == "401" and len(endpoint.calls) == 1


def test_429_is_retryable_with_retry_after(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    endpoint.then(Answer(status=429, body="slow down"))
    with pytest.raises(ProviderError) as caught:
        make(endpoint, sleeps).scale(3, 4, now=0.0)
    assert caught.value.retryable is True and len(endpoint.calls) == 1


def test_timeout_fails_retryably(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    endpoint.then(Answer(delay=0.5))
    with pytest.raises(ProviderError) as caught:
        make(endpoint, sleeps, timeout="150ms", retry_budget=0).scale(3, 4, now=0.0)
    assert caught.value.retryable is True and "no answer within" in caught.value.message


def test_secrets_in_url_and_headers_never_leak(endpoint: FakeHookServer, sleeps: list[float],
                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    endpoint.then(Answer(status=503, body="x"), Answer(status=403, body="forbidden"))
    provider = make(endpoint, sleeps)
    with pytest.raises(ProviderError) as caught:
        provider.scale(3, 4, now=0.0)
    assert "token=REDACTED" in str(caught.value)
    assert TOKEN not in str(caught.value) and TOKEN not in caplog.text and caplog.text
    assert TOKEN not in repr(provider.settings)


def test_tracked_count(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    provider = make(endpoint, sleeps)
    assert provider.capabilities.reports_count is False
    assert provider.status(Tracked(None, None), 0.0).current == 3
    assert provider.status(Tracked(8, 1.0), 2.0).current == 8


def test_count_url_reads_the_size(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    provider = make(endpoint, sleeps, tracks_count=False, count_url=endpoint.hook_url("/size", "token=" + TOKEN),
                    count_field="nodes")
    assert provider.capabilities.reports_count is True
    endpoint.then(Answer(body={"nodes": 6, "busy": True}), Answer(body={"nodes": "six"}))
    status = provider.status(Tracked(None, None), 0.0)
    assert (status.current, status.busy) == (6, True)
    assert endpoint.calls[0].headers["authorization"] == f"Bearer {TOKEN}"
    with pytest.raises(ProviderError, match="not a size"):
        provider.status(Tracked(None, None), 0.0)


@pytest.mark.parametrize(("overrides", "message"), [
    pytest.param({"body_template": '{"p": "{pool}", "n": {replicas}}'}, "unknown placeholder",
                 id="unknown-placeholder"),
    pytest.param({"body_template": '{"p": {pool}}'}, "not valid JSON", id="unquoted-string-placeholder"),
    pytest.param({"url": "file:///etc/passwd"}, "http(s) URL", id="not-http"),
    pytest.param({"tracks_count": False}, "needs count_url", id="untracked-without-count-url"),
    pytest.param({"method": "PATCH"}, "POST", id="method"),
])
def test_settings_are_checked(overrides: dict[str, Any], message: str) -> None:
    settings = {"url": "https://ci.example.com/trigger?token=" + TOKEN, **overrides}
    with pytest.raises(ValidationError) as caught:
        WebhookSettings.model_validate(settings)
    assert message in str(caught.value) and TOKEN not in str(caught.value)


def test_registry_builds_it() -> None:
    factory = providers.factory("webhook")
    provider = factory.build("p", factory.settings_model.model_validate({"url": "https://ci.example.com/x"}),
                             FakeClock())
    assert provider.capabilities.reports_count is False
