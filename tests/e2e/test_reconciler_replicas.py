"""The reconciler under real gunicorn: two instances of two workers each on one PostgreSQL, four loops, one holder;
a schedule window raises the pool once, with source ``schedule``."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest
import requests

from tests.support import pg
from tests.support.pipeline import wait_for
from tests.support.servers import Service

pytestmark = pytest.mark.slow
TOKEN = "reconciler-replica-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def config(store_url: str) -> dict[str, Any]:
    return {
        "server": {"auth": {"bearer_tokens": [TOKEN]}, "reconcile_interval": "1s"},
        "store": {"url": store_url},
        "pools": [{"name": "sim", "provider": "simulated", "min": 0, "max": 8,
                   "simulated": {"initial_count": 1},
                   "schedules": [{"cron": "* * * * *", "duration": "1h", "min": 3}]}],  # always open
    }


@pytest.fixture
def database() -> Iterator[str]:
    pg.require_postgres()
    with pg.temp_database() as name:
        yield name


def test_two_instances_of_two_workers_hold_one_reconciler(tmp_path: Path, database: str) -> None:
    url = pg.url_for(database)
    instances = [Service(config(url), tmp_path, workers=2) for _ in range(2)]
    try:
        for inst in instances:
            inst.spawn()
        for inst in instances:
            inst.wait_ready()
        wait_for(lambda: requests.get(f"{instances[0].url}/api/v1/events", headers=AUTH, timeout=10).json()["events"],
                 20, "the schedule's decision", interval=0.2)
        with psycopg.connect(pg.ADMIN_DSN.replace("dbname=test", f"dbname={database}"), autocommit=True) as conn:
            def read_at() -> Any:
                return conn.execute("SELECT read_at FROM pool_views WHERE pool = 'sim'").fetchone()

            first = read_at()
            # four more ticks (the view is read at each): the floor is met, nobody acts again
            later = wait_for(lambda: (lambda r: r if r is not None and first is not None and r[0] >= first[0] + 4
                                      else None)(read_at()), 20, "four more reconciler ticks", interval=0.2)
            owners = conn.execute("SELECT owner FROM leases WHERE name = 'reconciler'").fetchall()
        events = requests.get(f"{instances[1].url}/api/v1/events", headers=AUTH, timeout=10).json()["events"]
        assert [(e["source"], e["outcome"], e["from"], e["to"]) for e in events] == [("schedule", "scaled", 1, 3)]
        assert len(owners) == 1 and first is not None and later is not None and later[0] > first[0]  # it ticks
        logs = "".join(inst.read_log() for inst in instances)
        taken = re.findall(r"reconciler lease taken by (\S+)", logs)
        assert taken == [owners[0][0]], taken  # four loops, one holder, never handed over
        pool = requests.get(f"{instances[1].url}/api/v1/pools/sim", headers=AUTH, timeout=10).json()
        assert (pool["current"], pool["effective_min"]) == (3, 3) and pool["view_age_s"] < 3
    finally:
        for inst in instances:
            inst.stop()
