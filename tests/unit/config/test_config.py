"""Config: env substitution, durations, defaults merged, one precise message per problem."""
from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.load import ConfigError, build_settings, load_config, warnings
from tests.support import BASE_CONFIG

ROOT = Path(__file__).resolve().parents[3]


def problems(cfg: dict[str, Any], env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        build_settings(cfg, env or {})
    return info.value.problems


def cfg(**changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(BASE_CONFIG)
    out.update(changes)
    return out


def test_example_config_is_valid() -> None:
    settings = load_config(str(ROOT / "config.example.yaml"), env={})
    spec = settings.pools["sim"]
    assert spec.provider == "simulated" and spec.scale_out.cooldown == 300 and spec.scale_in.cooldown == 900
    assert settings.config.server.auth.bearer_tokens[0].token.get_secret_value() == "dev-token"


def test_env_substitution_and_defaults() -> None:
    raw = cfg(server={"auth": {"bearer_tokens": ["${TOK}", "${OTHER:-fallback}"]}})
    settings = build_settings(raw, {"TOK": "abc"})
    assert [t.token.get_secret_value() for t in settings.config.server.auth.bearer_tokens] == ["abc", "fallback"]


def test_missing_env_var_named() -> None:
    raw = cfg(server={"auth": {"bearer_tokens": ["${NOPE}"]}})
    assert "server.auth.bearer_tokens[0]: environment variable NOPE is not set and has no default" in problems(raw)


def test_pool_overrides_defaults_field_by_field() -> None:
    raw = cfg()
    raw["pools"][0]["scale_out"] = {"step": 2}
    raw["pools"][0]["scale_in"] = {"cooldown": "1h"}
    spec = build_settings(raw, {}).pools["gpu"]
    assert (spec.scale_out.step, spec.scale_out.cooldown) == (2, 300)
    assert (spec.scale_in.cooldown, spec.scale_in.delay_after_scale_out) == (3600, 600)


def test_every_problem_with_its_path() -> None:
    raw = cfg()
    raw["pools"][1]["min"] = 3
    raw["pools"][1]["max"] = 1
    raw["pools"][0]["simulated"] = {"initial_count": -1}
    raw["defaults"] = {"scale_out": {"cooldown": "5 minutes"}}
    found = problems(raw)
    assert "pools[1].max: must be >= min (3)" in found
    assert any(p.startswith("defaults.scale_out.cooldown: must be a duration") for p in found)


def test_provider_section_problems() -> None:
    raw = cfg()
    raw["pools"][0]["simulated"] = {"initial_count": -1, "bogus": 1}
    raw["pools"][0]["aks"] = {"cluster": "x"}
    found = problems(raw)
    assert "pools[0].simulated.initial_count: Input should be greater than or equal to 0" in found
    assert any(p.startswith("pools[0].simulated.bogus:") for p in found)
    assert "pools[0].aks: unknown key (is the provider 'aks'?)" in found


@pytest.mark.parametrize("change,expected", [
    pytest.param({"server": {"auth": {}}}, "server.auth: no authentication configured", id="no-auth"),
    pytest.param({"server": {"auth": {"bearer_tokens": [""]}}}, "server.auth.bearer_tokens: token [0] is empty",
                 id="empty-token"),
    pytest.param({"pools": [{"name": "x", "provider": "nimbus", "min": 0, "max": 1}]},
                 "pools[0].provider: unknown provider 'nimbus' (known: ", id="unknown-provider"),
    pytest.param({"pools": []}, "pools: List should have at least 1 item", id="no-pools"),
    pytest.param({"store": {"url": "mysql://x"}}, "store.url: must start with sqlite:/// or postgresql://",
                 id="bad-store"),
    pytest.param({"rules": [{"match": {"a": "b"}, "pool": "nope", "action": "scale_out"}]},
                 "rules[0].pool: no pool named 'nope'", id="rule-unknown-pool"),
    pytest.param({"rules": [{"match_re": {"a": "("}, "pool": "gpu", "action": "scale_out"}]},
                 "rules[0].match_re.a: not a valid regular expression", id="bad-regex"),
    pytest.param({"rules": [{"match": {"a": "b"}, "pool": "gpu", "action": "grow"}]},
                 "rules[0].action: Input should be", id="bad-action"),
    pytest.param({"unknown_top": 1}, "unknown_top: Extra inputs are not permitted", id="unknown-key"),
    pytest.param({"pools": [{"name": "x", "provider": "simulated", "min": 0, "max": 4,
                             "scale_out": {"headroom": {"nodes": True}}}]},
                 "pools[0].scale_out.headroom.nodes: a whole number, not true/false", id="headroom-nodes-boolean"),
])
def test_invalid(change: dict[str, Any], expected: str) -> None:
    found = problems(cfg(**change))
    assert any(p.startswith(expected) for p in found), found


def test_auth_disabled_is_allowed() -> None:
    assert build_settings(cfg(server={"auth": {"disabled": True}}), {}).config.server.auth.disabled


def run_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoscaler", "check-config", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_check_config_cli(tmp_path: Path) -> None:
    ok = run_check(ROOT / "config.example.yaml")
    assert ok.returncode == 0, ok.stderr
    assert len(ok.stdout.strip().splitlines()) == 1 and "OK" in ok.stdout
    raw = cfg()
    raw["pools"][1].update(min=3, max=1)
    raw["pools"][0]["min"] = -1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw))
    result = run_check(bad)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert "pools[1].max: must be >= min (3)" in lines
    assert "pools[0].min: Input should be greater than or equal to 0" in lines
    broken = tmp_path / "broken.yaml"
    broken.write_text("server: [unclosed\n")
    result = run_check(broken)
    assert result.returncode == 1 and "not valid YAML at line" in result.stderr


@pytest.mark.parametrize("name", ["contract_example.yaml", "contract_proportional.yaml",
                                  "contract_more_clouds.yaml"])
def test_contract_examples_are_valid(name: str) -> None:
    env = {"AUTOSCALER_TOKEN": "t", "GRAFANA_HOOK_PASSWORD": "p", "GRAFANA_HMAC_SECRET": "s",
           "ACK_SCALE_OUT_URL": "https://cs.console.aliyun.com/hook/trigger?triggerUrl=YQ==&secret=ab&type=scale_out",
           "ACK_SCALE_IN_URL": "https://cs.console.aliyun.com/hook/trigger?triggerUrl=YQ==&secret=ab&type=scale_in"}
    settings = load_config(str(ROOT / "tests" / "support" / "configs" / name), env=env)
    assert settings.pools


def test_headroom_and_window_headroom() -> None:
    from autoscaler.models import Headroom

    raw = cfg()
    raw["pools"][0]["scale_out"] = {"headroom": {"gpus": 12}}
    raw["pools"][0]["schedules"] = [{"cron": "0 8 * * 1-5", "duration": "11h", "headroom": {"nodes": 0}},
                                    {"cron": "0 20 * * *", "duration": "1h", "min": 2, "headroom": {"fraction": 0.5}}]
    spec = build_settings(raw, {}).pools["gpu"]
    assert spec.scale_out.headroom == Headroom(gpus=12)
    assert [(w.min, w.headroom) for w in spec.schedules] == [(0, Headroom(nodes=0)), (2, Headroom(fraction=0.5))]


@pytest.mark.parametrize("where,value,expected", [
    pytest.param("scale_out", {"headroom": {"nodes": 1, "gpus": 8}}, "pools[0].scale_out.headroom: "
                 "give exactly one of nodes, gpus or fraction", id="two-kinds"),
    pytest.param("scale_out", {"headroom": {}}, "pools[0].scale_out.headroom: give exactly one",
                 id="no-kind"),
    pytest.param("scale_out", {"headroom": {"nodes": -1}}, "pools[0].scale_out.headroom.nodes:", id="negative"),
    pytest.param("scale_in", {"headroom": {"nodes": 1}}, "pools[0].scale_in.headroom: headroom is set "
                 "under scale_out", id="scale-in"),
    pytest.param("schedules", [{"cron": "0 8 * * *", "duration": "1h"}], "pools[0].schedules[0]: a "
                 "window sets min, headroom or both", id="empty-window"),
])
def test_invalid_headroom(where: str, value: Any, expected: str) -> None:
    raw = cfg()
    raw["pools"][0][where] = value
    found = problems(raw)
    assert any(p.startswith(expected) for p in found), found


def test_headroom_beyond_max_is_warned() -> None:
    """Headroom is clamped at max: more spare than max allows is a config that does not do what it says."""
    raw = cfg()
    raw["pools"][0]["scale_out"] = {"headroom": {"nodes": 100}}
    raw["pools"][0]["schedules"] = [{"cron": "0 8 * * 1-5", "duration": "11h", "headroom": {"nodes": 50}}]
    found = warnings(build_settings(raw, env={}))
    top = raw["pools"][0]["max"]
    assert (f"pools[0].scale_out.headroom: 100 spare nodes can never be kept: the pool's max is {top} "
            "(headroom is clamped at max)") in found
    assert (f"pools[0].schedules[0].headroom: 50 spare nodes can never be kept: the pool's max is {top} "
            "(headroom is clamped at max)") in found


@pytest.mark.parametrize("provider, section", [
    pytest.param("aks", {"subscription_id": "s", "resource_group": "rg", "cluster": "c", "agent_pool": "gpunp"},
                 id="aks"),
    pytest.param("eks", {"region": "us-east-1", "cluster": "c", "nodegroup": "g"}, id="eks"),
    pytest.param("webhook", {"url": "http://127.0.0.1:9/scale"}, id="webhook"),
])
def test_retry_budget_zero_means_one_try_on_every_provider(provider: str, section: dict[str, Any]) -> None:
    """The per-call settings have the same names and bounds on every provider: 0 is "no retries"."""
    raw = cfg(rules=[], pools=[{"name": "p", "provider": provider, "min": 0, "max": 2,
                      provider: {**section, "retry_budget": 0}}])
    settings = build_settings(raw, env={})
    assert settings.pools["p"].provider_settings.retry_budget == 0


def test_victims_inherited_from_defaults_are_reported_where_they_are_written() -> None:
    """A problem with ``defaults.scale_in.victims`` names that key (and the pool), not a key the pool never has."""
    raw = cfg(defaults={"scale_in": {"victims": "movable"}})
    found = problems(raw)
    pool = raw["pools"][0]["name"]
    assert (f"defaults.scale_in.victims: movable needs the top-level `kubernetes:` section (pool {pool}) (the service "
            "must see the pool's nodes and pods to pick them)") in found, found
    assert not any(p.startswith("pools[0].scale_in.victims") for p in found), found
