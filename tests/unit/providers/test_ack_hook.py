"""The ack_hook provider against a local fake trigger endpoint, over real HTTP."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

import providers
from providers.ack_hook import AckHookProvider, AckHookSettings
from providers.base import ProviderError, Tracked
from tests.support.fakes.ack_hook import Answer, FakeHookServer
from tests.support import FakeClock

SECRET = "5f1c0ffee0ddba11deadbeef00c0ffee"
TRIGGER = "dHJpZ2dlcjovL2Nscy14eXovbnAtZ3B1"  # base64 of the ACK trigger, also sensitive


@pytest.fixture
def hook() -> Iterator[FakeHookServer]:
    server = FakeHookServer().start()
    yield server
    server.stop()


@pytest.fixture
def sleeps() -> list[float]:
    return []


def make(hook: FakeHookServer, sleeps: list[float], **overrides: Any) -> AckHookProvider:
    settings: dict[str, Any] = {
        "scale_out_url": hook.hook_url(query=f"triggerUrl={TRIGGER}&secret={SECRET}&type=scale_out&step=1"),
        "scale_in_url": hook.hook_url(query=f"triggerUrl={TRIGGER}&secret={SECRET}"),
        "initial_count": 2,
        "timeout": 2,
        "retry_budget": 5,
    }
    settings.update(overrides)
    return AckHookProvider("ack-t4", AckHookSettings.model_validate(settings), clock=FakeClock(sleeps=sleeps))


def test_scale_out_by_three_sends_one_call_with_step_three(hook: FakeHookServer, sleeps: list[float]) -> None:
    assert make(hook, sleeps).scale(2, 5, now=0.0) == 5
    assert len(hook.calls) == 1
    call = hook.calls[0]
    assert (call.method, call.param("type"), call.param("step")) == ("POST", "scale_out", "3")
    assert call.param("secret") == SECRET and call.param("triggerUrl") == TRIGGER
    assert call.query["step"] == ["3"], "the step already in the URL is replaced, not repeated"


def test_scale_in_by_two_sends_two_calls_of_step_one(hook: FakeHookServer, sleeps: list[float]) -> None:
    assert make(hook, sleeps, method="GET").scale(5, 3, now=0.0) == 3
    assert [(c.method, c.param("type"), c.param("step")) for c in hook.calls] == [("GET", "scale_in", "1")] * 2


def test_existing_type_and_step_are_replaced(hook: FakeHookServer, sleeps: list[float]) -> None:
    provider = make(hook, sleeps, scale_in_url=hook.hook_url(query=f"secret={SECRET}&type=scale_out&step=7"))
    provider.scale(3, 2, now=0.0)
    assert hook.calls[0].query["type"] == ["scale_in"] and hook.calls[0].query["step"] == ["1"]


def test_large_scale_out_is_split_into_steps_of_at_most_100(hook: FakeHookServer, sleeps: list[float]) -> None:
    assert make(hook, sleeps).scale(0, 250, now=0.0) == 250
    assert [c.param("step") for c in hook.calls] == ["100", "100", "50"]


def test_no_change_calls_nothing(hook: FakeHookServer, sleeps: list[float]) -> None:
    assert make(hook, sleeps).scale(4, 4, now=0.0) == 4
    assert hook.calls == []


def test_failure_mid_way_through_scale_in_records_what_went_through(hook: FakeHookServer,
                                                                     sleeps: list[float]) -> None:
    hook.then(Answer(), Answer(status=400, body={"code": "400", "message": "bad step", "requestId": "r2"}))
    with pytest.raises(ProviderError) as caught:
        make(hook, sleeps).scale(5, 2, now=0.0)
    assert len(hook.calls) == 2, "stops at the first failure"
    assert caught.value.applied == 4 and caught.value.retryable is False
    assert "1 of 3 call(s) went through" in caught.value.message and "bad step" in caught.value.message


def test_failure_on_the_first_call_applies_nothing(hook: FakeHookServer, sleeps: list[float]) -> None:
    hook.then(Answer(status=403, body={"code": "403", "message": "secret mismatch"}))
    with pytest.raises(ProviderError) as caught:
        make(hook, sleeps).scale(2, 3, now=0.0)
    assert caught.value.applied is None and caught.value.cloud_code == "403"


def test_5xx_is_retried_then_succeeds(hook: FakeHookServer, sleeps: list[float]) -> None:
    hook.then(Answer(status=502, body="bad gateway"), Answer(status=503, body={"code": "503"}))
    assert make(hook, sleeps).scale(1, 2, now=0.0) == 2
    assert len(hook.calls) == 3
    assert len(sleeps) == 2 and 0 < sleeps[0] <= sleeps[1] + 0.5, "exponential backoff with jitter"


def test_5xx_until_the_budget_is_spent_is_a_retryable_failure(hook: FakeHookServer, sleeps: list[float]) -> None:
    hook.then(*[Answer(status=500, body="oops")] * 10)
    with pytest.raises(ProviderError) as caught:  # a budget the 4 waits (up to 0.5+1+2+4 s + jitter) fit in
        make(hook, sleeps, retry_budget=30).scale(1, 2, now=0.0)
    assert caught.value.retryable is True and caught.value.cloud_code == "500"
    assert len(hook.calls) == 5, "bounded by max attempts"
    assert "HTTP 500" in caught.value.message


def test_4xx_is_not_retried(hook: FakeHookServer, sleeps: list[float]) -> None:
    hook.then(Answer(status=404, body={"code": "404", "message": "no such trigger"}))
    with pytest.raises(ProviderError):
        make(hook, sleeps).scale(1, 2, now=0.0)
    assert len(hook.calls) == 1 and sleeps == []


def test_timeout_is_retried_then_succeeds(hook: FakeHookServer, sleeps: list[float]) -> None:
    hook.then(Answer(delay=0.6))
    assert make(hook, sleeps, timeout="200ms").scale(1, 2, now=0.0) == 2
    assert len(hook.calls) == 2 and len(sleeps) == 1


def test_timeouts_spend_the_budget_and_fail_retryably(hook: FakeHookServer, sleeps: list[float]) -> None:
    hook.then(*[Answer(delay=0.6)] * 3)
    with pytest.raises(ProviderError) as caught:
        make(hook, sleeps, timeout="200ms", retry_budget=0).scale(1, 2, now=0.0)
    assert caught.value.retryable is True and "no answer within" in caught.value.message
    assert len(hook.calls) == 1, "a zero budget allows no second attempt"


def test_connection_refused_is_retryable(sleeps: list[float]) -> None:
    settings = AckHookSettings(scale_out_url=f"http://127.0.0.1:9/hook?secret={SECRET}",  # type: ignore[arg-type]
                               scale_in_url=f"http://127.0.0.1:9/hook?secret={SECRET}",  # type: ignore[arg-type]
                               retry_budget=1)
    with pytest.raises(ProviderError) as caught:
        AckHookProvider("p", settings, clock=FakeClock(sleeps=sleeps)).scale(0, 1, now=0.0)
    assert caught.value.retryable is True and "connection failed" in caught.value.message
    assert SECRET not in str(caught.value)


def test_body_with_code_500_is_a_failure(hook: FakeHookServer, sleeps: list[float]) -> None:
    hook.then(Answer(body={"code": "500", "message": "internal error", "requestId": "r9"}))
    with pytest.raises(ProviderError) as caught:
        make(hook, sleeps).scale(1, 2, now=0.0)
    assert caught.value.cloud_code == "500" and caught.value.retryable is True
    assert "requestId=r9" in caught.value.message and len(hook.calls) == 1


def test_numeric_code_200_is_success(hook: FakeHookServer, sleeps: list[float]) -> None:
    hook.then(Answer(body={"code": 200, "message": "", "requestId": "r1"}))
    assert make(hook, sleeps).scale(1, 2, now=0.0) == 2


def test_secret_never_leaks_into_errors_or_logs(hook: FakeHookServer, sleeps: list[float],
                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    hook.then(Answer(status=503, body="busy"),
              Answer(status=400, body={"code": "400", "message": f"bad https://x/y?secret={SECRET}"}))
    with pytest.raises(ProviderError) as caught:
        make(hook, sleeps).scale(3, 6, now=0.0)
    text = f"{caught.value} {caught.value.message!r} {caught.value.__cause__!r} {caught.value.__context__!r}"
    assert "secret=REDACTED" in text
    assert SECRET not in text and TRIGGER not in text
    assert caplog.records, "urllib3 and the retry logged something at DEBUG/WARNING"
    assert SECRET not in caplog.text and TRIGGER not in caplog.text


def test_status_returns_the_tracked_count_or_the_initial_one(hook: FakeHookServer, sleeps: list[float]) -> None:
    provider = make(hook, sleeps)
    assert provider.capabilities.reports_count is False
    assert provider.status(Tracked(count=None, changed_at=None), now=0.0).current == 2
    assert provider.status(Tracked(count=7, changed_at=1.0), now=2.0).current == 7
    assert hook.calls == []


@pytest.mark.parametrize("url", ["ftp://host/x?secret=abc", "not a url secret=abc", "https:///nohost?secret=abc"])
def test_settings_refuse_non_http_urls_without_quoting_them(url: str) -> None:
    with pytest.raises(ValidationError) as caught:
        AckHookSettings.model_validate({"scale_out_url": url, "scale_in_url": "https://h/x"})
    assert "http(s) URL" in str(caught.value) and "abc" not in str(caught.value)


def test_registry_builds_it_and_repr_hides_the_url() -> None:
    factory = providers.factory("ack_hook")
    settings = factory.settings_model.model_validate(
        {"scale_out_url": f"https://cs.console.aliyun.com/hook/trigger?secret={SECRET}",
         "scale_in_url": f"https://cs.console.aliyun.com/hook/trigger?secret={SECRET}", "initial_count": 1})
    assert SECRET not in repr(settings) and SECRET not in str(settings.model_dump())
    assert factory.build("ack-t4", settings, FakeClock()).capabilities.reports_count is False
    with pytest.raises(ValidationError):
        factory.settings_model.model_validate({"scale_out_url": "https://h/x", "scale_in_url": "https://h/y",
                                               "typo": 1})
