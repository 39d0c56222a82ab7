"""Two replicas on one PostgreSQL whose clocks differ by a minute: the same alert, delivered to both (as Alertmanager
in HA does) while the first one's cloud call runs, acts once; a pool with no cooldown shows none on either; a
repair's grace is the same length on both."""
from __future__ import annotations

import threading
from typing import Any, Iterator

import pytest
from flask import Flask

from tests.support import pg
from tests.support.fakes.ack_hook import Answer, FakeHookServer
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.webhook_receiver import WebhookReceiver
from tests.support import AUTH, FakeClock, am_alert, am_payload, make_app, post

T0 = 1_800_000_000.0
SKEW = 60.0  # the slow replica's clock is this far behind
CLOUD_CALL = 2.0  # how long the cloud takes to answer the scale-out


def _pools(hook: FakeHookServer, cooldown: str) -> list[dict[str, Any]]:
    return [{"name": "gpu", "provider": "webhook", "min": 0, "max": 6, "scale_out": {"step": 1, "cooldown": cooldown},
             "webhook": {"url": hook.hook_url("/runs"), "timeout": "10s", "initial_count": 2}}]


@pytest.fixture
def hook() -> Iterator[FakeHookServer]:
    server = FakeHookServer().start()
    yield server
    server.stop()


@pytest.fixture
def database() -> Iterator[str]:
    pg.require_postgres()
    with pg.temp_database() as name:
        yield pg.url_for(name)


def _replicas(database: str, hook: FakeHookServer, cooldown: str = "5m") -> tuple[Flask, Flask]:
    """(the slow replica, the other): each its own app, engine and clock, on one database."""
    slow = make_app(database, FakeClock(T0 - SKEW, real_waits=True), pools=_pools(hook, cooldown))
    fast = make_app(database, FakeClock(T0, real_waits=True), pools=_pools(hook, cooldown))
    return slow, fast


def _close(*apps: Flask) -> None:
    for app in apps:
        app.extensions["autoscaler"].store.close()


def _notify(app: Flask, fingerprint: str = "fp-ha") -> list[dict[str, Any]]:
    answer = post(app.test_client(), "/webhook/alertmanager", am_payload(am_alert(fingerprint=fingerprint)))
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return answer.get_json()["decisions"]  # type: ignore[no-any-return]


def test_one_alert_to_both_replicas_during_a_slow_cloud_call_calls_the_cloud_once(database: str,
                                                                                   hook: FakeHookServer) -> None:
    slow, fast = _replicas(database, hook)
    try:
        hook.then(Answer(delay=CLOUD_CALL))
        first: list[list[dict[str, Any]]] = []
        sender = threading.Thread(target=lambda: first.append(_notify(slow)))
        sender.start()
        for _ in range(200):  # the slow replica's cloud call is under way
            if hook.calls:
                break
            threading.Event().wait(0.02)
        assert len(hook.calls) == 1
        second = _notify(fast)  # the same alert, from Alertmanager's other instance
        sender.join(30)
        print(f"cloud calls: {len(hook.calls)}; answers: {first[0][0]['outcome']}, {second[0]['outcome']}")
        assert [d["outcome"] for d in first[0]] == ["scaled"]
        assert [d["outcome"] for d in second] == ["skipped_duplicate"]
        assert len(hook.calls) == 1
    finally:
        _close(slow, fast)


def test_a_pool_with_no_cooldown_shows_none_on_the_slow_replica(database: str, hook: FakeHookServer) -> None:
    slow, fast = _replicas(database, hook, cooldown="0s")
    try:
        assert [d["outcome"] for d in _notify(fast, "fp-1")] == ["scaled"]
        pool = slow.test_client().get("/api/v1/pools/gpu", headers=AUTH).get_json()
        print(f"slow replica's remaining scale-out cooldown: {pool['cooldown']['scale_out_remaining_s']}s")
        assert pool["cooldown"]["scale_out_remaining_s"] == 0
        assert [d["outcome"] for d in _notify(slow, "fp-2")] == ["scaled"]
    finally:
        _close(slow, fast)


def test_repair_grace_runs_on_the_database_clock(database: str, receiver: WebhookReceiver) -> None:
    """The slow replica starts a repair of a node running a Job; the other replica's reconciler, a second later,
    finds the Job's pod still within a one-minute grace (before: past it, by the slow replica's clock, and evicted)."""
    with FakeKube() as kube:
        kube.add_node("gpunp-0", {"agentpool": "gpunp"})
        kube.add_pod("train-7", "gpunp-0", gpus=8)  # owned by a Job: waits out repair.grace
        pools = [{"name": "gpu", "provider": "webhook", "min": 1, "max": 6, "node_selector": "agentpool=gpunp",
                  "webhook": {"url": receiver.url, "initial_count": 1},
                  "repair": {"max_unhealthy": 1, "grace": "1m"}}]
        clocks = [FakeClock(T0 - SKEW), FakeClock(T0)]
        slow, fast = (make_app(database, clock, pools=pools, kubernetes={"host": kube.url, "token": kube.token})
                      for clock in clocks)
        try:
            alert = am_alert("GPUNodeUnhealthy", fingerprint="fp-node", autoscaler_pool="gpu",
                             autoscaler_action="repair", node="gpunp-0")
            answer = post(slow.test_client(), "/webhook/alertmanager", am_payload(alert)).get_json()
            assert [d["outcome"] for d in answer["decisions"]] == ["repair_started"], answer
            clocks[1].advance(1)
            fast.extensions["autoscaler_reconciler"].tick(clocks[1]())
            state = fast.test_client().get("/api/v1/pools/gpu", headers=AUTH).get_json()["repairs"][0]["state"]
            print(f"after 1 s of a 60 s grace, on the other replica: {state}; evictions: "
                  f"{kube.calls['CREATE eviction']}")
            assert ("ml", "train-7") in kube.pods and kube.calls["CREATE eviction"] == 0
            assert state == "waiting"
        finally:
            _close(slow, fast)
