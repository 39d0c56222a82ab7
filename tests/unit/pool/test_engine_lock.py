"""Threads of one worker wait for a pool's decision on an in-process lock, not by polling the database."""
from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import event

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from autoscaler.models import CloudStatus
from providers import Tracked
from tests.support.fakes.scripted_cloud import ScriptedCloud
from tests.support import FakeClock, am_alert, am_payload, post


class GatedCloud(ScriptedCloud):
    """A cloud whose status call blocks until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__(count=2)
        self.entered = threading.Event()
        self.gate = threading.Event()

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        self.entered.set()
        assert self.gate.wait(10), "the test never opened the gate"
        return super().status(tracked, now)


def test_second_thread_waits_on_the_lock_then_skips_busy_without_polling_the_lease(
        raw_config: dict[str, Any], clock: FakeClock) -> None:
    raw_config["server"]["lock_wait"] = "300ms"
    cloud = GatedCloud()
    app = create_app(build_settings(raw_config, env={}), clock=clock, providers={"gpu": cloud})
    store = app.extensions["autoscaler"].store
    statements: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    first: list[Any] = []
    holder = threading.Thread(target=lambda: first.append(
        post(app.test_client(), "/webhook/alertmanager", am_payload(am_alert(fingerprint="a")))))
    holder.start()
    try:
        assert cloud.entered.wait(10)
        before = len(statements)
        started = time.monotonic()
        resp = post(app.test_client(), "/webhook/alertmanager", am_payload(am_alert(fingerprint="b")))
        waited = time.monotonic() - started
        during = statements[before:]
    finally:
        cloud.gate.set()
        holder.join(10)
    assert resp.get_json()["decisions"][0]["outcome"] == "skipped_busy"
    assert resp.status_code == 503 and resp.headers["Retry-After"]  # our lock: a retry can act
    assert 0.25 <= waited < 5.0, waited
    assert not [s for s in during if s.lstrip().upper().startswith("UPDATE POOLS")], during  # no lease polling
    assert first[0].get_json()["decisions"][0]["outcome"] == "scaled" and cloud.count == 3
    # the busy notification's dedup claim was freed and the lock released: its retry is decided normally
    resp = post(app.test_client(), "/webhook/alertmanager", am_payload(am_alert(fingerprint="b")))
    assert resp.get_json()["decisions"][0]["outcome"] == "skipped_cooldown"
