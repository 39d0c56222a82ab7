"""Two replicas (two apps, each with its own engine, reconciler and simulated cloud) on one PostgreSQL: one alert
for a group falls back once, never twice, and one shortfall is recorded and asked of the next pool once."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import pytest
from flask import Flask

from autoscaler.reconcile.loop import Reconciler
from autoscaler.store import PoolChange
from tests.support import pg
from tests.support import FakeClock, am_alert, am_payload, events, make_app, post

T0 = 1_800_000_000.0
POOLS = [{"name": "a100-spot", "provider": "simulated", "min": 0, "max": 8, "simulated": {"capacity": 1}},
         {"name": "a100-ondemand", "provider": "simulated", "min": 0, "max": 8}]
GROUPS = [{"name": "a100", "pools": ["a100-spot", "a100-ondemand"]}]


@pytest.fixture
def replicas() -> Iterator[tuple[list[Flask], FakeClock]]:
    pg.require_postgres()
    clock = FakeClock(T0)
    with pg.temp_database() as name:
        apps = [make_app(pg.url_for(name), clock, pools=POOLS, groups=GROUPS, rules=[]) for _ in range(2)]
        yield apps, clock
        for app in apps:
            app.extensions["autoscaler"].store.close()


def _notify(app: Flask, fingerprint: str) -> list[dict[str, Any]]:
    alert = am_alert("GPUBusy", fingerprint=fingerprint, autoscaler_pool="a100", autoscaler_action="scale_out")
    answer = post(app.test_client(), "/webhook/alertmanager", am_payload(alert))
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return answer.get_json()["decisions"]  # type: ignore[no-any-return]


def test_one_alert_never_falls_back_on_the_other_replica(replicas: tuple[list[Flask], FakeClock]) -> None:
    apps, _ = replicas
    [first] = _notify(apps[0], "fp-one")
    assert (first["pool"], first["outcome"]) == ("a100-spot", "scaled")
    store = apps[0].extensions["autoscaler"].store
    store.update_pool("a100-spot", None, PoolChange(short_until=T0 + 600, short_reason="SimulatedStockout"))
    [again] = _notify(apps[1], "fp-one")  # the same alert: its group's key is taken, whichever pool it would pick
    assert again["outcome"] == "skipped_duplicate"
    [other] = _notify(apps[1], "fp-two")  # another alert does fall back
    assert (other["pool"], other["outcome"]) == ("a100-ondemand", "scaled")


def test_a_storm_of_one_alert_on_two_replicas_acts_once_while_the_preferred_pool_turns_short(
        replicas: tuple[list[Flask], FakeClock]) -> None:
    apps, _ = replicas
    store = apps[0].extensions["autoscaler"].store

    def send(i: int) -> list[dict[str, Any]]:
        if i == 20:
            store.update_pool("a100-spot", None, PoolChange(short_until=T0 + 600, short_reason="SimulatedStockout"))
        return _notify(apps[i % 2], "fp-storm")

    with ThreadPoolExecutor(max_workers=8) as pool:
        decisions = [d for answer in pool.map(send, range(40)) for d in answer]
    acted = [d for d in decisions if d["outcome"] == "scaled"]
    assert len(acted) == 1, decisions
    assert {d["outcome"] for d in decisions} <= {"scaled", "skipped_duplicate", "skipped_busy"}


def test_one_shortfall_is_recorded_and_asked_of_the_next_pool_once(replicas: tuple[list[Flask], FakeClock]) -> None:
    apps, clock = replicas
    [first] = _notify(apps[0], "fp-one")
    assert (first["pool"], first["from"], first["to"]) == ("a100-spot", 0, 1)
    [second] = _notify(apps[1], "fp-two")
    assert second["outcome"] == "skipped_cooldown"
    manual = post(apps[1].test_client(), "/api/v1/pools/a100-spot/scale", {"target": 3, "force": True})
    assert (manual.get_json()["outcome"], manual.get_json()["to"]) == ("scaled", 3)  # asked for 3; 1 can come
    clock.advance(30)
    reconcilers: list[Reconciler] = [app.extensions["autoscaler_reconciler"] for app in apps]
    reconcilers[1].owner = "replica-b:1:reconciler"  # one process here; two hosts in production
    with ThreadPoolExecutor(max_workers=2) as pool:
        ticks = list(pool.map(lambda r: r.tick(clock()), reconcilers))
    assert sorted(t.held for t in ticks) == [False, True]
    [held] = [t for t in ticks if t.held]
    assert [(d.pool, d.outcome.value, d.from_, d.to) for d in held.decisions] == [
        ("a100-spot", "no_capacity", 3, 1), ("a100-ondemand", "scaled", 0, 2)]
    recorded = [(e["pool"], e["outcome"]) for e in events(apps[0].test_client()) if e["source"] == "reconcile"]
    assert recorded == [("a100-ondemand", "scaled"), ("a100-spot", "no_capacity")]
