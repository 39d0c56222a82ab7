"""Request edges (issue 15, items 4, 6, 16, 17): a chunked body over the limit is refused whole, credentials that
need no body are checked before it is read, a body that never comes ends in 408, a non-finite HMAC timestamp is
refused, and Grafana may PUT."""
from __future__ import annotations

import hashlib
import hmac
import io
import json
from typing import Any

import pytest

from autoscaler.auth.credentials import Authenticator
from autoscaler.config import AuthConfig
from tests.support import AUTH, HMAC_SECRET, am_alert, am_payload, events, make_app

LIMIT = 2048


class Trickle(io.RawIOBase):
    """A request body handed out in reads of at most 100 bytes, counting the reads."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reads = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        self.reads += 1
        n = min(len(buf), len(self.data), 100)
        buf[:n], self.data = self.data[:n], self.data[n:]
        return n


def _chunked(client: Any, path: str, raw: bytes, headers: dict[str, str] | None = None) -> Any:
    stream = Trickle(raw)
    return _send_chunked(client, path, stream, {**AUTH, **(headers or {})}), stream


def _send_chunked(client: Any, path: str, stream: io.RawIOBase, headers: dict[str, str]) -> Any:
    """As a server that decodes chunked bodies hands them on: no length, ``wsgi.input_terminated``."""
    return client.post(path, headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked", **headers},
                       environ_overrides={"wsgi.input": stream, "wsgi.input_terminated": True})


def _padded(size: int) -> bytes:
    """An Alertmanager notification that is valid JSON as a whole and whose first ``LIMIT`` bytes are too."""
    body = am_payload(am_alert(fingerprint="big", autoscaler_pool="gpu", autoscaler_action="scale_out"))
    text = json.dumps(body)
    pad = size - len(text) - len(', "pad": ""')
    return (text[:-1] + f', "pad": "{"x" * max(pad, 0)}"}}').encode()


@pytest.fixture
def client(tmp_path: Any) -> Any:
    cfg = {"server": {"max_body_bytes": LIMIT, "auth": {"bearer_tokens": [AUTH["Authorization"].split()[1]],
                                                        "grafana_hmac": {"secret": HMAC_SECRET}}}}
    return make_app(f"sqlite:///{tmp_path}/s.db", **cfg).test_client()


@pytest.mark.parametrize("size, status", [
    pytest.param(LIMIT - 10, 200, id="under-the-limit"),
    pytest.param(LIMIT, 200, id="exactly-the-limit"),
    pytest.param(LIMIT + 1, 413, id="one-byte-over"),
    pytest.param(LIMIT * 20, 413, id="far-over"),
])
def test_chunked_body_over_the_limit_is_refused_whole(client: Any, size: int, status: int) -> None:
    raw = _padded(size)
    assert len(raw) == size
    resp, _ = _chunked(client, "/webhook/alertmanager", raw)
    assert resp.status_code == status, resp.get_data(as_text=True)
    assert [e["outcome"] for e in events(client)] == (["scaled"] if status == 200 else [])
    if status == 413:
        assert resp.headers["Connection"] == "close"


def test_credentials_that_need_no_body_are_checked_before_it_is_read(client: Any) -> None:
    for headers in ({"Authorization": "Bearer wrong"}, {"Authorization": ""},
                    {"X-Grafana-Alerting-Signature": "not-hex"}):
        stream = Trickle(b"{" * 100000)
        resp = _send_chunked(client, "/webhook/grafana", stream, headers)
        assert resp.status_code == 401
        assert stream.reads == 0  # refused on its headers alone


def test_a_body_that_does_not_come_in_time_is_408(tmp_path: Any) -> None:
    cfg = {"server": {"read_timeout": "1s", "auth": {"bearer_tokens": ["t0ken-abc"]}}}
    client = make_app(f"sqlite:///{tmp_path}/s.db", **cfg).test_client()

    class Slow(Trickle):
        def readinto(self, buf: Any) -> int:
            import time

            time.sleep(0.3)  # a real peer: a client that trickles its body
            return super().readinto(buf)

    resp = _send_chunked(client, "/webhook/alertmanager", Slow(b" " * 5000), {"Authorization": "Bearer t0ken-abc"})
    assert resp.status_code == 408
    assert "read_timeout" in resp.get_json()["error"]


@pytest.mark.parametrize("stamp", ["nan", "NaN", "inf", "-inf", "1e999", "-1e999"])
def test_non_finite_hmac_timestamp_is_refused(stamp: str) -> None:
    cfg = AuthConfig.model_validate({"grafana_hmac": {"secret": "s3cret", "timestamp_header": "X-Ts"}})
    auth = Authenticator(cfg, wall=lambda: 1_800_000_000.0)
    body = b"{}"
    sig = hmac.new(b"s3cret", stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    assert auth.check({"X-Grafana-Alerting-Signature": sig, "X-Ts": stamp}, body) == \
        "X-Ts is not a Unix timestamp"


def _grafana_body() -> dict[str, Any]:
    return {"receiver": "autoscaler", "status": "firing", "version": "1", "orgId": 1, "groupKey": "g",
            "alerts": [{"status": "firing", "labels": {"alertname": "GPUUtilizationHigh", "autoscaler_pool": "gpu",
                                                       "autoscaler_action": "scale_out"},
                        "annotations": {}, "startsAt": "2026-11-21T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                        "fingerprint": "put-1"}]}


def test_grafana_may_put_with_the_same_meaning(client: Any) -> None:
    resp = client.put("/webhook/grafana", json=_grafana_body(), headers=AUTH)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert resp.get_json()["decisions"][0]["outcome"] == "scaled"
    again = client.post("/webhook/grafana", json=_grafana_body(), headers=AUTH)
    assert again.get_json()["decisions"][0]["outcome"] == "skipped_duplicate"  # the same alert either way
    spec = client.get("/openapi.json").get_json()
    assert {"post", "put"} <= set(spec["paths"]["/webhook/grafana"])
    assert client.put("/webhook/alertmanager", json={}, headers=AUTH).status_code == 405


def test_dedup_pruner_keeps_up_with_a_large_notification(tmp_path: Any) -> None:
    """45,000 expired dedup keys (what one large notification inserts) all go in one run, in small batches."""
    from sqlalchemy import insert

    from autoscaler.reconcile.retention import Pruner
    from autoscaler.store import tables
    from autoscaler.store.sql import SqlStore

    store = SqlStore(f"sqlite:///{tmp_path}/prune.db")
    try:
        rows = [{"key": f"k{i}", "pool": "gpu", "expires_at": 10.0, "claim": "c"} for i in range(45_000)]
        with store.engine.begin() as conn:
            conn.execute(insert(tables.dedup), rows)
        assert store.claim_dedup("gpu", ("live",), 100.0, 600.0, "x")
        assert Pruner(store, None).run(100.0) == 45_000
        assert not store.claim_dedup("gpu", ("live",), 100.0, 60.0, "y")  # a live key stays
    finally:
        store.close()


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a|ab)*c", r"(\w+\s?)*$", r"(a?)+b", r".*a.*a.*a.*b"])
def test_match_re_patterns_that_can_backtrack_without_bound_are_refused(tmp_path: Any, pattern: str) -> None:
    from autoscaler.config.load import ConfigError

    rules = [{"match_re": {"alertname": pattern}, "pool": "gpu", "action": "scale_out"}]
    with pytest.raises(ConfigError, match=r"rules\[0\]\.match_re\.alertname: "):
        make_app(f"sqlite:///{tmp_path}/s.db", rules=rules)


def test_a_long_label_is_not_matched_slowly(tmp_path: Any) -> None:
    import time

    rules = [{"match_re": {"alertname": r".*a.*a.*b"}, "pool": "gpu", "action": "scale_out"}]  # allowed: O(n^3)
    client = make_app(f"sqlite:///{tmp_path}/s.db", rules=rules).test_client()
    started = time.monotonic()
    resp = client.post("/webhook/alertmanager", json=am_payload(am_alert("a" * 1500, fingerprint="long")),
                       headers=AUTH)
    assert time.monotonic() - started < 0.5
    assert resp.get_json()["decisions"][0]["outcome"] == "unrouted"
    ok = client.post("/webhook/alertmanager", json=am_payload(am_alert("aab", fingerprint="short")), headers=AUTH)
    assert ok.get_json()["decisions"][0]["outcome"] == "scaled"


LONE_SURROGATE = '{"alerts": [{"status": "firing", "labels": {"alertname": "GPU\\ud800Hot"}, "fingerprint": "%s"}]}'


@pytest.mark.parametrize("path, body", [
    pytest.param("/webhook/alertmanager", LONE_SURROGATE % "", id="alertmanager-label"),
    pytest.param("/webhook/alertmanager?pool=gpu&action=scale_out", LONE_SURROGATE % "f1", id="alertmanager-routed"),
    pytest.param("/webhook/grafana", '{"ruleId": 1, "ruleName": "\\udfff", "state": "alerting", "evalMatches": []}',
                 id="grafana-legacy"),
    pytest.param("/webhook/azure-monitor", '{"schemaId": "azureMonitorCommonAlertSchema", "data": {"essentials": '
                 '{"alertId": "a", "monitorCondition": "Fired", "alertRule": "\\uDBFF"}, "alertContext": {}}}',
                 id="azure-monitor"),
    pytest.param("/api/v1/pools/gpu/pause", '{"reason": "\\ud800"}', id="manual-api"),
])
def test_a_lone_surrogate_escape_is_400_not_500(client: Any, path: str, body: str) -> None:
    """JSON may escape a UTF-16 surrogate that has no pair (``"\\ud800"``): no Unicode text, so nothing can encode,
    hash or store it. It is a malformed body like any other, refused before anything acts."""
    resp = client.post(path, data=body, headers={**AUTH, "Content-Type": "application/json"})
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert "surrogate" in resp.get_json()["error"]
    assert events(client) == []


def test_a_paired_surrogate_escape_is_ordinary_text(client: Any) -> None:
    body = '{"alerts": [{"status": "firing", "labels": {"alertname": "GPU \\ud83d\\udd25", "autoscaler_pool": "gpu", ' \
           '"autoscaler_action": "scale_out"}}]}'
    resp = client.post("/webhook/alertmanager", data=body, headers={**AUTH, "Content-Type": "application/json"})
    assert resp.status_code == 200 and resp.get_json()["decisions"][0]["outcome"] == "scaled"
    assert events(client)[0]["alerts"][0]["alertname"] == "GPU \U0001f525"
