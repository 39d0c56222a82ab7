"""The shipped deploy files, checked offline with the tools their users run."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.load import build_settings
from tests.support.pipeline import ALERTMANAGER, AMTOOL, PROMTOOL, require_binary

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
BIN = Path(sys.executable).parent


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_compose_file_matches_the_compose_spec() -> None:
    out = _run([str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec",
                str(ROOT / "docker-compose.yml")])
    assert out.returncode == 0, out.stdout + out.stderr
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert {"autoscaler", "influxdb", "grafana", "prometheus", "alertmanager", "dcgm-exporter"} <= set(services)
    assert services["dcgm-exporter"]["profiles"] == ["gpu"]
    for name, svc in services.items():  # every file a service mounts from the repo exists
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name}: {source} does not exist"


def test_compose_autoscaler_config_is_valid() -> None:
    raw = yaml.safe_load((DEPLOY / "compose" / "config.yaml").read_text())
    compose_env = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["autoscaler"]["environment"]
    settings = build_settings(raw, env={name: "x" * 12 for name in compose_env})  # what compose passes, no more
    assert settings.config.influxdb is not None
    assert settings.config.server.auth.basic  # a person can open the status page


def test_compose_prometheus_mounts_every_rule_file_it_loads() -> None:
    prometheus = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["prometheus"]
    config_path = next(a.split("=", 1)[1] for a in prometheus["command"] if a.startswith("--config.file="))
    mounts = {v.split(":")[1]: ROOT / v.split(":")[0] for v in prometheus["volumes"] if v.startswith("./")}

    def host_path(inside: str) -> Path:  # a path in the container, through compose's bind mounts
        best = max((m for m in mounts if inside == m or inside.startswith(m.rstrip("/") + "/")), key=len)
        return mounts[best] / Path(inside).relative_to(best) if inside != best else mounts[best]

    config = yaml.safe_load(host_path(config_path).read_text())
    loaded = {Path(config_path).parent.joinpath(f).as_posix() for f in config["rule_files"]}
    assert {host_path(f).name for f in loaded} >= {"gpu-autoscaler-rules.yml", "autoscaler-self-rules.yml"}
    for inside in loaded:
        assert host_path(inside).is_file(), f"prometheus.yml loads {inside}, which compose does not mount"
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    self_rules = (DEPLOY / "prometheus" / "autoscaler-self-rules.yml").read_text()
    watched = re.findall(r'up\{job="([^"]+)"\}', self_rules)
    assert watched and set(watched) <= set(jobs)
    assert jobs[watched[0]]["static_configs"][0]["targets"] == ["autoscaler:8080"]


def test_one_image_name_everywhere() -> None:
    from autoscaler import __version__
    image = f"gpu-pool-autoscaler:{__version__}"
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["autoscaler"]
    deployment = _docs(K8S / "deployment.yaml")[0]["spec"]["template"]["spec"]["containers"][0]
    chart = yaml.safe_load((DEPLOY / "helm" / "gpu-pool-autoscaler" / "Chart.yaml").read_text())
    values = yaml.safe_load((DEPLOY / "helm" / "gpu-pool-autoscaler" / "values.yaml").read_text())
    assert compose["image"] == deployment["image"] == f"{values['image']['repository']}:{chart['appVersion']}" == image
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^IMAGE \?= gpu-pool-autoscaler:\$\(VERSION\)$", makefile, re.M)
    assert (re.search(r"^VERSION := .*__version__", makefile, re.M)
            and "docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) ." in makefile)


def test_applying_the_manifests_folder_never_touches_the_secret() -> None:
    docs = [d for p in sorted(K8S.glob("*.yaml")) for d in _docs(p)]
    assert "Secret" not in {d["kind"] for d in docs}  # `kubectl apply -f deploy/kubernetes/` keeps the real one
    assert docs[0]["kind"] == "Namespace" and docs[0]["metadata"]["name"] == "gpu-autoscaler"  # created first
    assert {d["metadata"].get("namespace", "gpu-autoscaler") for d in docs} == {"gpu-autoscaler"}
    assert (DEPLOY / "secret.example.yaml").exists()


def test_docs_use_one_namespace() -> None:
    """Service URLs and workload-identity subjects name gpu-autoscaler wherever people copy them from."""
    texts = {p: p.read_text() for p in [ROOT / "README.md", DEPLOY / "README.md", *sorted((ROOT / "docs").glob("*.md")),
                                         DEPLOY / "alertmanager" / "alertmanager.yml"]}
    for path, text in texts.items():
        for ns in re.findall(r"gpu-pool-autoscaler\.([a-z0-9-]+)\.svc", text):
            assert ns == "gpu-autoscaler", f"{path.name}: gpu-pool-autoscaler.{ns}.svc"
        for ns in re.findall(r"system:serviceaccount:([a-z0-9-]+):", text):
            assert ns == "gpu-autoscaler", f"{path.name}: system:serviceaccount:{ns}:"
        for ns in re.findall(r"(?:kubectl|helm)[^\n]*?(?:-n|--namespace)[ =]([a-z0-9-]+)", text):
            assert ns == "gpu-autoscaler", f"{path.name}: -n {ns}"


def test_prometheus_config_and_rules_pass_promtool() -> None:
    promtool = require_binary(*PROMTOOL)
    config = _run([promtool, "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")])
    assert config.returncode == 0, config.stdout + config.stderr
    assert "SUCCESS: 4 rule files found" in config.stdout  # scaling, demand, static nodes and the service's own rules
    rules = _run([promtool, "check", "rules", str(DEPLOY / "prometheus" / "gpu-autoscaler-rules.yml")])
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS: 9 rules found" in rules.stdout  # map, node pools (2), per GPU, per pool (2), 3 alerts (repair)
    demand = _run([promtool, "check", "rules", str(DEPLOY / "prometheus" / "gpu-demand-rules.yml")])
    assert demand.returncode == 0 and "SUCCESS: 8 rules found" in demand.stdout, demand.stdout + demand.stderr


def _by_name(path: Path) -> dict[str, dict[str, Any]]:
    """Every rule of a rule file by its alert or record name (a map record may repeat: the last one wins)."""
    return {r.get("alert") or r["record"]: r for g in _docs(path)[0]["groups"] for r in g["rules"]}


def test_demand_rule_sends_pending_gpus_as_its_value() -> None:
    rules = _by_name(DEPLOY / "prometheus" / "gpu-demand-rules.yml")
    rule = rules["GPUDemandPending"]
    assert rule["expr"] == "autoscaler_pool:gpus_pending:sum > 0"
    assert 'kube_pod_status_phase{phase="Pending"}' in rules["namespace_pod:autoscaler_unschedulable:info"]["expr"]
    assert 'resource="nvidia_com_gpu"' in rules["namespace_pod:autoscaler_gpu_requests:sum"]["expr"]
    assert rule["labels"]["autoscaler_action"] == "scale_out" and rule["annotations"]["value"] == "{{ $value }}"


def test_shipped_rules_route_to_the_autoscaler() -> None:
    rules = _by_name(DEPLOY / "prometheus" / "gpu-autoscaler-rules.yml")
    high, low = rules["GPUUtilizationHigh"], rules["GPUUtilizationLow"]
    assert "sum by (autoscaler_pool)" in rules["autoscaler_pool:gpu_utilization:avg"]["expr"]
    assert "kube_node_labels" in rules["node:autoscaler_cloud_pool:info"]["expr"]
    assert high["expr"] == "autoscaler_pool:gpu_utilization:avg > 80" and high["for"] == "2m"
    assert low["expr"] == "autoscaler_pool:gpu_utilization:avg < 20" and low["for"] == "15m"
    assert (high["labels"]["autoscaler_action"], low["labels"]["autoscaler_action"]) == ("scale_out", "scale_in")
    assert high["annotations"]["value"] == "{{ $value }}"


def test_alertmanager_config_passes_amtool() -> None:
    require_binary(*ALERTMANAGER)
    amtool = require_binary(*AMTOOL)
    out = _run([amtool, "check-config", str(DEPLOY / "alertmanager" / "alertmanager.yml")])
    assert out.returncode == 0, out.stdout + out.stderr
    config = yaml.safe_load((DEPLOY / "alertmanager" / "alertmanager.yml").read_text())
    hook = config["receivers"][0]["webhook_configs"][0]
    assert hook["url"] == "http://autoscaler:8080/webhook/alertmanager" and hook["send_resolved"] is True
    assert "credentials_file" in hook["http_config"]["authorization"]
    assert config["route"]["group_by"] == ["alertname", "autoscaler_pool"]


def test_kubernetes_manifests_validate_strictly() -> None:
    files = sorted(str(p) for p in K8S.glob("*.yaml") if p.name != "servicemonitor.yaml")
    out = _run([str(BIN / "kubernetes-validate"), "--strict", "--quiet", *files, str(DEPLOY / "secret.example.yaml")])
    assert out.returncode == 0, out.stdout + out.stderr
    kinds = {d["kind"] for f in files for d in _docs(Path(f))}
    assert kinds == {"Namespace", "Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "ServiceAccount",
                     "ClusterRole", "ClusterRoleBinding", "NetworkPolicy"}


def test_rbac_grants_what_node_aware_scale_in_calls_and_no_more() -> None:
    role, binding = _docs(K8S / "rbac.yaml")
    grants = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
              for v in rule["verbs"]}
    assert grants == {("", "nodes", "get"), ("", "nodes", "list"), ("", "nodes", "patch"), ("", "pods", "list"),
                      ("", "pods/eviction", "create"), ("policy", "poddisruptionbudgets", "list"),  # never delete
                      *{("resource.k8s.io", r, v) for r in ("resourceslices", "resourceclaims", "deviceclasses")
                        for v in ("get", "list")},  # GPUs through DRA (docs/dra.md)
                      ("autoscaling.x-k8s.io", "provisioningrequests", "get"),  # all or nothing (docs/gang.md)
                      ("autoscaling.x-k8s.io", "provisioningrequests", "list"),
                      ("autoscaling.x-k8s.io", "provisioningrequests/status", "update"),
                      ("autoscaling.x-k8s.io", "provisioningrequests/status", "patch"), ("", "podtemplates", "get"),
                      ("resource.k8s.io", "resourceclaimtemplates", "get")}
    sa = _docs(K8S / "serviceaccount.yaml")[0]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": sa["metadata"]["namespace"]}]


def test_deployment_is_hardened_and_wired() -> None:
    deployment = _docs(K8S / "deployment.yaml")[0]
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == 2
    assert pod["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert {"requests", "limits"} <= set(container["resources"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["AUTOSCALER_CONFIG"] == "/etc/autoscaler/config.yaml"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert "emptyDir" in volumes[mounts[env["PROMETHEUS_MULTIPROC_DIR"]]]
    assert volumes[mounts["/etc/autoscaler"]]["configMap"]["name"] == "gpu-pool-autoscaler"
    sa = _docs(K8S / "serviceaccount.yaml")[0]
    assert pod["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    assert "azure.workload.identity/client-id" in sa["metadata"]["annotations"]


def test_servicemonitor_has_the_fields_prometheus_operator_needs() -> None:
    monitor = _docs(K8S / "servicemonitor.yaml")[0]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["kind"] == "ServiceMonitor"
    service = _docs(K8S / "service.yaml")[0]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    ports = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in ports and endpoint["path"] == "/metrics"


def test_configmap_config_passes_our_validation() -> None:
    data = _docs(K8S / "configmap.yaml")[0]["data"]
    settings = build_settings(yaml.safe_load(data["config.yaml"]),
                              env={"AUTOSCALER_TOKEN": "t", "AUTOSCALER_PASSWORD": "p" * 12,
                                   "DATABASE_URL": "postgresql://u:p@db:5432/a",
                                   "AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000000",
                                   "AKS_RESOURCE_GROUP": "rg-gpu", "AKS_CLUSTER": "prod"})
    assert settings.config.store.url.startswith("postgresql://")
    assert settings.pools["gpu-h100"].victims == "idle"  # in-cluster, with rbac.yaml: node-aware scale-in
    secret_keys = set(_docs(DEPLOY / "secret.example.yaml")[0]["stringData"])
    assert {"AUTOSCALER_TOKEN", "AUTOSCALER_PASSWORD", "DATABASE_URL"} <= secret_keys


def test_grafana_provisioning_parses_and_points_at_the_autoscaler() -> None:
    grafana = DEPLOY / "grafana"
    contact = _docs(grafana / "provisioning" / "alerting" / "contact-points.yml")[0]
    receiver = contact["contactPoints"][0]["receivers"][0]
    assert receiver["type"] == "webhook" and receiver["settings"]["url"].endswith("/webhook/grafana")
    rules = _docs(grafana / "provisioning" / "alerting" / "alert-rules.yml")[0]["groups"][0]["rules"]
    assert {r["labels"]["autoscaler_action"] for r in rules} == {"scale_out", "scale_in", "repair"}
    queries = {r["title"]: r["data"][0]["model"]["expr"] for r in rules}
    assert all("DCGM_FI_DEV_GPU_UTIL" in queries[t] and "kube_node_labels" in queries[t]
               for t in ("GPUUtilizationHigh", "GPUUtilizationLow"))
    assert "kube_pod_status_phase" in queries["GPUDemandPending"]  # same queries as the Prometheus rules: test_rules
    policy = _docs(grafana / "provisioning" / "alerting" / "policies.yml")[0]["policies"][0]
    scaling = [r for r in policy["routes"] if r["receiver"] == contact["contactPoints"][0]["name"]]
    assert [r["object_matchers"] for r in scaling] == [[["autoscaler_action", "=~", "scale_out|scale_in"]],
                                                       [["autoscaler_action", "=", "repair"]]]  # the repair rule's
    assert policy["receiver"] == "oncall"  # the rest, the self-alerts first of all, go to people (test_alert_routing)
    dashboard = json.loads((grafana / "dashboards" / "gpu-autoscaler.json").read_text())
    assert "autoscaler_event" in dashboard["annotations"]["list"][0]["target"]["query"]
    assert any("DCGM_FI_DEV_GPU_UTIL" in t["expr"] for p in dashboard["panels"] for t in p["targets"])


@pytest.mark.parametrize("needle", ["USER 10001", "HEALTHCHECK", "/healthz", "app:app", "python:3.11-slim"])
def test_dockerfile_has(needle: str) -> None:
    assert needle in (ROOT / "Dockerfile").read_text()
