"""Issue 45 item 5: the path to PostgreSQL stops forwarding but keeps its connections open (a hung PgBouncer or
sidecar; the kernel still acknowledges). ``statement_timeout`` is the server's and the query never reaches it;
``tcp_user_timeout`` and keepalives see acknowledgements: before, an alert had no answer after 25 s (stuck in the
pool's pre-ping) and scaled once forwarding resumed, after its sender had given up. Now every store call has a
client-side deadline: 503 within ``statement_timeout`` and a little, and nothing of that alert is written later.
The real PostgreSQL behind a stdlib TCP proxy that stalls."""
from __future__ import annotations

import time
from typing import Any, Iterator

import pytest

from autoscaler.store import SqlStore, StoreUnavailable
from autoscaler.store.connections import StoreOptions
from tests.support import pg
from tests.support.fakes.tcpproxy import TcpProxy
from tests.support import AUTH, FakeClock, am_alert, am_payload, answered_within, events, make_app, post

pytestmark = pytest.mark.slow

STATEMENT, CONNECT = 3.0, 2.0
BOUND = f"statement_timeout {STATEMENT:g}s, connect_timeout {CONNECT:g}s"
IN_TIME = STATEMENT + 1.5  # the deadline (statement_timeout + 1 s) and a margin for a loaded machine


@pytest.fixture
def database() -> Iterator[str]:
    pg.require_postgres()
    with pg.temp_database() as name:
        yield name


def test_an_alert_is_answered_503_in_time_and_never_acts_later(database: str) -> None:
    with TcpProxy(pg.HOST, pg.PORT) as proxy:
        clock = FakeClock()
        app = make_app(pg.url_for(database, port=proxy.port), clock=clock,
                       store={"url": pg.url_for(database, port=proxy.port), "statement_timeout": f"{STATEMENT:g}s",
                              "connect_timeout": f"{CONNECT:g}s"})
        try:
            _stall_one_alert(app.test_client(), proxy, clock)
        finally:
            app.extensions["autoscaler"].store.close()  # its connections closed before the database goes


def _stall_one_alert(client: Any, proxy: TcpProxy, clock: FakeClock) -> None:
    resp = post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="warm")))
    assert resp.status_code == 200 and resp.get_json()["decisions"][0]["outcome"] == "scaled"  # 2 -> 3
    clock.advance(600)  # past the cooldown: the next alert would scale

    proxy.stall()
    try:
        took, resp = answered_within(25, BOUND, lambda: post(
            client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="stalled"))))
    finally:
        proxy.resume()
    assert resp.status_code == 503, resp.get_data(as_text=True)
    assert resp.headers.get("Retry-After"), resp.headers
    assert took < IN_TIME, took

    time.sleep(1.0)  # what the proxy held reaches the database now: none of it may act or be recorded
    got = client.get("/api/v1/pools/gpu", headers=AUTH).get_json()
    assert got["current"] == 3, got
    assert [(e["outcome"], e["to"]) for e in events(client, pool="gpu")] == [("scaled", 3)]
    # and the service works again at once: a new alert acts (the cut connections were dropped)
    resp = post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="after")))
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert resp.get_json()["decisions"][0]["outcome"] == "scaled"


def test_every_store_call_has_the_deadline(database: str) -> None:
    """A read, a write and the readiness probe on pooled connections, each cut at the deadline."""
    with TcpProxy(pg.HOST, pg.PORT) as proxy:
        store = SqlStore(pg.url_for(database, port=proxy.port),
                         StoreOptions(statement_timeout=STATEMENT, connect_timeout=CONNECT))
        try:
            store.ensure_pools(["gpu"])
            for name, call in (("read", lambda: store.events("gpu", 10)),
                               ("write", lambda: store.acquire("gpu", "me", 100.0, 30.0)),
                               ("ready", store.ping)):
                store.ping()  # a pooled connection that works, then the path stalls
                proxy.stall()
                try:
                    took, got = answered_within(25, BOUND, call)
                finally:
                    proxy.resume()
                assert isinstance(got, StoreUnavailable), (name, got)
                assert took < IN_TIME, (name, took)
            assert store.acquire("gpu", "me", 100.0, 30.0) is not None  # fine again once forwarding resumes
        finally:
            store.close()
