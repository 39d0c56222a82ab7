"""The webhook provider names the nodes to remove (``"nodes"`` / ``{nodes}``), against a local endpoint over HTTP."""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import providers
from providers.base import NodeRef, ProviderError, RemovesNamedNodes
from tests.support.fakes.ack_hook import Answer, FakeHookServer
from tests.support.fakes.clients import WEBHOOK_TOKEN as TOKEN
from tests.support.fakes.clients import make_webhook as make
from tests.support import FakeClock

NODES = [NodeRef("gpu-node-3", "aws:///us-east-1a/i-0abc"), NodeRef("gpu-node-7")]


@pytest.fixture
def endpoint() -> Iterator[FakeHookServer]:
    server = FakeHookServer().start()
    yield server
    server.stop()


@pytest.fixture
def sleeps() -> list[float]:
    return []


def test_default_body_gets_the_node_names_and_the_lowered_target(endpoint: FakeHookServer,
                                                                 sleeps: list[float]) -> None:
    provider = make(endpoint, sleeps)
    assert isinstance(make(endpoint, sleeps), RemovesNamedNodes)
    assert provider.remove_nodes(NODES, current=5, now=0.0) == 3
    (call,) = endpoint.calls
    assert json.loads(call.body) == {"pool": "gpu-a100", "action": "scale_in", "from": 5, "to": 3, "step": 2,
                                     "nodes": ["gpu-node-3", "gpu-node-7"]}
    assert call.headers["authorization"] == f"Bearer {TOKEN}"


def test_nodes_placeholder_in_a_json_template(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    template = '{"vars": {"remove": {nodes}, "size": {to}}}'
    assert make(endpoint, sleeps, body_template=template).remove_nodes(NODES, current=4, now=0.0) == 2
    assert json.loads(endpoint.calls[0].body) == {"vars": {"remove": ["gpu-node-3", "gpu-node-7"], "size": 2}}


def test_nodes_placeholder_in_a_get_url(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    provider = make(endpoint, sleeps, method="GET", url=endpoint.hook_url("/drain/{pool}", "nodes={nodes}&to={to}"))
    assert provider.remove_nodes(NODES, current=4, now=0.0) == 2
    call = endpoint.calls[0]
    assert (call.path, call.param("nodes"), call.param("to")) == ("/drain/gpu-a100", "gpu-node-3,gpu-node-7", "2")


def test_a_template_that_cannot_name_nodes_is_refused_without_a_call(endpoint: FakeHookServer,
                                                                      sleeps: list[float]) -> None:
    provider = make(endpoint, sleeps, content_type="text/plain", body_template="{pool} to {to}")
    with pytest.raises(ProviderError) as err:
        provider.remove_nodes(NODES, current=4, now=0.0)
    assert err.value.code == "NodesNotSupported" and err.value.retryable is False and endpoint.calls == []
    plain_get = make(endpoint, sleeps, method="GET", url=endpoint.hook_url("/scale", "to={to}"))
    with pytest.raises(ProviderError, match="cannot name the nodes"):
        plain_get.remove_nodes(NODES, current=4, now=0.0)
    assert endpoint.calls == []


def test_scale_keeps_its_body_without_nodes(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    make(endpoint, sleeps).scale(3, 2, now=0.0)
    assert "nodes" not in json.loads(endpoint.calls[0].body)
    make(endpoint, sleeps, body_template='{"remove": {nodes}, "to": {to}}').scale(3, 2, now=0.0)
    assert json.loads(endpoint.calls[1].body) == {"remove": [], "to": 2}


def test_refusal_names_the_status_and_hides_the_url_secret(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    endpoint.then(Answer(status=403, body={"error": "token may not start runs"}))
    with pytest.raises(ProviderError) as err:
        make(endpoint, sleeps).remove_nodes(NODES, current=4, now=0.0)
    assert err.value.cloud_code == "403" and err.value.retryable is False and "HTTP 403" in err.value.message
    assert TOKEN not in err.value.message and "token=REDACTED" in err.value.message and len(endpoint.calls) == 1


def test_server_error_is_retried(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    endpoint.then(Answer(status=502, body="bad gateway"))
    assert make(endpoint, sleeps).remove_nodes(NODES[:1], current=4, now=0.0) == 3
    assert len(endpoint.calls) == 2 and len(sleeps) == 1
    assert json.loads(endpoint.calls[1].body)["nodes"] == ["gpu-node-3"]


def test_the_same_node_twice_counts_once(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    assert make(endpoint, sleeps).remove_nodes([NODES[0], NODES[0]], current=4, now=0.0) == 3
    assert json.loads(endpoint.calls[0].body)["nodes"] == ["gpu-node-3"]


def test_quotes_in_node_names_stay_valid_json(endpoint: FakeHookServer, sleeps: list[float]) -> None:
    odd = NodeRef('node"with\\quotes')
    make(endpoint, sleeps, body_template='{"n": {nodes}}').remove_nodes([odd], current=2, now=0.0)
    assert json.loads(endpoint.calls[0].body) == {"n": ['node"with\\quotes']}


def test_ack_hook_stays_count_only() -> None:
    ack_hook = providers.factory("ack_hook")
    settings = ack_hook.settings_model.model_validate(
        {"scale_out_url": "https://cs.console.aliyun.com/hook/trigger?token=a&type=scale_out",
         "scale_in_url": "https://cs.console.aliyun.com/hook/trigger?token=a&type=scale_in"})
    assert not isinstance(ack_hook.build("p", settings, FakeClock()), RemovesNamedNodes)
    assert ack_hook.node_selector is None
