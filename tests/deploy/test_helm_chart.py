"""The Helm chart, checked with the tools its users run: real helm (lint, template), kubernetes-validate, promtool."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from autoscaler import __version__
from autoscaler.config.load import build_settings
from tests.support.chart import (CHART, ENV, ROOT, config_of, one, render, run_tool,
                         value_set)
from tests.support.pipeline import PROMTOOL, require_binary
from tests.support import AUTH, FakeClock, am_alert, am_payload, make_app

SETS = sorted(p.stem.removesuffix("-values") for p in (CHART / "ci").glob("*-values.yaml"))
CRDS = {"ServiceMonitor", "PrometheusRule"}  # prometheus-operator's: no schema in kubernetes-validate
#: The copies the chart ships (helm reads files inside the chart only) and where each comes from.
COPIES = {"autoscaler-self-rules.yml": "deploy/prometheus/autoscaler-self-rules.yml",
          "gpu-autoscaler-rules.yml": "deploy/prometheus/gpu-autoscaler-rules.yml",
          "gpu-demand-rules.yml": "deploy/prometheus/gpu-demand-rules.yml",
          "gpu-dra-rules.yml": "deploy/prometheus/gpu-dra-rules.yml",
          "gpu-pool-autoscaler-service.json": "deploy/grafana/dashboards/gpu-pool-autoscaler-service.json"}


def test_chart_ships_exact_copies_of_the_rules_and_dashboard() -> None:
    for copy, source in COPIES.items():
        assert (CHART / "files" / copy).read_bytes() == (ROOT / source).read_bytes(), \
            f"{copy} differs from {source}: copy it again (cp {source} {CHART.relative_to(ROOT)}/files/)"


@pytest.mark.parametrize("values", SETS)
def test_helm_lint_strict(helm: str, values: str) -> None:
    out = run_tool([helm, "lint", "--strict", str(CHART), *value_set(values)])
    assert out.returncode == 0 and "0 chart(s) failed" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("values", SETS)
def test_rendered_manifests_validate_and_carry_a_valid_config(helm: str, values: str, tmp_path: Path) -> None:
    docs = render(helm, *value_set(values))
    plain = [d for d in docs if d["kind"] not in CRDS]
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(plain))
    out = run_tool([str(Path(sys.executable).parent / "kubernetes-validate"), "--strict", str(path)])
    assert out.returncode == 0 and "WARN" not in out.stdout, out.stdout + out.stderr
    assert out.stdout.count(" passed for resource ") == len(plain), out.stdout  # each one against its schema
    assert all(d["metadata"].get("namespace") in ("gpu-autoscaler", None) for d in docs)
    settings = build_settings(config_of(docs), env=ENV)
    postgres = values == "postgresql"
    assert settings.config.store.url == (ENV["DATABASE_URL"] if postgres else "sqlite:///data/autoscaler.db")


def test_kubernetes_validate_refuses_what_the_cluster_would(helm: str, tmp_path: Path) -> None:
    """The check above can fail: a misspelt field and a wrong type are each refused, offline."""
    deployment = one(render(helm), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    service = one(render(helm), "Service")
    service["spec"]["ports"][0]["port"] = "eighty"
    for doc in (deployment, service):
        path = tmp_path / f"{doc['kind']}.yaml"
        path.write_text(yaml.safe_dump(doc))
        out = run_tool([str(Path(sys.executable).parent / "kubernetes-validate"), "--strict", str(path)])
        assert out.returncode != 0, out.stdout


def test_default_is_one_hardened_sqlite_replica(helm: str) -> None:
    docs = render(helm, *value_set("default"))
    assert {d["kind"] for d in docs} == {"Deployment", "Service", "ConfigMap", "ServiceAccount",
                                         "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor", "PrometheusRule"}
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    assert container["image"] == f"gpu-pool-autoscaler:{__version__}"  # the chart's appVersion
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    sc, psc = container["securityContext"], pod["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and psc["runAsNonRoot"] is True and psc["runAsUser"] == 10001
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for writable in ("/tmp", "/tmp/prometheus-multiproc", "/app/data"):
        assert "emptyDir" in volumes[mounts[writable]], writable
    assert {"requests", "limits"} <= set(container["resources"])
    assert container["envFrom"] == [{"secretRef": {"name": "gpu-pool-autoscaler"}}]
    assert pod["automountServiceAccountToken"] is False  # no Kubernetes API use without node-aware scale-in
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_two_replicas_on_postgresql_roll_and_spread(helm: str) -> None:
    docs = render(helm, *value_set("postgresql"))
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert "podAntiAffinity" in pod["affinity"]
    assert "/app/data" not in {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    egress_ports = {p["port"] for rule in one(docs, "NetworkPolicy")["spec"]["egress"] for p in rule["ports"]}
    assert egress_ports == {53, 443, 6443, 5432}
    ingress = one(docs, "NetworkPolicy")["spec"]["ingress"][0]
    assert ingress["from"][0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}


@pytest.mark.parametrize("args", [["--set", "replicaCount=2"],
                                  ["--set", "replicaCount=3", "--set", "store.persistence.enabled=true"]])
def test_several_replicas_without_postgresql_refuse_to_render(helm: str, args: list[str]) -> None:
    out = run_tool([helm, "template", "x", str(CHART), *args])
    assert out.returncode != 0 and out.stdout == ""
    assert "needs PostgreSQL" in out.stderr and "store.postgresql.enabled=true" in out.stderr, out.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["--set", "replicas=2"], "additional properties 'replicas' not allowed"),
    (["--set", "cloudIdentity.eks.rolearn=arn"], "additional properties 'rolearn' not allowed"),
    (["--set", "logFormat=xml"], "value must be one of 'text', 'json'"),
])
def test_values_schema_names_a_misspelt_or_wrong_value(helm: str, args: list[str], says: str) -> None:
    out = run_tool([helm, "template", "x", str(CHART), *args])
    assert out.returncode != 0 and says in out.stderr, out.stderr


def test_node_aware_scale_in_gets_its_rbac_and_in_cluster_view(helm: str) -> None:
    plain = render(helm)
    assert not [d for d in plain if d["kind"].startswith("ClusterRole")]
    docs = render(helm, *value_set("node-aware"))
    role, binding = one(docs, "ClusterRole"), one(docs, "ClusterRoleBinding")
    grants = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    dra = {(r, v) for r in ("resourceslices", "resourceclaims", "deviceclasses") for v in ("get", "list")}
    # victims: idle with the chart's forced_removal: false drains nothing: no eviction (tests/deploy/test_rbac.py)
    assert grants == {("nodes", "get"), ("nodes", "list"), ("nodes", "patch"), ("pods", "list")} | dra
    sa = one(docs, "ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": "gpu-autoscaler"}]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True and pod["serviceAccountName"] == sa["metadata"]["name"]
    config = config_of(docs)
    assert config["kubernetes"] == {"in_cluster": True}
    assert build_settings(config, env=ENV).pools["sim"].victims == "idle"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == one(docs, "PersistentVolumeClaim")[
        "metadata"]["name"]


@pytest.mark.parametrize(("values", "annotations", "pod_label"), [
    ("aks", {"azure.workload.identity/client-id": "11111111-2222-3333-4444-555555555555",
             "azure.workload.identity/tenant-id": "66666666-7777-8888-9999-000000000000"}, True),
    ("eks", {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/gpu-pool-autoscaler",
             "eks.amazonaws.com/sts-regional-endpoints": "true"}, False),
    ("gke", {"iam.gke.io/gcp-service-account": "gpu-pool-autoscaler@my-project.iam.gserviceaccount.com"}, False),
])
def test_each_clouds_workload_identity(helm: str, values: str, annotations: dict[str, str], pod_label: bool) -> None:
    docs = render(helm, *value_set(values))
    assert one(docs, "ServiceAccount")["metadata"]["annotations"] == annotations
    labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert (labels.get("azure.workload.identity/use") == "true") is pod_label
    assert "annotations" not in one(render(helm), "ServiceAccount")["metadata"]


def test_servicemonitor_job_is_the_one_the_self_rules_watch(helm: str) -> None:
    docs = render(helm, *value_set("default"))
    monitor, service = one(docs, "ServiceMonitor"), one(docs, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0] == {"port": "http", "path": "/metrics", "interval": "30s"}
    job = service["metadata"]["labels"][monitor["spec"]["jobLabel"]]  # prometheus-operator's job label
    renamed = render(helm, "--set", "fullnameOverride=other-name", *value_set("default"))
    assert one(renamed, "Service")["metadata"]["labels"][monitor["spec"]["jobLabel"]] == job
    rules = {r["alert"]: r for g in one(docs, "PrometheusRule")["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert f'up{{job="{job}"}} == 0' in rules["GPUAutoscalerDown"]["expr"]
    compose_jobs = [j["job_name"] for j in yaml.safe_load(
        (ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]]
    assert job in compose_jobs
    plain = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "servicemonitor.yaml").read_text())
    assert plain["spec"]["jobLabel"] == "app.kubernetes.io/name"


def test_prometheusrule_passes_promtool(helm: str, tmp_path: Path) -> None:
    promtool = require_binary(*PROMTOOL)
    rule = one(render(helm, *value_set("default")), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    names = {g["name"] for g in rule["spec"]["groups"]}
    assert names == {"gpu-autoscaler-self", "gpu-autoscaler", "gpu-autoscaler-demand"}
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    out = run_tool([promtool, "check", "rules", str(path)])
    expected = sum(len(g["rules"]) for g in rule["spec"]["groups"])
    assert out.returncode == 0 and f"SUCCESS: {expected} rules found" in out.stdout, out.stdout + out.stderr
    for name in COPIES:  # the sources too, one by one
        if name.endswith(".yml"):
            checked = run_tool([promtool, "check", "rules", str(CHART / "files" / name)])
            assert checked.returncode == 0, checked.stdout + checked.stderr


def test_prometheusrule_takes_the_dra_demand_rule_instead(helm: str, tmp_path: Path) -> None:
    """``demandSource: dra``: GPUDemandPending on the service's gauge (docs/dra.md) in place of kube-state-metrics'
    form, never both (they would fire twice); any other source is refused by the schema."""
    promtool = require_binary(*PROMTOOL)
    rule = one(render(helm, *value_set("default"), "--set", "prometheusRule.demandSource=dra"), "PrometheusRule")
    groups = {g["name"]: g for g in rule["spec"]["groups"]}
    assert set(groups) == {"gpu-autoscaler-self", "gpu-autoscaler", "gpu-autoscaler-dra-demand"}
    shipped = yaml.safe_load((ROOT / "deploy" / "prometheus" / "gpu-dra-rules.yml").read_text())["groups"]
    assert [groups["gpu-autoscaler-dra-demand"]] == shipped
    alerts = [r["alert"] for g in groups.values() for r in g["rules"] if "alert" in r]
    assert alerts.count("GPUDemandPending") == 1
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    out = run_tool([promtool, "check", "rules", str(path)])
    assert out.returncode == 0, out.stdout + out.stderr
    bad = run_tool([helm, "template", "x", str(CHART), *value_set("default"), "--set",
                    "prometheusRule.demandSource=dcgm"])
    assert bad.returncode != 0 and "demandSource" in bad.stderr, bad.stderr


def _exported_metric_names(tmp_path: Path) -> set[str]:
    """Every sample name the service's /metrics can show, read from a live app that made a decision."""
    client = make_app(f"sqlite:///{tmp_path}/m.db", FakeClock()).test_client()
    client.post("/webhook/alertmanager", json=am_payload(am_alert(fingerprint="m1")), headers=AUTH)
    names = set()
    for family in text_string_to_metric_families(client.get("/metrics").get_data(as_text=True)):
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(family.type, [""])
        names |= {family.name + s for s in suffixes}
    return names


def test_dashboard_queries_are_valid_promql_on_exported_metrics(helm: str, tmp_path: Path) -> None:
    promtool = require_binary(*PROMTOOL)
    cm = next(d for d in render(helm) if d["metadata"]["name"].endswith("-dashboard"))
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["gpu-pool-autoscaler-service.json"])
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for topic in ("outcome", "limits", "view age", "failures", "backoff", "no capacity"):
        assert topic in titles, topic
    exported = _exported_metric_names(tmp_path)
    used = {name for e in exprs for name in re.findall(r"\bgpu_autoscaler_\w+", e)}
    assert used and used <= exported, sorted(used - exported)
    assert all(re.search(r"\bgpu_autoscaler_\w+", e) for e in exprs)  # no panel on another exporter's metric
    variable = dashboard["templating"]["list"][1]["query"]["query"]
    assert re.findall(r"gpu_autoscaler_\w+", variable)[0] in exported
    # promtool parses each query (as a recording rule, Grafana's variables replaced)
    rules = [{"record": f"dashboard:q{i}", "expr": e.replace("$__rate_interval", "5m").replace("$pool", ".*")}
             for i, e in enumerate(exprs)]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = run_tool([promtool, "check", "rules", str(path)])
    assert out.returncode == 0 and f"SUCCESS: {len(rules)} rules found" in out.stdout, out.stdout + out.stderr


def test_notes_say_how_to_reach_the_page_and_point_alertmanager(helm: str) -> None:
    out = run_tool([helm, "install", "gpu-pool-autoscaler", str(CHART), "-n", "gpu-autoscaler", "--dry-run=client"])
    assert out.returncode == 0, out.stderr
    notes = out.stdout.split("NOTES:", 1)[1]
    assert "kubectl -n gpu-autoscaler port-forward service/gpu-pool-autoscaler 8080:8080" in notes
    assert "http://gpu-pool-autoscaler.gpu-autoscaler.svc:8080/webhook/alertmanager" in notes
    assert "AUTOSCALER_PASSWORD" in notes



def _pool_map(rule: dict[str, Any]) -> dict[str, str]:
    entries = [r["labels"] for g in rule["spec"]["groups"] for r in g["rules"]
               if r.get("record") == "autoscaler_pool_map"]
    return {e["cloud_pool"]: e["autoscaler_pool"] for e in entries}


@pytest.mark.parametrize("values", SETS)
def test_the_rules_pool_map_names_only_pools_the_config_has(helm: str, values: str) -> None:
    """The GPU rules put `autoscaler_pool` on each alert from the pool map: an entry naming a pool the release's
    config does not have (the example gpunp -> gpu-a100 of deploy/prometheus/) sends every alert of that cloud pool
    to `unknown_pool`."""
    docs = render(helm, *value_set(values), "--set", "prometheusRule.enabled=true")
    settings = build_settings(config_of(docs), env=ENV)
    assert set(_pool_map(one(docs, "PrometheusRule")).values()) <= set(settings.pools)


def test_the_pool_map_comes_from_values_and_passes_promtool(helm: str, tmp_path: Path) -> None:
    promtool = require_binary(*PROMTOOL)
    docs = render(helm, *value_set("aks"), "--set", "prometheusRule.enabled=true",
                  "--set", "prometheusRule.poolMap.gpunp=gpu-h100")
    rule = one(docs, "PrometheusRule")
    assert _pool_map(rule) == {"gpunp": "gpu-h100"} and "gpu-h100" in build_settings(config_of(docs), env=ENV).pools
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    out = run_tool([promtool, "check", "rules", str(path)])
    assert out.returncode == 0, out.stdout + out.stderr
    wrong = run_tool([helm, "template", "x", str(CHART), "--set", "prometheusRule.poolMap.gpunp=9"])
    assert wrong.returncode != 0 and "poolMap" in wrong.stderr


REMOTE = ["--set", "nodeAwareScaleIn.enabled=true",
          "--set", "remoteClusters[0].name=eus", "--set", "remoteClusters[0].secretName=eus-kubeconfig",
          "--set", "remoteClusters[0].context=prod-eus",
          "--set", "remoteClusters[1].name=wus", "--set", "remoteClusters[1].secretName=wus-kubeconfig",
          "--set", "remoteClusters[1].key=config",
          "--set-json", 'config.file.pools=[{"name": "h100-local", "provider": "simulated", "min": 0, "max": 4, '
                        '"cluster": "local", "node_selector": "pool=h100"}, {"name": "h100-eus", "provider": '
                        '"simulated", "min": 0, "max": 4, "cluster": "eus", "node_selector": "pool=h100"}]',
          "--set-json", "config.file.rules=[]"]


def test_remote_clusters_are_mounted_from_their_secrets_and_named_in_the_config(helm: str) -> None:
    """The fleet (docs/fleet.md): this cluster in-cluster as `local`, each remote cluster's kubeconfig Secret mounted
    read-only and named in `clusters:`; the service's own loader takes the rendered config."""
    docs = render(helm, *REMOTE)
    config = config_of(docs)
    assert "kubernetes" not in config
    assert config["clusters"] == [
        {"name": "local", "in_cluster": True},
        {"name": "eus", "kubeconfig": "/etc/autoscaler-clusters/eus/kubeconfig", "context": "prod-eus"},
        {"name": "wus", "kubeconfig": "/etc/autoscaler-clusters/wus/config"}]
    settings = build_settings(config, env=ENV)
    assert {name: spec.cluster for name, spec in settings.pools.items()} == {"h100-local": "local", "h100-eus": "eus"}
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["cluster-eus"]["secret"] == {"secretName": "eus-kubeconfig"}
    assert volumes["cluster-wus"]["secret"] == {"secretName": "wus-kubeconfig"}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["cluster-eus"] == {"name": "cluster-eus", "mountPath": "/etc/autoscaler-clusters/eus",
                                     "readOnly": True}
    assert one(docs, "ClusterRole")  # the local cluster's grants, as before; remote ones: deploy/kubernetes/remote


@pytest.mark.parametrize(("args", "says"), [
    (["--set", "remoteClusters[0].name=local", "--set", "remoteClusters[0].secretName=s"], "named twice"),
    (["--set", "remoteClusters[0].name=eus", "--set", "remoteClusters[0].secretName=s",
      "--set", "remoteClusters[1].name=eus", "--set", "remoteClusters[1].secretName=t"], "named twice"),
    (["--set", "remoteClusters[0].name=eus"], "secretName"),
    (["--set", "remoteClusters[0].name=E_US", "--set", "remoteClusters[0].secretName=s"], "does not match pattern"),
    (["--set", "remoteClusters[0].name=eus", "--set", "remoteClusters[0].secretName=s",
      "--set", "config.existingConfigMap=mine"], "write clusters: there"),
])
def test_remote_clusters_refuse_what_cannot_work(helm: str, args: list[str], says: str) -> None:
    out = run_tool([helm, "template", "x", str(CHART), *args])
    assert out.returncode != 0 and says in out.stderr, out.stderr
