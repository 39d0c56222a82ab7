"""``server.auth.query_token``: the opt-in secret in a plain action group webhook's URL. Webhooks only, and never
in an answer, an event, a log line or gunicorn's access line."""
from __future__ import annotations

import datetime
import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import pytest
from flask import Flask
from gunicorn.config import Config

from autoscaler.config.load import ConfigError, build_settings
from autoscaler.gunicorn_log import GunicornLogger
from autoscaler.logjson import TextFormatter, gunicorn_logconfig
from tests.support import AUTH, BASE_CONFIG, logging_kept

SECRET = "Az-mon_7f3c9e2b4d6a8f10.c5e7"
HOOK = "/webhook/azure-monitor"
BODY = json.loads((Path(__file__).resolve().parents[3] / "tests" / "support" / "payloads" / "azure_monitor" /
                   "prometheus_fired.json").read_text())


@pytest.fixture
def app(make_app: Callable[..., Flask]) -> Flask:
    return make_app(server={"auth": {"bearer_tokens": [AUTH["Authorization"].split()[1]],
                                     "query_token": {"token": SECRET, "name": "action-group-gpu"}}})


def test_the_query_token_sends_alerts_and_is_named_as_actor(app: Flask) -> None:
    client = app.test_client()
    resp = client.post(f"{HOOK}?token={SECRET}", json=BODY)
    assert resp.status_code == 200 and resp.get_json()["decisions"][0]["outcome"] == "scaled"
    [event] = client.get("/api/v1/events", headers=AUTH).get_json()["events"]
    assert event["actor"] == "action-group-gpu"
    assert SECRET not in json.dumps(event)


def test_wrong_or_missing_query_token_is_401(app: Flask) -> None:
    client = app.test_client()
    wrong = client.post(f"{HOOK}?token={SECRET[:-1]}x", json=BODY)
    assert wrong.status_code == 401 and "'token'" in wrong.get_json()["error"]
    assert client.post(HOOK, json=BODY).status_code == 401
    assert SECRET not in wrong.get_data(as_text=True)


def test_the_query_token_may_only_send_webhooks(app: Flask) -> None:
    client = app.test_client()
    assert client.get(f"/api/v1/pools?token={SECRET}").status_code == 403
    assert client.post(f"/api/v1/pools/gpu/pause?token={SECRET}", json={}).status_code == 403
    # routing parameters ride along in the same URL
    resp = client.post(f"{HOOK}?pool=spare&action=scale_out&token={SECRET}",
                       json=json.loads((Path(__file__).resolve().parents[3] / "tests" / "support" / "payloads" /
                                        "azure_monitor" / "log_alert_fired.json").read_text()))
    assert resp.get_json()["decisions"][0]["pool"] == "spare"


def test_the_query_token_is_off_unless_configured(make_app: Callable[..., Flask]) -> None:
    assert make_app().test_client().post(f"{HOOK}?token={SECRET}", json=BODY).status_code == 401


@pytest.mark.parametrize("entry, words", [
    pytest.param({"token": "short-token"}, "24 to 256", id="too-short"),
    pytest.param({"token": "a" * 20 + "%2F+/=="}, "A-Z a-z 0-9", id="needs-url-encoding"),
    pytest.param({"token": SECRET, "param": "pool"}, "routing parameter", id="param-clashes-with-routing"),
])
def test_weak_or_clashing_query_tokens_are_config_errors(entry: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_settings({**BASE_CONFIG, "server": {"auth": {"query_token": entry}}}, env={})
    assert words in str(err.value) and "server.auth.query_token" in str(err.value)


@pytest.fixture
def _keep_logging() -> Iterator[None]:
    with logging_kept():
        yield


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_gunicorn_access_lines_never_show_it(app: Flask, fmt: str, capsys: pytest.CaptureFixture[str],
                                             _keep_logging: None) -> None:
    cfg = Config()
    cfg.set("logconfig_dict", gunicorn_logconfig("INFO", fmt, access=True))
    logger = GunicornLogger(cfg)  # the app above installed its config's secrets in the process's redactor
    query = f"pool=gpu&token={SECRET}"
    environ = {"REQUEST_METHOD": "POST", "RAW_URI": f"{HOOK}?{query}", "SERVER_PROTOCOL": "HTTP/1.1",
               "PATH_INFO": HOOK, "QUERY_STRING": query, "REMOTE_ADDR": "10.0.0.4"}
    resp = SimpleNamespace(status="200 OK", headers=[("Content-Type", "application/json")], sent=42)
    logger.access(resp, SimpleNamespace(headers=[("HOST", "autoscaler")]), environ, datetime.timedelta(milliseconds=3))
    line = capsys.readouterr().err
    assert HOOK in line and "pool=gpu" in line  # the line was written, with the rest of the URL
    assert SECRET not in line


def test_service_logs_never_show_it(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        app.test_client().post(f"{HOOK}?token={SECRET}", json=BODY)
        app.test_client().post(f"{HOOK}?token={SECRET}x", json=BODY)
    formatter = TextFormatter()
    assert caplog.records and all(SECRET not in formatter.format(r) for r in caplog.records)


ENCODED = "".join(f"%{ord(c):02X}" for c in SECRET[:4]) + SECRET[4:]  # the same token, percent-encoded in part
OLD = "Az-mon_0ld0ld0ld0ld0ld0ld0ld"  # the token before a rotation, still in a sender's URL


def test_a_percent_encoded_copy_is_the_same_token(app: Flask) -> None:
    """URLs are compared decoded (RFC 3986: %41 is A), so the encoded copy authenticates: it is as secret."""
    resp = app.test_client().post(f"{HOOK}?token={ENCODED}", json=BODY)
    assert resp.status_code == 200


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("query", [
    pytest.param(f"token={ENCODED}&pool=gpu", id="percent-encoded-token"),
    pytest.param(f"pool=gpu&token={OLD}", id="wrong-or-rotated-token"),
    pytest.param(f"pool=gpu&%74oken={OLD}", id="encoded-parameter-name"),
])
def test_access_lines_mask_the_token_parameter_whatever_its_value(app: Flask, fmt: str, query: str,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  _keep_logging: None) -> None:
    """Redaction by value finds the configured token only as written; the parameter is masked by its name, so an
    encoded copy, an old token after a rotation or a near miss never reaches a log either."""
    cfg = Config()
    cfg.set("logconfig_dict", gunicorn_logconfig("INFO", fmt, access=True))
    logger = GunicornLogger(cfg)
    environ = {"REQUEST_METHOD": "POST", "RAW_URI": f"{HOOK}?{query}", "SERVER_PROTOCOL": "HTTP/1.1",
               "PATH_INFO": HOOK, "QUERY_STRING": query, "REMOTE_ADDR": "10.0.0.4"}
    resp = SimpleNamespace(status="401 UNAUTHORIZED", headers=[("Content-Type", "application/json")], sent=42)
    logger.access(resp, SimpleNamespace(headers=[("HOST", "autoscaler")]), environ, datetime.timedelta(milliseconds=3))
    line = capsys.readouterr().err
    assert HOOK in line and "pool=gpu" in line and "**********" in line
    for leaked in (SECRET, SECRET[4:], ENCODED, OLD):
        assert leaked not in line
