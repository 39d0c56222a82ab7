"""The end-to-end scaffolding works: the real service under gunicorn scales an AKS and an ACK pool on the fakes."""
from __future__ import annotations

from pathlib import Path

import pytest
import requests

from tests.support.cloud_stack import ACK_KEY_SECRET, CLOUD_APP, AckCloud, AksCloud, service_config
from tests.support import AUTH, am_alert, am_payload
from tests.support.servers import Service

pytestmark = pytest.mark.slow


def test_alerts_through_gunicorn_reach_both_fake_clouds(tmp_path: Path) -> None:
    with AksCloud(count=2) as aks, AckCloud(count=2) as ack:
        rules = [{"match": {"alertname": "GPUUtilizationHigh", "cloud": "aks"}, "pool": "gpu-aks",
                  "action": "scale_out"},
                 {"match": {"alertname": "GPUUtilizationHigh", "cloud": "ack"}, "pool": "gpu-ack",
                  "action": "scale_out"}]
        cfg = service_config(tmp_path, [aks.pool_config("gpu-aks"), ack.pool_config("gpu-ack")], rules)
        with Service(cfg, tmp_path, workers=1, env={**aks.env, **ack.env}, app=CLOUD_APP) as svc:
            body = am_payload(am_alert(fingerprint="a", cloud="aks"), am_alert(fingerprint="b", cloud="ack"))
            resp = requests.post(f"{svc.url}/webhook/alertmanager", json=body, headers=AUTH, timeout=30)
            assert resp.status_code == 200, resp.text
            outcomes = sorted((d["pool"], d["outcome"]) for d in resp.json()["decisions"])
            assert outcomes == [("gpu-ack", "scaled"), ("gpu-aks", "scaled")], resp.text
            log = svc.read_log()
        assert aks.arm.pools["gpunp"]["count"] == 3 and len(aks.nodes()) == 3
        assert ack.pool.desired_size == 3
        ack.api.settle()
        assert len(ack.nodes()) == 3
        assert aks.token not in log and ACK_KEY_SECRET not in log
        names = [n.name for n in aks.nodes()]
        assert len(set(names)) == 3 and all(n.labels["kubernetes.azure.com/agentpool"] == "gpunp" for n in aks.nodes())
