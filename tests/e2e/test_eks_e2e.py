"""End to end on AWS's API: dcgm stand-in -> Prometheus -> Alertmanager -> the service under gunicorn -> boto3 ->
moto's EKS and Auto Scaling (a process). The service builds its EKS provider from the config alone: boto3's default
chain finds the (fake) keys in the environment, ``endpoint_url`` points it at moto."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from tests.support.cloud_stack import service_config
from tests.support.fakes.moto_eks import AWS_ENV, MotoServer, asg_instances, client, create_node_group
from tests.support.pipeline import wait_for
from tests.support.pipeline_stack import POOL, Stack
from tests.support.servers import Service
from tests.support import AUTH, TOKEN, am_alert, am_payload

pytestmark = pytest.mark.slow


def test_prometheus_alert_scales_an_eks_node_group_through_gunicorn(pipeline: Stack, moto: MotoServer,
                                                                    tmp_path: Path) -> None:
    pipeline.reset()
    asg = create_node_group(moto.url, "e2e", "gpu-a10", desired=2, min_size=1, max_size=6)
    eks = client("eks", moto.url)

    def desired() -> int:
        group = eks.describe_nodegroup(clusterName="e2e", nodegroupName="gpu-a10")["nodegroup"]
        return int(group["scalingConfig"]["desiredSize"])

    pool = {"name": POOL, "provider": "eks", "min": 1, "max": 6,
            "eks": {"region": "us-east-1", "cluster": "e2e", "nodegroup": "gpu-a10", "endpoint_url": moto.url,
                    "timeout": "2s", "retry_budget": "3s"}}
    with Service(service_config(tmp_path, [pool], rules=[]), tmp_path, workers=2, env=AWS_ENV) as svc:
        pipeline.alertmanager.route_to(svc.url + "/webhook/alertmanager", TOKEN)
        try:
            changed = time.monotonic()
            pipeline.dcgm.set_utilization(95)
            wait_for(lambda: desired() == 3, 15, "scale-out of the node group to 3")
            print(f"\nmetric change -> EKS desiredSize 3: {time.monotonic() - changed:.2f}s")
            assert len(asg_instances(moto.url, asg)) == 3

            changed = time.monotonic()
            pipeline.dcgm.set_utilization(5)
            wait_for(lambda: desired() == 2, 15, "scale-in of the node group to 2")
            print(f"metric change -> EKS desiredSize 2: {time.monotonic() - changed:.2f}s")
        finally:
            pipeline.reset()
        events = requests.get(f"{svc.url}/api/v1/events", params={"pool": POOL}, headers=AUTH,
                              timeout=5).json()["events"]
        answer = requests.get(f"{svc.url}/api/v1/pools/{POOL}", headers=AUTH, timeout=5).json()
        log = svc.read_log()
    summary = [(e["action"], e["outcome"], e["from"], e["to"]) for e in events]
    assert ("scale_out", "scaled", 2, 3) in summary and ("scale_in", "scaled", 3, 2) in summary, summary
    assert answer["current"] == 2
    assert AWS_ENV["AWS_SECRET_ACCESS_KEY"] not in log


def test_a_target_past_the_node_groups_max_size_is_skipped_limit_through_gunicorn(moto: MotoServer,
                                                                                  tmp_path: Path) -> None:
    create_node_group(moto.url, "e2e", "gpu-small", desired=3, min_size=1, max_size=3)
    pool = {"name": "eks-small", "provider": "eks", "min": 0, "max": 8,
            "eks": {"region": "us-east-1", "cluster": "e2e", "nodegroup": "gpu-small", "endpoint_url": moto.url}}
    rules = [{"match": {"alertname": "GPUUtilizationHigh"}, "pool": "eks-small", "action": "scale_out"}]
    with Service(service_config(tmp_path, [pool], rules=rules), tmp_path, workers=1, env=AWS_ENV) as svc:
        resp = requests.post(f"{svc.url}/webhook/alertmanager", json=am_payload(am_alert()), headers=AUTH,
                             timeout=30)
    group = client("eks", moto.url).describe_nodegroup(clusterName="e2e", nodegroupName="gpu-small")
    assert resp.status_code == 200, resp.text
    decision = resp.json()["decisions"][0]
    assert decision["outcome"] == "skipped_limit", decision
    assert "above the EKS node group gpu-small's maxSize (3), which the service never widens" in decision["reason"]
    assert group["nodegroup"]["scalingConfig"]["desiredSize"] == 3
