"""AKS end to end: Alertmanager webhook -> engine -> real Azure SDK -> local fake ARM."""
from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.core.pipeline.policies import SansIOHTTPPolicy
from flask.testing import FlaskClient

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from providers.aks import AksProvider
from tests.support.fakes.arm import FakeArm
from tests.support import FakeClock

SUB = "3f2c1d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
HOOK_TOKEN = "hook-token-e2e"
AUTH = {"Authorization": f"Bearer {HOOK_TOKEN}"}
_FINGERPRINTS = itertools.count(1)


class StaticCredential:
    """Hands out one fixed ARM token."""

    def __init__(self, token: str) -> None:
        self.token = token

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(self.token, int(time.time()) + 3600)


class AllowHttp(SansIOHTTPPolicy):  # type: ignore[type-arg]
    """Lets the SDK send the bearer token to the fake over plain http."""

    def on_request(self, request: Any) -> None:
        request.context["enforce_https"] = False


@pytest.fixture
def arm_token() -> str:
    return f"eyJarm.{uuid.uuid4().hex}.sig"


@pytest.fixture
def arm(arm_token: str) -> Iterator[FakeArm]:
    with FakeArm(SUB, "rg-gpu", "prod-aks", arm_token) as fake:
        fake.add_pool("gpunp", count=1)
        fake.add_pool("auto", count=2, enable_auto_scaling=True)
        yield fake


@pytest.fixture
def clocks() -> FakeClock:
    return FakeClock()


@pytest.fixture
def client(arm: FakeArm, arm_token: str, clocks: FakeClock, tmp_path: Any) -> FlaskClient:
    aks = {"subscription_id": SUB, "resource_group": "rg-gpu", "cluster": "prod-aks", "arm_endpoint": arm.url}
    settings = build_settings({
        "server": {"auth": {"bearer_tokens": [HOOK_TOKEN]}},
        "store": {"url": f"sqlite:///{tmp_path}/state.db"},
        "defaults": {"scale_out": {"step": 1, "cooldown": "5m"},
                     "scale_in": {"step": 1, "cooldown": "15m", "delay_after_scale_out": "10m"}},
        "pools": [
            {"name": "gpu-h100", "provider": "aks", "min": 0, "max": 4, "aks": {**aks, "agent_pool": "gpunp"}},
            {"name": "auto", "provider": "aks", "min": 0, "max": 4, "aks": {**aks, "agent_pool": "auto"}},
        ],
    }, env={})
    credential, policies = StaticCredential(arm_token), [AllowHttp()]
    providers: dict[str, Any] = {
        name: AksProvider(name, spec.provider_settings, credential=credential, clock=clocks,
                           per_call_policies=policies)
        for name, spec in settings.pools.items()
    }
    return create_app(settings, clock=clocks, providers=providers).test_client()


def alert(pool: str = "gpu-h100", action: str = "scale_out", name: str = "GPUUtilizationHigh") -> dict[str, Any]:
    """An Alertmanager v4 notification with one firing alert routed by labels."""
    labels = {"alertname": name, "autoscaler_pool": pool, "autoscaler_action": action, "severity": "info"}
    return {
        "version": "4", "groupKey": f'{{}}:{{alertname="{name}"}}', "truncatedAlerts": 0, "status": "firing",
        "receiver": "gpu-pool-autoscaler", "groupLabels": {"alertname": name}, "commonLabels": labels,
        "commonAnnotations": {}, "externalURL": "http://alertmanager:9093",
        "alerts": [{"status": "firing", "labels": labels, "annotations": {"summary": "GPU busy"},
                    "startsAt": "2026-01-01T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                    "generatorURL": "http://prometheus:9090/graph", "fingerprint": f"{next(_FINGERPRINTS):016x}"}],
    }


def post(client: FlaskClient, body: dict[str, Any]) -> tuple[int, dict[str, Any], Any]:
    resp = client.post("/webhook/alertmanager", json=body, headers=AUTH)
    decisions = resp.get_json()["decisions"]
    assert len(decisions) == 1
    return resp.status_code, decisions[0], resp


def test_scale_out_then_busy_then_scale_out_again(client: FlaskClient, arm: FakeArm, clocks: FakeClock) -> None:
    status, decision, _ = post(client, alert())
    assert status == 200 and decision["outcome"] == "scaled" and (decision["from"], decision["to"]) == (1, 2)
    assert arm.pools["gpunp"]["count"] == 2 and arm.calls(kind="operations") == []
    pool = client.get("/api/v1/pools/gpu-h100", headers=AUTH).get_json()  # the view the decision stored
    assert pool["current"] == 2 and pool["in_flight"] == 1 and "1 -> 2 asked for" in pool["busy_detail"]
    assert client.application.extensions["autoscaler_reconciler"].tick(clocks.now).held  # it reads ARM
    pool = client.get("/api/v1/pools/gpu-h100", headers=AUTH).get_json()
    assert pool["current"] == 2 and pool["busy"] is True and pool["view_age_s"] == 0
    clocks.now += 600  # cooldown over, but ARM still Scaling
    status, decision, _ = post(client, alert())
    assert decision["outcome"] == "skipped_busy" and len(arm.calls("PUT")) == 1
    arm.finish_operations()
    status, decision, _ = post(client, alert())
    assert decision["outcome"] == "scaled" and (decision["from"], decision["to"]) == (2, 3)


def test_alerts_inside_the_cooldown_never_reach_arm(client: FlaskClient, arm: FakeArm, clocks: FakeClock) -> None:
    status, decision, _ = post(client, alert())
    assert decision["outcome"] == "scaled" and (decision["from"], decision["to"]) == (1, 2)
    arm.finish_operations()
    reads = len(arm.calls())
    clocks.now += 60
    for _ in range(20):  # a storm of new alerts while the 5 min scale-out cooldown runs
        status, decision, _ = post(client, alert())
        assert status == 200 and decision["outcome"] == "skipped_cooldown"
        assert (decision["from"], decision["to"]) == (2, 2)  # the count the last decision saw
        assert decision["reason"].endswith("scale out cooldown: 240s left")
    assert len(arm.calls()) == reads  # not one ARM request: nothing ARM says could make it act
    event = client.get("/api/v1/events?pool=gpu-h100&limit=1", headers=AUTH).get_json()["events"][0]
    assert event["details"] == {"cloud": "not read: the cooldown settles it"}
    pool = client.get("/api/v1/pools/gpu-h100", headers=AUTH).get_json()
    assert pool["last_event"]["id"] == event["id"]
    clocks.now += 240  # cooldown over: the cloud is read again and the pool scales
    status, decision, _ = post(client, alert())
    assert decision["outcome"] == "scaled" and (decision["from"], decision["to"]) == (2, 3)
    assert len(arm.calls("GET")) > 0 and len(arm.calls("PUT")) == 2


def test_scale_in_uses_the_count_arm_reports(client: FlaskClient, arm: FakeArm) -> None:
    arm.pools["gpunp"]["count"] = 3
    status, decision, _ = post(client, alert(action="scale_in", name="GPUUtilizationLow"))
    assert status == 200 and decision["outcome"] == "scaled" and (decision["from"], decision["to"]) == (3, 2)
    assert [r.body["properties"]["count"] for r in arm.calls("PUT")] == [2]


def test_throttled_then_accepted(client: FlaskClient, arm: FakeArm, clocks: FakeClock) -> None:
    arm.fail_next(429, retry_after="2", method="PUT")
    status, decision, _ = post(client, alert())
    assert status == 200 and decision["outcome"] == "scaled" and clocks.sleeps == [2.0]


def test_server_errors_exhaust_the_budget_and_ask_for_a_retry(client: FlaskClient, arm: FakeArm,
                                                              clocks: FakeClock) -> None:
    arm.fail_next(500, times=50, method="PUT")
    status, decision, resp = post(client, alert())
    assert status == 503 and int(resp.headers["Retry-After"]) >= 1
    assert decision["outcome"] == "failed" and "InternalServerError" in decision["reason"]
    assert sum(clocks.sleeps) <= 8.0 and arm.pools["gpunp"]["count"] == 1


def test_busy_409_asks_for_a_retry(client: FlaskClient, arm: FakeArm) -> None:
    arm.fail_next(409, method="PUT")
    status, decision, _ = post(client, alert())
    assert status == 503 and decision["outcome"] == "failed" and "OperationNotAllowed" in decision["reason"]


@pytest.mark.parametrize("fault,code", [(400, "InvalidParameter"), (401, "InvalidAuthenticationToken")])
def test_client_errors_fail_without_a_retry(client: FlaskClient, arm: FakeArm, fault: int, code: str) -> None:
    arm.fail_next(fault, method="PUT")
    status, decision, _ = post(client, alert())
    assert status == 200 and decision["outcome"] == "failed" and code in decision["reason"]
    events = client.get("/api/v1/events?pool=gpu-h100", headers=AUTH).get_json()["events"]
    assert events[0]["outcome"] == "failed" and code in events[0]["reason"]


def test_autoscaler_enabled_pool_is_refused_with_advice(client: FlaskClient, arm: FakeArm) -> None:
    status, decision, _ = post(client, alert(pool="auto"))
    assert status == 200 and decision["outcome"] == "failed"
    assert "--disable-cluster-autoscaler" in decision["reason"] and arm.calls("PUT") == []


def test_arm_token_never_leaves_the_service(client: FlaskClient, arm: FakeArm, arm_token: str,
                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    bodies = []
    for fault in (401, 400, 500, None):
        if fault:
            arm.fail_next(fault, times=50)
        bodies.append(client.post("/webhook/alertmanager", json=alert(), headers=AUTH).get_data(as_text=True))
        arm.faults.clear()
    bodies.append(client.get("/api/v1/events", headers=AUTH).get_data(as_text=True))
    bodies.append(client.get("/api/v1/pools", headers=AUTH).get_data(as_text=True))
    bodies.append(client.get("/metrics").get_data(as_text=True))
    assert any("InvalidAuthenticationToken" in b for b in bodies)  # the failures did reach the answers
    assert all(arm_token not in b for b in bodies)
    assert arm_token not in caplog.text
