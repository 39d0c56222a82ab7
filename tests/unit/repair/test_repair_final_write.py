"""A repair's start records through the hold's final write: the database away for a moment after the cloud took
the replacement does not lose the record (the same promise as every decision's, docs/failures.md)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest

from autoscaler.app import create_app
from tests.support import pg
from tests.support.fakes.cutting_hook import CuttingHook
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.tcpproxy import TcpProxy
from tests.support import AUTH, am_alert, am_payload, config, post

pytestmark = pytest.mark.slow


@pytest.fixture
def database() -> Iterator[str]:
    pg.require_postgres()
    with pg.temp_database() as name:
        yield name


def test_a_repair_start_whose_record_meets_a_database_outage_is_recorded_once_it_is_back(
        tmp_path: Path, database: str) -> None:
    """Before: the start recorded with ``EventLog.applied`` (one try of ``update_pool``): the node cordoned and the
    replacement asked, then 503 and no event, no stored size. Now: the final write waits while the lease holds."""
    with FakeKube() as kube, TcpProxy(pg.HOST, pg.PORT) as proxy, CuttingHook(proxy, down=2.0) as hook:
        for i in range(3):
            kube.add_node(f"gpunp-{i}", {"agentpool": "gpunp"})
        kube.add_pod("train-7", "gpunp-0", gpus=8)  # a Job: the repair waits for it, nothing more is asked
        cfg = config(pg.url_for(database, port=proxy.port), kubernetes={"host": kube.url, "token": kube.token},
                     pools=[{"name": "gpu", "provider": "webhook", "min": 1, "max": 6,
                             "node_selector": "agentpool=gpunp", "repair": {"max_unhealthy": 1},
                             "webhook": {"url": f"{hook.url}/scale", "initial_count": 3, "timeout": "5s"}}])
        cfg["store"] = {**cfg["store"], "connect_timeout": "1s"}
        app = create_app(cfg, startup_check=False)
        client = app.test_client()
        started = time.monotonic()
        answer = post(client, "/webhook/alertmanager", am_payload(am_alert(
            "GPUNodeUnhealthy", autoscaler_pool="gpu", autoscaler_action="repair", node="gpunp-0")))
        took = time.monotonic() - started
        assert answer.status_code == 200, answer.get_data(as_text=True)
        decision = answer.get_json()["decisions"][0]
        assert (decision["outcome"], decision["from"], decision["to"]) == ("repair_started", 3, 4), decision
        assert hook.back_at is not None and took >= 1.5  # answered once the database was back
        assert [c["to"] for c in hook.calls] == [4]
        events = client.get("/api/v1/events?pool=gpu", headers=AUTH).get_json()["events"]
        assert [(e["outcome"], e["from"], e["to"]) for e in events] == [("repair_started", 3, 4)]
        pool = client.get("/api/v1/pools/gpu", headers=AUTH).get_json()
        assert [r["node"] for r in pool["repairs"]] == ["gpunp-0"] and pool["last_event"]["id"] == events[0]["id"]
        app.extensions["autoscaler"].store.close()  # its pooled connections closed here, not by a later test's GC
