"""The AKS provider through the real Azure SDK over HTTP against a local fake ARM server."""
from __future__ import annotations

import logging
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from pydantic import ValidationError

from autoscaler.models import CloudStatus
from providers import factory
from providers.aks import AksProvider, AksSettings, get_client
from providers.base import ProviderError, Tracked
from tests.support.fakes.arm import FakeArm
from tests.support.fakes.clients import AKS_CLUSTER as CLUSTER
from tests.support.fakes.clients import RG, SUB, AllowHttp, StaticCredential
from tests.support import FakeClock

NO_TRACK = Tracked(count=None, changed_at=None)


@pytest.fixture
def token() -> str:
    return f"eyJfake.{uuid.uuid4().hex}.sig"


@pytest.fixture
def arm(token: str) -> Iterator[FakeArm]:
    with FakeArm(SUB, RG, CLUSTER, token) as fake:
        fake.add_pool("gpunp", count=1)
        fake.add_pool("system", count=2, mode="System")
        yield fake


@pytest.fixture
def fake_time() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make(arm: FakeArm, token: str, fake_time: FakeClock) -> Any:
    credential = StaticCredential(token)
    policies = [AllowHttp()]

    def build(agent_pool: str = "gpunp", credential: Any = credential, **overrides: Any) -> AksProvider:
        settings = AksSettings(subscription_id=SUB, resource_group=RG, cluster=CLUSTER, agent_pool=agent_pool,
                               arm_endpoint=arm.url, **overrides)
        return AksProvider("gpu", settings, credential=credential,
                           clock=fake_time,  per_call_policies=policies)

    build.credential = credential  # type: ignore[attr-defined]
    return build


def test_read_reports_arm_count_state_and_uses_endpoint_scope(arm: FakeArm, make: Any, token: str) -> None:
    arm.pools["gpunp"]["count"] = 2
    status = make().status(NO_TRACK, now=0.0)
    assert status.current == 2 and status.busy is False
    assert "provisioningState=Succeeded" in status.detail and "mode=User" in status.detail
    (get,) = arm.calls("GET")
    assert get.path.endswith(f"/managedClusters/{CLUSTER}/agentPools/gpunp")
    assert get.query["api-version"] == ["2025-09-01"]
    assert get.headers["authorization"] == f"Bearer {token}"
    assert make.credential.scopes[0] == (arm.url + "/.default",)


def test_stored_count_never_wins_over_arm(arm: FakeArm, make: Any) -> None:
    arm.pools["gpunp"]["count"] = 4
    assert make().status(Tracked(count=9, changed_at=1.0), now=2.0).current == 4


def test_scale_out_returns_once_arm_accepted_and_pool_turns_busy(arm: FakeArm, make: Any) -> None:
    provider = make()
    status = provider.status(NO_TRACK, 0.0)
    assert status.current == 1
    assert provider.scale(1, 3, now=0.0, status=status) == 3
    (put,) = arm.calls("PUT")
    assert put.body["properties"]["count"] == 3
    assert put.body["properties"]["vmSize"] == "Standard_NC40ads_H100_v5"
    assert put.body["properties"]["nodeTaints"] == ["sku=gpu:NoSchedule"]
    assert put.headers["if-match"]  # optimistic concurrency with the eTag just read
    assert arm.calls(kind="operations") == []  # the poller never ran: we did not wait for nodes
    assert len(arm.calls("GET")) == 1  # the read from status() was reused
    busy = provider.status(NO_TRACK, 1.0)
    assert busy == CloudStatus(current=3, busy=True, detail=busy.detail) and "Scaling" in busy.detail
    arm.finish_operations()
    assert provider.status(NO_TRACK, 2.0) == CloudStatus(
        current=3, busy=False, detail="provisioningState=Succeeded powerState=Running mode=User")


def test_scale_in_without_a_prior_read(arm: FakeArm, make: Any) -> None:
    arm.pools["gpunp"]["count"] = 3
    assert make().scale(3, 1, now=0.0) == 1
    assert [r.method for r in arm.calls()] == ["GET", "PUT"]
    assert arm.pools["gpunp"]["count"] == 1


def test_busy_pool_is_reported_and_never_put(arm: FakeArm, make: Any) -> None:
    arm.pools["gpunp"]["provisioningState"] = "Updating"
    provider = make()
    status = provider.status(NO_TRACK, 0.0)
    assert status.busy is True and "Updating" in status.detail
    with pytest.raises(ProviderError) as err:
        provider.scale(1, 2, 0.0)
    assert err.value.retryable is True and err.value.code == "PoolBusy"
    assert arm.calls("PUT") == []


def test_failed_state_is_not_busy_and_can_be_scaled(arm: FakeArm, make: Any) -> None:
    arm.pools["gpunp"]["provisioningState"] = "Failed"
    provider = make()
    status = provider.status(NO_TRACK, 0.0)
    assert status.busy is False and "ended Failed" in status.detail
    assert provider.scale(1, 2, 0.0) == 2


def test_409_operation_not_allowed_is_retryable_but_not_retried_now(arm: FakeArm, make: Any,
                                                                     fake_time: FakeClock) -> None:
    arm.fail_next(409, method="PUT")
    with pytest.raises(ProviderError) as err:
        make().scale(1, 2, 0.0)
    assert err.value.retryable is True and err.value.cloud_code == "OperationNotAllowed"
    assert "409" in err.value.message and "in progress" in err.value.message
    assert len(arm.calls("PUT")) == 1 and fake_time.sleeps == []


def test_429_with_retry_after_then_success(arm: FakeArm, make: Any, fake_time: FakeClock) -> None:
    arm.fail_next(429, retry_after="2", method="PUT")
    assert make().scale(1, 2, 0.0) == 2
    assert fake_time.sleeps == [2.0]
    assert len(arm.calls("PUT")) == 2 and arm.pools["gpunp"]["count"] == 2


def test_retry_after_beyond_the_budget_is_handed_to_the_caller(arm: FakeArm, make: Any,
                                                               fake_time: FakeClock) -> None:
    arm.fail_next(429, retry_after="30")
    with pytest.raises(ProviderError) as err:
        make().status(NO_TRACK, 0.0)
    assert err.value.retryable is True and err.value.retry_after == 30.0
    assert err.value.cloud_code == "TooManyRequests" and fake_time.sleeps == []


def test_500_exhausts_the_budget(arm: FakeArm, make: Any, fake_time: FakeClock) -> None:
    arm.fail_next(500, times=50)
    with pytest.raises(ProviderError) as err:
        make(budget="8s").status(NO_TRACK, 0.0)
    assert err.value.retryable is True and err.value.cloud_code == "InternalServerError"
    assert "gave up after" in err.value.message
    attempts = len(arm.calls("GET"))
    assert 3 <= attempts <= 8
    assert len(fake_time.sleeps) == attempts - 1
    assert sum(fake_time.sleeps) <= 8.0
    assert all(b >= a * 0.9 for a, b in zip(fake_time.sleeps, fake_time.sleeps[1:]))  # backing off


def test_connection_dropped_then_success(arm: FakeArm, make: Any, fake_time: FakeClock) -> None:
    arm.fail_next(0, reset=True, method="GET")
    assert make().status(NO_TRACK, 0.0).current == 1
    assert len(arm.calls("GET")) == 2 and len(fake_time.sleeps) == 1


def test_slow_answer_hits_the_read_timeout_and_is_retried(arm: FakeArm, make: Any, fake_time: FakeClock) -> None:
    arm.fail_next(0, delay=1.5, method="GET")
    started = time.monotonic()
    assert make(request_timeout="0.3s").status(NO_TRACK, 0.0).current == 1
    assert time.monotonic() - started < 1.2
    assert len(arm.calls("GET")) == 2 and len(fake_time.sleeps) == 1


def test_read_and_change_share_one_budget(arm: FakeArm, make: Any, fake_time: FakeClock) -> None:
    provider = make(budget="8s")
    arm.fail_next(429, retry_after="3", method="GET")
    status = provider.status(NO_TRACK, 0.0)
    arm.fail_next(429, retry_after="6", method="PUT")
    with pytest.raises(ProviderError) as err:
        provider.scale(1, 2, 0.0, status=status)  # 3 s spent reading + 6 s more would pass the 8 s of this decision
    assert err.value.retryable is True and err.value.retry_after == 6.0
    assert fake_time.sleeps == [3.0] and len(arm.calls("PUT")) == 1


def test_400_invalid_parameter_fails_at_once_with_arm_code_and_message(arm: FakeArm, make: Any) -> None:
    arm.fail_next(400, method="PUT", message="Node count 7 is not allowed for VM size Standard_NC40ads_H100_v5.")
    with pytest.raises(ProviderError) as err:
        make().scale(1, 7, 0.0)
    assert err.value.retryable is False and err.value.cloud_code == "InvalidParameter"
    assert "400 InvalidParameter: Node count 7 is not allowed" in err.value.message
    assert len(arm.calls("PUT")) == 1


@pytest.mark.parametrize("status,code", [(401, "InvalidAuthenticationToken"), (403, "AuthorizationFailed"),
                                         (404, "ResourceNotFound")])
def test_client_errors_fail_at_once(arm: FakeArm, make: Any, fake_time: FakeClock, status: int, code: str) -> None:
    arm.fail_next(status)
    with pytest.raises(ProviderError) as err:
        make().status(NO_TRACK, 0.0)
    assert err.value.retryable is False and err.value.cloud_code == code and str(status) in err.value.message
    assert len(arm.calls()) == 1 and fake_time.sleeps == []


def test_wrong_token_is_refused_by_arm(arm: FakeArm, make: Any) -> None:
    with pytest.raises(ProviderError) as err:
        make(credential=StaticCredential("not-the-token")).status(NO_TRACK, 0.0)
    assert err.value.cloud_code == "AuthenticationFailed" and err.value.retryable is False


def test_unknown_pool_is_a_clear_404(arm: FakeArm, make: Any) -> None:
    with pytest.raises(ProviderError) as err:
        make("nosuch").check()
    assert err.value.cloud_code == "ResourceNotFound" and "nosuch" in err.value.message


def test_autoscaler_enabled_pool_is_refused(arm: FakeArm, make: Any) -> None:
    arm.add_pool("auto", count=2, enable_auto_scaling=True)
    provider = make("auto")
    for call in (provider.check, lambda: provider.status(NO_TRACK, 0.0), lambda: provider.scale(2, 3, 0.0)):
        with pytest.raises(ProviderError) as err:
            call()
        assert err.value.retryable is False and err.value.code == "ClusterAutoscalerEnabled"
        assert "--disable-cluster-autoscaler" in err.value.message and "remove this pool" in err.value.message
    assert arm.calls("PUT") == []


def test_system_pool_floor_and_aks_maximum(arm: FakeArm, make: Any) -> None:
    provider = make("system")
    for target in (0, 1001):
        with pytest.raises(ProviderError) as err:
            provider.scale(2, target, 0.0)
        assert err.value.retryable is False and err.value.code == "OutsideCloudLimits"
    with pytest.raises(ProviderError, match=r"System pool \(1\.\.1000\)"):
        provider.scale(2, 0, 0.0)
    assert provider.scale(2, 1, 0.0) == 1
    assert [r.body["properties"]["count"] for r in arm.calls("PUT")] == [1]


def test_user_pool_may_go_to_zero(arm: FakeArm, make: Any) -> None:
    assert make().scale(1, 0, 0.0) == 0 and arm.pools["gpunp"]["count"] == 0


def test_stale_etag_is_retryable(arm: FakeArm, make: Any) -> None:
    provider = make()
    status = provider.status(NO_TRACK, 0.0)
    arm.pools["gpunp"]["eTag"] = "changed-by-someone-else"
    with pytest.raises(ProviderError) as err:
        provider.scale(1, 2, 0.0, status=status)
    assert err.value.retryable is True and "412" in err.value.message


def test_bearer_token_never_in_errors_or_logs(arm: FakeArm, make: Any, token: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """With the SDK's HTTP logging on (LOG_LEVEL=DEBUG turns it on; the service keeps it at WARNING otherwise)."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="azure")
    provider = make()
    errors: list[ProviderError] = []
    for status in (401, 400, 500):
        arm.fail_next(status, times=20)
        with pytest.raises(ProviderError) as err:
            provider.status(NO_TRACK, 0.0)
        errors.append(err.value)
        arm.faults.clear()
    provider.check()
    provider.scale(1, 2, 0.0)
    assert "'Authorization': 'REDACTED'" in caplog.text  # the SDK logged the request headers, redacted
    assert token not in caplog.text
    assert all(token not in str(e) and token not in e.message for e in errors)


def test_one_client_per_subscription_and_endpoint(arm: FakeArm, token: str) -> None:
    settings = AksSettings(subscription_id=SUB, resource_group=RG, cluster=CLUSTER, agent_pool="gpunp",
                           arm_endpoint=arm.url)
    other_pool = settings.model_copy(update={"agent_pool": "system"})
    credential = StaticCredential(token)
    assert get_client(settings, credential) is get_client(other_pool, credential)
    moved = settings.model_copy(update={"arm_endpoint": "https://management.chinacloudapi.cn"})
    assert get_client(moved, credential) is not get_client(settings, credential)


def test_settings_validation_and_factory() -> None:
    aks = factory("aks")
    assert aks.settings_model is AksSettings
    settings = AksSettings.model_validate(
        {"subscription_id": SUB, "resource_group": RG, "cluster": CLUSTER, "agent_pool": "gpunp"})
    assert settings.arm_endpoint == "https://management.azure.com" and settings.retry_budget == 8.0
    assert isinstance(aks.build("gpu", settings, FakeClock()), AksProvider)
    bad = [{"subscription_id": "sub/../other"}, {"subscription_id": ""}, {"agent_pool": "GPU_pool"}, {"arm_endpoint": "ftp://x"},
           {"client_secret": "s3cret"}]
    for change in bad:
        with pytest.raises(ValidationError):
            aks.settings_model.model_validate({"subscription_id": SUB, "resource_group": RG, "cluster": CLUSTER,
                                               "agent_pool": "gpunp", **change})
    # the contract's own example writes a placeholder ID; it must pass check-config (ARM answers a wrong one 404)
    assert AksSettings.model_validate({"subscription_id": "...", "resource_group": RG, "cluster": CLUSTER,
                                       "agent_pool": "gpunp"}).subscription_id == "..."
    sovereign = AksSettings.model_validate(
        {"subscription_id": SUB, "resource_group": RG, "cluster": CLUSTER, "agent_pool": "gpunp",
         "arm_endpoint": "https://management.usgovcloudapi.net/", "budget": "5s"})
    assert sovereign.arm_endpoint == "https://management.usgovcloudapi.net" and sovereign.retry_budget == 5.0


def test_azure_sdk_is_imported_lazily() -> None:
    code = ("import sys, providers.aks; "
            "assert not [m for m in sys.modules if m.startswith('azure')], 'azure imported at module load'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=".", timeout=30)


def test_fake_operation_goes_in_progress_then_succeeded_under_the_sdk_poller(arm: FakeArm, token: str) -> None:
    settings = AksSettings(subscription_id=SUB, resource_group=RG, cluster=CLUSTER, agent_pool="gpunp",
                           arm_endpoint=arm.url)
    client = get_client(settings, StaticCredential(token), per_call_policies=[AllowHttp()])
    pool = client.agent_pools.get(RG, CLUSTER, "gpunp")
    pool.count = 2
    poller = client.agent_pools.begin_create_or_update(RG, CLUSTER, "gpunp", pool, polling_interval=0)
    assert poller.result(timeout=10).provisioning_state == "Succeeded"
    assert len(arm.calls("GET", kind="operations")) == arm.operation_polls + 1
    assert client.agent_pools.get(RG, CLUSTER, "gpunp").count == 2


def test_production_credential_is_default_azure_credential_shared_per_authority() -> None:
    from azure.identity import DefaultAzureCredential

    from providers.aks import _default_credential

    public = _default_credential(None)
    assert isinstance(public, DefaultAzureCredential) and _default_credential(None) is public
    assert _default_credential("login.chinacloudapi.cn") is not public


class NoCredential:
    """A credential that cannot get a token, like DefaultAzureCredential with nothing configured."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        from azure.identity import CredentialUnavailableError

        raise CredentialUnavailableError(message="EnvironmentCredential: environment variables are not set")


def test_missing_credential_fails_clearly_without_calling_arm(arm: FakeArm, make: Any) -> None:
    with pytest.raises(ProviderError) as err:
        make(credential=NoCredential()).check()
    assert err.value.cloud_code == "CredentialUnavailable" and err.value.retryable is False
    assert "EnvironmentCredential" in err.value.message and arm.requests == []
