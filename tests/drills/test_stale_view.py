"""Drill: the cloud unreachable for minutes while the reconciler keeps ticking. The stored view keeps its last good
count and its age grows (so /metrics' view age, and the GPUAutoscalerCloudViewStale alert on it, show the outage);
the API says why the cloud could not be read."""
from __future__ import annotations

from pathlib import Path

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from autoscaler.reconcile.loop import Reconciler
from providers.aks import AksProvider
from tests.support.fakes.arm import FakeArm
from tests.support.fakes.clients import AKS_CLUSTER, RG, SUB, AllowHttp, StaticCredential
from tests.support import AUTH, FakeClock


def test_cloud_down_for_minutes_the_view_ages_and_keeps_its_last_count(tmp_path: Path) -> None:
    with FakeArm(SUB, RG, AKS_CLUSTER, "eyJarm.stale.sig") as arm:
        arm.add_pool("gpunp", count=3)
        aks = {"subscription_id": SUB, "resource_group": RG, "cluster": AKS_CLUSTER, "arm_endpoint": arm.url,
               "agent_pool": "gpunp"}
        settings = build_settings({"server": {"auth": {"bearer_tokens": [AUTH["Authorization"][7:]]}},
                                   "store": {"url": f"sqlite:///{tmp_path}/aks.db"},
                                   "pools": [{"name": "gpu", "provider": "aks", "min": 0, "max": 4, "aks": aks}]},
                                  env={})
        fake = FakeClock()
        provider = AksProvider("gpu", settings.pools["gpu"].provider_settings, credential=StaticCredential(arm.token),
                               clock=fake,  per_call_policies=[AllowHttp()])
        clock = FakeClock()
        app = create_app(settings, clock=clock, providers={"gpu": provider}, startup_check=False)
        reconciler: Reconciler = app.extensions["autoscaler_reconciler"]
        client = app.test_client()
        assert reconciler.tick(clock()).held
        read_at = clock()
        arm.fail_next(503, times=1000)  # the cloud answers nothing useful from now on
        for _ in range(12):  # six minutes of ticks every 30 s
            clock.advance(30)
            reconciler.tick(clock())
        pool = client.get("/api/v1/pools/gpu", headers=AUTH).get_json()
        metrics = client.get("/metrics").get_data(as_text=True)
    assert pool["view_read_at"] == read_at and pool["view_age_s"] == 360.0
    assert pool["current"] == 3  # the last count read, with its age: not forgotten
    assert pool["error"]  # and why it is old
    assert 'gpu_autoscaler_pool_view_age_seconds{pool="gpu"} 360.0' in metrics  # > 300: the stale alert fires
