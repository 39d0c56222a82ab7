"""Where the shipped Alertmanager config and Grafana notification policy send each alert the shipped rules raise:
the service's own health alerts (every alert of autoscaler-self-rules.yml, with the labels its promtool unit tests
prove) reach people, the ``oncall`` placeholder, never the service; the scaling alerts reach the service. Real
promtool and amtool (``amtool config routes test``)."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.pipeline import AMTOOL, PROMTOOL, require_binary, routed

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
AM_CONFIG = DEPLOY / "alertmanager" / "alertmanager.yml"
GRAFANA = DEPLOY / "grafana" / "provisioning" / "alerting"
TESTS = DEPLOY / "prometheus" / "tests"
SELF_TEST = TESTS / "autoscaler-self-rules.test.yml"
HUMAN, SERVICE = "oncall", "gpu-autoscaler"


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def fired(test_file: Path) -> list[dict[str, str]]:
    """Every alert a promtool unit test file expects to fire: its full label set, alertname included."""
    return [{"alertname": case["alertname"], **{k: str(v) for k, v in exp["exp_labels"].items()}}
            for test in _load(test_file)["tests"] for case in test.get("alert_rule_test", [])
            for exp in case.get("exp_alerts", [])]


def test_the_self_rules_unit_tests_cover_every_self_alert_and_pass() -> None:
    shipped = {r["alert"] for g in _load(DEPLOY / "prometheus" / "autoscaler-self-rules.yml")["groups"]
               for r in g["rules"] if "alert" in r}
    assert {a["alertname"] for a in fired(SELF_TEST)} == shipped
    assert all(name.startswith("GPUAutoscaler") for name in shipped)  # the routes match on this prefix
    out = subprocess.run([require_binary(*PROMTOOL), "test", "rules", SELF_TEST.name], cwd=TESTS,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def grafana_as_alertmanager(tmp_path: Path) -> Path:
    """Grafana's notification policy tree as the Alertmanager routing tree it is (same matching, same first-match
    order, ``continue`` false), with one placeholder webhook per contact point, for amtool."""
    def route(policy: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"receiver": policy["receiver"]}
        if policy.get("object_matchers"):
            out["matchers"] = [f'{k}{op}"{v}"' for k, op, v in policy["object_matchers"]]
        if policy.get("continue"):
            out["continue"] = True
        if policy.get("routes"):
            out["routes"] = [route(r) for r in policy["routes"]]
        return out

    points = [p["name"] for p in _load(GRAFANA / "contact-points.yml")["contactPoints"]]
    policy = _load(GRAFANA / "policies.yml")["policies"][0]
    config = {"route": route(policy),
              "receivers": [{"name": n, "webhook_configs": [{"url": "http://127.0.0.1:1/"}]} for n in points]}
    path = tmp_path / "grafana-as-alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    check = subprocess.run([require_binary(*AMTOOL), "check-config", str(path)], capture_output=True, text=True,
                           timeout=60, check=False)
    assert check.returncode == 0, check.stdout + check.stderr  # every receiver a policy names is a contact point
    return path


@pytest.mark.parametrize("which", ["alertmanager", "grafana"])
def test_every_self_alert_reaches_people_and_never_the_service(tmp_path: Path, which: str) -> None:
    config = AM_CONFIG if which == "alertmanager" else grafana_as_alertmanager(tmp_path)
    alerts = fired(SELF_TEST)
    assert {"GPUAutoscalerDown", "GPUAutoscalerStoreDown"} <= {a["alertname"] for a in alerts}
    for labels in alerts:
        assert routed(config, labels) == [HUMAN], labels
        # a self-alert that somehow carries the service's routing label still goes to people
        assert routed(config, {**labels, "autoscaler_action": "scale_out", "autoscaler_pool": "gpu"}) == [HUMAN]


@pytest.mark.parametrize("which", ["alertmanager", "grafana"])
def test_the_scaling_alerts_reach_the_service_and_anything_else_people(tmp_path: Path, which: str) -> None:
    config = AM_CONFIG if which == "alertmanager" else grafana_as_alertmanager(tmp_path)
    scaling = fired(TESTS / "gpu-autoscaler-rules.test.yml") + fired(TESTS / "gpu-demand-rules.test.yml")
    assert {a["alertname"] for a in scaling} >= {"GPUUtilizationHigh", "GPUUtilizationLow", "GPUDemandPending"}
    for labels in scaling:
        assert routed(config, labels) == [SERVICE], labels
    assert routed(config, {"alertname": "KubeNodeNotReady", "severity": "warning"}) == [HUMAN]


@pytest.mark.parametrize("which", ["alertmanager", "grafana"])
def test_the_repair_alerts_reach_the_service(tmp_path: Path, which: str) -> None:
    """GPUNodeUnhealthy (``autoscaler_action: repair``) acts only if it reaches the service: the shipped routes used to
    send it to people alone, so a pool with ``repair:`` never repaired until the operator edited the matcher."""
    config = AM_CONFIG if which == "alertmanager" else grafana_as_alertmanager(tmp_path)
    repairs = fired(TESTS / "gpu-repair-rules.test.yml")
    assert {a["alertname"] for a in repairs} == {"GPUNodeUnhealthy"} and all(a["node"] for a in repairs)
    for labels in repairs:
        assert routed(config, labels) == [SERVICE], labels


def test_the_placeholder_is_the_one_the_docs_point_at() -> None:
    doc = (ROOT / "docs" / "production.md").read_text()
    assert "## Who hears about the autoscaler itself" in doc
    section = doc.split("## Who hears about the autoscaler itself", 1)[1].split("\n## ", 1)[0]
    assert "`oncall`" in section and "alertmanager.yml" in section and "contact-points.yml" in section
    receivers = {r["name"]: r for r in _load(AM_CONFIG)["receivers"]}
    assert "example.invalid" in receivers[HUMAN]["webhook_configs"][0]["url"]  # a placeholder, never a real host
    for path in (AM_CONFIG, GRAFANA / "contact-points.yml", GRAFANA / "policies.yml"):
        assert "docs/production.md#who-hears-about-the-autoscaler-itself" in path.read_text().replace(
            "-\n# ", "-"), path
