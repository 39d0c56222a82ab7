"""Issue 34 items 5 and 6: a cloud hook that trickles its answer, or answers hundreds of MB, against real local
endpoints (stdlib sockets). Each exchange has a total deadline (not a per-read one), a change of several calls
one deadline for all of them, and an answer is read up to 1 MiB and refused past it, recorded as the cloud's
error."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from google.oauth2.credentials import Credentials

from autoscaler.config.load import build_settings
from autoscaler.app import create_app
from providers import PermanentError, ProviderError, TemporaryError, Tracked
from providers.ack_hook import AckHookProvider, AckHookSettings
from providers.aks import AksProvider, AksSettings
from providers.eks import EksProvider, EksSettings
from providers.gke import GkeProvider, GkeSettings
from providers.webhook import WebhookProvider, WebhookSettings
from tests.support.fakes.clients import AKS_CLUSTER, RG, SUB, AllowHttp, StaticCredential
from tests.support.fakes.misbehaving import Misbehaving
from tests.support.fakes.moto_eks import AWS_ENV
from tests.support import AUTH, FakeClock, am_alert, am_payload, config

MiB = 1024 * 1024


def webhook(url: str, clock: FakeClock | None = None, **overrides: Any) -> WebhookProvider:
    settings = {"url": url + "/runs?token=hook-secret-1", "timeout": "1s", "retry_budget": "2s", **overrides}
    return WebhookProvider("gpu", WebhookSettings.model_validate(settings), clock=clock or FakeClock())


def ack_hook(url: str, clock: FakeClock | None = None, **overrides: Any) -> AckHookProvider:
    settings = {"scale_out_url": url + "/hook/trigger?secret=s-out-1",
                "scale_in_url": url + "/hook/trigger?secret=s-in-1",
                "initial_count": 6, "timeout": "1s", "retry_budget": "2s", **overrides}
    return AckHookProvider("gpu", AckHookSettings.model_validate(settings), clock=clock or FakeClock())


@pytest.mark.parametrize("mode", ["trickle_body", "trickle_head"])
def test_a_trickling_webhook_is_cut_at_its_deadline(mode: str) -> None:
    """The answer (80 bytes, a byte every 0.5 s: 40 s whole) never stalls one read for the 1 s timeout."""
    with Misbehaving(mode) as hook:
        provider = webhook(hook.url)
        started = time.monotonic()
        with pytest.raises(TemporaryError) as caught:
            provider.scale(3, 4, now=0.0)
        took = time.monotonic() - started
    print(f"{mode}: gave up after {took:.2f}s, {len(hook.served)} attempt(s)")
    assert took < 3.5, f"the 1s timeout and 2s budget held the call {took:.1f}s"
    assert caught.value.retryable and "no answer within" in caught.value.message
    assert "hook-secret-1" not in caught.value.message


def test_a_trickling_count_url_is_cut_at_its_deadline() -> None:
    with Misbehaving("trickle_body") as hook:
        provider = webhook(hook.url, tracks_count=False, count_url=hook.url + "/count?token=hook-secret-1")
        started = time.monotonic()
        with pytest.raises(TemporaryError):
            provider.status(Tracked(None, None), 0.0)
        assert time.monotonic() - started < 3.5


def test_an_ack_hook_change_of_several_calls_shares_one_deadline() -> None:
    """A scale-in of 6 nodes is 6 calls; each answered in 0.8 s (inside the 1 s timeout) they would take 4.8 s:
    together they get the 2 s budget + 1 s timeout, and the error says how far the change got."""
    with Misbehaving("ok", delay=0.8) as hook:
        provider = ack_hook(hook.url, FakeClock(real_waits=True))  # real time: a real peer answers each in 0.8 s
        started = time.monotonic()
        with pytest.raises(TemporaryError) as caught:
            provider.scale(6, 0, now=0.0)
        took = time.monotonic() - started
    print(f"ack hook scale-in: stopped after {took:.2f}s and {len(hook.served)} call(s): {caught.value.message}")
    assert took < 4.0
    assert 2 <= len(hook.served) <= 4
    went = caught.value.applied
    assert went is not None and 6 - went in (len(hook.served), len(hook.served) - 1)
    assert "s-in-1" not in caught.value.message


@pytest.mark.parametrize("make", [webhook, ack_hook], ids=["webhook", "ack_hook"])
def test_a_huge_answer_is_refused_after_one_mib(make: Any) -> None:
    with Misbehaving("large") as hook:
        provider = make(hook.url)
        with pytest.raises(PermanentError) as caught:
            provider.scale(3, 4, now=0.0)
        deadline = time.monotonic() + 5
        while not hook.served[0].ended and time.monotonic() < deadline:
            time.sleep(0.05)
    served = hook.served
    print(f"the endpoint wrote {served[0].sent / MiB:.1f} MiB before the client hung up")
    assert len(served) == 1, "an answer that may have acted is not sent again"
    assert served[0].cut and served[0].sent < 24 * MiB  # 32 MiB offered; 1 MiB read, the rest socket buffers
    error = caught.value
    assert error.code == "BadAnswer" and error.cloud_code == "200" and not error.retryable
    assert "answered HTTP 200 with a body of more than 1 MiB; refused after reading 1 MiB" in error.message


def test_a_huge_count_answer_is_refused() -> None:
    with Misbehaving("large") as hook:
        provider = webhook(hook.url, tracks_count=False, count_url=hook.url + "/count")
        with pytest.raises(ProviderError, match="more than 1 MiB"):
            provider.status(Tracked(None, None), 0.0)


def webhook_app(tmp_path: Path, url: str) -> Any:
    cfg = config(f"sqlite:///{tmp_path}/s.db")
    cfg["pools"] = [{"name": "gpu", "provider": "webhook", "min": 0, "max": 6,
                     "webhook": {"url": url + "/runs?token=hook-secret-1", "timeout": "1s", "retry_budget": "2s",
                                 "initial_count": 2}}]
    return create_app(build_settings(cfg, env={}), clock=FakeClock(), startup_check=False)


def test_the_decision_on_a_trickling_hook_ends_within_its_budget(tmp_path: Path) -> None:
    with Misbehaving("trickle_body") as hook:
        app = webhook_app(tmp_path, hook.url)
        started = time.monotonic()
        answer = app.test_client().post("/webhook/alertmanager", json=am_payload(am_alert()), headers=AUTH)
        took = time.monotonic() - started
        events = app.test_client().get("/api/v1/events?pool=gpu", headers=AUTH).get_json()["events"]
    print(f"alert answered after {took:.2f}s")
    assert took < 4.0 and answer.status_code == 503 and answer.headers["Retry-After"]
    (event,) = events
    assert event["outcome"] == "failed" and "no answer within" in event["reason"]


def test_the_decision_records_the_huge_answer_as_the_clouds_error(tmp_path: Path) -> None:
    with Misbehaving("large") as hook:
        app = webhook_app(tmp_path, hook.url)
        answer = app.test_client().post("/webhook/alertmanager", json=am_payload(am_alert()), headers=AUTH)
        events = app.test_client().get("/api/v1/events?pool=gpu", headers=AUTH).get_json()["events"]
    (decision,) = answer.get_json()["decisions"]
    assert decision["outcome"] == "failed" and "more than 1 MiB" in decision["reason"]
    (event,) = events
    assert event["outcome"] == "failed" and "refused after reading 1 MiB" in event["reason"]
    assert event["details"]["code"] == "BadAnswer" and event["details"]["cloud_code"] == "200"
    assert "hook-secret-1" not in answer.get_data(as_text=True) + str(events)


def aks(url: str) -> AksProvider:
    settings = AksSettings(subscription_id=SUB, resource_group=RG, cluster=AKS_CLUSTER, agent_pool="gpunp",
                           arm_endpoint=url, timeout=1, retry_budget=2)
    return AksProvider("gpu", settings, credential=StaticCredential("arm-token"), per_call_policies=[AllowHttp()])


def test_a_trickling_arm_is_cut_at_its_deadline() -> None:
    """azure-core's read_timeout bounds each socket read; through the bounded session it bounds the exchange."""
    with Misbehaving("trickle_body") as arm:
        provider = aks(arm.url)  # the SDK's client is built before the clock starts
        started = time.monotonic()
        with pytest.raises(TemporaryError) as caught:
            provider.status(Tracked(None, None), 0.0)
        took = time.monotonic() - started
    print(f"ARM trickle: gave up after {took:.2f}s, {len(arm.served)} attempt(s)")
    assert took < 3.5 and "no answer from ARM" in caught.value.message


def test_a_huge_arm_answer_is_refused_not_retried() -> None:
    with Misbehaving("large", size=40 * MiB) as arm:
        with pytest.raises(PermanentError) as caught:
            aks(arm.url).status(Tracked(None, None), 0.0)
    assert len(arm.served) == 1 and arm.served[0].sent < 40 * MiB
    assert caught.value.code == "BadAnswer" and "more than 16 MiB" in caught.value.message


def gke(url: str, clock: FakeClock | None = None) -> GkeProvider:
    settings = GkeSettings(project="p", location="us-central1", cluster="c", node_pool="gpu", api_endpoint=url,
                           timeout=1, retry_budget=2)
    return GkeProvider("gpu", settings, credentials=Credentials(token="gke-token"), clock=clock or FakeClock())


def test_a_trickling_gke_api_is_cut_at_its_deadline() -> None:
    """google-cloud-container's REST transport hands requests a per-read timeout; bounded, it is the exchange's."""
    with Misbehaving("trickle_body") as api:
        # the SDK's client is built before the clock starts; the budget is counted in real time, as in service
        provider = gke(api.url, FakeClock(real_waits=True))
        started = time.monotonic()
        with pytest.raises(TemporaryError) as caught:
            provider.status(Tracked(None, None), 0.0)
        took = time.monotonic() - started
    print(f"GKE trickle: gave up after {took:.2f}s, {len(api.served)} attempt(s)")
    assert took < 3.5 and "no answer from Google" in caught.value.message


def test_a_huge_gke_answer_is_refused_not_retried() -> None:
    with Misbehaving("large", size=40 * MiB) as api:
        with pytest.raises(PermanentError) as caught:
            gke(api.url).status(Tracked(None, None), 0.0)
    assert len(api.served) == 1 and api.served[0].sent < 40 * MiB
    assert caught.value.code == "BadAnswer" and "more than 16 MiB" in caught.value.message


def eks(url: str, monkeypatch: pytest.MonkeyPatch, clock: FakeClock | None = None) -> EksProvider:
    for key, value in AWS_ENV.items():
        monkeypatch.setenv(key, value)
    settings = EksSettings(region="us-east-1", cluster="prod", nodegroup="gpu", endpoint_url=url, timeout=1,
                           retry_budget=2)
    return EksProvider("gpu", settings, clock=clock or FakeClock())


def test_a_trickling_aws_api_is_cut_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore's read_timeout bounds each socket read; sent over the bounded session, the exchange."""
    with Misbehaving("trickle_body") as api:
        # boto3's client is built (models loaded) before the clock starts; the budget is counted in real time
        provider = eks(api.url, monkeypatch, FakeClock(real_waits=True))
        started = time.monotonic()
        with pytest.raises(TemporaryError) as caught:
            provider.status(Tracked(None, None), 0.0)
        took = time.monotonic() - started
    print(f"AWS trickle: gave up after {took:.2f}s, {len(api.served)} attempt(s)")
    assert took < 3.5 and "no answer from AWS" in caught.value.message


def test_a_huge_aws_answer_is_refused_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    with Misbehaving("large", size=40 * MiB) as api:
        with pytest.raises(PermanentError) as caught:
            eks(api.url, monkeypatch).status(Tracked(None, None), 0.0)
    assert len(api.served) == 1 and api.served[0].sent < 40 * MiB
    assert caught.value.code == "BadAnswer" and "more than 16 MiB" in caught.value.message
