"""AKS removes named nodes (agent pool deleteMachines) through the real Azure SDK, over HTTP, against the fake ARM."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from providers import factory
from providers.aks import AksProvider, AksSettings
from providers.base import NodeRef, ProviderError, RemovesNamedNodes, Tracked
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
        fake.add_pool("gpunp", count=4)
        fake.add_pool("system", count=1, mode="System")
        yield fake


@pytest.fixture
def fake_time() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make(arm: FakeArm, token: str, fake_time: FakeClock) -> Any:
    def build(agent_pool: str = "gpunp") -> AksProvider:
        settings = AksSettings(subscription_id=SUB, resource_group=RG, cluster=CLUSTER, agent_pool=agent_pool,
                               arm_endpoint=arm.url)
        return AksProvider("gpu", settings, credential=StaticCredential(token), clock=fake_time,
                            per_call_policies=[AllowHttp()])

    return build


def node(arm: FakeArm, instance: int, pool: str = "gpunp", *, with_provider_id: bool = True) -> NodeRef:
    """The Kubernetes node of VMSS instance ``instance`` as the cluster reports it (providerID lower-cased)."""
    provider_id = "azure://" + arm.machine_resource_id(pool, instance).lower() if with_provider_id else ""
    return NodeRef(arm.machine_name(pool, instance), provider_id)


def test_removes_exactly_the_named_nodes_and_lowers_the_count(arm: FakeArm, make: Any) -> None:
    provider = make()
    assert isinstance(make(), RemovesNamedNodes)
    status = provider.status(NO_TRACK, 0.0)
    assert status.current == 4
    assert provider.remove_nodes([node(arm, 1), node(arm, 3)], current=4, now=0.0, status=status) == 2
    (post,) = arm.calls("POST")
    assert post.path.endswith(f"/managedClusters/{CLUSTER}/agentPools/gpunp/deleteMachines")
    assert post.body == {"machineNames": [arm.machine_name("gpunp", 1), arm.machine_name("gpunp", 3)]}
    assert arm.machine_names("gpunp") == [arm.machine_name("gpunp", 0), arm.machine_name("gpunp", 2)]
    assert arm.pools["gpunp"]["count"] == 2
    assert [r.path.rsplit("/", 1)[-1] for r in arm.calls()] == ["gpunp", "machines", "deleteMachines"]
    assert arm.calls(kind="operation") == []  # the LRO was started, never polled
    busy = provider.status(NO_TRACK, 1.0)
    assert (busy.current, busy.busy) == (2, True)


def test_a_node_is_found_by_provider_id_when_its_name_is_not_the_machine_name(arm: FakeArm, make: Any) -> None:
    renamed = NodeRef("gpu-node-custom-name", node(arm, 2).provider_id)
    assert make().remove_nodes([renamed], current=4, now=0.0) == 3
    assert arm.calls("POST")[0].body == {"machineNames": [arm.machine_name("gpunp", 2)]}
    assert arm.machine_name("gpunp", 2) not in arm.machine_names("gpunp")


def test_an_unknown_node_refuses_the_whole_call(arm: FakeArm, make: Any) -> None:
    with pytest.raises(ProviderError) as err:
        make().remove_nodes([node(arm, 0), NodeRef("aks-other-99999999-vmss000000")], current=4, now=0.0)
    assert err.value.code == "NodeNotInPool" and err.value.retryable is False
    assert "aks-other-99999999-vmss000000" in err.value.message and "nothing was deleted" in err.value.message
    assert arm.calls("POST") == [] and len(arm.machine_names("gpunp")) == 4


def test_a_node_of_another_pool_is_unknown_here(arm: FakeArm, make: Any) -> None:
    with pytest.raises(ProviderError) as err:
        make().remove_nodes([node(arm, 0, pool="system")], current=4, now=0.0)
    assert err.value.code == "NodeNotInPool" and arm.calls("POST") == []


def test_name_and_provider_id_of_two_different_machines_is_refused(arm: FakeArm, make: Any) -> None:
    confused = NodeRef(arm.machine_name("gpunp", 0), node(arm, 1).provider_id)
    with pytest.raises(ProviderError) as err:
        make().remove_nodes([confused], current=4, now=0.0)
    assert err.value.code == "NodeMismatch" and arm.calls("POST") == []
    assert len(arm.machine_names("gpunp")) == 4


def test_busy_pool_is_refused_before_any_machine_is_touched(arm: FakeArm, make: Any) -> None:
    arm.pools["gpunp"]["provisioningState"] = "Upgrading"
    with pytest.raises(ProviderError) as err:
        make().remove_nodes([node(arm, 0)], current=4, now=0.0)
    assert err.value.code == "PoolBusy" and err.value.retryable is True and "Upgrading" in err.value.message
    assert arm.calls("POST") == [] and arm.calls("GET", kind="machines") == []


def test_arm_busy_answer_is_retryable_and_names_the_code(arm: FakeArm, make: Any) -> None:
    arm.fail_next(409, method="POST")
    with pytest.raises(ProviderError) as err:
        make().remove_nodes([node(arm, 0)], current=4, now=0.0)
    assert err.value.cloud_code == "OperationNotAllowed" and err.value.retryable is True
    assert "in progress scale node pool operation" in err.value.message
    assert len(arm.machine_names("gpunp")) == 4


def test_arm_refusal_names_code_and_message_without_secrets(arm: FakeArm, make: Any, token: str) -> None:
    arm.fail_next(403, method="POST", message="The client may not perform "
                  "'Microsoft.ContainerService/managedClusters/agentPools/deleteMachines/action'; see "
                  "https://portal.example/check?sig=supersecret-sas")
    with pytest.raises(ProviderError) as err:
        make().remove_nodes([node(arm, 0)], current=4, now=0.0)
    assert err.value.cloud_code == "AuthorizationFailed" and err.value.retryable is False
    assert "deleteMachines/action" in err.value.message and "ARM answered 403" in err.value.message
    assert "supersecret-sas" not in err.value.message and token not in err.value.message
    assert "sig=REDACTED" in err.value.message


def test_throttled_delete_is_retried_inside_the_budget(arm: FakeArm, make: Any, fake_time: FakeClock) -> None:
    arm.fail_next(429, method="POST", retry_after="2")
    assert make().remove_nodes([node(arm, 3)], current=4, now=0.0) == 3
    assert len(arm.calls("POST")) == 2 and fake_time.sleeps == [2.0]
    assert arm.machine_name("gpunp", 3) not in arm.machine_names("gpunp")


def test_machines_are_found_on_later_pages(arm: FakeArm, make: Any) -> None:
    arm.machine_page_size = 2
    arm.add_pool("gpunp", count=5)
    assert make().remove_nodes([node(arm, 4, with_provider_id=False)], current=5, now=0.0) == 4
    assert len(arm.calls("GET", kind="machines")) == 3  # pages of 2, 2 and 1
    assert arm.calls("POST")[0].body == {"machineNames": [arm.machine_name("gpunp", 4)]}


def test_the_last_node_of_a_system_pool_is_refused(arm: FakeArm, make: Any) -> None:
    with pytest.raises(ProviderError) as err:
        make("system").remove_nodes([node(arm, 0, pool="system")], current=1, now=0.0)
    assert err.value.code == "OutsideCloudLimits" and arm.calls("POST") == []


def test_same_node_twice_removes_it_once(arm: FakeArm, make: Any) -> None:
    assert make().remove_nodes([node(arm, 2), node(arm, 2, with_provider_id=False)], current=4, now=0.0) == 3
    assert arm.calls("POST")[0].body == {"machineNames": [arm.machine_name("gpunp", 2)]}


def test_nothing_to_remove_calls_nothing(arm: FakeArm, make: Any) -> None:
    assert make().remove_nodes([], current=4, now=0.0) == 4
    assert arm.calls() == []


def test_default_node_selector_is_the_agent_pool_label() -> None:
    aks = factory("aks")
    settings = aks.settings_model.model_validate({"subscription_id": SUB, "resource_group": RG,
                                                  "cluster": CLUSTER, "agent_pool": "gpunp"})
    assert aks.node_selector is not None
    assert aks.node_selector(settings) == "kubernetes.azure.com/agentpool=gpunp"


def test_a_lost_answer_then_a_busy_retry_still_counts_as_removed(arm: FakeArm, make: Any, fake_time: FakeClock) -> None:
    arm.lose_next_answer("POST")  # ARM deletes the machines; the connection drops before its 202
    assert make().remove_nodes([node(arm, 1)], current=4, now=0.0) == 3
    assert len(arm.calls("POST")) == 2  # the retry was refused as busy: the pool was already Scaling
    assert arm.machine_name("gpunp", 1) not in arm.machine_names("gpunp") and len(arm.machine_names("gpunp")) == 3
    assert arm.pools["gpunp"]["count"] == 3


def test_a_refusal_on_a_pool_someone_else_made_busy_is_still_a_failure(arm: FakeArm, make: Any) -> None:
    provider = make()
    status = provider.status(NO_TRACK, 0.0)  # read while settled; then another operation starts
    arm.pools["gpunp"]["provisioningState"] = "Upgrading"
    with pytest.raises(ProviderError) as err:
        provider.remove_nodes([node(arm, 1)], current=4, now=0.0, status=status)
    assert err.value.cloud_code == "OperationNotAllowed" and len(arm.machine_names("gpunp")) == 4
