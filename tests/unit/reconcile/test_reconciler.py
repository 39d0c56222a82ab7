"""The reconciler: schedule floors at a window's start, drift below min, one holder, and a stored cloud view that
the API and /metrics read without calling the cloud. Ticks are driven by hand with an injected clock."""
from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from flask import Flask

from autoscaler.config.load import build_settings
from autoscaler.app import create_app
from autoscaler.reconcile.loop import Reconciler
from providers.aks import AksProvider
from tests.support.fakes.arm import FakeArm
from tests.support.fakes.clients import AKS_CLUSTER, RG, SUB, AllowHttp, StaticCredential
from tests.support import AUTH, FakeClock, am_alert, am_payload, events, make_app, post

WINDOW = {"cron": "0 8 * * 1-5", "duration": "11h", "min": 4, "timezone": "Europe/Warsaw"}


def warsaw(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo("Europe/Warsaw")).timestamp()


def _app(tmp_path: Path, clock: FakeClock, **pool: Any) -> Flask:
    pools = [{"name": "gpu", "provider": "simulated", "min": 1, "max": 6, "simulated": {"initial_count": 2}, **pool}]
    return make_app(f"sqlite:///{tmp_path}/s.db", clock, pools=pools)


def _reconciler(app: Flask) -> Reconciler:
    return app.extensions["autoscaler_reconciler"]  # type: ignore[no-any-return]


def test_window_start_raises_the_floor_and_alerts_cannot_go_below(tmp_path: Path) -> None:
    clock = FakeClock(warsaw("2025-01-06 07:59"))  # a Monday
    app = _app(tmp_path, clock, schedules=[WINDOW])
    client = app.test_client()
    assert _reconciler(app).tick(clock()).decisions == []
    clock.now = warsaw("2025-01-06 08:00")
    tick = _reconciler(app).tick(clock())
    assert [(d.outcome.value, d.from_, d.to) for d in tick.decisions] == [("scaled", 2, 4)]
    first = events(client)[0]
    assert (first["source"], first["action"]) == ("schedule", "scale_out")
    assert "schedule '0 8 * * 1-5' (Europe/Warsaw) opened 2025-01-06 08:00 CET" in first["reason"]
    assert _reconciler(app).tick(clock() + 30).decisions == []  # at the floor: nothing more to do
    clock.advance(3600)  # past the scale-in delay after the scale-out
    low = post(client, "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationLow"))).get_json()["decisions"][0]
    assert (low["outcome"], low["to"]) == ("skipped_limit", 4) and "already at min (4)" in low["reason"]
    pool = client.get("/api/v1/pools/gpu", headers=AUTH).get_json()
    assert (pool["min"], pool["effective_min"]) == (1, 4) and "Europe/Warsaw" in pool["effective_min_reason"]
    clock.now = warsaw("2025-01-06 19:00")  # the window closed: the pool's own min again
    later = post(client, "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationLow", fingerprint="fp9")))
    assert later.get_json()["decisions"][0]["to"] == 3


def test_floor_ignores_cooldown_but_waits_out_backoff_and_pause(tmp_path: Path) -> None:
    clock = FakeClock(warsaw("2025-01-06 07:58"))
    app = _app(tmp_path, clock, schedules=[WINDOW])
    client = app.test_client()
    assert post(client, "/webhook/alertmanager", am_payload(am_alert())).get_json()["decisions"][0]["to"] == 3
    clock.now = warsaw("2025-01-06 08:00")  # two minutes into a five-minute scale-out cooldown
    assert [(d.outcome.value, d.to) for d in _reconciler(app).tick(clock()).decisions] == [("scaled", 4)]

    clock2 = FakeClock(warsaw("2025-01-06 08:00"))
    paused = _app(tmp_path / "p", clock2, schedules=[WINDOW])
    paused_client = paused.test_client()
    assert post(paused_client, "/api/v1/pools/gpu/pause", {}).status_code == 200
    assert _reconciler(paused).tick(clock2()).decisions == []
    assert [e["outcome"] for e in events(paused_client)] == ["paused"]  # no event per tick while paused


def test_drift_below_min_is_repaired_with_source_reconcile(tmp_path: Path) -> None:
    clock = FakeClock()
    app = _app(tmp_path, clock, min=2)
    client = app.test_client()
    assert client.put("/api/v1/pools/gpu/count", json={"count": 0}, headers=AUTH).status_code == 200
    tick = _reconciler(app).tick(clock())
    assert [(d.outcome.value, d.from_, d.to) for d in tick.decisions] == [("scaled", 0, 2)]
    ev = events(client)[0]
    assert (ev["source"], ev["reason"].startswith("pool below its min (2): 0 nodes")) == ("reconcile", True)
    assert ev["details"]["in_flight"] == 0


def test_one_holder_at_a_time_and_a_dead_holder_is_replaced(tmp_path: Path) -> None:
    clock = FakeClock()
    url = f"sqlite:///{tmp_path}/shared.db"
    first, second = (make_app(url, clock) for _ in range(2))
    one, two = _reconciler(first), _reconciler(second)
    two.owner = one.owner + "-other-process"
    assert (one.tick(clock()).held, two.tick(clock()).held) == (True, False)
    clock.advance(30)
    assert (one.tick(clock()).held, two.tick(clock()).held) == (True, False)  # the holder renews
    clock.advance(one.ttl + 1)  # the holder died: its lease runs out
    assert (two.tick(clock()).held, one.tick(clock()).held) == (True, False)
    two.stop()  # a clean shutdown gives it up at once
    assert one.tick(clock()).held


def _aks_app(tmp_path: Path, arm: FakeArm, clock: FakeClock) -> Flask:
    aks = {"subscription_id": SUB, "resource_group": RG, "cluster": AKS_CLUSTER, "arm_endpoint": arm.url,
           "agent_pool": "gpunp"}
    settings = build_settings({"server": {"auth": {"bearer_tokens": [AUTH["Authorization"][7:]]}},
                               "store": {"url": f"sqlite:///{tmp_path}/aks.db"},
                               "pools": [{"name": "gpu", "provider": "aks", "min": 0, "max": 4, "aks": aks}]}, env={})
    fake = FakeClock()
    provider = AksProvider("gpu", settings.pools["gpu"].provider_settings, credential=StaticCredential(arm.token),
                           clock=fake,  per_call_policies=[AllowHttp()])
    return create_app(settings, clock=clock, providers={"gpu": provider}, startup_check=False)


def test_api_status_page_and_metrics_read_the_stored_view_not_the_cloud(tmp_path: Path) -> None:
    with FakeArm(SUB, RG, AKS_CLUSTER, "eyJarm.view.sig") as arm:
        arm.add_pool("gpunp", count=3)
        clock = FakeClock()
        app = _aks_app(tmp_path, arm, clock)
        client = app.test_client()
        before = client.get("/api/v1/pools/gpu", headers=AUTH).get_json()
        assert (before["current"], before["view_age_s"]) == (None, None) and "not read yet" in before["busy_detail"]
        assert _reconciler(app).tick(clock()).held
        reads = len(arm.calls("GET"))
        assert reads >= 1
        clock.advance(42)
        for _ in range(5):
            metrics = client.get("/metrics").get_data(as_text=True)
            pools = client.get("/api/v1/pools", headers=AUTH).get_json()["pools"]
            page = client.get("/", headers=AUTH).get_data(as_text=True)
        assert len(arm.calls("GET")) == reads  # fifteen requests, no cloud call
        assert 'gpu_autoscaler_pool_size{pool="gpu"} 3.0' in metrics
        assert 'gpu_autoscaler_pool_view_age_seconds{pool="gpu"} 42.0' in metrics
        assert (pools[0]["current"], pools[0]["view_age_s"], pools[0]["in_flight"]) == (3, 42.0, 0)
        assert "cloud read 42s ago" in re.sub(r"<[^>]+>", "", page)  # as a person reads it (the time on hover)
        arm.pools["gpunp"]["count"] = 4  # changed behind our back: shown after the next tick
        _reconciler(app).tick(clock())
        assert client.get("/api/v1/pools/gpu", headers=AUTH).get_json()["current"] == 4


def test_the_tick_prunes_expired_dedup_keys_at_most_once_a_minute(tmp_path: Path) -> None:
    """Pruning is periodic work: the reconciler's tick does it (the lease holder only), no request starts it."""
    clock = FakeClock()
    app = _app(tmp_path, clock)
    store = app.extensions["autoscaler"].store
    assert post(app.test_client(), "/webhook/alertmanager", am_payload(am_alert())).status_code == 200
    assert store.claim_dedup("gpu", ("old",), clock() - 700, 60.0, "a")  # expired long ago
    mine = _reconciler(app)
    other = Reconciler(mine.parts, mine.engine, pruner=mine.pruner)
    other.owner = "another-replica:1:reconciler"
    assert _reconciler(app).tick(clock()).pruned == 1  # the expired key; the notification's keys still hold
    assert other.tick(clock()).held is False  # another process's reconciler neither ticks nor prunes
    assert store.claim_dedup("gpu", ("old",), clock(), 60.0, "b")  # it is gone: claimable again
    clock.advance(30)
    assert _reconciler(app).tick(clock()).pruned is None  # not due yet
    clock.advance(30 + 600)  # the notification's keys (10 min window) and "old" (1 min) expired meanwhile
    assert _reconciler(app).tick(clock()).pruned == 2
