"""Upgrades from every schema this repository ever shipped, on SQLite and PostgreSQL (issue 34, item 3).

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
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, text

from autoscaler.store import SqlStore, tables
from autoscaler.store.base import EventRecord, NodesView, PoolChange, PoolView
from autoscaler.store.migrate import head_revision
from tests.support import pg
from tests.support.schema_history import build, revision_label, shipped_commits
from tests.support.servers import Service
from tests.support import AUTH, config

pytestmark = pytest.mark.slow
COMMITS = [pytest.param(c, id=f"{c}-{revision_label(c)}") for c in shipped_commits()]


def test_the_history_holds_each_revision_and_the_two_builds_of_0004() -> None:
    labels = [revision_label(c) for c in shipped_commits()]
    assert labels[0] == "create_all" and labels[-1].startswith(head_revision())  # HEAD's own schema is the last
    assert {"0001_initial", "0002_recommendations", "0003_reconciler", "0004_capacity", "0004_node_views"} <= set(labels)


def _usable(store: SqlStore) -> None:
    """The schema is head's, the old rows are kept, and every kind of row the service writes can be written."""
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn)
        assert compare_metadata(ctx, tables.metadata) == []
        assert ctx.get_current_revision() == head_revision()
    gpu = store.pool("gpu")
    assert gpu.paused and gpu.pause_reason == "kept by the upgrade"
    assert [e.reason for e in store.events("gpu", 10)] == ["old"]
    store.ping()
    store.save_nodes(NodesView("gpu", [{"name": "n1"}], None, 5.0))
    assert store.nodes_view("gpu") == NodesView("gpu", [{"name": "n1"}], None, 5.0)
    store.save_view(PoolView("gpu", 2, False, "", 0, None, 5.0))
    assert store.views()["gpu"].current == 2
    assert store.hold_lease("reconciler", "me", 5.0, 30.0)
    store.add_recommendation("gpu", 5.0, 3, 0.0)
    assert store.recommendations("gpu", 0.0) == [(5.0, 3)]
    assert store.acquire("gpu", "owner", 5.0, 30.0) is not None
    ev = EventRecord(time=6.0, pool="gpu", source="manual", action="scale_out", outcome="no_capacity", from_=2,
                     to=2, reason="short")
    store.finish("gpu", "owner", ev, PoolChange(at=6.0, short_until=66.0, short_reason="stockout"))
    assert (store.pool("gpu").short_until, store.pool("gpu").short_reason) == (66.0, "stockout")


@pytest.mark.parametrize("commit", COMMITS)
def test_sqlite_file_of_every_shipped_schema_upgrades_to_head(commit: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/old.db"
    build(commit, url, tmp_path)
    store = SqlStore(url)
    try:
        _usable(store)
    finally:
        store.close()
    again = SqlStore(url)  # a second start finds nothing to do and changes nothing
    try:
        _usable_again(again)
    finally:
        again.close()


def _usable_again(store: SqlStore) -> None:
    with store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), tables.metadata) == []
    assert store.nodes_view("gpu") is not None and store.pool("gpu").short_reason == "stockout"


@pytest.mark.parametrize("commit", COMMITS)
def test_postgresql_database_of_every_shipped_schema_upgrades_to_head(commit: str, tmp_path: Path) -> None:
    pg.require_postgres()
    with pg.temp_database() as name:
        build(commit, pg.url_for(name).replace("postgresql://", "postgresql+psycopg://", 1), tmp_path)
        store = SqlStore(pg.url_for(name))
        try:
            _usable(store)
        finally:
            store.close()
        again = SqlStore(pg.url_for(name))
        try:
            _usable_again(again)
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
