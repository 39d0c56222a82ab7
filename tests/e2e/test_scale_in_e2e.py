"""Node-aware scale-in end to end: the real service under gunicorn, Alertmanager-shaped scale-in alerts, the fake ARM
(AKS deleteMachines) and the fake ACK OpenAPI (RemoveNodePoolNodes), and the fake Kubernetes API the real client
reads. The idle node goes by name, the busy one stays; a worker killed between cordon and removal leaves a cordon
the next decision lifts."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests

from autoscaler.cluster.nodes import CORDON_ANNOTATION
from tests.support.cloud_stack import CLOUD_APP, AckCloud, AksCloud, KubeNode, service_config
from tests.support.fakes.arm import Fault
from tests.support.fakes.kube import FakeKube
from tests.support.pipeline import wait_for
from tests.support.servers import ROOT, Service
from tests.support import AUTH, TOKEN, am_alert, am_payload

pytestmark = pytest.mark.slow

RULES = [{"match": {"alertname": "GPUUtilizationLow", "cloud": "aks"}, "pool": "gpu-aks", "action": "scale_in"},
         {"match": {"alertname": "GPUUtilizationLow", "cloud": "ack"}, "pool": "gpu-ack", "action": "scale_in"},
         {"match": {"alertname": "GPUUtilizationHigh", "cloud": "aks"}, "pool": "gpu-aks", "action": "scale_out"}]


def seed(kube: FakeKube, nodes: list[KubeNode], busy: int) -> None:
    """The nodes oldest first (one day apart); the ``busy``-th runs an 8-GPU training pod (limits only)."""
    for i, node in enumerate(nodes):
        kube.add_node(node.name, node.labels, provider_id=node.provider_id, created=f"2026-11-{10 + i:02d}T00:00:00Z")
    kube.add_pod(f"train-{busy}", nodes[busy].name, gpus=8)


def test_idle_nodes_go_by_name_busy_ones_stay(tmp_path: Path) -> None:
    with AksCloud(count=3) as aks, AckCloud(count=2) as ack, FakeKube() as kube:
        seed(kube, aks.nodes(), busy=2)  # the newest AKS node is busy: the middle one goes
        seed(kube, ack.nodes(), busy=1)
        aks_names, ack_nodes = [n.name for n in aks.nodes()], ack.nodes()
        cfg = service_config(tmp_path, [aks.pool_config("gpu-aks"), ack.pool_config("gpu-ack")], RULES,
                             kubernetes={"host": kube.url, "token": kube.token})
        cfg["server"]["reconcile_interval"] = "1s"  # pages and the CLI show the node view the reconciler stores
        with Service(cfg, tmp_path, workers=1, env={**aks.env, **ack.env}, app=CLOUD_APP) as svc:
            body = am_payload(am_alert("GPUUtilizationLow", fingerprint="a", cloud="aks"),
                              am_alert("GPUUtilizationLow", fingerprint="b", cloud="ack"))
            resp = requests.post(f"{svc.url}/webhook/alertmanager", json=body, headers=AUTH, timeout=30)
            assert resp.status_code == 200, resp.text
            decisions = {d["pool"]: d for d in resp.json()["decisions"]}
            assert decisions["gpu-aks"]["outcome"] == "scaled" and decisions["gpu-ack"]["outcome"] == "scaled"
            events = requests.get(f"{svc.url}/api/v1/events", headers=AUTH, timeout=5).json()["events"]
            details = {e["pool"]: e["details"] for e in events}
            def listed() -> subprocess.CompletedProcess[str]:
                return subprocess.run([sys.executable, "-m", "autoscaler", "nodes", "gpu-aks"], capture_output=True,
                                      text=True, timeout=30, cwd=ROOT,
                                      env={**os.environ, "PYTHONPATH": str(ROOT), "AUTOSCALER_URL": svc.url,
                                           "AUTOSCALER_TOKEN": TOKEN})
            seen: list[subprocess.CompletedProcess[str]] = []
            wait_for(lambda: seen.append(listed()) or "yes (us)" in seen[-1].stdout, 20,
                     "the reconciler's next node listing (after the cordon)")
            nodes = seen[-1]
            log = svc.read_log()
        # AKS: exactly the idle middle machine went through deleteMachines; the busy newest one stays
        assert aks.arm.machine_names("gpunp") == [aks_names[0], aks_names[2]]
        deletes = [r.body for r in aks.arm.requests if r.path.endswith("/deleteMachines")]
        assert deletes == [{"machineNames": [aks_names[1]]}]
        assert details["gpu-aks"]["nodes"] == [aks_names[1]]
        assert details["gpu-aks"]["kept"] == [{"node": aks_names[2],
                                               "reason": "runs GPU pod ml/train-2 (nvidia.com/gpu 8)"}]
        # ACK: RemoveNodePoolNodes for the idle node's instance (from its providerID), drain and release on
        removes = [r for r in ack.api.requests if r.method == "DELETE" and r.path.endswith("/nodes")]
        assert len(removes) == 1
        assert ack_nodes[0].provider_id.split(".", 1)[1] in removes[0].param("instance_ids")
        flags = {(removes[0].param(k) or "").lower() for k in ("drain_node", "release_node")}
        assert flags == {"true"}
        assert [name for name, _ in ack.pool.nodes] == [ack_nodes[1].name]
        assert details["gpu-ack"]["nodes"] == [ack_nodes[0].name]
        # the CLI lists the AKS pool's nodes, the busy one with its pod, the removed one cordoned by us
        assert nodes.returncode == 0, nodes.stderr
        lines = {line.split()[0]: line for line in nodes.stdout.splitlines()[1:]}
        assert "ml/train-2 (nvidia.com/gpu 8)" in lines[aks_names[2]]
        assert lines[aks_names[1]].rstrip().endswith("yes (us)")
        assert kube.token not in log and aks.token not in log


def test_worker_killed_between_cordon_and_removal(tmp_path: Path) -> None:
    with AksCloud(count=3) as aks, FakeKube() as kube:
        seed(kube, aks.nodes(), busy=0)
        victim = aks.nodes()[2].name  # the newest idle node
        aks.arm.fail_next(503, method="POST", delay=20)  # deleteMachines is held: the worker hangs in the call
        cfg = service_config(tmp_path, [aks.pool_config("gpu-aks")], [RULES[0], RULES[2]],
                             kubernetes={"host": kube.url, "token": kube.token})
        cfg["server"]["lease_ttl"] = "2s"
        with Service(cfg, tmp_path, workers=1, env=aks.env, app=CLOUD_APP, graceful_timeout=2) as svc:
            hook = f"{svc.url}/webhook/alertmanager"
            lost: list[BaseException] = []

            def deliver() -> None:
                try:
                    requests.post(hook, json=am_payload(am_alert("GPUUtilizationLow", fingerprint="k", cloud="aks")),
                                  headers=AUTH, timeout=30)
                except requests.RequestException as exc:
                    lost.append(exc)

            sender = threading.Thread(target=deliver)
            sender.start()
            wait_for(lambda: any(r.path.endswith("/deleteMachines") for r in aks.arm.requests), 15, "deleteMachines")
            assert kube.nodes[victim]["spec"]["unschedulable"] is True  # cordoned, removal asked, no answer yet
            (worker,) = svc.worker_pids()
            os.kill(worker, signal.SIGKILL)
            sender.join(15)
            assert lost, "the request to the killed worker should have failed"
            wait_for(lambda: len(svc.worker_pids()) == 1 and worker not in svc.worker_pids(), 15, "a new worker")
            assert kube.nodes[victim]["spec"]["unschedulable"] is True  # the dead worker could not clean up
            outcomes: list[str] = []

            def next_decision_ran() -> bool:  # the next decision waits for the dead worker's lease, then sweeps
                body = am_payload(am_alert("GPUUtilizationHigh", fingerprint=f"n{len(outcomes)}", cloud="aks"))
                answer = requests.post(hook, json=body, headers=AUTH, timeout=10)
                outcomes.append(answer.json()["decisions"][0]["outcome"])
                return outcomes[-1] != "skipped_busy"

            wait_for(next_decision_ran, 20, "the next decision")
            assert outcomes[-1] == "scaled", outcomes
            node = kube.nodes[victim]
            assert "unschedulable" not in node["spec"] and CORDON_ANNOTATION not in node["metadata"]["annotations"]
            assert victim in aks.arm.machine_names("gpunp")  # nothing was removed
            assert "uncordoned nodes a stopped decision left cordoned: " + victim in svc.read_log()


def test_worker_killed_while_the_cloud_takes_the_removal_keeps_the_node_cordoned(tmp_path: Path) -> None:
    """Issue 34 item 10: ARM takes deleteMachines (the machine goes, the pool reads Scaling) but holds its answer;
    the worker is killed in the call. The next decisions keep the node cordoned: first while ARM still works on
    the pool, then because ARM's count is below the one the removal was decided on (the node is the cloud's: the
    ``/removing`` mark), never open to new GPU pods while it is deleted."""
    with AksCloud(count=3) as aks, FakeKube() as kube:
        seed(kube, aks.nodes(), busy=0)
        victim = aks.nodes()[2].name  # the newest idle node
        aks.arm.faults.append(Fault(0, method="POST", reset=True, applied=True, delay=20))  # taken, answer held
        cfg = service_config(tmp_path, [aks.pool_config("gpu-aks")], [RULES[0], RULES[2]],
                             kubernetes={"host": kube.url, "token": kube.token})
        cfg["server"]["lease_ttl"] = "2s"
        with Service(cfg, tmp_path, workers=1, env=aks.env, app=CLOUD_APP, graceful_timeout=2) as svc:
            hook = f"{svc.url}/webhook/alertmanager"
            sender = threading.Thread(target=_deliver_lost, args=(hook, am_payload(
                am_alert("GPUUtilizationLow", fingerprint="k", cloud="aks"))))
            sender.start()
            wait_for(lambda: any(r.path.endswith("/deleteMachines") for r in aks.arm.requests), 15, "deleteMachines")
            assert victim not in aks.arm.machine_names("gpunp")  # the cloud has taken the removal
            (worker,) = svc.worker_pids()
            os.kill(worker, signal.SIGKILL)
            sender.join(15)
            wait_for(lambda: len(svc.worker_pids()) == 1 and worker not in svc.worker_pids(), 15, "a new worker")

            first = _next_decision(hook, "n0")  # waits out the dead worker's lease; ARM still reads Scaling
            assert first["outcome"] == "skipped_busy" and "still working" in first["reason"], first
            assert kube.nodes[victim]["spec"].get("unschedulable") is True, "the next decision uncordoned it"

            aks.arm.finish_operations()  # ARM is done: 2 machines, where the removal was decided on 3
            second = _next_decision(hook, "n1")
            assert second["outcome"] == "scaled" and (second["from"], second["to"]) == (2, 3), second
            aks.arm.finish_operations()
            third = _next_decision(hook, "n2")  # the node's record is settled: the sweep sees only its mark now
            assert third["outcome"] == "scaled" and (third["from"], third["to"]) == (3, 4), third
            node = kube.nodes[victim]
            assert node["spec"].get("unschedulable") is True, "a later decision uncordoned it"
            mark = node["metadata"]["annotations"][CORDON_ANNOTATION]
            assert mark.rpartition("@")[0].endswith("/removing"), mark  # left to the cloud for REMOVAL_GRACE
            log = svc.read_log()
            assert f"node {victim}: its removal may have been sent" in log and "it went (kept cordoned)" in log
            assert "uncordoned nodes a stopped decision left cordoned" not in log


def _deliver_lost(hook: str, body: dict[str, object]) -> None:
    """Send a notification whose worker is killed while answering it."""
    try:
        requests.post(hook, json=body, headers=AUTH, timeout=30)
    except requests.RequestException:
        pass


def _next_decision(hook: str, fingerprint: str) -> dict[str, object]:
    """A scale-out alert, sent again while the pool's lease is a dead worker's; the decision that ran."""
    answers: list[dict[str, object]] = []

    def ran() -> bool:
        body = am_payload(am_alert("GPUUtilizationHigh", fingerprint=f"{fingerprint}-{len(answers)}", cloud="aks"))
        answers.append(requests.post(hook, json=body, headers=AUTH, timeout=10).json()["decisions"][0])
        return (answers[-1].get("details") or {}).get("busy") != "lease"

    wait_for(ran, 20, "the next decision")
    return answers[-1]
