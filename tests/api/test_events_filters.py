"""GET /api/v1/events filtered by outcome and source and paged with ``before``/``next``; the store's reads behind it
(and the status page's batch reads) the same on SQLite, PostgreSQL and the memory store."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from sqlalchemy import event, insert, text

from autoscaler.store import EventRecord, NodesView, PoolChange, SqlStore, Store, tables
from autoscaler.store.rows import event_row
from tests.support import pg
from tests.support import AUTH, FakeClock, am_alert, am_payload, make_app


def _ev(t: float, pool: str | None, outcome: str, source: str = "alertmanager") -> EventRecord:
    return EventRecord(time=t, pool=pool, source=source, action="scale_out", outcome=outcome, from_=1, to=2,
                       reason=f"{outcome} at {t:g}")


@pytest.fixture(params=["sqlite", "postgresql", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with pg.each_store(request.param, tmp_path) as made:
        yield made


def _fill(store: Store) -> list[int]:
    store.ensure_pools(["a", "b", "c"])
    kinds = [("a", "scaled", "alertmanager"), ("b", "failed", "grafana"), ("a", "skipped_cooldown", "alertmanager"),
             ("a", "no_capacity", "reconcile"), (None, "unrouted", "alertmanager"), ("b", "scaled", "manual"),
             ("a", "scaled", "grafana")]
    return [store.record(_ev(100.0 + i, pool, outcome, source)) for i, (pool, outcome, source) in enumerate(kinds)]


def test_the_store_filters_by_outcome_and_source_and_pages(store: Store) -> None:
    ids = _fill(store)
    outcomes = [e.outcome for e in store.events(None, 10, outcomes=("scaled", "no_capacity"))]
    assert outcomes == ["scaled", "scaled", "no_capacity", "scaled"]
    assert [e.id for e in store.events("a", 10, outcomes=("scaled",))] == [ids[6], ids[0]]
    assert [e.id for e in store.events(None, 10, source="grafana")] == [ids[6], ids[1]]
    assert [e.id for e in store.events("a", 10, ids[6], outcomes=("scaled",), source="grafana")] == []
    assert [e.id for e in store.events(None, 2, ids[5], outcomes=("scaled", "failed"))] == [ids[1], ids[0]]
    assert [e.id for e in store.events(None, 100)] == ids[::-1]  # unfiltered: as before


def test_the_page_reads_every_pool_at_once(store: Store) -> None:
    ids = _fill(store)
    recent = store.recent_events(since=102.0, per_pool=2)
    assert {pool: [e.id for e in evs] for pool, evs in recent.items()} == {"a": [ids[6], ids[3]], "b": [ids[5]]}
    store.update_pool("b", _ev(200.0, "b", "paused", "operator"), PoolChange(paused=True, pause_reason="x"))
    last = store.last_events()
    assert set(last) == {"b"} and last["b"].outcome == "paused"  # record() leaves a pool's last event alone
    assert store.nodes_views() == {}
    store.save_nodes(NodesView("a", [{"name": "n1"}], None, 5.0))
    store.save_nodes(NodesView("c", [], "listing failed", 6.0))
    assert store.nodes_views() == {"a": NodesView("a", [{"name": "n1"}], None, 5.0),
                                   "c": NodesView("c", [], "listing failed", 6.0)}


def _scanned(store: SqlStore, call: Any) -> int:
    """The rows PostgreSQL's scans read for the statement ``call`` sends: its plan run (EXPLAIN ANALYZE), each scan's
    rows kept and removed by its filter, times its loops. The database's work, so the check cannot flake."""
    sent: list[tuple[str, Any]] = []

    def hook(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        sent.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", hook)
    try:
        call()
    finally:
        event.remove(store.engine, "before_cursor_execute", hook)
    statement, parameters = next(s for s in sent if "FROM events" in s[0])
    with store.engine.connect() as conn:
        plan = conn.exec_driver_sql(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", parameters).scalar_one()

    def read(node: dict[str, Any]) -> int:
        own = (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"] \
            if "Scan" in node["Node Type"] else 0
        return int(own) + sum(read(child) for child in node.get("Plans", []))
    return read(plan[0]["Plan"])


def test_the_pages_read_of_recent_events_reads_each_pools_newest_only_on_postgresql(tmp_path: Path) -> None:
    """Issue 45, item 11: the read ranked every event of the window (a window function over 20,000 rows here), and
    a LATERAL join on ``pool = name`` walked the whole table backwards for a pool whose events are old."""
    with pg.each_store("postgresql", tmp_path) as store:
        assert isinstance(store, SqlStore)
        store.ensure_pools(["busy1", "busy2", "quiet"])
        rows = [event_row(_ev(10.0 + i, "quiet", "scaled")) for i in range(3)]
        rows += [event_row(_ev(1000.0 + i, f"busy{1 + i % 2}", "skipped_cooldown")) for i in range(20_000)]
        with store.engine.begin() as conn:
            conn.execute(insert(tables.events), rows)
            conn.execute(text("ANALYZE events"))  # what autovacuum does after such a batch
        recent: dict[str, list[EventRecord]] = {}
        read = _scanned(store, lambda: recent.update(store.recent_events(since=500.0, per_pool=50)))
        assert {pool: len(evs) for pool, evs in recent.items()} == {"busy1": 50, "busy2": 50}
        assert [e.time for e in recent["busy1"][:2]] == [20998.0, 20996.0]
    assert read <= 2 * (3 + 3 * 50), read  # the pools and each pool's newest; before: every event scanned


def _get(client: Any, **query: str) -> Any:
    return client.get("/api/v1/events", query_string=query, headers=AUTH)


@pytest.fixture
def client(tmp_path: Path) -> Any:
    clock = FakeClock()
    client = make_app(f"sqlite:///{tmp_path}/s.db", clock).test_client()
    for i in range(5):  # one scaled, then cooldown skips
        client.post("/webhook/alertmanager", json=am_payload(am_alert(fingerprint=f"f{i}")), headers=AUTH)
        clock.advance(30)
    client.post("/api/v1/pools/spare/scale", json={"action": "scale_out"}, headers=AUTH)
    client.post("/api/v1/pools/spare/pause", json={"reason": "drain"}, headers=AUTH)
    return client


def test_api_filters_by_outcome_and_source(client: Any) -> None:
    every = _get(client).get_json()
    assert every["next"] is None and len(every["events"]) == 7
    scaled = _get(client, outcome="scaled").get_json()["events"]
    assert [(e["pool"], e["source"]) for e in scaled] == [("spare", "manual"), ("gpu", "alertmanager")]
    two = _get(client, outcome="scaled,paused").get_json()["events"]
    assert [e["outcome"] for e in two] == ["paused", "scaled", "scaled"]
    repeated = client.get("/api/v1/events?outcome=scaled&outcome=paused", headers=AUTH).get_json()["events"]
    assert repeated == two
    assert [e["outcome"] for e in _get(client, source="manual").get_json()["events"]] == ["scaled"]
    assert _get(client, pool="gpu", outcome="paused").get_json() == {"events": [], "next": None}


def test_api_pages_with_next_until_null(client: Any) -> None:
    seen, before, pages = [], None, 0
    while True:
        query = ({"pool": "gpu", "outcome": "skipped_cooldown", "limit": "2"}
                 | ({"before": str(before)} if before else {}))
        body = _get(client, **query).get_json()
        seen += body["events"]
        pages += 1
        before = body["next"]
        if before is None:
            break
        assert before == body["events"][-1]["id"]
    assert pages == 2 and len(seen) == 4 and all(e["outcome"] == "skipped_cooldown" for e in seen)
    assert [e["id"] for e in seen] == sorted((e["id"] for e in seen), reverse=True)
    exact = _get(client, outcome="skipped_cooldown", limit="4").get_json()
    assert len(exact["events"]) == 4 and exact["next"] is None  # a full last page: no page after it


@pytest.mark.parametrize(("query", "said"), [
    pytest.param({"outcome": "scaled,nope"}, "outcome: unknown outcome 'nope'", id="unknown-outcome"),
    pytest.param({"source": "pagerduty"}, "source: unknown source 'pagerduty'", id="unknown-source"),
    pytest.param({"before": "-1"}, "before must be an event id", id="negative-before"),
    pytest.param({"before": "abc"}, "before must be an event id", id="word-before"),
    pytest.param({"limit": "0"}, "limit must be a whole number from 1 to 1000", id="zero-limit"),
])
def test_api_refuses_bad_filters_with_400(client: Any, query: dict[str, str], said: str) -> None:
    resp = _get(client, **query)
    assert resp.status_code == 400 and resp.get_json()["error"].startswith(said)


def test_openapi_documents_the_filters_and_next(client: Any) -> None:
    doc = client.get("/openapi.json").get_json()
    params = {p["name"]: p for p in doc["paths"]["/api/v1/events"]["get"]["parameters"]}
    assert {"pool", "limit", "before", "outcome", "source"} <= set(params)
    assert "no_capacity" in params["outcome"]["schema"]["items"]["enum"] and params["outcome"]["explode"] is False
    assert "next" in doc["components"]["schemas"]["EventList"]["properties"]


