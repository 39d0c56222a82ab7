"""Pause, resume and count corrections take the pool's lease like decisions: an operator's act is never overtaken
by a decision in flight (waiting up to ``server.lock_wait``, then 503 + Retry-After, nothing changed)."""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from flask.testing import FlaskClient

from tests.support.fakes.fault_cloud import FakeCloud, HttpTestProvider, Reply
from tests.support.fakes.httpbase import FakeHttpServer, Reply as HttpReply, Request
from tests.support.pipeline import wait_for
from tests.support import AUTH, BASE_CONFIG, FakeClock, am_alert, am_payload, make_app

JSON = {**AUTH, "Content-Type": "application/json"}


class Gate(FakeHttpServer):
    """A webhook endpoint that holds each POST until released (a slow cloud); counts what entered."""

    name = "gate"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        super().__init__()

    def handle(self, request: Request) -> HttpReply:
        self.entered.set()
        self.release.wait(30)
        return HttpReply(200, {})


def _server(lock_wait: str) -> dict[str, Any]:
    return {**BASE_CONFIG["server"], "lock_wait": lock_wait}


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    return thread, out


@pytest.fixture
def cloud() -> Iterator[FakeCloud]:
    with FakeCloud(count=2) as fake:
        yield fake


def _events(client: FlaskClient) -> list[dict[str, Any]]:
    return list(reversed(client.get("/api/v1/events?pool=gpu", headers=AUTH).get_json()["events"]))


def test_pause_waits_for_the_decision_in_flight(tmp_path: Path, cloud: FakeCloud) -> None:
    cloud.script = [Reply(block=True)]
    app = make_app(f"sqlite:///{tmp_path}/s.db", FakeClock(), {"gpu": HttpTestProvider(cloud.url, timeout=20)},
                   server=_server("10s"))
    client = app.test_client()
    alert, _ = _in_thread(lambda: client.post("/webhook/alertmanager", json=am_payload(am_alert()), headers=AUTH))
    wait_for(lambda: cloud.calls, 10, "the cloud call")
    pause, paused = _in_thread(lambda: app.test_client().post("/api/v1/pools/gpu/pause", data="{}", headers=JSON))
    pause.join(0.5)
    assert pause.is_alive(), "pause answered while a decision on the pool was still running"
    cloud.release.set()
    alert.join(10)
    pause.join(10)
    assert paused[0].status_code == 200 and paused[0].get_json()["paused"] is True
    assert [e["outcome"] for e in _events(client)] == ["scaled", "paused"]


def test_pause_past_lock_wait_is_503_and_changes_nothing(tmp_path: Path, cloud: FakeCloud) -> None:
    cloud.script = [Reply(block=True)]
    app = make_app(f"sqlite:///{tmp_path}/s.db", FakeClock(), {"gpu": HttpTestProvider(cloud.url, timeout=20)},
                   server=_server("200ms"))
    client = app.test_client()
    alert, _ = _in_thread(lambda: client.post("/webhook/alertmanager", json=am_payload(am_alert()), headers=AUTH))
    wait_for(lambda: cloud.calls, 10, "the cloud call")
    answer = app.test_client().post("/api/v1/pools/gpu/pause", data=json.dumps({"reason": "x"}), headers=JSON)
    assert answer.status_code == 503 and int(answer.headers["Retry-After"]) >= 1
    assert "another decision" in answer.get_json()["error"]
    cloud.release.set()
    alert.join(10)
    assert client.get("/api/v1/pools/gpu", headers=AUTH).get_json()["paused"] is False
    assert [e["outcome"] for e in _events(client)] == ["scaled"]


def test_count_correction_is_not_lost_to_a_decision_in_flight(tmp_path: Path) -> None:
    with Gate() as gate:
        pools = [{"name": "gpu", "provider": "webhook", "min": 0, "max": 50,
                  "webhook": {"url": gate.url + "/scale", "initial_count": 2}}]
        app = make_app(f"sqlite:///{tmp_path}/s.db", FakeClock(), pools=pools, server=_server("10s"))
        client = app.test_client()
        alert, _ = _in_thread(lambda: client.post("/webhook/alertmanager", json=am_payload(am_alert()),
                                                  headers=AUTH))
        assert gate.entered.wait(10)
        put, answered = _in_thread(lambda: app.test_client().put("/api/v1/pools/gpu/count",
                                                                 data=json.dumps({"count": 40}), headers=JSON))
        put.join(0.5)
        assert put.is_alive(), "the count was corrected while a decision on the pool was still running"
        gate.release.set()
        alert.join(10)
        put.join(10)
        assert answered[0].status_code == 200, answered[0].get_data(as_text=True)
        assert client.get("/api/v1/pools/gpu", headers=AUTH).get_json()["current"] == 40
        events = _events(client)
        assert [e["outcome"] for e in events] == ["scaled", "count_corrected"]
        assert (events[1]["from"], events[1]["to"]) == (3, 40)
