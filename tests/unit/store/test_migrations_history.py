"""Upgrades from every schema this repository ever shipped, on SQLite (PostgreSQL:
test_migrations_history_postgresql.py; issue 34, item 3).

Each old schema is built by the code of the commit that shipped it (``tests/support/schema_history.py``), then this
checkout's store opens it: the schema must be the one ``store/tables.py`` describes, whatever revision the old file
claimed (one build's capacity migration carried revision 0004, the number node_views took later), data kept, and
every store call the service makes must work. A store the service cannot use fails ``/readyz``, through gunicorn.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import create_engine, text

from autoscaler.store import SqlStore
from autoscaler.store.migrate import head_revision
from tests.support.schema_history import build, revision_label, shipped_commits, usable, usable_again
from tests.support.servers import Service
from tests.support import AUTH, config

pytestmark = pytest.mark.slow
COMMITS = [pytest.param(c, id=f"{c}-{revision_label(c)}") for c in shipped_commits()]


def test_the_history_holds_each_revision_and_the_two_builds_of_0004() -> None:
    labels = [revision_label(c) for c in shipped_commits()]
    assert labels[0] == "create_all" and labels[-1].startswith(head_revision())  # HEAD's own schema is the last
    assert {"0001_initial", "0002_recommendations", "0003_reconciler", "0004_capacity",
            "0004_node_views"} <= set(labels)



@pytest.mark.parametrize("commit", COMMITS)
def test_sqlite_file_of_every_shipped_schema_upgrades_to_head(commit: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/old.db"
    build(commit, url, tmp_path)
    store = SqlStore(url)
    try:
        usable(store)
    finally:
        store.close()
    again = SqlStore(url)  # a second start finds nothing to do and changes nothing
    try:
        usable_again(again)
    finally:
        again.close()



def _ready(server: Service) -> tuple[int, dict[str, Any]]:
    got = requests.get(f"{server.url}/readyz", timeout=10)
    return got.status_code, got.json()


def _store_up(server: Service) -> float:
    body = requests.get(f"{server.url}/metrics", timeout=10).text
    line = next(ln for ln in body.splitlines() if ln.startswith("gpu_autoscaler_store_up "))
    return float(line.split()[1])


def test_service_on_the_0004_capacity_file_gets_node_views_and_a_lost_table_fails_readyz(tmp_path: Path) -> None:
    commit = next(c for c in shipped_commits() if revision_label(c) == "0004_capacity")
    db = tmp_path / "old.db"
    build(commit, f"sqlite:///{db}", tmp_path)
    with Service(config(f"sqlite:///{db}"), tmp_path, workers=2) as server:
        assert _ready(server) == (200, {"status": "ready"})
        pool = requests.get(f"{server.url}/api/v1/pools/gpu", headers=AUTH, timeout=10)
        assert pool.status_code == 200 and pool.json()["paused"] is True
        engine = create_engine(f"sqlite:///{db}")
        try:
            with engine.begin() as conn:
                assert conn.execute(text("SELECT count(*) FROM node_views")).scalar() == 0  # the table exists
                conn.execute(text("DROP TABLE node_views"))  # a store the service cannot use any more
        finally:
            engine.dispose()
        answers = [_ready(server) for _ in range(4)]  # each worker says so
        assert all(code == 503 for code, _ in answers), answers
        assert "node_views" in answers[0][1]["error"]
        assert _store_up(server) == 0
