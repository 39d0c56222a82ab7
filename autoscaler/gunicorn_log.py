"""gunicorn's logger, minus the work for access lines nobody writes.

Once a ``logconfig_dict`` is set (``gunicorn.conf.py`` always sets one, so gunicorn's own lines go through the
service's formatters), gunicorn builds every request's access-line atoms (a dict of the request's headers, the
response's headers and the whole WSGI environ, and a ``strftime``) and hands them to ``gunicorn.access``, which
drops them when access lines are off (its level is WARNING then). That was ≈ 5 % of a worker's CPU on the webhook
path (BENCHMARKS.md, "Intake after the second hardening round"). Here the atoms are built only when the access
logger would write the line, and the query's secret parameters (``server.auth.query_token``) are masked by name
before it is: redaction by value alone misses a percent-encoded copy or a token rotated out.
"""
from __future__ import annotations

import logging
from typing import Any

from gunicorn.glogging import Logger

from autoscaler.redact import redact_query


class GunicornLogger(Logger):  # type: ignore[misc]  # gunicorn ships no type hints
    """``gunicorn.glogging.Logger`` whose ``access`` returns at once when ``gunicorn.access`` drops INFO lines."""

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        if not self.access_log.isEnabledFor(logging.INFO):
            return
        super().access(resp, req, _query_masked(environ), request_time)


def _query_masked(environ: dict[str, Any]) -> dict[str, Any]:
    """The request's environ with its query's secret parameters masked (the ``query_token`` by name, so an
    encoded or rotated-out copy is masked too); the redactor then removes secrets by value from the whole line."""
    query = environ.get("QUERY_STRING") or ""
    safe = redact_query(query) if query else query
    if safe == query:
        return environ
    path = str(environ.get("RAW_URI") or environ.get("PATH_INFO") or "").split("?", 1)[0]
    return {**environ, "QUERY_STRING": safe, "RAW_URI": f"{path}?{safe}"}
