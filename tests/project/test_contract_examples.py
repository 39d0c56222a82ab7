"""Every YAML example of CONTRACT.md (kept verbatim in tests/support/configs/contract_*.yaml) validates as part of a
config, through ``python -m autoscaler check-config``, and means what the CONTRACT says it means."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.__main__ import main
from autoscaler.config.load import load_config
from autoscaler.models import Mode

CONFIGS = Path(__file__).resolve().parents[2] / "tests" / "support" / "configs"
ENV = {"AUTOSCALER_TOKEN": "token-for-tests", "GRAFANA_HOOK_PASSWORD": "password-for-tests",
       "GRAFANA_HMAC_SECRET": "hmac-secret-for-tests",
       "ACK_SCALE_OUT_URL": "https://cs.console.aliyun.com/hook/trigger?triggerUrl=YQ==&secret=ab&type=scale_out",
       "ACK_SCALE_IN_URL": "https://cs.console.aliyun.com/hook/trigger?triggerUrl=YQ==&secret=ab&type=scale_in"}


def block(name: str) -> Any:
    return yaml.safe_load((CONFIGS / f"contract_{name}.yaml").read_text())


def deep_merge(base: Any, extra: Any) -> Any:
    if isinstance(base, dict) and isinstance(extra, dict):
        return {**base, **{k: deep_merge(base[k], v) if k in base else v for k, v in extra.items()}}
    return extra


def with_pools(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra``'s top-level sections merged into ``base``; its pools merged into ``base``'s pool of that name."""
    out = deep_merge(base, {k: v for k, v in extra.items() if k != "pools"})
    pools = {p["name"]: p for p in base["pools"]}
    for pool in extra.get("pools", []):
        pools[pool["name"]] = deep_merge(pools.get(pool["name"], {}), pool)
    out["pools"] = list(pools.values())
    return out


def check(tmp_path: Path, raw: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    code = main(["check-config", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_full_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = check(tmp_path, block("example"), monkeypatch, capsys)
    assert code == 0, err
    assert len(out.strip().splitlines()) == 1 and "3 pool(s)" in out and "1 rule(s)" in out


def test_the_node_aware_example_in_the_full_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """It writes both `in_cluster: true` and `kubeconfig:`; the other pools (ack_hook, simulated without a
    node_selector) keep working with the cloud picking their victims, said as a warning."""
    raw = with_pools(block("example"), block("node_aware"))
    code, out, err = check(tmp_path, raw, monkeypatch, capsys)
    assert code == 0, err
    assert "pools[2].node_selector: not set, so the cloud picks" in err  # sim: simulated has no default selector
    settings = load_config(str(tmp_path / "config.yaml"))
    a100, ack, sim = (settings.pools[n] for n in ("gpu-a100", "ack-t4", "sim"))
    assert (a100.victims, a100.drain_timeout) == ("idle", 600.0)
    assert a100.node_selector == (("kubernetes.azure.com/agentpool", "gpunp"),)
    assert ack.victims == "cloud" and sim.victims == "cloud"  # ack_hook can't name a node
    kube = settings.config.kubernetes
    assert kube is not None and kube.gpu_resources == ["nvidia.com/gpu", "nvidia.com/mig-*"]
    assert settings.config.routing.node_label == "node"


def test_node_aware_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    """`idle` is the default with `kubernetes` and a provider that removes named nodes; the node_selector defaults
    per provider (aks: the agent pool's label); `gpu_resources` and `routing.node_label` have the documented
    defaults; `cloud` is the only choice for ack_hook."""
    raw = block("example")
    raw["kubernetes"] = {"kubeconfig": "/etc/autoscaler/kubeconfig"}
    code, _, err = check(tmp_path, raw, monkeypatch, capsys)
    assert code == 0, err
    settings = load_config(str(tmp_path / "config.yaml"))
    a100 = settings.pools["gpu-a100"]
    assert a100.victims == "idle" and a100.node_selector == (("kubernetes.azure.com/agentpool", "gpunp"),)
    assert settings.config.kubernetes is not None
    assert settings.config.kubernetes.gpu_resources == ["nvidia.com/gpu", "nvidia.com/mig-*"]
    assert settings.config.routing.node_label == "node"
    raw["pools"][1]["scale_in"] = {"victims": "idle"}
    code, _, err = check(tmp_path, raw, monkeypatch, capsys)
    assert code == 1 and "pools[1].scale_in.victims: idle needs a provider that removes named nodes" in err


@pytest.mark.parametrize("victims", ["cloud", "alerted", "idle"])
def test_every_victims_choice_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str], victims: str) -> None:
    raw = with_pools(block("example"), block("node_aware"))
    raw["pools"][0]["scale_in"]["victims"] = victims
    code, _, err = check(tmp_path, raw, monkeypatch, capsys)
    assert code == 0, err
    assert load_config(str(tmp_path / "config.yaml")).pools["gpu-a100"].victims == victims


def test_the_demand_example_on_the_proportional_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    raw = with_pools(block("proportional"), block("demand"))
    code, _, err = check(tmp_path, raw, monkeypatch, capsys)
    assert code == 0, err
    gpu = load_config(str(tmp_path / "config.yaml")).pools["gpu"]
    assert gpu.scale_out.mode is Mode.DEMAND and gpu.gpus_per_node == 8 and gpu.provision_time == 480
    (window,) = gpu.schedules
    assert (window.cron, window.duration, window.min, window.timezone) == ("0 8 * * 1-5", 39600, 4, "Europe/Warsaw")


def test_the_demand_example_as_a_new_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    (pool,) = block("demand")["pools"]
    raw = block("example")
    raw["pools"].append({"provider": "simulated", "min": 0, "max": 8, **pool})
    code, out, err = check(tmp_path, raw, monkeypatch, capsys)
    assert code == 0, err
    assert "gpu (simulated 0..8)" in out


def test_the_pending_rule_of_the_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`{alert: GPUDemandPending, pending_above: 0, for: 1m, pool, action}` is a replay rule."""
    raw = with_pools(block("proportional"), block("demand"))
    raw["replay"]["rules"].append({"alert": "GPUDemandPending", "pending_above": 0, "for": "1m", "pool": "gpu",
                                   "action": "scale_out"})
    code, _, err = check(tmp_path, raw, monkeypatch, capsys)
    assert code == 0, err


def test_the_more_clouds_example_beside_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    raw = block("example")
    raw["pools"] += block("more_clouds")["pools"]
    code, out, err = check(tmp_path, raw, monkeypatch, capsys)
    assert code == 0, err
    assert "eks-a10 (eks 0..8)" in out and "gke-l4 (gke 0..8)" in out


def test_everything_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    raw = with_pools(with_pools(block("example"), block("node_aware")), block("proportional"))
    raw = with_pools(raw, block("demand"))
    raw["pools"] += block("more_clouds")["pools"]
    code, out, err = check(tmp_path, raw, monkeypatch, capsys)
    assert code == 0, err
    assert "6 pool(s)" in out


def test_a_scale_in_key_under_scale_out_is_warned_about(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    raw = block("example")
    raw["pools"][2]["scale_out"] = {"delay_after_scale_out": "5m"}
    code, _, err = check(tmp_path, raw, monkeypatch, capsys)
    assert code == 0
    assert "warning: pools[2].scale_out.delay_after_scale_out: does nothing (a scale-in setting" in err


def test_an_unusable_default_node_selector_is_a_problem_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """docs/ack.md's example masks IDs the way Alibaba's console does (`np31…****`): not a label value."""
    raw = block("more_clouds")
    raw["pools"] = [{"name": "ack-gpu", "provider": "ack", "min": 0, "max": 4,
                     "ack": {"cluster_id": "c82e6987e2961451182edacd74faf****", "region_id": "cn-hangzhou",
                             "nodepool_id": "np31da1b38983f4511b490fc62108a****"}}]
    code, _, err = check(tmp_path, raw, monkeypatch, capsys)
    assert code == 0, err  # without `kubernetes:` the selector is never read
    raw["kubernetes"] = {"in_cluster": True}
    code, _, err = check(tmp_path, raw, monkeypatch, capsys)
    assert code == 1
    assert err.startswith("pools[0].node_selector: the default from pools[0].ack is unusable: "
                          "'alibabacloud.com/nodepool-id=np31da1b38983f4511b490fc62108a****' is not label=value")
