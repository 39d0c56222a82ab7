"""The scaling rules, proven with promtool's rule unit tests on the exporters' real label sets
(deploy/prometheus/tests), and the Grafana and Azure Monitor forms of the same rules checked against the same inputs."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.pipeline import PROMTOOL, require_binary

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
UNIT_TESTS = sorted((PROM / "tests").glob("*.test.yml"))
#: the unit tests of the scaling rules (the self-alerts' have no Azure or Grafana form)
SCALING_UNIT_TESTS = [p for p in UNIT_TESTS if p.name != "autoscaler-self-rules.test.yml"]
GRAFANA_RULES = ROOT / "deploy" / "grafana" / "provisioning" / "alerting" / "alert-rules.yml"
AZURE = ROOT / "deploy" / "azure" / "prometheus-rule-groups.json"
SHIPPED = [PROM / "gpu-autoscaler-rules.yml", PROM / "gpu-demand-rules.yml"]
#: GPUDemandPending on the service's own gauge, for DRA clusters: loaded instead of gpu-demand-rules.yml (docs/dra.md)
DRA = PROM / "gpu-dra-rules.yml"
DRA_UNIT_TESTS = sorted((PROM / "tests" / "dra").glob("*.test.yml"))
GRAFANA_GROUP, GRAFANA_DRA_GROUP = "gpu-autoscaler", "gpu-autoscaler-dra-demand"
_CONDITION = re.compile(r"\[equals\(parameters\('demandRules'\), '([a-z-]+)'\)\]")


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_binary(*PROMTOOL), *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          check=False)


def _load(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))


def _rules(path: Path) -> list[dict[str, Any]]:
    return [rule for group in _load(path)["groups"] for rule in group["rules"]]


def test_promtool_unit_tests_pass() -> None:
    assert len(UNIT_TESTS) == 4  # the GPU rules, the demand rules, the self-alerts (test_alert_routing), repair
    out = _promtool("test", "rules", *(p.name for p in UNIT_TESTS), cwd=PROM / "tests")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("SUCCESS") == len(UNIT_TESTS), out.stdout


def test_unit_tests_cover_each_cloud_mig_a_leaving_node_and_waiting_pods() -> None:
    text = "\n".join(p.read_text() for p in UNIT_TESTS)
    for label in ("label_kubernetes_azure_com_agentpool", "label_eks_amazonaws_com_nodegroup",
                  "label_cloud_google_com_gke_nodepool", "label_alibabacloud_com_nodepool_id"):
        assert f'{label}="' in text, label
    series = [s for p in UNIT_TESTS for t in _load(p)["tests"] for s in t["input_series"]]
    assert any('GPU_I_PROFILE="' in s["series"] and 'GPU_I_ID="' in s["series"] for s in series)  # MIG
    assert any(s["values"].endswith("stale") and s["series"].startswith("kube_node_labels") for s in series)
    assert any('phase="Pending"' in s["series"] for s in series)
    eight = [s for s in series if 'Hostname="aks-gpunp-12345678-vmss000000"' in s["series"]
             and s["series"].startswith("DCGM_FI_DEV_GPU_UTIL")]
    assert len(eight) == 8 and len({s["values"] for s in eight}) > 4  # 8 GPUs at mixed utilisation


def test_alerts_carry_the_routing_labels_the_service_reads() -> None:
    alerts = {r["alert"]: r for path in SHIPPED for r in _rules(path) if "alert" in r}
    assert set(alerts) == {"GPUUtilizationHigh", "GPUUtilizationLow", "GPUDemandPending", "GPUNodeUnhealthy"}
    actions = {name: rule["labels"]["autoscaler_action"] for name, rule in alerts.items()}
    assert actions == {"GPUUtilizationHigh": "scale_out", "GPUUtilizationLow": "scale_in",
                       "GPUDemandPending": "scale_out", "GPUNodeUnhealthy": "repair"}
    unhealthy = alerts["GPUNodeUnhealthy"]["expr"]  # joined to the pool like the other GPU rules, by node
    assert "DCGM_FI_DEV_XID_ERRORS" in unhealthy and "node:autoscaler_pool:info" in unhealthy
    assert "max by (node, cloud_pool, autoscaler_pool)" in unhealthy  # the node label the service routes by
    assert all(f"!= {xid}" in unhealthy for xid in (13, 31, 43, 45, 68, 109))
    assert all(rule["annotations"]["value"] == "{{ $value }}" for rule in alerts.values())
    records = {r["record"]: r["expr"] for path in SHIPPED for r in _rules(path) if "record" in r}
    assert "sum by (autoscaler_pool)" in records["autoscaler_pool:gpu_utilization:avg"]
    assert "sum by (autoscaler_pool)" in records["autoscaler_pool:gpus_pending:sum"]


def _to_promql_duration(iso: str) -> str:
    match = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?", iso)
    assert match, iso
    hours, minutes, seconds = (int(x or 0) for x in match.groups())
    return f"{hours * 3600 + minutes * 60 + seconds}s"


def _azure_as_prometheus(demand: str = "kube-state-metrics") -> dict[str, Any]:
    """The ARM template's rule groups as a Prometheus rule file: those it deploys with ``demandRules`` = ``demand``."""
    template = json.loads(AZURE.read_text())
    assert demand in template["parameters"]["demandRules"]["allowedValues"]
    groups = []
    for resource in template["resources"]:
        assert resource["type"] == "Microsoft.AlertsManagement/prometheusRuleGroups"
        if "condition" in resource:
            match = _CONDITION.fullmatch(resource["condition"])
            assert match, resource["condition"]  # the only condition form this reading knows
            if match.group(1) != demand:
                continue
        rules = []
        for rule in resource["properties"]["rules"]:
            out = {k: rule[k] for k in ("record", "alert") if k in rule}
            out["expr"] = rule["expression"]
            out.update({k: rule[k] for k in ("labels", "annotations") if k in rule})
            if "for" in rule:
                out["for"] = _to_promql_duration(rule["for"])
            rules.append(out)
        groups.append({"name": resource["name"].strip("[]"), "rules": rules})
    return {"groups": groups}


def test_azure_rule_groups_pass_the_same_unit_tests(tmp_path: Path) -> None:
    converted = tmp_path / "azure-rules.yml"
    converted.write_text(yaml.safe_dump(_azure_as_prometheus()))
    for unit in SCALING_UNIT_TESTS:
        doc = _load(unit)
        doc["rule_files"] = [str(PROM / "tests" / f) for f in doc["rule_files"] if not f.startswith("..")]
        doc["rule_files"].append(str(converted))
        (tmp_path / unit.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    out = _promtool("test", "rules", *(p.name for p in SCALING_UNIT_TESTS), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def test_azure_dra_rule_group_passes_the_dra_unit_test(tmp_path: Path) -> None:
    converted = tmp_path / "azure-rules.yml"
    converted.write_text(yaml.safe_dump(_azure_as_prometheus("dra")))
    assert len(DRA_UNIT_TESTS) == 1
    for unit in DRA_UNIT_TESTS:
        doc = _load(unit)
        assert doc["rule_files"] == ["../../gpu-dra-rules.yml"]
        doc["rule_files"] = [str(converted)]
        (tmp_path / unit.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    out = _promtool("test", "rules", *(p.name for p in DRA_UNIT_TESTS), cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.count("SUCCESS") == 1, out.stdout + out.stderr


@pytest.mark.parametrize("demand, rules", [("kube-state-metrics", SHIPPED), ("dra", [SHIPPED[0], DRA])])
def test_azure_deploys_one_demand_alert_per_choice(demand: str, rules: list[Path]) -> None:
    """Each ``demandRules`` value deploys the same alerts and records as the Prometheus files it stands for: one
    GPUDemandPending, never both forms (they would fire twice)."""
    template = json.loads(AZURE.read_text())
    assert template["parameters"]["demandRules"]["defaultValue"] == "kube-state-metrics"
    deployed = [r for g in _azure_as_prometheus(demand)["groups"] for r in g["rules"]]
    shipped = [r for path in rules for r in _rules(path)]
    assert [r.get("alert") or r["record"] for r in deployed] == [r.get("alert") or r["record"] for r in shipped]
    assert [r["alert"] for r in deployed if "alert" in r].count("GPUDemandPending") == 1
    for ours, theirs in zip(deployed, shipped):
        assert ours["expr"].strip() == theirs["expr"].strip() and ours.get("labels") == theirs.get("labels")


def test_azure_alerts_route_to_the_action_group_with_our_labels() -> None:
    template = json.loads(AZURE.read_text())
    alerts = [r for res in template["resources"] for r in res["properties"]["rules"] if "alert" in r]
    shipped = {r["alert"]: r for path in SHIPPED for r in _rules(path) if "alert" in r}
    assert {a["alert"] for a in alerts} == set(shipped)
    assert len(alerts) == len(shipped) + 1  # GPUDemandPending twice: kube-state-metrics' and the DRA form
    dra = {r["alert"]: r for r in _rules(DRA) if "alert" in r}
    for alert in alerts:
        assert alert["labels"]["autoscaler_action"] == shipped[alert["alert"]]["labels"]["autoscaler_action"]
        assert alert["labels"] in (shipped[alert["alert"]]["labels"], dra.get(alert["alert"], {}).get("labels"))
        assert alert["actions"] == [{"actionGroupId": "[parameters('actionGroupId')]"}]
        assert alert["resolveConfiguration"]["autoResolved"] is True
    for resource in template["resources"]:
        assert resource["properties"]["scopes"] == ["[parameters('azureMonitorWorkspaceId')]"]
        assert resource["properties"]["clusterName"] == "[parameters('clusterName')]"


def _grafana_rules(group: str = GRAFANA_GROUP) -> dict[str, dict[str, Any]]:
    groups = {g["name"]: g for g in _load(GRAFANA_RULES)["groups"]}
    assert set(groups) == {GRAFANA_GROUP, GRAFANA_DRA_GROUP}
    return {r["title"]: r for r in groups[group]["rules"]}


@pytest.mark.parametrize("group, files", [(GRAFANA_GROUP, SHIPPED), (GRAFANA_DRA_GROUP, [DRA])])
def test_grafana_rules_mirror_the_prometheus_alerts(group: str, files: list[Path]) -> None:
    grafana = _grafana_rules(group)
    shipped = {r["alert"]: r for path in files for r in _rules(path) if "alert" in r}
    assert set(grafana) == set(shipped)
    for name, rule in grafana.items():
        prom = shipped[name]
        evaluator = rule["data"][1]["model"]["conditions"][0]["evaluator"]
        if name == "GPUNodeUnhealthy":  # an expression with no threshold: the alert is its series, > 0 (the XID)
            assert evaluator == {"type": "gt", "params": [0]}
            assert rule["for"] == prom["for"] and rule["labels"]["autoscaler_action"] == "repair"
            continue
        op, threshold = re.fullmatch(r"\S+ ([<>]) (\d+)", prom["expr"]).groups()  # type: ignore[union-attr]
        assert evaluator == {"type": {">": "gt", "<": "lt"}[op], "params": [int(threshold)]}
        assert rule["for"] == prom["for"] and rule["labels"]["autoscaler_action"] == prom["labels"]["autoscaler_action"]
        # one GPUDemandPending runs: kube-state-metrics' form; the DRA form is paused until swapped in (docs/dra.md)
        assert rule.get("isPaused", False) is (group == GRAFANA_DRA_GROUP)


@pytest.mark.parametrize("title, recorded, group", [
    ("GPUUtilizationHigh", "autoscaler_pool:gpu_utilization:avg", GRAFANA_GROUP),
    ("GPUUtilizationLow", "autoscaler_pool:gpu_utilization:avg", GRAFANA_GROUP),
    ("GPUDemandPending", "autoscaler_pool:gpus_pending:sum", GRAFANA_GROUP),
    ("GPUDemandPending", "autoscaler_pool:gpus_pending:sum", GRAFANA_DRA_GROUP)])
def test_grafana_query_equals_the_recorded_figure_on_the_unit_test_inputs(title: str, recorded: str, group: str,
                                                                         tmp_path: Path) -> None:
    """Grafana can't read recording rules it does not own, so its query is the rules inlined; on every unit-test
    input, it must give the recorded figure of the shipped rules, pool for pool."""
    query = _grafana_rules(group)[title]["data"][0]["model"]["expr"]
    checks = [f"({query}) != on (autoscaler_pool) {recorded}", f"({query}) unless on (autoscaler_pool) {recorded}",
              f"{recorded} unless on (autoscaler_pool) ({query})"]
    dra = group == GRAFANA_DRA_GROUP
    unit = DRA_UNIT_TESTS[0] if dra else next(p for p in SCALING_UNIT_TESTS
                                              if ("demand" in p.name) == (title == "GPUDemandPending"))
    tests = []
    for test in _load(unit)["tests"]:
        exprs = [{"expr": e, "eval_time": f"{m}m", "exp_samples": []} for m in (2, 5, 10, 16) for e in checks]
        nonempty = [{"expr": f"absent({query})", "eval_time": "5m", "exp_samples": []}]
        if test["name"] == "nothing waits":
            nonempty = []
        tests.append({"name": test["name"], "interval": test["interval"], "input_series": test["input_series"],
                      "promql_expr_test": exprs + nonempty})
    doc = {"rule_files": [str(p) for p in ([DRA] if dra else SHIPPED)], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "parity.test.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    out = _promtool("test", "rules", "parity.test.yml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def test_grafana_unhealthy_query_equals_the_prometheus_alert_on_the_unit_test_inputs(tmp_path: Path) -> None:
    """GPUNodeUnhealthy's Grafana query (the pool join inlined) gives the same series and values as the shipped
    rule's expression, node for node, at every step of the repair unit test's inputs."""
    query = _grafana_rules()["GPUNodeUnhealthy"]["data"][0]["model"]["expr"]
    prom = next(r["expr"] for path in SHIPPED for r in _rules(path) if r.get("alert") == "GPUNodeUnhealthy")
    on = "on (node, cloud_pool, autoscaler_pool)"
    checks = [f"({query}) != {on} ({prom})", f"({query}) unless {on} ({prom})", f"({prom}) unless {on} ({query})"]
    unit = _load(PROM / "tests" / "gpu-repair-rules.test.yml")
    tests = [{"name": t["name"], "interval": t["interval"], "input_series": t["input_series"],
              "promql_expr_test": [{"expr": e, "eval_time": f"{m}m", "exp_samples": []}
                                   for m in (1, 2, 4, 10) for e in checks]
              + [{"expr": f"absent({query})", "eval_time": "4m", "exp_samples": []}]} for t in unit["tests"]]
    doc = {"rule_files": [str(p) for p in SHIPPED], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "parity.test.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    out = _promtool("test", "rules", "parity.test.yml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
