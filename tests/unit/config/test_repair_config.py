"""``pools[].repair``: what check-config accepts, and what it refuses with the key's path (a repair needs
``kubernetes:``, a provider that removes named nodes, the pool's node selector, a budget of at least one node)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.load import ConfigError, build_settings
from autoscaler.models import RepairPolicy

KUBE = {"host": "https://kube.example:6443", "token": "kube-token-123456"}
AKS = {"subscription_id": "3f2c1d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f", "resource_group": "rg", "cluster": "prod",
       "agent_pool": "gpunp"}
HOOK = {"scale_out_url": "https://hook.example/out", "scale_in_url": "https://hook.example/in", "initial_count": 1}


def cfg(pool: dict[str, Any], kubernetes: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"server": {"auth": {"bearer_tokens": ["token-123456789"]}},
                           "pools": [{"name": "gpu", "min": 0, "max": 8, **pool}]}
    if kubernetes:
        out["kubernetes"] = KUBE
    return out


def problems(config: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        build_settings(config)
    return info.value.problems


@pytest.mark.parametrize("repair, expected", [
    pytest.param({}, RepairPolicy(1, None, 3600.0, True), id="defaults"),
    pytest.param({"max_unhealthy": "20%", "grace": "10m"}, RepairPolicy(1, 20.0, 600.0, True), id="percent"),
    pytest.param({"max_unhealthy": 3, "replace": False}, RepairPolicy(3, None, 3600.0, False), id="count-no-replace"),
])
def test_repair_on_an_aks_pool_with_kubernetes(repair: dict[str, Any], expected: RepairPolicy) -> None:
    settings = build_settings(cfg({"provider": "aks", "aks": AKS, "repair": repair}))
    assert settings.pools["gpu"].repair == expected


@pytest.mark.parametrize("pool, kubernetes, said", [
    pytest.param({"provider": "aks", "aks": AKS}, False,
                 "pools[0].repair: needs the top-level `kubernetes:` section", id="no-kubernetes"),
    pytest.param({"provider": "ack_hook", "ack_hook": HOOK, "node_selector": "np=gpu"}, True,
                 "pools[0].repair: needs a provider that removes named nodes; ack_hook can't name a node",
                 id="provider-cannot-name-nodes"),
    pytest.param({"provider": "simulated"}, True, "pools[0].node_selector: required with repair:", id="no-selector"),
])
def test_check_config_refuses_a_repair_that_cannot_work(pool: dict[str, Any], kubernetes: bool, said: str) -> None:
    found = problems(cfg({**pool, "repair": {}}, kubernetes))
    assert any(p.startswith(said) for p in found), found


@pytest.mark.parametrize("value", [0, -1, "0%", "120%", "lots", True, 1.5])
def test_a_budget_of_no_node_or_nonsense_is_refused(value: Any) -> None:
    found = problems(cfg({"provider": "aks", "aks": AKS, "repair": {"max_unhealthy": value}}))
    assert any(p.startswith("pools[0].repair.max_unhealthy") for p in found), found


def test_check_config_cli_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg({"provider": "aks", "aks": AKS, "repair": {"grace": "1h"}}, False)))
    out = subprocess.run([sys.executable, "-m", "autoscaler", "check-config", str(path)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert (out.returncode == 1
            and "pools[0].repair: needs the top-level `kubernetes:` section" in out.stdout + out.stderr)


def test_a_replayed_rule_cannot_repair() -> None:
    config = cfg({"provider": "simulated"}, kubernetes=False)
    config["replay"] = {"rules": [{"alert": "X", "above": 90, "pool": "gpu", "action": "repair"}]}
    found = problems(config)
    assert any(p.startswith("replay.rules[0]") and "a repair names a node" in p for p in found), found
