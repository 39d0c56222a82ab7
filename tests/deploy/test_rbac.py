"""The ClusterRole the Helm chart renders holds exactly docs/rbac.md's rows for the config's pools (real ``helm
template``), and the service, driven against the fake API server with the config the chart rendered, asks for
nothing that role does not grant."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

import providers
from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from tests.support.chart import ENV, config_of, render
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.webhook_receiver import WebhookReceiver
from tests.support.rbac import Grant, asked, expected, granted, table
from tests.support import AUTH, FakeClock, am_alert, am_payload, config, post

ROOT = Path(__file__).resolve().parents[2]
LABELS = {"agentpool": "gpunp"}


def conditions(cfg: dict[str, Any], kube: bool) -> set[str]:
    """docs/rbac.md's conditions that hold for a config, read through the service's own settings."""
    raw_pools = {p["name"]: p for p in cfg.get("pools") or []}
    plain = {**copy.deepcopy(cfg), "rules": []}  # the chart's example rules name its example pool
    for pool in plain.get("pools") or []:
        pool.pop("repair", None)  # node repair's section (issue 36) is read from the file as written
    settings = build_settings(plain, env={**ENV, "AKS_RESOURCE_GROUP": "rg", "AKS_CLUSTER": "c"})
    out = {"kubernetes"} if kube else set()
    if cfg.get("provisioning_requests") is not None:
        out.add("provisioning_requests")
    for name, spec in settings.pools.items():
        if spec.victims == "movable":
            out.add("movable")
        if "repair" in raw_pools[name] or "repair" in (cfg.get("defaults") or {}):
            out.add("repair")
        removes = providers.capabilities(spec.provider, spec.provider_settings).removes_named_nodes
        if spec.forced_removal and removes:
            out.add("forced_removal")
    return out if kube else set()


def role_of(docs: list[dict[str, Any]]) -> set[Grant]:
    roles = [d for d in docs if d["kind"] == "ClusterRole"]
    assert len(roles) <= 1
    return granted(roles[0]) if roles else set()


def values_file(tmp_path: Path, values: dict[str, Any]) -> list[str]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return ["-f", str(path)]


def pool(**scale_in: Any) -> dict[str, Any]:
    return {"name": "gpu", "provider": "webhook", "min": 1, "max": 6, "node_selector": "agentpool=gpunp",
            "webhook": {"url": "http://hooks.example/scale", "initial_count": 3}, "scale_in": scale_in}


def test_the_table_is_the_one_the_docs_and_chart_speak_of() -> None:
    rows = table()
    assert {(r.group, r.resource) for r in rows} >= {("", "nodes"), ("", "pods"), ("", "pods/eviction"),
                                                     ("policy", "poddisruptionbudgets"),
                                                     ("resource.k8s.io", "resourceslices")}
    assert all(r.when <= {"kubernetes", "movable", "repair", "forced_removal", "provisioning_requests"} and r.when
               for r in rows), rows
    assert not any("delete" in r.verbs for r in rows)


CASES = [
    pytest.param({}, id="no-kubernetes-no-role"),
    pytest.param({"nodeAwareScaleIn": {"enabled": True}, "config": {"file": {"pools": [pool(victims="idle")]}}},
                 id="idle-chart-defaults-no-eviction"),
    pytest.param({"nodeAwareScaleIn": {"enabled": True},
                  "config": {"file": {"pools": [pool(victims="idle", forced_removal=True)]}}},
                 id="idle-forced-removal-evicts-lists-no-budgets"),
    pytest.param({"nodeAwareScaleIn": {"enabled": True}, "config": {"file": {"pools": [pool(victims="movable")]}}},
                 id="movable-evicts-and-lists-budgets"),
    pytest.param({"nodeAwareScaleIn": {"enabled": True},
                  "config": {"file": {"defaults": {"scale_in": {"victims": "movable"}}, "pools": [pool()]}}},
                 id="movable-inherited-from-defaults"),
    pytest.param({"nodeAwareScaleIn": {"enabled": True},
                  "config": {"file": {"pools": [{**pool(victims="idle"), "repair": {"max_unhealthy": 1}}]}}},
                 id="repair-drains"),
    pytest.param({"nodeAwareScaleIn": {"enabled": True},
                  "config": {"file": {"defaults": {"scale_in": {"forced_removal": True}},
                                      "pools": [pool(victims="cloud")]}}},
                 id="cloud-victims-forced-removal-from-defaults"),
    pytest.param({"config": {"file": {"kubernetes": {"in_cluster": True}, "pools": [pool(victims="idle")]}}},
                 id="kubernetes-written-in-the-config"),
    pytest.param({"nodeAwareScaleIn": {"enabled": True},
                  "config": {"file": {"provisioning_requests": {"booking": "10m"}, "pools": [pool(victims="idle")]}}},
                 id="provisioning-requests"),
]


@pytest.mark.parametrize("values", CASES)
def test_the_chart_grants_exactly_the_tables_rows_the_config_uses(helm: str, tmp_path: Path,
                                                                   values: dict[str, Any]) -> None:
    docs = render(helm, *values_file(tmp_path, values))
    cfg = config_of(docs)
    want = expected(conditions(cfg, kube="kubernetes" in cfg))
    assert role_of(docs) == want
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is bool(want)  # the token only where the API is called


@pytest.mark.parametrize("uses,rows", [
    ({}, {"kubernetes"}),
    ({"forcedRemoval": True}, {"kubernetes", "forced_removal"}),
    ({"movable": True}, {"kubernetes", "movable"}),
    ({"repair": True}, {"kubernetes", "repair"}),
    ({"provisioningRequests": True}, {"kubernetes", "provisioning_requests"}),
])
def test_with_an_existing_configmap_the_values_say_what_the_pools_use(helm: str, uses: dict[str, bool],
                                                                      rows: set[str]) -> None:
    args = ["--set", "config.existingConfigMap=mine", "--set", "nodeAwareScaleIn.enabled=true"]
    for key, on in uses.items():
        args += ["--set", f"nodeAwareScaleIn.uses.{key}={str(on).lower()}"]
    assert role_of(render(helm, *args)) == expected(rows)


def test_the_plain_manifests_grant_every_row_their_config_uses() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / "rbac.yaml").read_text()))
    cfg = yaml.safe_load(yaml.safe_load((ROOT / "deploy" / "kubernetes" / "configmap.yaml").read_text())["data"][
        "config.yaml"])
    needed = expected(conditions(cfg, kube=True))
    assert needed <= granted(docs[0]) == expected({"kubernetes", "movable", "repair", "forced_removal",
                                                   "provisioning_requests"})


# ---- what the code calls, against what the chart grants -----------------------------------------------------------
@pytest.fixture()
def kube() -> Iterator[FakeKube]:
    """Three nodes: a training Job's GPU pod on one, an inference replica on one, one idle but for a DaemonSet's."""
    with FakeKube() as fake:
        for i in range(3):
            fake.add_node(f"gpunp-{i}", LABELS, created=f"2026-11-0{i + 1}T00:00:00Z")
        fake.add_pod("train-7", "gpunp-0", gpus=4)
        fake.add_pod("infer-a", "gpunp-1", gpus=1, owner="ReplicaSet", labels={"app": "infer"})
        fake.add_pod("dcgm-2", "gpunp-2", owner="DaemonSet", namespace="gpu-operator")
        fake.add_budget("infer", {"app": "infer"}, allowed=1)
        yield fake


def drive(tmp_path: Path, helm_bin: str, kube: FakeKube, receiver: WebhookReceiver,
          values: dict[str, Any]) -> tuple[set[Grant], set[Grant], dict[str, Any]]:
    """Render the chart for ``values``, run the service on the config it rendered (against the fake API server
    instead of in-cluster), scale in by alert, force a busy node out by name, scale out, read the pool, run the
    reconciler: what the service asked for, what the role grants, and the forced removal's decision."""
    docs = render(helm_bin, *values_file(tmp_path, values))
    rendered = config_of(docs)
    for p in rendered["pools"]:
        p["webhook"]["url"] = receiver.url
    cfg = config(f"sqlite:///{tmp_path}/s.db", pools=rendered["pools"], defaults=rendered["defaults"],
                 kubernetes={"host": kube.url, "token": kube.token})
    clock = FakeClock()
    app = create_app(build_settings(cfg, env={}), clock=clock, startup_check=False)
    client = app.test_client()
    assert post(client, "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationLow"))).status_code == 200
    forced = post(client, "/api/v1/pools/gpu/scale", {"action": "scale_in", "nodes": ["gpunp-0"], "force": True})
    assert forced.status_code == 200, forced.get_data(as_text=True)
    clock.advance(3600)
    assert post(client, "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationHigh", "firing", "fp2"))
                ).status_code == 200
    assert client.get("/api/v1/pools/gpu", headers=AUTH).status_code == 200
    app.extensions["autoscaler_reconciler"].tick(clock())
    return asked(kube.log), role_of(docs), forced.get_json()


@pytest.mark.parametrize("scale_in,drains", [
    pytest.param({"victims": "idle"}, False, id="idle-chart-defaults"),
    pytest.param({"victims": "idle", "forced_removal": True}, True, id="idle-forced-removal"),
    pytest.param({"victims": "movable", "step": 2}, True, id="movable"),
])
def test_every_call_the_service_makes_is_granted_by_the_rendered_role(
        helm: str, tmp_path: Path, kube: FakeKube, receiver: WebhookReceiver, scale_in: dict[str, Any],
        drains: bool) -> None:
    values = {"nodeAwareScaleIn": {"enabled": True}, "config": {"file": {"pools": [pool(**scale_in)]}}}
    calls, role, forced = drive(tmp_path, helm, kube, receiver, values)
    assert calls - role == set(), f"the service called what the chart does not grant: {sorted(calls - role)}"
    assert {("", "nodes", "list"), ("", "nodes", "patch"), ("", "pods", "list")} <= calls  # it was exercised
    assert (("", "pods/eviction", "create") in calls) is drains
    if not drains:  # forced_removal: false keeps the busy node, and says why
        assert forced["outcome"] == "skipped_in_use" and "forced_removal: false" in forced["reason"], forced


def test_the_check_fails_when_the_code_calls_what_the_role_lacks(helm: str, tmp_path: Path, kube: FakeKube,
                                                                  receiver: WebhookReceiver) -> None:
    """The movable pool's calls against the idle pool's role: the drain's eviction and budget list stand out."""
    movable, _, _ = drive(tmp_path, helm, kube, receiver, {"nodeAwareScaleIn": {"enabled": True}, "config": {
        "file": {"pools": [pool(victims="movable", step=2)]}}})
    idle_role = role_of(render(helm, *values_file(tmp_path, {"nodeAwareScaleIn": {"enabled": True}, "config": {
        "file": {"pools": [pool(victims="idle")]}}})))
    assert movable - idle_role == {("", "pods/eviction", "create"), ("policy", "poddisruptionbudgets", "list")}
