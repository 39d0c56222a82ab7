"""``victims: movable`` end to end: the real service under gunicorn, a scale-in alert, the fake Kubernetes API the
real client reads, and the cloud that removes exactly the drained node: AKS (the fake ARM, deleteMachines) and EKS
(moto's Auto Scaling, TerminateInstanceInAutoScalingGroup). A node whose one pod is an inference replica is drained
and removed, nodes running a Job's pod stay; a budget that never allows the eviction leaves the node in place,
uncordoned, and the reason names the pod."""
from __future__ import annotations

import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

import pytest
import requests

from autoscaler.cluster.nodes import CORDON_ANNOTATION
from tests.support.cloud_stack import CLOUD_APP, AksCloud, KubeNode, service_config
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.moto_eks import AWS_ENV, MotoServer, asg_instances, create_node_group
from tests.support.servers import Service
from tests.support import AUTH, am_alert, am_payload

pytestmark = pytest.mark.slow
RULES = [{"match": {"alertname": "GPUUtilizationLow"}, "pool": "gpu", "action": "scale_in"}]
SCALE_IN = {"victims": "movable", "drain_timeout": "4s"}


class Cloud:
    """One pool on a fake cloud: its config, its nodes as Kubernetes lists them, and what is left of it."""

    def __init__(self, pool: dict[str, Any], nodes: list[KubeNode], env: dict[str, str], app: str,
                 left: Callable[[], list[str]]) -> None:
        self.pool, self.nodes, self.env, self.app, self.left = pool, nodes, env, app, left


def aks(stack: ExitStack, moto: MotoServer) -> Cloud:
    cloud = stack.enter_context(AksCloud(count=3))
    nodes = cloud.nodes()
    by_id = {n.provider_id: n.name for n in nodes}
    return Cloud(cloud.pool_config("gpu", min_size=1, scale_in=SCALE_IN), nodes, cloud.env, CLOUD_APP,
                 lambda: sorted(n.name for n in cloud.nodes() if n.provider_id in by_id))


def eks(stack: ExitStack, moto: MotoServer) -> Cloud:
    group = f"gpu-{uuid.uuid4().hex[:6]}"
    asg = create_node_group(moto.url, "movable", group, desired=3, min_size=1, max_size=6)
    label = {"eks.amazonaws.com/nodegroup": group}
    nodes = [KubeNode(f"ip-10-0-1-{i}.ec2.internal", f"aws:///{zone}/{instance}", label)
             for i, (instance, zone) in enumerate(asg_instances(moto.url, asg))]
    pool = {"name": "gpu", "provider": "eks", "min": 1, "max": 6, "scale_in": SCALE_IN,
            "eks": {"region": "us-east-1", "cluster": "movable", "nodegroup": group, "endpoint_url": moto.url,
                    "timeout": "2s", "retry_budget": "3s"}}
    instances = {n.provider_id.rpartition("/")[2]: n.name for n in nodes}
    return Cloud(pool, nodes, AWS_ENV, CLOUD_APP,
                 lambda: sorted(instances[i] for i, _ in asg_instances(moto.url, asg) if i in instances))


def seed(kube: FakeKube, nodes: list[KubeNode]) -> None:
    """A training Job's pod on the oldest and the newest node; one inference replica on the middle one."""
    for i, node in enumerate(nodes):
        kube.add_node(node.name, node.labels, provider_id=node.provider_id, created=f"2026-11-{10 + i:02d}T00:00:00Z")
        kube.add_pod(f"gpu-feature-discovery-{i}", node.name, namespace="gpu-operator", owner="DaemonSet")
    kube.add_pod("train-0", nodes[0].name, gpus=4)
    kube.add_pod("infer-1", nodes[1].name, gpus=1, owner="ReplicaSet", labels={"app": "infer"})
    kube.add_pod("train-2", nodes[2].name, gpus=4)


def scale_in(url: str) -> dict[str, Any]:
    resp = requests.post(f"{url}/webhook/alertmanager", json=am_payload(am_alert("GPUUtilizationLow")),
                         headers=AUTH, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()["decisions"][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("build", [pytest.param(aks, id="aks"), pytest.param(eks, id="eks")])
def test_the_movable_node_is_drained_and_removed_the_jobs_nodes_stay(build: Callable[..., Cloud], moto: MotoServer,
                                                                     tmp_path: Path) -> None:
    with ExitStack() as stack:
        cloud = build(stack, moto)
        kube = stack.enter_context(FakeKube())
        seed(kube, cloud.nodes)
        names = [n.name for n in cloud.nodes]
        cfg = service_config(tmp_path, [cloud.pool], RULES, kubernetes={"host": kube.url, "token": kube.token})
        with Service(cfg, tmp_path, workers=1, env=cloud.env, app=cloud.app) as svc:
            decision = scale_in(svc.url)
            events = requests.get(f"{svc.url}/api/v1/events", headers=AUTH, timeout=5).json()["events"]
        assert decision["outcome"] == "scaled" and (decision["from"], decision["to"]) == (3, 2), decision
        assert cloud.left() == sorted([names[0], names[2]])
        assert ("ml", "infer-1") not in kube.pods  # evicted through the Eviction API, not left to the cloud
        assert ("gpu-operator", "gpu-feature-discovery-1") in kube.pods  # a DaemonSet's pod is not evicted
        assert kube.calls["CREATE eviction"] == 1
        kept = {k["node"]: k["reason"] for k in events[0]["details"]["kept"]}
        assert events[0]["details"]["nodes"] == [names[1]]
        assert kept == {n: f"pod ml/train-{i} is owned by a Job (movable: ReplicaSet, StatefulSet): cannot move"
                        for i, n in ((0, names[0]), (2, names[2]))}


@pytest.mark.parametrize("build", [pytest.param(aks, id="aks"), pytest.param(eks, id="eks")])
def test_a_budget_that_never_allows_the_eviction_keeps_the_node(build: Callable[..., Cloud], moto: MotoServer,
                                                                tmp_path: Path) -> None:
    with ExitStack() as stack:
        cloud = build(stack, moto)
        kube = stack.enter_context(FakeKube())
        seed(kube, cloud.nodes)
        kube.pdb[("ml", "infer-1")] = 10**6  # the Eviction API answers 429 for good
        names = [n.name for n in cloud.nodes]
        cfg = service_config(tmp_path, [cloud.pool], RULES, kubernetes={"host": kube.url, "token": kube.token})
        with Service(cfg, tmp_path, workers=1, env=cloud.env, app=cloud.app) as svc:
            decision = scale_in(svc.url)
        assert decision["outcome"] == "failed" and decision["to"] == 3, decision
        assert "gave up after drain_timeout 4s: GPU pod ml/infer-1 blocks the drain" in decision["reason"]
        assert "disruption budget" in decision["reason"]
        assert cloud.left() == sorted(names)
        node = kube.nodes[names[1]]
        assert "unschedulable" not in node["spec"] and CORDON_ANNOTATION not in node["metadata"]["annotations"]
        assert ("ml", "infer-1") in kube.pods and kube.calls["CREATE eviction"] >= 2
