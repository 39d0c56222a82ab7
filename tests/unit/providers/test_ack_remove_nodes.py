"""ACK removes named nodes (RemoveNodePoolNodes) through the real Alibaba Cloud SDK, over HTTP, against the fake."""
from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

import providers
from providers.base import NodeRef, ProviderError, RemovesNamedNodes, Tracked
from tests.support.fakes.ack_api import FakeAckApi, Pool
from tests.support.fakes.clients import ACK_CLUSTER as CLUSTER
from tests.support.fakes.clients import AK_SECRET, NODEPOOL
from tests.support.fakes.clients import make_ack as make

NONE = Tracked(None, None)
OTHER_POOL = "np-cpu-0000"


@pytest.fixture
def api() -> Iterator[FakeAckApi]:
    fake = FakeAckApi(pools={(CLUSTER, NODEPOOL): Pool(desired_size=4, total_nodes=4),
                             (CLUSTER, OTHER_POOL): Pool(desired_size=2, total_nodes=2, name="cpu")}).start()
    yield fake
    fake.stop()


@pytest.fixture
def sleeps() -> list[float]:
    return []


def pool(api: FakeAckApi) -> Pool:
    return api.pools[(CLUSTER, NODEPOOL)]


def node(api: FakeAckApi, index: int, *, provider_id: bool = True, of: str = NODEPOOL) -> NodeRef:
    """Node ``index`` of a pool as Kubernetes shows it (providerID ``cn-hangzhou.i-…``)."""
    name = api.pools[(CLUSTER, of)].nodes[index][0]
    return NodeRef(name, api.pools[(CLUSTER, of)].provider_id(name) if provider_id else "")


def actions(api: FakeAckApi) -> list[str]:
    return [r.headers["x-acs-action"] for r in api.requests]


def test_removes_exactly_the_named_nodes_with_drain_and_release(api: FakeAckApi, sleeps: list[float]) -> None:
    provider = make(api, sleeps)
    assert isinstance(make(api, sleeps), RemovesNamedNodes)
    keep = [pool(api).nodes[0], pool(api).nodes[2]]
    gone = [pool(api).nodes[1][1], pool(api).nodes[3][1]]
    assert provider.remove_nodes([node(api, 1), node(api, 3)], current=4, now=0.0) == 2
    assert actions(api) == ["DescribeClusterNodePoolDetail", "DescribeClusterNodes", "RemoveNodePoolNodes"]
    remove = api.requests[-1]
    assert (remove.method, remove.path) == ("DELETE", f"/clusters/{CLUSTER}/nodepools/{NODEPOOL}/nodes")
    assert json.loads(remove.param("instance_ids") or "") == gone
    # the SDK writes Python booleans as "True"; the service reads them case-insensitively
    assert (remove.param("drain_node") or "").lower() == "true" == (remove.param("release_node") or "").lower()
    assert pool(api).nodes == keep and pool(api).desired_size == 2
    status = provider.status(NONE, now=1.0)
    assert (status.current, status.busy) == (2, True), "removing until ACK is done"
    assert api.requests[1].param("nodepool_id") == NODEPOOL


def test_node_found_by_provider_id_under_another_name(api: FakeAckApi, sleeps: list[float]) -> None:
    renamed = NodeRef("gpu-worker-renamed", node(api, 2).provider_id)
    instance = pool(api).nodes[2][1]
    assert make(api, sleeps).remove_nodes([renamed], current=4, now=0.0) == 3
    assert json.loads(api.requests[-1].param("instance_ids") or "") == [instance]


def test_unknown_node_refuses_the_whole_call(api: FakeAckApi, sleeps: list[float]) -> None:
    with pytest.raises(ProviderError) as err:
        make(api, sleeps).remove_nodes([node(api, 0), NodeRef("cn-hangzhou.10.9.9.9")], current=4, now=0.0)
    assert err.value.code == "NodeNotInPool" and err.value.retryable is False
    assert "cn-hangzhou.10.9.9.9" in err.value.message
    assert "RemoveNodePoolNodes" not in actions(api) and len(pool(api).nodes) == 4


def test_a_node_of_another_pool_is_not_removed(api: FakeAckApi, sleeps: list[float]) -> None:
    with pytest.raises(ProviderError) as err:
        make(api, sleeps).remove_nodes([node(api, 0, of=OTHER_POOL)], current=4, now=0.0)
    assert err.value.code == "NodeNotInPool" and "RemoveNodePoolNodes" not in actions(api)
    assert len(api.pools[(CLUSTER, OTHER_POOL)].nodes) == 2


def test_name_and_provider_id_that_disagree_are_refused(api: FakeAckApi, sleeps: list[float]) -> None:
    confused = NodeRef(node(api, 0).name, node(api, 1).provider_id)
    with pytest.raises(ProviderError) as err:
        make(api, sleeps).remove_nodes([confused], current=4, now=0.0)
    assert err.value.code == "NodeMismatch" and "RemoveNodePoolNodes" not in actions(api)


def test_busy_pool_is_refused(api: FakeAckApi, sleeps: list[float]) -> None:
    pool(api).state = "scaling"
    with pytest.raises(ProviderError) as err:
        make(api, sleeps).remove_nodes([node(api, 0)], current=4, now=0.0)
    assert err.value.code == "PoolBusy" and err.value.retryable is True and "scaling" in err.value.message
    assert actions(api) == ["DescribeClusterNodePoolDetail"]


def test_many_nodes_are_read_page_by_page(api: FakeAckApi, sleeps: list[float]) -> None:
    api.pools[(CLUSTER, NODEPOOL)] = Pool(desired_size=230, total_nodes=230)
    last = node(api, 229, provider_id=False)
    assert make(api, sleeps).remove_nodes([last], current=230, now=0.0) == 229
    pages = [r.param("pageNumber") for r in api.requests if r.headers["x-acs-action"] == "DescribeClusterNodes"]
    assert pages == ["1", "2", "3"]
    assert last.name not in dict(pool(api).nodes)


def test_refusal_names_the_code_and_message_and_leaks_no_secret(api: FakeAckApi, sleeps: list[float],
                                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    original = list(pool(api).nodes)
    api.fail_next(403, "Forbidden.RAM", "You are not authorized to do cs:RemoveNodePoolNodes; see "
                  "https://ram.console.aliyun.com/?sig=hidden-signature", action="RemoveNodePoolNodes")
    with pytest.raises(ProviderError) as err:
        make(api, sleeps).remove_nodes([node(api, 0)], current=4, now=0.0)
    assert err.value.cloud_code == "Forbidden.RAM" and err.value.retryable is False
    assert "cs:RemoveNodePoolNodes" in err.value.message
    assert "RemoveNodePoolNodes refused (HTTP 403)" in err.value.message
    assert "hidden-signature" not in err.value.message and "sig=REDACTED" in err.value.message
    assert AK_SECRET not in err.value.message and AK_SECRET not in caplog.text
    assert pool(api).nodes == original and sleeps == []


def test_a_server_error_on_the_removal_is_retried(api: FakeAckApi, sleeps: list[float]) -> None:
    api.fail_next(503, "ServiceUnavailable", "try later", action="RemoveNodePoolNodes")
    assert make(api, sleeps).remove_nodes([node(api, 0)], current=4, now=0.0) == 3
    assert actions(api).count("RemoveNodePoolNodes") == 2 and len(sleeps) == 1
    assert len(pool(api).nodes) == 3


def test_throttled_removal_is_retryable_with_the_code(api: FakeAckApi, sleeps: list[float]) -> None:
    api.fail_next(429, "Throttling.User", "Request was denied due to user flow control.",
                  action="RemoveNodePoolNodes")
    with pytest.raises(ProviderError) as err:
        make(api, sleeps).remove_nodes([node(api, 0)], current=4, now=0.0)
    assert err.value.retryable is True and err.value.cloud_code == "Throttling.User"
    assert "user flow control" in err.value.message and len(pool(api).nodes) == 4


def test_the_service_refusing_an_instance_removes_nothing(api: FakeAckApi, sleeps: list[float]) -> None:
    provider = make(api, sleeps)
    doomed = node(api, 1)
    # the node leaves the pool between the node list and the removal (someone else removed it)
    api.fail_next(400, "ErrorInstanceNotInNodePool", "instances are not in the node pool",
                  action="RemoveNodePoolNodes")
    with pytest.raises(ProviderError) as err:
        provider.remove_nodes([node(api, 0), doomed], current=4, now=0.0)
    assert err.value.cloud_code == "ErrorInstanceNotInNodePool" and err.value.retryable is False
    assert len(pool(api).nodes) == 4


def test_nothing_to_remove_calls_nothing(api: FakeAckApi, sleeps: list[float]) -> None:
    assert make(api, sleeps).remove_nodes([], current=4, now=0.0) == 4
    assert api.requests == []


def test_default_node_selector_is_the_nodepool_id_label() -> None:
    ack = providers.factory("ack")
    settings = ack.settings_model.model_validate({"cluster_id": CLUSTER, "nodepool_id": NODEPOOL,
                                                  "region_id": "cn-hangzhou"})
    assert ack.node_selector is not None
    assert ack.node_selector(settings) == f"alibabacloud.com/nodepool-id={NODEPOOL}"


def test_a_lost_answer_then_a_refused_retry_still_counts_as_removed(api: FakeAckApi, sleeps: list[float]) -> None:
    api.lose_next_answer("RemoveNodePoolNodes")  # ACK starts the task; the connection drops before its answer
    gone = node(api, 2)
    assert make(api, sleeps).remove_nodes([gone], current=4, now=0.0) == 3
    assert actions(api).count("RemoveNodePoolNodes") == 2 and len(sleeps) == 1
    assert gone.name not in dict(pool(api).nodes) and pool(api).desired_size == 3


def test_a_refusal_while_someone_else_changes_the_pool_is_still_a_failure(api: FakeAckApi,
                                                                          sleeps: list[float]) -> None:
    api.fail_next(400, "ErrorNodePoolStatusNotAllowed", "node pool is updating", action="RemoveNodePoolNodes")
    with pytest.raises(ProviderError) as err:
        make(api, sleeps).remove_nodes([node(api, 0)], current=4, now=0.0)
    assert err.value.cloud_code == "ErrorNodePoolStatusNotAllowed" and len(pool(api).nodes) == 4
    assert actions(api)[-1] == "DescribeClusterNodePoolDetail"  # it looked, and the pool was not removing
