"""Each cloud's own shapes of "accepted, but the machines could not be created", through its fake, the real SDK and
the reconciler: the ``no_capacity`` event names the cloud's code, and the asked size is given back."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Flask

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from autoscaler.reconcile.loop import Reconciler
from providers.aks import AksProvider
from tests.support.fakes.arm import FakeArm
from tests.support.fakes.clients import AKS_CLUSTER, RG, SUB, AllowHttp, StaticCredential
from tests.support import AUTH, FakeClock, events, post

TOKEN = AUTH["Authorization"][7:]


def _app(tmp_path: Path, clock: FakeClock, provider: Any, cloud: str, section: dict[str, Any]) -> Flask:
    pools = [{"name": "gpu", "provider": cloud, "min": 0, "max": 8, cloud: section},
             {"name": "gpu-ondemand", "provider": "simulated", "min": 0, "max": 8}]
    settings = build_settings({"server": {"auth": {"bearer_tokens": [TOKEN]}},
                               "store": {"url": f"sqlite:///{tmp_path}/s.db"}, "pools": pools,
                               "groups": [{"name": "a100", "pools": ["gpu", "gpu-ondemand"]}]}, env={})
    return create_app(settings, clock=clock, providers={"gpu": provider(settings.pools["gpu"].provider_settings)},
                      startup_check=False)


def _aks_app(tmp_path: Path, clock: FakeClock, arm: FakeArm) -> Flask:
    fake = FakeClock()
    section = {"subscription_id": SUB, "resource_group": RG, "cluster": AKS_CLUSTER, "arm_endpoint": arm.url,
               "agent_pool": "gpunp"}
    return _app(tmp_path, clock, lambda s: AksProvider("gpu", s, credential=StaticCredential(arm.token),
                                                       clock=fake, 
                                                       per_call_policies=[AllowHttp()]), "aks", section)


def _tick(app: Flask, clock: FakeClock) -> list[tuple[str | None, str]]:
    reconciler: Reconciler = app.extensions["autoscaler_reconciler"]
    return [(d.pool, d.outcome.value) for d in reconciler.tick(clock()).decisions]


def test_aks_a_failed_agent_pool_with_an_allocation_error(tmp_path: Path) -> None:
    with FakeArm(SUB, RG, AKS_CLUSTER, "eyJarm.capacity.sig") as arm:
        arm.add_pool("gpunp", count=2)
        arm.stock_out("gpunp", 2)
        clock = FakeClock()
        app = _aks_app(tmp_path, clock, arm)
        client = app.test_client()
        asked = post(client, "/api/v1/pools/gpu/scale", {"target": 5}).get_json()
        assert (asked["outcome"], asked["from"], asked["to"]) == ("scaled", 2, 5)  # ARM accepted the PUT
        assert _tick(app, clock) == []  # the operation runs: Scaling, busy
        arm.finish_operations()  # it ends Failed: ZonalAllocationFailed, 2 machines of 5
        assert arm.pools["gpunp"]["provisioningState"] == "Failed"
        clock.advance(30)
        assert _tick(app, clock) == [("gpu", "no_capacity"), ("gpu-ondemand", "scaled")]
        short = events(client, pool="gpu")[0]
        assert (short["from"], short["to"]) == (5, 2)
        assert {k: short["details"][k] for k in ("code", "asked", "delivered", "kind")} == {
            "code": "ZonalAllocationFailed", "asked": 5, "delivered": 2, "kind": "capacity"}
        assert short["details"]["message"].startswith("Allocation failed. We do not have sufficient capacity")
        given_back = arm.calls("PUT")[-1]
        assert given_back.json()["properties"]["count"] == 2 and given_back.headers.get("if-match")
        assert arm.pools["gpunp"]["count"] == 2
        fallback = events(client, pool="gpu-ondemand")[0]
        assert (fallback["from"], fallback["to"], fallback["details"]["group"]) == (0, 3, "a100")


def test_aks_a_failed_pool_for_another_reason_is_no_shortfall(tmp_path: Path) -> None:
    with FakeArm(SUB, RG, AKS_CLUSTER, "eyJarm.capacity.sig") as arm:
        arm.add_pool("gpunp", count=2)
        arm.stock_out("gpunp", 2, code="InternalOperationError", message="An internal error occurred.")
        clock = FakeClock()
        app = _aks_app(tmp_path, clock, arm)
        post(app.test_client(), "/api/v1/pools/gpu/scale", {"target": 4})
        arm.finish_operations()
        clock.advance(30)
        assert _tick(app, clock) == []
        assert arm.pools["gpunp"]["count"] == 4  # nothing given back
        assert not arm.calls("GET", kind="machines")  # the machines are listed only for a capacity or quota code


def test_gke_managed_instances_that_cannot_be_created(tmp_path: Path) -> None:
    from google.oauth2.credentials import Credentials

    from providers.gke import GkeProvider
    from tests.support.fakes.gke_api import FakeGke

    with FakeGke("ya29.capacity", per_zone=1) as gke:
        for zone in gke.migs:
            gke.stock_out(zone, 1)
        clock = FakeClock()
        section = {"project": gke.project, "location": gke.location, "cluster": gke.cluster,
                   "node_pool": gke.node_pool, "api_endpoint": gke.url, "retry_budget": 1}
        app = _app(tmp_path, clock, lambda s: GkeProvider("gpu", s, credentials=Credentials(token=gke.token),
                                                          clock=FakeClock()), "gke", section)
        client = app.test_client()
        asked = post(client, "/api/v1/pools/gpu/scale", {"target": 4}).get_json()
        assert (asked["outcome"], asked["from"], asked["to"]) == ("scaled", 2, 4)
        assert _tick(app, clock) == []  # the setSize operation runs
        gke.settle()
        clock.advance(30)
        assert _tick(app, clock) == [("gpu", "no_capacity"), ("gpu-ondemand", "scaled")]
        short = events(client, pool="gpu")[0]
        assert {k: short["details"][k] for k in ("code", "asked", "delivered", "kind")} == {
            "code": "ZONE_RESOURCE_POOL_EXHAUSTED", "asked": 4, "delivered": 2, "kind": "capacity"}
        assert (short["from"], short["to"]) == (4, 2)
        assert [m.target_size for m in gke.migs.values()] == [1, 1]  # setSize 1 per zone: given back
        assert all(not m.failing for m in gke.migs.values())


def test_eks_launch_failures_for_capacity(tmp_path: Path, monkeypatch: Any) -> None:
    from providers.eks import EksProvider
    from tests.support.fakes.moto_eks import AWS_ENV, MotoServer, asg_instances, create_node_group, stock_out

    for key, value in AWS_ENV.items():
        monkeypatch.setenv(key, value)
    with MotoServer(tmp_path) as moto:
        asg = create_node_group(moto.url, "prod", "gpu-a10", desired=2, max_size=8)
        stock_out(moto.url, asg, 2)
        clock = FakeClock()
        section = {"region": "us-east-1", "cluster": "prod", "nodegroup": "gpu-a10", "endpoint_url": moto.url,
                   "retry_budget": 1}
        app = _app(tmp_path, clock, lambda s: EksProvider("gpu", s, clock=FakeClock()), "eks", section)
        client = app.test_client()
        asked = post(client, "/api/v1/pools/gpu/scale", {"target": 5}).get_json()
        assert (asked["outcome"], asked["from"], asked["to"]) == ("scaled", 2, 5)
        clock.advance(30)
        assert _tick(app, clock) == [("gpu", "no_capacity"), ("gpu-ondemand", "scaled")]
        short = events(client, pool="gpu")[0]
        assert {k: short["details"][k] for k in ("code", "asked", "delivered", "kind")} == {
            "code": "InsufficientInstanceCapacity", "asked": 5, "delivered": 2, "kind": "capacity"}
        assert "do not have sufficient g5.xlarge capacity" in short["details"]["message"]
        assert (short["from"], short["to"]) == (5, 2)
        assert len(asg_instances(moto.url, asg)) == 2


def test_eks_quota_named_by_a_scaling_activity(tmp_path: Path, monkeypatch: Any) -> None:
    from providers.eks import EksProvider
    from tests.support.fakes.moto_eks import AWS_ENV, MotoServer, create_node_group, stock_out

    for key, value in AWS_ENV.items():
        monkeypatch.setenv(key, value)
    with MotoServer(tmp_path) as moto:
        asg = create_node_group(moto.url, "prod", "gpu-a10", desired=1, max_size=8, health_issues=False)
        stock_out(moto.url, asg, 1, error="VcpuLimitExceeded - You have requested more vCPU capacity than your "
                                          "current vCPU limit of 32 allows for the instance bucket that the "
                                          "specified instance type belongs to.")
        clock = FakeClock()
        section = {"region": "us-east-1", "cluster": "prod", "nodegroup": "gpu-a10", "endpoint_url": moto.url,
                   "retry_budget": 1}
        app = _app(tmp_path, clock, lambda s: EksProvider("gpu", s, clock=FakeClock()), "eks", section)
        client = app.test_client()
        post(client, "/api/v1/pools/gpu/scale", {"target": 3})
        clock.advance(30)
        assert _tick(app, clock) == [("gpu", "no_capacity"), ("gpu-ondemand", "scaled")]
        short = events(client, pool="gpu")[0]
        assert (short["details"]["code"], short["details"]["kind"]) == ("VcpuLimitExceeded", "quota")
        assert short["details"]["message"].startswith("Could not launch On-Demand Instances. VcpuLimitExceeded")


def test_ack_a_scale_out_task_failed_for_no_stock(tmp_path: Path) -> None:
    from providers.ack import AckProvider
    from tests.support.fakes.ack_api import FakeAckApi, Pool
    from tests.support.fakes.clients import ACK_CLUSTER, NODEPOOL, static_credential

    api = FakeAckApi(pools={(ACK_CLUSTER, NODEPOOL): Pool(desired_size=2, total_nodes=2)}).start()
    try:
        api.stock_out(ACK_CLUSTER, NODEPOOL, 2)
        clock = FakeClock()
        section = {"cluster_id": ACK_CLUSTER, "nodepool_id": NODEPOOL, "region_id": "cn-hangzhou",
                   "endpoint": api.endpoint, "protocol": "http", "timeout": 2, "retry_budget": 5}
        app = _app(tmp_path, clock, lambda s: AckProvider("gpu", s, credential=static_credential(),
                                                          clock=FakeClock()), "ack", section)
        client = app.test_client()
        asked = post(client, "/api/v1/pools/gpu/scale", {"target": 4}).get_json()
        assert (asked["outcome"], asked["from"], asked["to"]) == ("scaled", 2, 4)
        assert _tick(app, clock) == []  # scaling
        api.settle()  # the task fails: OperationDenied.NoStock, 2 nodes of 4
        clock.advance(30)
        assert _tick(app, clock) == [("gpu", "no_capacity"), ("gpu-ondemand", "scaled")]
        short = events(client, pool="gpu")[0]
        assert {k: short["details"][k] for k in ("code", "asked", "delivered", "kind")} == {
            "code": "OperationDenied.NoStock", "asked": 4, "delivered": 2, "kind": "capacity"}
        assert api.pools[(ACK_CLUSTER, NODEPOOL)].desired_size == 2  # given back
        assert any(r.path == f"/clusters/{ACK_CLUSTER}/tasks" for r in api.requests)
    finally:
        api.stop()


def test_kubernetes_nodes_that_never_registered_within_provision_time(tmp_path: Path) -> None:
    from datetime import datetime, timezone

    from tests.support.fakes.kube import FakeKube
    from tests.support import config

    clock = FakeClock()
    with FakeKube() as kube:
        created = datetime.fromtimestamp(clock() - 86400, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        kube.add_node("gpunp-0", {"agentpool": "gpunp"}, created=created)
        pools = [{"name": "gpu", "provider": "simulated", "min": 0, "max": 8, "node_selector": "agentpool=gpunp",
                  "provision_time": "5m", "simulated": {"initial_count": 1}},
                 {"name": "gpu-ondemand", "provider": "simulated", "min": 0, "max": 8}]
        cfg = config(f"sqlite:///{tmp_path}/k.db", pools=pools, rules=[], kubernetes={"host": kube.url,
                                                                                      "token": kube.token},
                     groups=[{"name": "a100", "pools": ["gpu", "gpu-ondemand"]}])
        app = create_app(build_settings(cfg, env={}), clock=clock, startup_check=False)
        client = app.test_client()
        assert post(client, "/api/v1/pools/gpu/scale", {"target": 3}).get_json()["outcome"] == "scaled"
        clock.advance(120)
        assert _tick(app, clock) == []  # within provision_time: booting
        clock.advance(200)
        assert _tick(app, clock) == [("gpu", "no_capacity"), ("gpu-ondemand", "scaled")]
        short = events(client, pool="gpu")[0]
        assert {k: short["details"][k] for k in ("code", "asked", "delivered")} == {
            "code": "NodesNotReadyInTime", "asked": 3, "delivered": 1}
        assert (short["from"], short["to"]) == (3, 3)  # which machine is missing is the cloud's to say: kept
        assert "2 of 3 node(s) asked for have not registered Ready" in short["details"]["message"]
        clock.advance(30)
        assert _tick(app, clock) == []  # noticed once per scale-out


def test_aks_a_put_refused_for_a_cores_quota_falls_back_in_the_same_decision(tmp_path: Path) -> None:
    from tests.support import am_alert, am_payload

    with FakeArm(SUB, RG, AKS_CLUSTER, "eyJarm.capacity.sig") as arm:
        arm.add_pool("gpunp", count=2)
        arm.fail_next(400, code="OperationNotAllowed", method="PUT",
                      message="Operation could not be completed as it results in exceeding approved "
                              "standardNCADSH100v5Family Cores quota. Current Limit: 80, Current Usage: 80.")
        clock = FakeClock()
        app = _aks_app(tmp_path, clock, arm)
        client = app.test_client()
        alert = am_alert("GPUBusy", autoscaler_pool="a100", autoscaler_action="scale_out", autoscaler_step="2")
        answer = post(client, "/webhook/alertmanager", am_payload(alert))
        assert answer.status_code == 200  # not a failure a retry of the same pool could fix: the group moved on
        [decision] = answer.get_json()["decisions"]
        assert (decision["pool"], decision["outcome"], decision["from"], decision["to"]) == ("gpu", "no_capacity", 2, 2)
        story = [(e["pool"], e["outcome"], e["from"], e["to"]) for e in reversed(events(client))]
        assert story == [("gpu", "no_capacity", 2, 2), ("gpu-ondemand", "scaled", 0, 2)]
        short = events(client, pool="gpu")[0]
        assert (short["details"]["code"], short["details"]["asked"], short["details"]["delivered"]) == (
            "OperationNotAllowed", 4, 2)
        pool = client.get("/api/v1/pools/gpu", headers=AUTH).get_json()
        assert pool["short_until"] is not None and pool["backoff_remaining_s"] == 0 and pool["failures"] == 0
        assert arm.pools["gpunp"]["count"] == 2


def test_gke_the_node_pool_condition_when_the_instances_do_not_say(tmp_path: Path) -> None:
    from google.oauth2.credentials import Credentials

    from providers.gke import GkeProvider
    from tests.support.fakes.gke_api import FakeGke

    with FakeGke("ya29.capacity", per_zone=1) as gke:
        for zone in gke.migs:
            gke.stock_out(zone, 1)
        gke.quiet_instances = True
        gke.conditions = [{"code": "GCE_QUOTA_EXCEEDED", "message": "Quota 'NVIDIA_L4_GPUS' exceeded. Limit: 2.0 "
                                                                    "in region us-central1."}]
        clock = FakeClock()
        section = {"project": gke.project, "location": gke.location, "cluster": gke.cluster,
                   "node_pool": gke.node_pool, "api_endpoint": gke.url, "retry_budget": 1}
        app = _app(tmp_path, clock, lambda s: GkeProvider("gpu", s, credentials=Credentials(token=gke.token),
                                                          clock=FakeClock()), "gke", section)
        client = app.test_client()
        post(client, "/api/v1/pools/gpu/scale", {"target": 4})
        gke.settle()
        clock.advance(30)
        assert _tick(app, clock) == [("gpu", "no_capacity"), ("gpu-ondemand", "scaled")]
        short = events(client, pool="gpu")[0]
        assert {k: short["details"][k] for k in ("code", "asked", "delivered", "kind")} == {
            "code": "GCE_QUOTA_EXCEEDED", "asked": 4, "delivered": 2, "kind": "quota"}
