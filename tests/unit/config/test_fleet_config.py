"""``clusters:`` and a pool's ``cluster:``: what check-config accepts (each pool's cluster resolved, ``kubernetes:``
still one cluster named "default") and what it refuses, each with its path."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.load import ConfigError, build_settings

WEU = {"name": "weu", "host": "https://weu.example:6443", "token": "weu-token-123456"}
EUS = {"name": "eus", "host": "https://eus.example:6443", "token": "eus-token-123456"}
KUBE = {"host": "https://kube.example:6443", "token": "kube-token-123456"}


def cfg(pools: list[dict[str, Any]], **sections: Any) -> dict[str, Any]:
    return {"server": {"auth": {"bearer_tokens": ["token-123456789"]}},
            "pools": [{"provider": "simulated", "min": 0, "max": 4, "node_selector": "pool=gpu", **p} for p in pools],
            **sections}


def problems(config: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        build_settings(config)
    return info.value.problems


@pytest.mark.parametrize("config, expected", [
    pytest.param(cfg([{"name": "a", "cluster": "weu"}, {"name": "b", "cluster": "eus"}], clusters=[WEU, EUS]),
                 {"a": "weu", "b": "eus"}, id="each-pool-its-cluster"),
    pytest.param(cfg([{"name": "a"}], clusters=[WEU]), {"a": "weu"}, id="the-only-cluster-by-default"),
    pytest.param(cfg([{"name": "a"}], kubernetes=KUBE), {"a": "default"}, id="kubernetes-is-default"),
    pytest.param(cfg([{"name": "a", "cluster": "default"}], kubernetes=KUBE), {"a": "default"},
                 id="kubernetes-named-default"),
])
def test_accepted(config: dict[str, Any], expected: dict[str, str]) -> None:
    settings = build_settings(config)
    assert {name: spec.cluster for name, spec in settings.pools.items()} == expected
    assert set(settings.config.cluster_settings()) == set(expected.values())


@pytest.mark.parametrize("config, expected", [
    pytest.param(cfg([{"name": "a", "cluster": "nowhere"}], clusters=[WEU, EUS]),
                 "pools[0].cluster: no cluster named 'nowhere' (configured: eus, weu)", id="unknown-cluster"),
    pytest.param(cfg([{"name": "a", "cluster": "weu"}]),
                 "pools[0].cluster: no cluster named 'weu' (no cluster configured: add `clusters:` or `kubernetes:`)",
                 id="no-cluster-at-all"),
    pytest.param(cfg([{"name": "a"}], clusters=[WEU, {**EUS, "name": "weu"}]),
                 "clusters[1].name: duplicate cluster name 'weu'", id="duplicate-names"),
    pytest.param(cfg([{"name": "a"}], clusters=[WEU], kubernetes=KUBE),
                 "clusters: give either `kubernetes:` (one cluster, named \"default\") or `clusters:`, not both",
                 id="both-sections"),
    pytest.param(cfg([{"name": "a", "cluster": "weu"}, {"name": "b"}], clusters=[WEU, EUS]),
                 "pools[1].cluster: required with several clusters (one of eus, weu)", id="must-choose"),
    pytest.param(cfg([{"name": "a", "cluster": "weu"}], clusters=[{**WEU, "name": "Bad Name"}]),
                 "clusters[0].name:", id="bad-name"),
])
def test_refused(config: dict[str, Any], expected: str) -> None:
    found = problems(config)
    assert any(line.startswith(expected) for line in found), found


def test_check_config_names_the_unknown_cluster(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(cfg([{"name": "a", "cluster": "weu"}, {"name": "b", "cluster": "wus"}],
                                       clusters=[WEU, EUS])))
    out = subprocess.run([sys.executable, "-m", "autoscaler", "check-config", str(path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1
    assert "pools[1].cluster: no cluster named 'wus' (configured: eus, weu)" in out.stdout + out.stderr
    path.write_text(yaml.safe_dump(cfg([{"name": "a", "cluster": "weu"}, {"name": "b", "cluster": "eus"}],
                                       clusters=[WEU, EUS])))
    ok = subprocess.run([sys.executable, "-m", "autoscaler", "check-config", str(path)], capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
