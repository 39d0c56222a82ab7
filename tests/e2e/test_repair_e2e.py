"""Node repair end to end: the real service under gunicorn, the real Kubernetes client against the fake API server,
the real Azure SDK against the fake ARM (deleteMachines removes exactly the named machine). A node an alert reports
unhealthy is cordoned at once and a replacement asked for; the reconciler drains it (a movable pod is evicted) or
waits for a Job's pod within grace, then removes exactly that node. The budget, a restart in the middle."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
import requests

from autoscaler.cluster.nodes import CORDON_ANNOTATION
from tests.support import pg
from tests.support.cloud_stack import CLOUD_APP, AksCloud, KubeNode, service_config
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.moto_eks import AWS_ENV, MotoServer, asg_instances, create_node_group
from tests.support.servers import ROOT, Service
from tests.support import AUTH, TOKEN, am_alert, am_payload

pytestmark = pytest.mark.slow
ROUTE = {"autoscaler_pool": "gpu", "autoscaler_action": "repair"}


def seed(kube: FakeKube, nodes: list[KubeNode]) -> None:
    for i, node in enumerate(nodes):
        kube.add_node(node.name, node.labels, provider_id=node.provider_id, created=f"2026-11-{10 + i:02d}T00:00:00Z")
        kube.add_pod(f"dcgm-exporter-{i}", node.name, namespace="gpu-operator", owner="DaemonSet")


def join(kube: FakeKube, aks: AksCloud) -> list[str]:
    """Register in Kubernetes every machine of the pool the fake ARM has and the cluster does not (nodes joining)."""
    joined = []
    for node in aks.nodes():
        if node.name not in kube.nodes:
            kube.add_node(node.name, node.labels, provider_id=node.provider_id, created="2026-11-26T00:00:00Z")
            joined.append(node.name)
    return joined


def config(tmp_path: Path, aks: AksCloud, kube: FakeKube, store: str | None = None, **repair: Any) -> dict[str, Any]:
    pool = aks.pool_config("gpu", min_size=1, max_size=6, repair={"max_unhealthy": 1, "grace": "1h", **repair})
    cfg = service_config(tmp_path, [pool], [], kubernetes={"host": kube.url, "token": kube.token})
    cfg["server"]["reconcile_interval"] = "1s"
    if store is not None:
        cfg["store"] = {"url": store}
    return cfg


def alert(url: str, node: str, fingerprint: str = "fp-xid") -> dict[str, Any]:
    resp = requests.post(f"{url}/webhook/alertmanager", headers=AUTH, timeout=30, json=am_payload(
        am_alert("GPUNodeUnhealthy", fingerprint=fingerprint, node=node, **ROUTE)))
    assert resp.status_code == 200, resp.text
    return resp.json()["decisions"][0]  # type: ignore[no-any-return]


def until(check: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    """Poll a real peer (the service's reconciler runs on its own clock) until ``check()`` is truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


def events(url: str, outcome: str) -> list[dict[str, Any]]:
    got = requests.get(f"{url}/api/v1/events", params={"outcome": outcome}, headers=AUTH, timeout=5).json()["events"]
    return [e for e in got if e["outcome"] == outcome]


def pool(url: str) -> dict[str, Any]:
    return requests.get(f"{url}/api/v1/pools/gpu", headers=AUTH, timeout=5).json()  # type: ignore[no-any-return]


def cordoned(kube: FakeKube, name: str) -> bool:
    node = kube.nodes[name]
    return bool(node["spec"].get("unschedulable")) and CORDON_ANNOTATION in node["metadata"]["annotations"]


def test_a_node_with_a_movable_gpu_pod_is_repaired(tmp_path: Path) -> None:
    with AksCloud(count=3) as aks, FakeKube() as kube:
        nodes = aks.nodes()
        seed(kube, nodes)
        sick = nodes[1].name
        kube.add_pod("infer-1", sick, gpus=1, owner="ReplicaSet", labels={"app": "infer"})
        with Service(config(tmp_path, aks, kube), tmp_path, workers=1, env=aks.env, app=CLOUD_APP,
                     graceful_timeout=2) as svc:
            before = time.monotonic()
            decision = alert(svc.url, sick)
            answered = time.monotonic() - before
            assert decision["outcome"] == "repair_started", decision
            assert (decision["from"], decision["to"]) == (3, 4)
            assert cordoned(kube, sick)  # at once, before the answer
            assert len(aks.arm.machine_names("gpunp")) == 4  # the replacement was asked for
            assert [r["node"] for r in pool(svc.url)["repairs"]] == [sick]
            joined = join(kube, aks)
            # ARM is still scaling the replacement in: the removal is refused as busy, and the repair goes on
            busy = until(lambda: pool(svc.url)["repairs"][0]["error"], what="the removal refused while ARM scales")
            assert "removal:" in busy and pool(svc.url)["repairs"][0]["state"] == "draining", busy
            assert cordoned(kube, sick) and sick in aks.arm.machine_names("gpunp")  # no half-state
            aks.arm.finish_operations()
            done = until(lambda: events(svc.url, "repaired"), what="the node repaired")
            assert ("ml", "infer-1") not in kube.pods  # evicted through the Eviction API
            assert kube.calls["CREATE eviction"] >= 1
            assert sick not in aks.arm.machine_names("gpunp")
            assert sorted(aks.arm.machine_names("gpunp")) == sorted([nodes[0].name, nodes[2].name] + joined)
            assert done[0]["source"] == "reconcile" and done[0]["details"]["node"] == sick
            assert done[0]["details"]["replacement"] == 4 and done[0]["details"]["started"]
            assert done[0]["details"]["evicted"] == ["ml/infer-1"]  # the event names what the repair moved
            assert pool(svc.url)["repairs"] == []
            metrics = requests.get(f"{svc.url}/metrics", timeout=5).text
            assert 'gpu_autoscaler_nodes_in_repair{pool="gpu"} 0.0' in metrics
        assert answered < 10


def test_a_jobs_node_is_kept_the_budget_holds_and_a_restart_carries_the_repair_on(tmp_path: Path) -> None:
    with AksCloud(count=3) as aks, FakeKube() as kube:
        nodes = aks.nodes()
        seed(kube, nodes)
        sick, other = nodes[0].name, nodes[2].name
        kube.add_pod("train-0", sick, gpus=8)  # a training Job's pod: never evicted within grace
        svc = Service(config(tmp_path, aks, kube), tmp_path, workers=1, env=aks.env, app=CLOUD_APP, graceful_timeout=2)
        with svc:
            assert alert(svc.url, sick)["outcome"] == "repair_started"
            assert cordoned(kube, sick)
            over = alert(svc.url, other, fingerprint="fp-other")
            assert over["outcome"] == "skipped_repair_budget", over
            assert not cordoned(kube, other) and len(aks.arm.machine_names("gpunp")) == 4  # nothing touched
            join(kube, aks)
            aks.arm.finish_operations()
            until(lambda: pool(svc.url)["repairs"][0]["state"] == "waiting", what="the repair waiting for the Job")
            assert ("ml", "train-0") in kube.pods and kube.calls["CREATE eviction"] == 0
            svc.restart()  # the service goes away in the middle of the repair and comes back
            assert [r["node"] for r in pool(svc.url)["repairs"]] == [sick]
            assert cordoned(kube, sick) and sick in aks.arm.machine_names("gpunp")
            kube.pods[("ml", "train-0")]["status"]["phase"] = "Succeeded"  # the Job ends
            done = until(lambda: events(svc.url, "repaired"), what="the node removed once the Job ended")
            assert done[0]["details"]["node"] == sick and sick not in aks.arm.machine_names("gpunp")
            assert len(events(svc.url, "repair_started")) == 1 and kube.calls["CREATE eviction"] == 0
            deletes = [r for r in aks.arm.requests if r.method == "POST" and r.path.endswith("deleteMachines")]
            assert [r.body["machineNames"] for r in deletes] == [[sick]]  # exactly that node, once


@pytest.fixture
def database() -> Any:
    pg.require_postgres()
    with pg.temp_database() as name:
        yield name


def test_two_replicas_on_postgresql_ask_one_replacement_and_one_removal(tmp_path: Path, database: str) -> None:
    with AksCloud(count=3) as aks, FakeKube() as kube:
        nodes = aks.nodes()
        seed(kube, nodes)
        sick = nodes[1].name
        kube.add_pod("infer-1", sick, gpus=1, owner="ReplicaSet", labels={"app": "infer"})
        cfg = config(tmp_path, aks, kube, store=pg.url_for(database))
        first = Service(cfg, tmp_path / "a", workers=1, env=aks.env, app=CLOUD_APP, graceful_timeout=2)
        second = Service(cfg, tmp_path / "b", workers=1, env=aks.env, app=CLOUD_APP, graceful_timeout=2)
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        with first, second:
            # Alertmanager HA: both replicas get the same notification at the same instant.
            answers: list[dict[str, Any]] = []
            threads = [threading.Thread(target=lambda u=u: answers.append(alert(u, sick)))
                       for u in (first.url, second.url)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            outcomes = sorted(a["outcome"] for a in answers)
            assert outcomes == ["repair_started", "skipped_duplicate"], answers
            puts = [r for r in aks.arm.requests if r.method == "PUT"]
            assert len(puts) == 1 and puts[0].body["properties"]["count"] == 4  # one replacement between them
            join(kube, aks)
            aks.arm.finish_operations()
            until(lambda: events(first.url, "repaired"), what="the node repaired by one of the replicas")
            time.sleep(2)  # two more ticks of the holder's loop: nothing more may happen
            deletes = [r for r in aks.arm.requests if r.method == "POST" and r.path.endswith("deleteMachines")]
            assert [r.body["machineNames"] for r in deletes] == [[sick]]
            assert len(events(second.url, "repaired")) == 1 and pool(second.url)["repairs"] == []


def test_on_eks_the_unhealthy_instance_is_terminated_and_a_replacement_asked(tmp_path: Path, moto: MotoServer) -> None:
    group = f"gpu-{uuid.uuid4().hex[:6]}"
    asg = create_node_group(moto.url, "repair", group, desired=3, min_size=1, max_size=6)
    label = {"eks.amazonaws.com/nodegroup": group}
    nodes = [KubeNode(f"ip-10-0-1-{i}.ec2.internal", f"aws:///{zone}/{instance}", label)
             for i, (instance, zone) in enumerate(asg_instances(moto.url, asg))]
    instances = {n.name: n.provider_id.rpartition("/")[2] for n in nodes}
    pool = {"name": "gpu", "provider": "eks", "min": 1, "max": 6, "repair": {"max_unhealthy": 1, "grace": "1h"},
            "eks": {"region": "us-east-1", "cluster": "repair", "nodegroup": group, "endpoint_url": moto.url,
                    "timeout": "2s", "retry_budget": "3s"}}
    with FakeKube() as kube:
        seed(kube, nodes)
        sick = nodes[1].name
        kube.add_pod("infer-1", sick, gpus=1, owner="ReplicaSet", labels={"app": "infer"})
        cfg = service_config(tmp_path, [pool], [], kubernetes={"host": kube.url, "token": kube.token})
        cfg["server"]["reconcile_interval"] = "1s"
        with Service(cfg, tmp_path, workers=1, env=AWS_ENV, app=CLOUD_APP, graceful_timeout=2) as svc:
            decision = alert(svc.url, sick)
            assert decision["outcome"] == "repair_started" and (decision["from"], decision["to"]) == (3, 4), decision
            assert cordoned(kube, sick)
            done = until(lambda: events(svc.url, "repaired"), timeout=30, what="the instance terminated")
            assert done[0]["details"]["node"] == sick and ("ml", "infer-1") not in kube.pods
        left = {i for i, _ in asg_instances(moto.url, asg)}
        assert instances[sick] not in left and {instances[n.name] for n in nodes if n.name != sick} <= left


def unhealthy(node: str, starts_at: str, status: str = "firing") -> dict[str, Any]:
    """The notification Alertmanager sends for the shipped GPUNodeUnhealthy rule (deploy/prometheus): the same
    fingerprint and startsAt on every repeat of one firing; ``endsAt`` set once it resolved."""
    body = am_payload(am_alert("GPUNodeUnhealthy", status=status, fingerprint="3f9c1d0a7b2e4c11",
                               starts_at=starts_at, node=node, cloud_pool="gpunp", severity="warning", **ROUTE),
                      status=status)
    body["alerts"][0]["annotations"] = {"summary": f"GPU node {node} of pool gpu reported XID 79: replace it",
                                        "value": "79"}
    if status == "resolved":
        body["alerts"][0]["endsAt"] = "2026-11-28T04:10:00Z"
    body["groupKey"] = '{}/{autoscaler_action="repair"}:{alertname="GPUNodeUnhealthy"}'
    return body


def notify(url: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = requests.post(f"{url}/webhook/alertmanager", headers=AUTH, timeout=30, json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()["decisions"][0]  # type: ignore[no-any-return]


def test_a_cancelled_repair_stays_cancelled_while_its_alert_repeats(tmp_path: Path) -> None:
    with AksCloud(count=3) as aks, FakeKube() as kube:
        nodes = aks.nodes()
        seed(kube, nodes)
        sick = nodes[1].name
        with Service(config(tmp_path, aks, kube), tmp_path, workers=2, env=aks.env, app=CLOUD_APP,
                     graceful_timeout=2) as svc:
            firing = unhealthy(sick, "2026-11-28T02:58:00Z")
            started = notify(svc.url, firing)
            assert started["outcome"] == "repair_started" and (started["from"], started["to"]) == (3, 4), started
            assert len(aks.arm.machine_names("gpunp")) == 4 and cordoned(kube, sick)
            env = {"AUTOSCALER_URL": svc.url, "AUTOSCALER_TOKEN": TOKEN, "USER": "alice"}
            done = cli("repair", "gpu", sick, "--cancel", "--reason", "false alarm: exporter restart", env=env)
            assert done.returncode == 0 and f"repair of {sick} cancelled" in done.stdout, done.stderr
            assert not cordoned(kube, sick)
            puts = len([r for r in aks.arm.requests if r.method == "PUT"])
            for _ in range(3):  # Alertmanager's repeats of the still-firing alert, byte for byte
                again = notify(svc.url, firing)
                assert again["outcome"] == "skipped_cancelled", again
            assert len(aks.arm.machine_names("gpunp")) == 4  # the pool's size unchanged: no 4 -> 5
            assert len([r for r in aks.arm.requests if r.method == "PUT"]) == puts and not cordoned(kube, sick)
            assert pool(svc.url)["repairs"] == []
            cancel = events(svc.url, "repair_cancelled")
            assert len(cancel) == 1 and cancel[0]["actor"] and "false alarm: exporter restart" in cancel[0]["reason"]
            assert cancel[0]["details"]["on_behalf_of"] == "alice"
            assert notify(svc.url, unhealthy(sick, "2026-11-28T02:58:00Z", "resolved"))["outcome"] == \
                "ignored_resolved"
            aks.arm.finish_operations()  # the first replacement has come up by now
            back = notify(svc.url, unhealthy(sick, "2026-11-28T05:41:00Z"))  # a new firing: a new fault
            assert back["outcome"] == "repair_started" and (back["from"], back["to"]) == (4, 5), back
            assert cordoned(kube, sick)
            by_hand = cli("repair", "gpu", sick, env=env)
            assert by_hand.returncode == 3 and "skipped_duplicate" in by_hand.stdout, by_hand.stdout
            log = svc.read_log()
            assert "logger=autoscaler.decision" in log and "logger=azure" not in log  # no SDK request logging


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCALER_")}
    full.update({"PYTHONPATH": str(ROOT), **env})
    return subprocess.run([sys.executable, "-m", "autoscaler", *args], capture_output=True, text=True, env=full,
                          cwd=ROOT, timeout=30)
