"""An AKS System pool asked below 1 node (issue 15, item 15): a limit (skipped_limit, no backoff), not a failure;
check-config warns when a pool's min is below what the cloud allows."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.__main__ import main
from autoscaler.models import CloudStatus
from providers.aks import AksProvider, AksSettings
from providers import Capabilities, LimitError, Tracked
from tests.support.fakes.arm import FakeArm
from tests.support.fakes.clients import AKS_CLUSTER as CLUSTER
from tests.support.fakes.clients import RG, SUB, AllowHttp, StaticCredential
from tests.support import FakeClock, AUTH, make_app


@pytest.fixture
def arm() -> Iterator[tuple[FakeArm, str]]:
    token = f"eyJfake.{uuid.uuid4().hex}.sig"
    with FakeArm(SUB, RG, CLUSTER, token) as fake:
        fake.add_pool("system", count=2, mode="System")
        yield fake, token


def _provider(arm: FakeArm, token: str) -> AksProvider:
    settings = AksSettings(subscription_id=SUB, resource_group=RG, cluster=CLUSTER, agent_pool="system",
                           arm_endpoint=arm.url)
    time = FakeClock()
    return AksProvider("sys", settings, credential=StaticCredential(token), clock=time, 
                       per_call_policies=[AllowHttp()])


def test_system_pool_below_one_node_is_a_limit_not_a_failure(tmp_path: Path, arm: tuple[FakeArm, str]) -> None:
    fake, token = arm
    pools = [{"name": "sys", "provider": "simulated", "min": 0, "max": 5}]
    app = make_app(f"sqlite:///{tmp_path}/s.db", providers={"sys": _provider(fake, token)}, pools=pools, rules=[])
    client = app.test_client()

    def scale_in(step: int) -> dict[str, Any]:
        resp = client.post("/api/v1/pools/sys/scale", json={"action": "scale_in", "step": step, "force": True},
                           headers=AUTH)
        assert resp.status_code == 200, resp.get_data(as_text=True)
        return resp.get_json()  # type: ignore[no-any-return]

    first = scale_in(5)  # 2 -> 0 asked: below the System pool's floor, refused as a limit before any call
    assert first["outcome"] == "skipped_limit"
    assert "below the AKS System pool system's floor (1)" in first["reason"]
    assert (scale_in(1)["outcome"], fake.pools["system"]["count"]) == ("scaled", 1)
    fake.pools["system"]["provisioningState"] = "Succeeded"  # the change finished
    second = scale_in(1)  # 1 -> 0 asked: nothing to do, and nothing failed
    assert second["outcome"] == "skipped_limit" and "System pool" in second["reason"]
    pool = client.get("/api/v1/pools/sys", headers=AUTH).get_json()
    assert pool["failures"] == 0 and pool["backoff_remaining_s"] == 0
    assert [r.body["properties"]["count"] for r in fake.calls("PUT")] == [1]


def test_a_provider_limit_refused_at_the_cloud_call_is_skipped_limit(tmp_path: Path) -> None:
    class Refuses:
        capabilities = Capabilities()

        def check(self) -> None:
            pass

        def status(self, tracked: Tracked, now: float) -> CloudStatus:
            return CloudStatus(current=1)

        def scale(self, current: int, target: int, now: float, status: CloudStatus | None = None) -> int:
            raise LimitError("pool p: 0 nodes is outside what the cloud allows")

    pools = [{"name": "p", "provider": "simulated", "min": 0, "max": 5}]
    client = make_app(f"sqlite:///{tmp_path}/s.db", providers={"p": Refuses()}, pools=pools, rules=[]).test_client()
    resp = client.post("/api/v1/pools/p/scale", json={"action": "scale_in"}, headers=AUTH).get_json()
    assert resp["outcome"] == "skipped_limit" and "outside what the cloud allows" in resp["reason"]
    assert client.get("/api/v1/pools/p", headers=AUTH).get_json()["failures"] == 0


def test_check_config_warns_when_min_is_below_the_clouds_floor(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    aks = {"subscription_id": SUB, "resource_group": RG, "cluster": CLUSTER, "agent_pool": "system"}
    cfg = {"server": {"auth": {"bearer_tokens": ["abcdefgh1"]}},
           "pools": [{"name": "sys", "provider": "aks", "min": 0, "max": 3, "aks": {**aks, "mode": "System"}},
                     {"name": "usr", "provider": "aks", "min": 0, "max": 3, "aks": {**aks, "mode": "User"}}]}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr()
    assert out.err.splitlines() == ["warning: pools[0].min: 0 is below what the cloud allows (1: AKS keeps at least "
                                    "1 node in a System pool); scale-in stops at 1 (skipped_limit)"]
    assert ": OK: 2 pool(s)" in out.out
