"""gunicorn's logger, minus the work for access lines nobody writes.

Once a ``logconfig_dict`` is set (``gunicorn.conf.py`` always sets one, so gunicorn's own lines go through the
service's formatters), gunicorn builds every request's access-line atoms (a dict of the request's headers, the
response's headers and the whole WSGI environ, and a ``strftime``) and hands them to ``gunicorn.access``, which
drops them when access lines are off (its level is WARNING then). That was ≈ 5 % of a worker's CPU on the webhook
path (BENCHMARKS.md, "Intake after the second hardening round"). Here the atoms are built only when the access
logger would write the line; what it writes, and through which formatter, is unchanged.
"""
from __future__ import annotations

import logging
from typing import Any

from gunicorn.glogging import Logger


class GunicornLogger(Logger):  # type: ignore[misc]  # gunicorn ships no type hints
    """``gunicorn.glogging.Logger`` whose ``access`` returns at once when ``gunicorn.access`` drops INFO lines."""

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        if not self.access_log.isEnabledFor(logging.INFO):
            return
        super().access(resp, req, environ, request_time)
