"""Secrets by value (issue 15, items 1-2): no configured secret leaves the process, in logs (text and JSON),
events, API answers or the status page, even when a hook echoes it back or it sits in a URL's path."""
from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from autoscaler.logjson import JsonFormatter, TextFormatter
from autoscaler.redact import Redactor, plain_word, url_secrets
from tests.support.fakes.ack_hook import Answer, FakeHookServer
from tests.support import AUTH, FakeClock, am_alert, am_payload, events, make_app, post

HEADER_SECRET = "HdrSecret-77abc"
WEBHOOK_PATH_SECRET = "WhPath5ecret99"
ACK_PATH_SECRET = "Tk9pathSecret42xy"
ACK_QUERY_SECRET = "QueryTok3n99"
BASIC_PASSWORD = "basic-Pass-31"
SECRETS = (HEADER_SECRET, WEBHOOK_PATH_SECRET, ACK_PATH_SECRET, ACK_QUERY_SECRET, BASIC_PASSWORD)


@pytest.mark.parametrize("segment, secret", [
    pytest.param("hooks", False, id="short-word"),
    pytest.param("scale-out", False, id="hyphenated-word"),
    pytest.param("TRIGGER_URL", False, id="upper-word"),
    pytest.param("a1b2c3d4", True, id="letters-and-digits"),
    pytest.param("AbCdEfGhIj", True, id="mixed-case"),
    pytest.param("averyveryverylongplainwordtoken", True, id="24-chars-or-more"),
    pytest.param("v1", False, id="version"),
])
def test_plain_word_rule(segment: str, secret: bool) -> None:
    assert plain_word(segment) is not secret


def test_url_secrets_take_path_query_userinfo_but_not_placeholders_or_pool_names() -> None:
    found = url_secrets("https://u:pw-Secret-1@ci.example/hooks/gpu-a100/{pool}/x9Y8z7W6v5/run?token=abcdef12&x={to}",
                        words=["gpu-a100"])
    assert found >= {"pw-Secret-1", "x9Y8z7W6v5", "abcdef12"}
    assert not found & {"hooks", "gpu-a100", "{pool}", "run", "{to}", "ci.example"}


def test_redactor_masks_json_and_html_escaped_forms() -> None:
    r = Redactor(['se"cr<et&\'42'])
    assert "se" not in r.redact(json.dumps({"m": 'x se"cr<et&\'42 y'}))
    assert "cr" not in r.redact("x se&quot;cr&lt;et&amp;&#x27;42 y")
    assert "cr" not in r.redact("x se&#34;cr&lt;et&amp;&#39;42 y")  # markupsafe's (Jinja's) escapes


def _config(hook: FakeHookServer) -> dict[str, Any]:
    return {
        "server": {"auth": {"bearer_tokens": [AUTH["Authorization"].split()[1]],
                            "basic": [{"username": "grafana", "password": BASIC_PASSWORD}]}},
        "rules": [],
        "pools": [
            {"name": "wh", "provider": "webhook", "min": 0, "max": 5,
             "webhook": {"url": hook.hook_url(f"/hooks/{WEBHOOK_PATH_SECRET}/{{pool}}"), "retry_budget": 0,
                         "headers": {"Authorization": f"Bearer {HEADER_SECRET}"}, "initial_count": 1}},
            {"name": "ack", "provider": "ack_hook", "min": 0, "max": 5,
             "ack_hook": {"scale_out_url": hook.hook_url(f"/hook/trigger/{ACK_PATH_SECRET}",
                                                         f"token={ACK_QUERY_SECRET}"),
                          "scale_in_url": hook.hook_url(f"/hook/trigger/{ACK_PATH_SECRET}", "token=other-Tok-55"),
                          "initial_count": 1, "retry_budget": 0}},
        ],
    }


def _echo(status: int, code: str) -> Answer:
    return Answer(status, {"code": code, "message": f"bad token {ACK_PATH_SECRET} {ACK_QUERY_SECRET} "
                                                    f"{HEADER_SECRET} at /hooks/{WEBHOOK_PATH_SECRET}"})


def test_no_secret_in_logs_events_answers_or_status_page(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with FakeHookServer() as hook:
        hook.then(_echo(400, "400"), _echo(200, "500"), _echo(500, "500"))
        cfg = _config(hook)
        clock = FakeClock()
        app = make_app(f"sqlite:///{tmp_path}/s.db", clock, **{k: v for k, v in cfg.items()})
        client = app.test_client()
        answers = []
        for i, pool in enumerate(("ack", "ack", "wh")):
            answers.append(post(client, "/webhook/alertmanager", am_payload(am_alert(
                f"Hot{i}", fingerprint=f"f{i}", autoscaler_pool=pool, autoscaler_action="scale_out"))))
            clock.advance(3600)  # past the failure's backoff and the cooldown: each echo reaches the cloud's answer
        assert [(a.status_code, [d["outcome"] for d in a.get_json()["decisions"]]) for a in answers] == [
            (200, ["failed"]), (503, ["failed"]), (503, ["failed"])]  # each cloud's echo answered, none held back
        seen = [a.get_data(as_text=True) for a in answers]
        seen.append(json.dumps(events(client)))
        seen.append(client.get("/", headers=AUTH).get_data(as_text=True))
        seen.append(client.get("/api/v1/pools", headers=AUTH).get_data(as_text=True))
    echoed = [e["reason"] for e in events(client) if "bad token" in e["reason"]]
    assert len(echoed) == 2  # both ACK echoes reached their reasons (the webhook's 500 is told without its body)
    for record in caplog.records:  # what reaches the log, in both formats (and our own messages at their source)
        seen += [TextFormatter().format(record), JsonFormatter().format(record)]
        if record.name.startswith(("autoscaler", "providers")):
            seen.append(record.getMessage())
    assert any("effective config" in text for text in seen)
    leaks = [(secret, text[:200]) for text in seen for secret in SECRETS if secret in text]
    assert leaks == []


def test_effective_config_shows_header_names_not_values(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="autoscaler")
    with FakeHookServer() as hook:
        make_app(f"sqlite:///{tmp_path}/s.db", **_config(hook))
    line = " ".join(r.getMessage() for r in caplog.records if r.getMessage().startswith("effective config"))
    assert '"Authorization": "**********"' in line and HEADER_SECRET not in line


@pytest.mark.slow
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_no_secret_in_a_real_gunicorn_log(tmp_path: Any, log_format: str) -> None:
    """The whole process's output under gunicorn (start-up, decisions, the hook's echo, gunicorn's own lines)."""
    import requests

    from tests.support.servers import Service

    with FakeHookServer() as hook:
        hook.then(_echo(400, "400"), _echo(200, "500"))
        cfg = {**_config(hook), "store": {"url": f"sqlite:///{tmp_path}/s.db"}}
        env = {"LOG_FORMAT": log_format, "GUNICORN_ACCESS_LOG": "-"}
        with Service(cfg, tmp_path, workers=1, env=env) as svc:
            for i, pool in enumerate(("ack", "wh")):
                body = am_payload(am_alert(f"Hot{i}", fingerprint=f"g{i}", autoscaler_pool=pool,
                                           autoscaler_action="scale_out"))
                requests.post(f"{svc.url}/webhook/alertmanager", json=body, headers=AUTH, timeout=20)
            log = svc.read_log()
    assert "effective config" in log and "bad token" in log
    assert [s for s in SECRETS if s in log] == []
