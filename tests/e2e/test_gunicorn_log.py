"""gunicorn's access lines: built only when written (BENCHMARKS.md, "Intake after the second hardening round")."""
from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any, Iterator

import pytest
from gunicorn.config import Config

from autoscaler.gunicorn_log import GunicornLogger
from autoscaler.logjson import gunicorn_logconfig
from tests.support import logging_kept


@pytest.fixture(autouse=True)
def _keep_logging() -> Iterator[None]:
    """gunicorn's logger runs dictConfig on the root logger: put every touched logger back afterwards."""
    with logging_kept():
        yield


class Environ(dict[str, Any]):
    """A WSGI environ that counts how often something walks it (the access-line atoms walk all of it)."""

    walked = 0

    def items(self) -> Any:
        Environ.walked += 1
        return super().items()


def _access(access: bool) -> int:
    cfg = Config()
    cfg.set("logconfig_dict", gunicorn_logconfig("INFO", "text", access=access))
    logger = GunicornLogger(cfg)
    Environ.walked = 0
    environ = Environ(REQUEST_METHOD="POST", RAW_URI="/webhook/alertmanager", SERVER_PROTOCOL="HTTP/1.1",
                      PATH_INFO="/webhook/alertmanager", QUERY_STRING="", REMOTE_ADDR="127.0.0.1")
    resp = SimpleNamespace(status="200 OK", headers=[("Content-Type", "application/json")], sent=42)
    req = SimpleNamespace(headers=[("HOST", "localhost")])
    logger.access(resp, req, environ, datetime.timedelta(milliseconds=3))
    return Environ.walked


def test_access_lines_off_build_nothing() -> None:
    assert _access(access=False) == 0


def test_access_lines_on_are_still_written(capsys: pytest.CaptureFixture[str]) -> None:
    assert _access(access=True) >= 1
    line = capsys.readouterr().err
    assert "gunicorn.access" in line and "POST /webhook/alertmanager HTTP/1.1" in line and " 200 " in line
