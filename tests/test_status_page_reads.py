"""Issue 34, item 9: the status page read every pool's stored view once per row (800 pools: 6 s; 10,000: no
answer). A page now reads the store a fixed number of times whatever the number of pools, as the API's list does;
counted as the SQL statements the store sends (SQLAlchemy's own cursor hook), so the check cannot flake."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from flask.testing import FlaskClient
from sqlalchemy import event

from tests.support import AUTH, FakeClock, am_alert, am_payload, make_app, post


def _app(tmp_path: Path, pools: int) -> tuple[FlaskClient, Any]:
    specs = [{"name": f"p{i:04d}", "provider": "simulated", "min": 0, "max": 6, "simulated": {"initial_count": 1}}
             for i in range(pools)]
    groups = [{"name": "g", "pools": [s["name"] for s in specs[:3]]}]
    clock = FakeClock()
    app = make_app(f"sqlite:///{tmp_path}/s-{pools}.db", clock, pools=specs, groups=groups, rules=[])
    client = app.test_client()
    for spec in specs:  # each pool with a decision (its last event) and a stored view
        labels = {"autoscaler_pool": spec["name"], "autoscaler_action": "scale_out"}
        post(client, "/webhook/alertmanager", am_payload(am_alert("GPUBusy", fingerprint=spec["name"], **labels)))
        clock.advance(1)
    app.extensions["autoscaler_reconciler"].tick(clock())
    return client, app.extensions["autoscaler"].store.engine


@pytest.fixture
def counted() -> Iterator[Any]:
    def count(engine: Any, client: FlaskClient, path: str) -> int:
        seen: list[str] = []

        def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if statement.lstrip().upper().startswith("SELECT"):  # a read (SQLite's BEGIN IMMEDIATE aside)
                seen.append(statement)

        client.get(path, headers=AUTH)  # warm: connections opened, nothing else counted
        event.listen(engine, "before_cursor_execute", hook)
        try:
            resp = client.get(path, headers=AUTH)
        finally:
            event.remove(engine, "before_cursor_execute", hook)
        assert resp.status_code == 200
        return len(seen)
    yield count


def test_a_page_reads_the_store_the_same_few_times_for_3_or_60_pools(tmp_path: Path, counted: Any) -> None:
    small, small_engine = _app(tmp_path, 3)
    large, large_engine = _app(tmp_path, 60)
    page = counted(small_engine, small, "/"), counted(large_engine, large, "/")
    assert page[0] == page[1] <= 6, page  # before: 13 reads for 3 pools, 241 for 60
    filtered = "/?pool=p0002&outcome=scaled,skipped_cooldown&limit=5"
    assert counted(small_engine, small, filtered) == counted(large_engine, large, filtered) <= 6
    api = counted(small_engine, small, "/api/v1/pools"), counted(large_engine, large, "/api/v1/pools")
    assert api[0] == api[1] <= 3, api  # the API's list too (before: each pool's row and last event, 2 per pool)
    html = large.get("/", headers=AUTH).get_data(as_text=True)
    assert html.count('class="pool"') == 60 and html.count("<svg") == 60
