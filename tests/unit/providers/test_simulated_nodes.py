"""The simulated cloud keeps named nodes: configured or generated names, newest dropped on a count scale-in, and
exactly the named ones removed through ``remove_nodes``."""
from __future__ import annotations

import copy
from typing import Any

import pytest

import providers
from autoscaler.config.load import ConfigError, build_settings
from providers.base import NodeRef, ProviderError, RemovesNamedNodes, Tracked
from providers.simulated import SimulatedProvider, SimulatedSettings
from tests.support import BASE_CONFIG

NOT_TRACKED = Tracked(None, None)


def make(**settings: Any) -> SimulatedProvider:
    provider = providers.build("simulated", "gpu", SimulatedSettings(**settings))
    assert isinstance(provider, SimulatedProvider)
    return provider


@pytest.mark.parametrize("settings,names", [
    pytest.param({}, (), id="empty-pool"),
    pytest.param({"initial_count": 3}, ("gpu-node-0001", "gpu-node-0002", "gpu-node-0003"), id="generated"),
    pytest.param({"nodes": ["a100-x", "a100-y"]}, ("a100-x", "a100-y"), id="configured"),
    pytest.param({"nodes": ["a", "b"], "initial_count": 2}, ("a", "b"), id="configured-and-matching-count"),
])
def test_starting_names(settings: dict[str, Any], names: tuple[str, ...]) -> None:
    provider = make(**settings)
    assert provider.node_names() == names
    assert provider.status(NOT_TRACKED, 0.0).current == len(names)


def test_scale_out_adds_generated_names_and_count_scale_in_drops_the_newest() -> None:
    provider = make(nodes=["a", "b"])
    assert provider.scale(2, 4, 0.0) == 4
    assert provider.node_names() == ("a", "b", "gpu-node-0001", "gpu-node-0002")
    assert provider.scale(4, 3, 1.0) == 3
    assert provider.node_names() == ("a", "b", "gpu-node-0001")
    assert provider.scale(3, 4, 2.0) == 4
    assert provider.node_names() == ("a", "b", "gpu-node-0001", "gpu-node-0003"), "a name is never reused"


def test_remove_nodes_removes_exactly_the_named_ones() -> None:
    provider = make(initial_count=4)
    assert isinstance(provider, RemovesNamedNodes)
    reached = provider.remove_nodes([NodeRef("gpu-node-0002"), NodeRef("gpu-node-0001"), NodeRef("gpu-node-0002")],
                                    current=4, now=0.0)
    assert reached == 2
    assert provider.node_names() == ("gpu-node-0003", "gpu-node-0004")
    assert provider.status(Tracked(reached, 0.0), 1.0).current == 2
    assert provider.node_names() == ("gpu-node-0003", "gpu-node-0004")


def test_an_unknown_name_removes_nothing() -> None:
    provider = make(initial_count=3)
    with pytest.raises(ProviderError) as info:
        provider.remove_nodes([NodeRef("gpu-node-0001"), NodeRef("other-node-9")], current=3, now=0.0)
    assert info.value.code == "NodeNotInPool" and not info.value.retryable
    assert "other-node-9" in info.value.message
    assert provider.node_names() == ("gpu-node-0001", "gpu-node-0002", "gpu-node-0003")


def test_count_semantics_unchanged_names_follow_the_tracked_count() -> None:
    """The store's count stays the truth (another worker may have changed it): names follow it."""
    provider = make(initial_count=2, provision_seconds=60)
    status = provider.status(Tracked(5, 100.0), 130.0)
    assert (status.current, status.busy) == (5, True)
    assert len(provider.node_names()) == 5
    assert provider.status(Tracked(1, 100.0), 200.0).busy is False
    assert provider.node_names() == ("gpu-node-0001",)


def test_a_stale_read_never_renames_the_machines() -> None:
    """A tick that read the pool's count before a change was stored and asks the cloud after it passes the old count:
    the cloud's machines keep their names (a read never renames them); the next read with the count shows them."""
    provider = make()
    assert provider.scale(0, 4, 0.0) == 4
    made = provider.node_names()
    assert provider.status(Tracked(0, None), 1.0).current == 0  # the stale read: the count is the store's
    assert provider.node_names() == ()
    assert provider.status(Tracked(4, 0.0), 2.0).current == 4
    assert provider.node_names() == made == ("gpu-node-0001", "gpu-node-0002", "gpu-node-0003", "gpu-node-0004")
    assert provider.remove_nodes([NodeRef("gpu-node-0002")], current=4, now=3.0) == 3
    assert provider.scale(3, 4, 4.0) == 4
    assert provider.node_names()[-1] == "gpu-node-0005", "a machine removed by a change is gone: never reused"


def pool_problems(simulated: dict[str, Any]) -> list[str]:
    raw = copy.deepcopy(BASE_CONFIG)
    raw["pools"][0]["simulated"] = simulated
    with pytest.raises(ConfigError) as info:
        build_settings(raw, env={})
    return info.value.problems


@pytest.mark.parametrize("simulated,expected", [
    pytest.param({"nodes": ["a", "b"], "initial_count": 3}, "initial_count (3) must equal the number of nodes (2)",
                 id="count-disagrees"),
    pytest.param({"nodes": ["a", "b", "a"]}, "node names must be unique: a given twice", id="duplicate"),
    pytest.param({"nodes": ["a", " "]}, "a node name must not be empty", id="empty-name"),
])
def test_bad_node_lists_are_config_problems(simulated: dict[str, Any], expected: str) -> None:
    found = pool_problems(simulated)
    assert any(p.startswith("pools[0].simulated") and expected in p for p in found), found


def test_config_nodes_set_the_pools_starting_count() -> None:
    raw = copy.deepcopy(BASE_CONFIG)
    raw["pools"][0]["simulated"] = {"nodes": ["n1", "n2", "n3"]}
    spec = build_settings(raw, env={}).pools["gpu"]
    assert spec.provider_settings.initial_count == 3
    assert spec.provider_settings.nodes == ("n1", "n2", "n3")
