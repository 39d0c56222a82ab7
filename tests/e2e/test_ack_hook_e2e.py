"""End to end: Grafana legacy alerts to /webhook/grafana?pool=&action= scale an ACK-hook pool; no secret leaks."""
from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from autoscaler.app import create_app
from autoscaler.config.load import load_config
from providers.ack_hook import AckHookProvider
from tests.support.fakes.ack_hook import Answer, FakeHookServer
from tests.support import FakeClock

SECRET = "9c2d7e55aa01b2c3d4e5f60718293a4b"
TOKEN = "e2e-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

CONFIG = """
server:
  auth: {bearer_tokens: ["${E2E_TOKEN}"]}
store: {url: "sqlite:///DB"}
defaults:
  scale_out: {step: 1, cooldown: 0}
  scale_in: {step: 1, cooldown: 0, delay_after_scale_out: 0}
  dedup_window: 0
pools:
  - name: ack-t4
    provider: ack_hook
    min: 1
    max: 8
    scale_out: {step: 3}
    scale_in: {step: 2}
    ack_hook: {scale_out_url: "${ACK_SCALE_OUT_URL}", scale_in_url: "${ACK_SCALE_IN_URL}", initial_count: 2,
               timeout: 2s, retry_budget: 3s}
"""


def grafana_legacy(rule: str, rule_id: int, state: str = "alerting") -> dict[str, Any]:
    """A legacy Grafana alert notification, as the article's InfluxDB "GPU Usage" alert sends it."""
    return {"title": f"[Alerting] {rule}", "ruleId": rule_id, "ruleName": rule, "state": state,
            "message": "GPU usage above 45%", "ruleUrl": "http://grafana:3000/d/gpu?panelId=2",
            "evalMatches": [{"metric": "gpu_usage", "value": 71.5, "tags": {}}], "tags": {}}


@pytest.fixture
def hook() -> Iterator[FakeHookServer]:
    server = FakeHookServer().start()
    yield server
    server.stop()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "autoscaler.db"


@pytest.fixture
def settings(hook: FakeHookServer, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG.replace("DB", str(db)))
    monkeypatch.setenv("E2E_TOKEN", TOKEN)
    monkeypatch.setenv("ACK_SCALE_OUT_URL",
                       hook.hook_url(query=f"triggerUrl=dGVzdA%3D%3D&secret={SECRET}&type=scale_out"))
    monkeypatch.setenv("ACK_SCALE_IN_URL",
                       hook.hook_url(query=f"triggerUrl=dGVzdA%3D%3D&secret={SECRET}&type=scale_in"))
    return load_config(str(path))


@pytest.fixture
def client(settings: Any) -> FlaskClient:
    return create_app(settings, clock=FakeClock(1_700_000_000.0)).test_client()


def test_alerts_scale_out_and_in_through_the_hook(client: FlaskClient, hook: FakeHookServer) -> None:
    answer = client.post("/webhook/grafana?pool=ack-t4&action=scale_out", json=grafana_legacy("GPU Usage", 1),
                         headers=AUTH)
    assert answer.status_code == 200, answer.json
    decision = answer.json["decisions"][0]
    assert (decision["outcome"], decision["from"], decision["to"]) == ("scaled", 2, 5)
    assert [(c.param("type"), c.param("step")) for c in hook.calls] == [("scale_out", "3")]
    assert client.get("/api/v1/pools/ack-t4", headers=AUTH).json["current"] == 5

    answer = client.post("/webhook/grafana?pool=ack-t4&action=scale_in", json=grafana_legacy("GPU Idle", 2),
                         headers=AUTH)
    assert answer.json["decisions"][0]["to"] == 3
    assert [(c.param("type"), c.param("step")) for c in hook.calls[1:]] == [("scale_in", "1")] * 2


def test_partial_scale_in_stores_what_went_through(client: FlaskClient, hook: FakeHookServer) -> None:
    client.post("/webhook/grafana?pool=ack-t4&action=scale_out", json=grafana_legacy("GPU Usage", 1), headers=AUTH)
    hook.then(Answer(), Answer(status=400, body={"code": "400", "message": "rule disabled"}))
    answer = client.post("/webhook/grafana?pool=ack-t4&action=scale_in", json=grafana_legacy("GPU Idle", 2),
                         headers=AUTH)
    decision = answer.json["decisions"][0]
    assert (decision["outcome"], decision["from"], decision["to"]) == ("failed", 5, 4)
    assert client.get("/api/v1/pools/ack-t4", headers=AUTH).json["current"] == 4


def test_retryable_hook_failure_answers_503_and_the_count_can_be_corrected(
        settings: Any, hook: FakeHookServer, db: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    provider = AckHookProvider("ack-t4", settings.pools["ack-t4"].provider_settings, clock=FakeClock())
    client = create_app(settings, clock=FakeClock(1_700_000_000.0), providers={"ack-t4": provider}).test_client()
    hook.then(*[Answer(status=502, body="bad gateway")] * 5)
    answer = client.post("/webhook/grafana?pool=ack-t4&action=scale_out", json=grafana_legacy("GPU Usage", 1),
                         headers=AUTH)
    assert answer.status_code == 503 and answer.headers.get("Retry-After")
    assert answer.json["decisions"][0]["outcome"] == "failed"
    assert "secret=REDACTED" in answer.json["decisions"][0]["reason"]

    fixed = client.put("/api/v1/pools/ack-t4/count", json={"count": 4}, headers=AUTH)
    assert fixed.status_code == 200 and fixed.json["current"] == 4

    events = client.get("/api/v1/events?pool=ack-t4", headers=AUTH)
    assert SECRET not in answer.get_data(as_text=True) and SECRET not in events.get_data(as_text=True)
    assert SECRET not in caplog.text
    assert SECRET not in _dump(db)


def test_events_table_never_holds_the_secret(client: FlaskClient, hook: FakeHookServer, db: Path) -> None:
    hook.then(Answer(body={"code": "500", "message": f"failed for https://cs/hook?secret={SECRET}"}))
    client.post("/webhook/grafana?pool=ack-t4&action=scale_out", json=grafana_legacy("GPU Usage", 1), headers=AUTH)
    client.post("/webhook/grafana?pool=ack-t4&action=scale_out", json=grafana_legacy("GPU Usage", 3), headers=AUTH)
    dump = _dump(db)
    assert "ack-t4" in dump and "failed" in dump
    assert SECRET not in dump


def _dump(db: Path) -> str:
    """Every row of every table of the SQLite store, as text."""
    with sqlite3.connect(db) as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return "\n".join(repr(row) for table in tables for row in conn.execute(f'SELECT * FROM "{table}"'))
