"""autoscaler/cluster/kube.py: the real kubernetes client against the fake API server."""
from __future__ import annotations

import re
import time
from decimal import Decimal
from typing import Any, Iterator

import pytest
import yaml
from pydantic import ValidationError

from autoscaler.config import KubernetesConfig
from autoscaler.cluster.nodes import CORDON_ANNOTATION, ClusterError, GpuPod
from autoscaler.cluster.kube import KubeCluster
from tests.support.fakes.kube import FakeKube

POOL = {"kubernetes.azure.com/agentpool": "gpunp"}


@pytest.fixture()
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        fake.add_node("aks-gpunp-1-vmss000000", POOL, created="2026-11-20T10:00:00Z", provider_id="azure:///vm/0")
        fake.add_node("aks-gpunp-1-vmss000001", POOL, created="2026-11-21T10:00:00Z")
        fake.add_node("aks-cpu-1-vmss000000", {"kubernetes.azure.com/agentpool": "cpu"})
        fake.add_pod("train-7", "aks-gpunp-1-vmss000000", gpus=8)
        fake.add_pod("done", "aks-gpunp-1-vmss000001", gpus=8, phase="Succeeded")
        fake.add_pod("dcgm-x", "aks-gpunp-1-vmss000001", gpus=1, owner="DaemonSet", namespace="gpu-operator")
        yield fake


def cluster(fake: FakeKube, token: str | None = None) -> KubeCluster:
    return KubeCluster(KubernetesConfig(host=fake.url, token=token or fake.token, verify_ssl=False))


def test_nodes_by_label_with_their_gpu_pods(kube: FakeKube) -> None:
    views = {v.name: v for v in cluster(kube).nodes(POOL)}
    assert sorted(views) == ["aks-gpunp-1-vmss000000", "aks-gpunp-1-vmss000001"]
    busy, idle = views["aks-gpunp-1-vmss000000"], views["aks-gpunp-1-vmss000001"]
    assert busy.gpu_pods == (GpuPod("ml", "train-7", "nvidia.com/gpu", 8),) and busy.provider_id == "azure:///vm/0"
    assert idle.gpu_pods == () and idle.ready and idle.gpu_allocatable == 8
    # one node list by selector, one list of the cluster's unfinished pods for the whole pool
    assert kube.calls == {"LIST nodes": 1, "LIST pods": 1}


def test_cordon_and_uncordon_with_our_annotation(kube: FakeKube) -> None:
    c = cluster(kube)
    c.cordon("aks-gpunp-1-vmss000001", "worker-1", 1_795_168_800.0)
    raw = kube.nodes["aks-gpunp-1-vmss000001"]
    assert raw["spec"]["unschedulable"] is True
    assert raw["metadata"]["annotations"][CORDON_ANNOTATION] == "worker-1@2026-11-20T10:00:00Z"
    view = c.node("aks-gpunp-1-vmss000001")
    assert view is not None and view.cordoned and view.cordoned_by_us == 1_795_168_800.0
    c.uncordon("aks-gpunp-1-vmss000001")
    assert "unschedulable" not in raw["spec"] and CORDON_ANNOTATION not in raw["metadata"]["annotations"]


def test_pod_landing_during_cordon_is_seen_on_reread(kube: FakeKube) -> None:
    kube.on_cordon = lambda name: kube.add_pod("late", name, gpus=1, resource="nvidia.com/mig-1g.10gb")
    c = cluster(kube)
    c.cordon("aks-gpunp-1-vmss000001", "w", 0.0)
    view = c.node("aks-gpunp-1-vmss000001")
    assert view is not None and [p.name for p in view.gpu_pods] == ["late"]


def test_gone_node_reads_none(kube: FakeKube) -> None:
    assert cluster(kube).node("nope") is None


def test_eviction_pdb_refusal_then_accepted(kube: FakeKube) -> None:
    kube.pdb[("ml", "train-7")] = 1
    c = cluster(kube)
    assert c.evict("ml", "train-7") == "Cannot evict pod as it would violate the pod's disruption budget."
    assert c.evict("ml", "train-7") is None
    assert ("ml", "train-7") not in kube.pods
    assert c.evict("ml", "train-7") is None  # already gone


def test_bad_token_is_a_cluster_error_without_the_token(kube: FakeKube) -> None:
    with pytest.raises(ClusterError) as err:
        cluster(kube, token="wrong-secret-token").nodes(POOL)
    assert "401" in str(err.value) and "wrong-secret-token" not in str(err.value)


def test_unreachable_server() -> None:
    with FakeKube() as fake:
        url = fake.url
    c = KubeCluster(KubernetesConfig(host=url, token="t", timeout=0.5))
    with pytest.raises(ClusterError, match="unreachable"):
        c.nodes(POOL)


def test_kubeconfig_with_a_context(kube: FakeKube, tmp_path: Any) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "other",
        "clusters": [{"name": "fake", "cluster": {"server": kube.url}},
                     {"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "autoscaler", "user": {"token": kube.token}}],
        "contexts": [{"name": "prod", "context": {"cluster": "fake", "user": "autoscaler"}},
                     {"name": "other", "context": {"cluster": "nowhere", "user": "autoscaler"}}]}))
    c = KubeCluster(KubernetesConfig(kubeconfig=str(path), context="prod"))
    assert len(c.nodes(POOL)) == 2


def test_in_cluster_and_kubeconfig_use_the_file_outside_a_pod(kube: FakeKube, tmp_path: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """CONTRACT's example writes both: as a pod the service account serves, elsewhere the kubeconfig."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "prod",
        "clusters": [{"name": "fake", "cluster": {"server": kube.url}}],
        "users": [{"name": "autoscaler", "user": {"token": kube.token}}],
        "contexts": [{"name": "prod", "context": {"cluster": "fake", "user": "autoscaler"}}]}))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    both = KubernetesConfig(in_cluster=True, kubeconfig=str(path))
    assert len(KubeCluster(both).nodes(POOL)) == 2
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # a pod: the service account, absent here
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ClusterError, match="in-cluster config"):
        KubeCluster(both).nodes(POOL)


@pytest.mark.parametrize("raw, problem", [
    pytest.param({}, "give `in_cluster: true` and/or `kubeconfig:`, or `host:` alone", id="nothing"),
    pytest.param({"in_cluster": True, "host": "http://x"}, "(got in_cluster, host)", id="two-sources"),
    pytest.param({"kubeconfig": "/k", "host": "http://x"}, "(got kubeconfig, host)", id="file-and-host"),
    pytest.param({"host": "http://x", "context": "c"}, "`context` needs `kubeconfig`", id="context-without-file"),
    pytest.param({"in_cluster": True, "token": "t"}, "`token` and `ca_cert` go with `host`", id="token-in-cluster"),
])
def test_kubernetes_section_is_checked(raw: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(problem)):
        KubernetesConfig.model_validate(raw)


def test_missing_kubeconfig_is_a_cluster_error(tmp_path: Any) -> None:
    c = KubeCluster(KubernetesConfig(kubeconfig=str(tmp_path / "none")))
    with pytest.raises(ClusterError, match="kubeconfig .*none"):
        c.nodes(POOL)


def test_the_pools_pods_in_pages_with_owners_volumes_and_requests(kube: FakeKube) -> None:
    for i in range(5):
        kube.add_pod(f"web-{i}", "aks-gpunp-1-vmss000001", gpus=1, owner="ReplicaSet", labels={"app": "web"},
                     volumes=[{"name": "scratch", "emptyDir": {}}] if i == 0 else None, cpu="500m", memory="4Gi")
    kube.add_pod("elsewhere", "aks-cpu-1-vmss000000", owner=None)
    views = {v.name: v for v in KubeCluster(KubernetesConfig(host=kube.url, token=kube.token), page=2).nodes(POOL)}
    node = views["aks-gpunp-1-vmss000001"]
    assert sorted(p.name for p in node.pods) == [f"web-{i}" for i in range(5)]  # not the DaemonSet's, not finished
    first = next(p for p in node.pods if p.name == "web-0")
    assert (first.owner, first.local_storage, first.gpus) == ("ReplicaSet", "emptyDir volume scratch", 1)
    free = dict(node.free)  # 96 CPUs less 5 x 0.5 and the DaemonSet's 1; 8 GPUs less 5 and the DaemonSet's 1
    assert (free["cpu"], free["nvidia.com/gpu"], free["memory"]) == (Decimal("92.5"), 2, (512 - 20) * 2**30)
    assert kube.calls == {"LIST nodes": 1, "LIST pods": 4}  # 8 unfinished pods in the cluster, 2 a page


def test_budgets_are_listed_once_with_what_they_allow(kube: FakeKube) -> None:
    kube.add_budget("web", {"app": "web"}, allowed=0)
    kube.add_budget("dns", {"k8s-app": "kube-dns"}, namespace="kube-system", allowed=1)
    budgets = cluster(kube).budgets()
    assert [(b.namespace, b.name, b.match_labels, b.disruptions_allowed) for b in budgets] == [
        ("kube-system", "dns", (("k8s-app", "kube-dns"),), 1), ("ml", "web", (("app", "web"),), 0)]
    assert kube.calls == {"LIST poddisruptionbudgets": 1}
    kube.add_pod("web-0", "aks-gpunp-1-vmss000001", owner="ReplicaSet", labels={"app": "web"})
    assert "disruption budget" in str(cluster(kube).evict("ml", "web-0"))  # the budget object refuses it


class HungKube(FakeKube):
    """Pod list pages that hang (a stuck API server) for ``hang`` seconds each, or answer 500 at once (``fails``)."""

    fails = False
    hang = 6.0

    def handle(self, request: Any) -> Any:
        if request.path.endswith("/pods") and request.method == "GET":
            if self.fails:
                from tests.support.fakes.kube import status
                return status(500, "InternalError", "etcd is sad")
            time.sleep(self.hang)  # a real peer: the fake API server hangs, the client's timeout is real
        return super().handle(request)


def _hung(n: int, fails: bool = False, hang: float = 6.0) -> HungKube:
    fake = HungKube()
    fake.fails, fake.hang = fails, hang
    for i in range(n):
        fake.add_node(f"gpu-{i:02d}", POOL)
        fake.add_pod(f"work-{i:02d}", f"gpu-{i:02d}", gpus=1)
    return fake


def test_a_failed_pod_list_fails_the_read_at_once() -> None:
    with _hung(20, fails=True) as fake:
        c = KubeCluster(KubernetesConfig(host=fake.url, token=fake.token, timeout=2.0))
        started = time.monotonic()
        with pytest.raises(ClusterError, match="listing pods: 500"):
            c.nodes(POOL)
        assert time.monotonic() - started < 1.5  # before: every other list's timeout, 8 at a time


def test_a_pool_read_has_one_deadline() -> None:
    """Each page of the pod list answers after 0.6 s: four pages must not take four timeouts."""
    with _hung(20, hang=0.6) as fake:
        c = KubeCluster(KubernetesConfig(host=fake.url, token=fake.token, timeout=1.0), page=5)
        started = time.monotonic()
        with pytest.raises(ClusterError, match="no answer within kubernetes.timeout 1s"):
            c.nodes(POOL)
        assert time.monotonic() - started < 2.5  # before: ceil(20 / 8) rounds of two attempts of 1 s each
