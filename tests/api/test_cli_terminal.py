"""Operator commands never write a control character of the service's data to the terminal (issue 45, item 6): a
credential that may only send webhooks can name an alert ``ESC [2J`` or ``ESC ]0;title BEL``; ``status``,
``events``, ``scale`` and their errors show it escaped (``\\x1b``), as the log lines do, and ``--json`` stays JSON."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.__main__ import main
from tests.support.app_server import AppServer
from tests.support import TOKEN, am_alert, am_payload, make_app, post

ERASE = "\x1b[2J\x1b[H"  # clear the screen, cursor home
TITLE = "\x1b]0;owned\x07"  # set the window title
C1 = "\x9b31m"  # CSI as one C1 character
BIDI = "\u202e\u2066"  # right-to-left override, left-to-right isolate: text shown in another order (Trojan Source)
NAME = f"GPUHigh{ERASE}{TITLE}{C1}\u2028x{BIDI}"
RAW = ("\x1b", "\x07", "\x9b", "\u2028", "\u202e", "\u2066")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    app = make_app(f"sqlite:///{tmp_path}/s.db")
    alert = am_alert(NAME, fingerprint="esc", autoscaler_pool="gpu", autoscaler_action="scale_out")
    assert post(app.test_client(), "/webhook/alertmanager", am_payload(alert)).status_code == 200
    server = AppServer(app)
    yield server.url
    server.stop()


def _run(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--url", url, "--token", TOKEN, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("args", [["events"], ["events", "--wide"], ["status", "--wide"]])
def test_tables_escape_what_the_sender_wrote(served: str, capsys: pytest.CaptureFixture[str],
                                            args: list[str]) -> None:
    code, out, err = _run(capsys, served, *args)
    assert code == 0, err
    assert not [c for c in RAW if c in out + err], repr(out)
    assert "GPUHigh\\x1b[2J\\x1b[H\\x1b]0;owned\\x07\\x9b31m\\u2028x\\u202e\\u2066" in out, out


def test_json_stays_json_and_holds_no_raw_control(served: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, served, "events", "--json")
    assert code == 0 and not [c for c in RAW if c in out]
    assert NAME in json.loads(out)["events"][0]["reason"]


def test_errors_escape_what_the_service_echoes(served: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, served, "scale", f"gpu{ERASE}", "out")
    assert code == 1 and out == ""
    assert "404" in err and "\\x1b[2J" in err and not [c for c in RAW if c in err], repr(err)


@pytest.mark.parametrize("command", ["check-config", "replay"])
def test_config_problems_escape_a_key_the_file_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     command: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"server": {"auth": {"disabled": True}}, f"key{TITLE}": 1,
                                "pools": [{"name": "gpu", "provider": "simulated", "min": 0, "max": 3}]}))
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,demand\n2025-01-01T00:00:00Z,1\n")
    argv = [command, str(path)] if command == "check-config" else [
        command, "--config", str(path), "--trace", str(trace), "--out", str(tmp_path / "out")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "key\\x1b]0;owned\\x07" in err and not [c for c in RAW if c in err], repr(err)
