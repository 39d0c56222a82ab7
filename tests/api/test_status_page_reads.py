"""Issue 34, item 9: the status page read every pool's stored view once per row (800 pools: 6 s; 10,000: no
answer). A page now reads the store a fixed number of times whatever the number of pools, as the API's list does;
counted as the SQL statements the store sends (SQLAlchemy's own cursor hook), so the check cannot flake."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from flask.testing import FlaskClient
from sqlalchemy import event, insert

from autoscaler.api.status import CHARTS
from autoscaler.store import EventRecord, tables
from autoscaler.store.rows import event_row
from tests.support import AUTH, FakeClock, am_alert, am_payload, make_app, post
from tests.support.statements import reads, sent_by


def _app(tmp_path: Path, pools: int) -> tuple[FlaskClient, Any]:
    specs = [{"name": f"p{i:04d}", "provider": "simulated", "min": 0, "max": 6, "simulated": {"initial_count": 1}}
             for i in range(pools)]
    groups = [{"name": "g", "pools": [s["name"] for s in specs[:3]]}]
    clock = FakeClock()
    tmp_path.mkdir(parents=True, exist_ok=True)
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
        return len(reads(sent_by(client, engine, path)[1]))
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
    assert html.count('class="pool"') + html.count('class="pool-row"') == 60  # every pool: a section or a row
    assert html.count("<svg") == CHARTS  # the charts the page draws at most (issue 45, item 11; before: 60)


def _stored_events(engine: Any, pools: list[str], per_pool: int, now: float, spread: float) -> None:
    """``per_pool`` events of each pool, the newest at ``now``, one every ``spread / per_pool`` seconds before it,
    written as one batch (a store's year of decisions in a second)."""
    rows = [event_row(EventRecord(time=now - spread * (per_pool - 1 - i) / per_pool, pool=pool, source="alertmanager",
                                  action="scale_out", outcome=("scaled", "skipped_cooldown")[i % 2], from_=1,
                                  to=2 - i % 2, reason="GPUBusy", details={"value": float(i % 7)}))
            for i in range(per_pool) for pool in pools]
    with engine.begin() as conn:
        conn.execute(insert(tables.events), rows)


def _sqlite_steps(engine: Any, client: FlaskClient, path: str) -> int:
    """The SQLite virtual machine's instructions (in hundreds) the request runs: the database's work, whatever the
    machine's load, so the check cannot flake."""
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    def hook(conn: Any, *args: Any) -> None:
        conn.connection.driver_connection.set_progress_handler(tick, 100)

    event.listen(engine, "before_cursor_execute", hook)
    try:
        resp = client.get(path, headers=AUTH)
    finally:
        event.remove(engine, "before_cursor_execute", hook)
    assert resp.status_code == 200
    return steps[0]


def test_a_page_does_the_same_work_in_the_store_for_200_or_20_000_events_per_pool(tmp_path: Path) -> None:
    """Issue 45, item 11: the charts' read ranked every event of the 6-hour window to keep each pool's newest 200
    (800 pools, 100,000 events: 6.5 s a page). Both stores hold each pool's 200 newest events in the last hour, what its
    chart draws; the second also 19,800 older per pool, half of them inside the window."""
    names = ["p0000", "p0001", "p0002"]
    steps = []
    for older in (0, 19_800):
        client, engine = _app(tmp_path / str(older), 3)
        now = client.application.extensions["autoscaler"].wall()
        if older:
            _stored_events(engine, names, older, now - 3600, 10 * 3600)
        _stored_events(engine, names, 200, now, 3600)
        client.get("/", headers=AUTH)  # warm: connections opened, statements compiled
        steps.append(_sqlite_steps(engine, client, "/"))
    assert steps[1] <= steps[0] * 1.25, steps  # before: 712 and 28,039 hundreds of steps
