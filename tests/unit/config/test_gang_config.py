"""``provisioning_requests:`` and ``pools[].node_labels``: valid with ``kubernetes:``, refused without it, each bad
label named with its path, through ``check-config`` as an operator runs it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.gang import ATOMIC_CLASS
from autoscaler.config.load import ConfigError, build_settings
from tests.support import config

ROOT = Path(__file__).resolve().parents[3]
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def _cfg(**changes: Any) -> dict[str, Any]:
    pool = {"name": "h100-spot", "provider": "simulated", "min": 0, "max": 8, "node_selector": "pool=spot",
            "node_labels": H100, "provision_time": "10m", "gpus_per_node": 8}
    return config("sqlite:///:memory:", pools=[pool], rules=[], kubernetes={"host": "http://127.0.0.1:1"},
                  provisioning_requests={"booking": "15m"}, **changes)


def test_the_contract_example_is_valid() -> None:
    settings = build_settings(_cfg(), env={})
    assert settings.config.provisioning_requests is not None
    assert settings.config.provisioning_requests.class_ == ATOMIC_CLASS
    assert settings.config.provisioning_requests.booking == 900
    spec = settings.pools["h100-spot"]
    assert spec.node_labels == (("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),)
    assert spec.provision_time == 600


@pytest.mark.parametrize("change,problem", [
    pytest.param({"kubernetes": None}, "provisioning_requests: needs the `kubernetes:` section", id="no-cluster"),
    pytest.param({"provisioning_requests": {"booking": 0}}, "provisioning_requests.booking: must be more than 0",
                 id="no-booking"),
    pytest.param({"provisioning_requests": {"klass": "x"}}, "provisioning_requests.klass: Extra inputs",
                 id="typo"),
])
def test_refused(change: dict[str, Any], problem: str) -> None:
    cfg = _cfg()
    for key, value in change.items():
        if value is None:
            cfg.pop(key)
        else:
            cfg[key] = value
    with pytest.raises(ConfigError) as info:
        build_settings(cfg, env={})
    assert any(line.startswith(problem) for line in info.value.problems), info.value.problems


@pytest.mark.parametrize("labels,problem", [
    pytest.param({"bad key!": "x"}, "'bad key!' is not a label key", id="key"),
    pytest.param({"a/b": "no spaces"}, "is not a label value", id="value"),
    pytest.param({"count": 8}, "keys and values are strings", id="number"),
    pytest.param(["a=b"], "a mapping of label: value", id="list"),
])
def test_bad_node_labels_are_named_by_path(labels: Any, problem: str) -> None:
    cfg = _cfg()
    cfg["pools"][0]["node_labels"] = labels
    with pytest.raises(ConfigError) as info:
        build_settings(cfg, env={})
    assert any(line.startswith("pools[0].node_labels: ") and problem in line for line in info.value.problems), \
        info.value.problems


def test_check_config_accepts_it(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_cfg()))
    out = subprocess.run([sys.executable, "-m", "autoscaler", "check-config", str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
