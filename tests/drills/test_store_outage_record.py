"""PostgreSQL away for 6-7 s while the cloud acts, through gunicorn (issue 34, item 11).

The service reaches the shared PostgreSQL through a TCP proxy (tests/support/fakes/tcpproxy.py) that the pool's webhook
cuts the moment it receives the change, and that comes back a few seconds later; the webhook is a real local HTTP
server taking the generic webhook provider's call. The cloud's change is always recorded: within the lease, the
decision's final write waits for the database and the sender is answered ``scaled``; past the lease, the sender
gets 503 and the record is written as soon as the database is back (a resend finds it recorded, never acts again).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest
import requests

from autoscaler.pool.final_write import FinalWrites, Pending
from autoscaler.store import SqlStore
from autoscaler.store.base import EventRecord, PoolChange
from tests.support import pg
from tests.support.fakes.cutting_hook import CuttingHook
from tests.support.fakes.tcpproxy import TcpProxy
from tests.support.pipeline import wait_for
from tests.support.servers import Service
from tests.support import AUTH, am_alert, am_payload, config

pytestmark = pytest.mark.slow


@pytest.fixture
def database() -> Iterator[str]:
    pg.require_postgres()
    with pg.temp_database() as name:
        yield name


def _service(tmp_path: Path, name: str, proxy: TcpProxy, hook: CuttingHook, lease_ttl: str) -> Service:
    cfg = config(pg.url_for(name, port=proxy.port))
    cfg["store"] = {**cfg["store"], "connect_timeout": "1s"}
    cfg["server"] = {**cfg["server"], "lease_ttl": lease_ttl}
    cfg["pools"] = [{"name": "gpu", "provider": "webhook", "min": 1, "max": 6,
                     "webhook": {"url": f"{hook.url}/scale", "initial_count": 3, "timeout": "5s"}}]
    return Service(cfg, tmp_path, workers=2)


def _recorded(server: Service) -> list[tuple[str, int | None, int | None]]:
    got = requests.get(f"{server.url}/api/v1/events?pool=gpu&limit=100", headers=AUTH, timeout=10)
    return [(e["outcome"], e["from"], e["to"]) for e in reversed(got.json()["events"])]


def _size(server: Service) -> int:
    return int(requests.get(f"{server.url}/api/v1/pools/gpu", headers=AUTH, timeout=10).json()["current"])


def test_outage_within_the_lease_waits_for_the_database_and_records_the_change(tmp_path: Path,
                                                                               database: str) -> None:
    with TcpProxy(pg.HOST, pg.PORT) as proxy, CuttingHook(proxy, down=6.0) as hook:
        with _service(tmp_path, database, proxy, hook, lease_ttl="30s") as server:
            started = time.monotonic()
            answer = requests.post(f"{server.url}/webhook/alertmanager", json=am_payload(am_alert()),
                                   headers=AUTH, timeout=60)
            took = time.monotonic() - started
            assert answer.status_code == 200, answer.text
            decision = answer.json()["decisions"][0]
            assert (decision["outcome"], decision["from"], decision["to"]) == ("scaled", 3, 4)
            assert hook.back_at is not None and took >= 5.0  # answered after the database came back
            assert [c["to"] for c in hook.calls] == [4]
            assert _recorded(server) == [("scaled", 3, 4)]
            assert _size(server) == 4  # the pool as the cloud has it
            resend = requests.post(f"{server.url}/webhook/alertmanager", json=am_payload(am_alert()),
                                   headers=AUTH, timeout=30)
            assert [d["outcome"] for d in resend.json()["decisions"]] == ["skipped_duplicate"]
            assert [c["to"] for c in hook.calls] == [4]
        assert "retrying for up to" in server.read_log()


def test_outage_past_the_lease_is_recorded_once_the_database_is_back(tmp_path: Path, database: str) -> None:
    with TcpProxy(pg.HOST, pg.PORT) as proxy, CuttingHook(proxy, down=7.0) as hook:
        with _service(tmp_path, database, proxy, hook, lease_ttl="3s") as server:
            answer = requests.post(f"{server.url}/webhook/alertmanager", json=am_payload(am_alert()),
                                   headers=AUTH, timeout=60)
            assert answer.status_code == 503, answer.text  # not recorded yet: the sender will resend
            assert [c["to"] for c in hook.calls] == [4]
            wait_for(lambda: hook.back_at is not None, 15, "the database back")
            resends = []
            for _ in range(3):  # Alertmanager's resends, whichever worker takes them
                resends.append(requests.post(f"{server.url}/webhook/alertmanager", json=am_payload(am_alert()),
                                             headers=AUTH, timeout=30))
            assert [r.status_code for r in resends] == [200] * 3, [r.text for r in resends]
            assert all(r.json()["decisions"][0]["outcome"] == "skipped_duplicate" for r in resends)
            wait_for(lambda: ("scaled", 3, 4) in _recorded(server), 10, "the lost write recorded")
            assert [e for e in _recorded(server) if e[0] != "skipped_duplicate"] == [("scaled", 3, 4)]
            assert _size(server) == 4
            assert [c["to"] for c in hook.calls] == [4]  # the cloud was asked once
        log = server.read_log()
        assert "written late" in log or "had been committed" in log


def test_a_write_whose_commit_landed_is_found_not_written_twice(tmp_path: Path) -> None:
    """The connection cut during COMMIT: the transaction landed, its answer did not; the retry finds the event."""
    store = SqlStore(f"sqlite:///{tmp_path}/s.db")
    try:
        store.ensure_pools(["gpu"])
        assert store.acquire("gpu", "me", 100.0, 30.0) is not None
        ev = EventRecord(time=100.5, pool="gpu", source="alertmanager", action="scale_out", outcome="scaled",
                         from_=3, to=4, reason="scale out 3 -> 4")
        change = PoolChange(at=100.5, tracked_count=4)
        landed = store.finish("gpu", "me", ev, change)  # committed; the service never heard back
        published: list[int] = []
        pending = Pending("gpu", "me", ev, change, None, published.append, in_doubt=True)
        assert FinalWrites(store).write(pending, until=None) == landed
        assert [(e.outcome, e.to) for e in store.events("gpu", 10)] == [("scaled", 4)]
        fresh = Pending("gpu", "me", EventRecord(**{**ev.__dict__, "time": 200.0}), change, None, published.append)
        assert FinalWrites(store).write(fresh, until=None) != landed  # not in doubt: written
        assert len(store.events("gpu", 10)) == 2
    finally:
        store.close()
