"""Text the database cannot hold (NUL, lone surrogates, a label wider than its column) and text without bound (a
500 KB alertname, thousands of alerts): stored, answered and logged, cleaned and bounded by one rule on SQLite and
PostgreSQL, so a change the cloud committed is always recorded and a retry never acts twice."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.support import pg
from tests.support import AUTH, am_alert, am_payload, make_app


@pytest.fixture(params=["sqlite", "postgresql"])
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A test client of the app on each store; its connections closed before the database goes."""
    if request.param == "sqlite":
        yield make_app(f"sqlite:///{tmp_path}/s.db").test_client()
        return
    pg.require_postgres()
    with pg.temp_database() as name:
        app = make_app(pg.url_for(name))
        yield app.test_client()
        app.extensions["autoscaler"].store.close()


def _pool(client: Any, name: str = "gpu") -> dict[str, Any]:
    return client.get(f"/api/v1/pools/{name}", headers=AUTH).get_json()


def _events(client: Any, pool: str | None = None) -> list[dict[str, Any]]:
    query = f"?pool={pool}" if pool else ""
    return client.get(f"/api/v1/events{query}", headers=AUTH).get_json()["events"]


def test_alertname_with_nul_scales_once_and_is_recorded(client: Any) -> None:
    # (a lone surrogate escape is no text at all: the body is refused with 400, tests/api/test_request_edges.py)
    body = am_payload(am_alert(name="GPU\u0000High", fingerprint="fp\u0000x", autoscaler_pool="gpu",
                               autoscaler_action="scale_out"))
    answers = [client.post("/webhook/alertmanager", json=body, headers=AUTH) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200], [a.get_data(as_text=True) for a in answers]
    assert [a.get_json()["decisions"][0]["outcome"] for a in answers] == ["scaled", "skipped_duplicate",
                                                                          "skipped_duplicate"]
    assert _pool(client)["current"] == 3  # 2 -> 3 once, not once per delivery
    events = _events(client, "gpu")
    assert [e["outcome"] for e in events] == ["skipped_duplicate", "skipped_duplicate", "scaled"]
    name = events[-1]["alerts"][0]["alertname"]
    assert "\u0000" not in name and name == "GPU\ufffdHigh"


def test_unknown_and_unrouted_pool_labels_wider_than_the_column(client: Any) -> None:
    long_pool = "p" * 100
    body = am_payload(am_alert(fingerprint="a", autoscaler_pool=long_pool, autoscaler_action="scale_out"),
                      am_alert(name="Other", fingerprint="b", autoscaler_pool="q" * 100 + "\u0000"))
    answer = client.post("/webhook/alertmanager", json=body, headers=AUTH)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert [d["outcome"] for d in answer.get_json()["decisions"]] == ["unknown_pool", "unrouted"]
    pools = [e["pool"] for e in _events(client)]
    assert all(p and len(p) <= 64 and "\u0000" not in p for p in pools), pools
    assert pools[-1].startswith("p" * 60)


def test_manual_and_operator_reasons_the_database_cannot_hold(client: Any) -> None:
    headers = {**AUTH, "Content-Type": "application/json"}
    scaled = client.post("/api/v1/pools/gpu/scale", data=json.dumps({"action": "scale_out", "reason": "why\u0000"}),
                         headers=headers)
    assert scaled.status_code == 200 and scaled.get_json()["outcome"] == "scaled", scaled.get_data(as_text=True)
    for verb in ("pause", "resume"):
        answer = client.post(f"/api/v1/pools/gpu/{verb}", data=json.dumps({"reason": "not\u0000now"}),
                             headers=headers)
        assert answer.status_code == 200, answer.get_data(as_text=True)
    assert _pool(client)["current"] == 3
    reasons = [e["reason"] for e in _events(client, "gpu")]
    assert len(reasons) == 3 and all("\u0000" not in r and "\ufffd" in r for r in reasons)
    # a lone surrogate is no text at all: a malformed body, refused (400) before anything happens, as on every route
    refused = client.post("/api/v1/pools/gpu/pause", data=json.dumps({"reason": "x\ud800"}), headers=headers)
    assert refused.status_code == 400 and len(_events(client, "gpu")) == 3


def test_huge_label_values_are_bounded_in_events_answers_and_logs(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    client = make_app(f"sqlite:///{tmp_path}/s.db").test_client()
    huge = "A" * 500_000
    body = am_payload(am_alert(name=huge, fingerprint="f" * 2000, autoscaler_pool="gpu",
                               autoscaler_action="scale_out"))
    with caplog.at_level(logging.INFO):
        answer = client.post("/webhook/alertmanager", json=body, headers=AUTH)
    assert answer.status_code == 200 and len(answer.get_data()) < 20_000
    assert max(len(r.getMessage()) for r in caplog.records) < 20_000
    pools = client.get("/api/v1/pools", headers=AUTH)
    assert len(pools.get_data()) < 20_000
    events = client.get("/api/v1/events", headers=AUTH)
    assert len(events.get_data()) < 20_000


def test_alert_lists_are_bounded_and_the_rest_counted(tmp_path: Path) -> None:
    client = make_app(f"sqlite:///{tmp_path}/s.db").test_client()
    alerts = [am_alert(name=f"N{i:04d}" + "x" * 200, fingerprint=f"fp{i}", autoscaler_pool="gpu",
                       autoscaler_action="scale_out") for i in range(2000)]
    answer = client.post("/webhook/alertmanager", json=am_payload(*alerts), headers=AUTH)
    assert answer.status_code == 200 and answer.get_json()["received"] == 2000
    event = _events(client, "gpu")[0]
    assert event["outcome"] == "scaled"
    assert len(event["alerts"]) + event["details"]["alerts_not_listed"] == 2000
    assert len(json.dumps(event)) < 60_000
