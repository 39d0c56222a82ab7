"""Log injection (issue 15, item 5): no alert name, label or reason can start a log line of its own, in the text
format or the JSON one."""
from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from autoscaler.logjson import JsonFormatter, TextFormatter
from tests.support import am_alert, am_payload, make_app, post

HOSTILE = "x\nlevel=ERROR logger=autoscaler forged\r\x1b[31m\x00\x07\x85\u2028\u2029\x9b\x7f\u202e\u2067\u200fend"
# C0, C1, DEL, line separators, and bidi overrides/isolates/marks (a log line shown in another order)
_BREAKS = ("\n", "\r", "\x1b", "\x00", "\x07", "\x85", "\u2028", "\u2029", "\x9b", "\x7f", "\u202e", "\u2067", "\u200f")


@pytest.mark.parametrize("msg, args", [
    pytest.param("decision alerts=%s reason=%s", (HOSTILE, HOSTILE), id="interpolated"),
    pytest.param("decision " + HOSTILE, None, id="in-the-message"),
    pytest.param("pool %(pool)s", ({"pool": HOSTILE},), id="mapping-args"),
])
def test_text_format_escapes_every_control(msg: str, args: Any) -> None:
    record = logging.LogRecord("autoscaler.decision", logging.INFO, __file__, 1, msg, args, None)
    line = TextFormatter().format(record)
    assert not [c for c in _BREAKS if c in line]
    assert "\\n" in line and "\\x1b" in line and "\\u2028" in line


def test_json_format_escapes_line_separators() -> None:
    record = logging.LogRecord("autoscaler", logging.INFO, __file__, 1, "m %s", (HOSTILE,), None)
    line = JsonFormatter().format(record)
    assert not [c for c in _BREAKS if c in line]
    assert json.loads(line)["message"] == "m " + HOSTILE


def test_a_hostile_alert_name_and_pool_label_stay_on_one_line(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    client = make_app(f"sqlite:///{tmp_path}/s.db").test_client()
    post(client, "/webhook/alertmanager", am_payload(
        am_alert(HOSTILE, fingerprint="a", autoscaler_pool="gpu", autoscaler_action="scale_out"),
        am_alert("x", fingerprint="b", autoscaler_pool=HOSTILE, autoscaler_action="scale_out")))
    decisions = [r for r in caplog.records if r.name == "autoscaler.decision"]
    assert len(decisions) == 2
    for record in decisions:
        for line in (TextFormatter().format(record), JsonFormatter().format(record)):
            assert not [c for c in _BREAKS if c in line], line
