"""The effective config in the log: once per start, readable, secrets redacted.

gunicorn's master reads the config before it forks (``gunicorn.conf.py``'s ``on_starting``) and logs it, one line
per section and per pool instead of one JSON line of the whole file; it leaves the config's digest in
``LOGGED_ENV`` for the workers it forks. A worker whose config has that digest (the same file, unchanged since)
says so in one short line; one whose config differs (the file changed before a worker restarted) logs its own in
full. Outside gunicorn (a test, a script) ``create_app`` logs it in full.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Any

from autoscaler.redact import redact_tree

log = logging.getLogger("autoscaler.app")

#: ``<pid>:<digest>`` of the effective config the process ``pid`` logged in full (inherited by forked workers).
LOGGED_ENV = "AUTOSCALER_CONFIG_LOGGED"


def _compact(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True, separators=(", ", ": "))


def sections(settings: Any) -> tuple[str, list[tuple[str, str]]]:
    """The redacted effective config's digest, and its lines: (``server``, JSON), …, (``pools[gpu]``, JSON)."""
    effective = redact_tree(settings.config.model_dump(mode="python"))
    digest = hashlib.sha256(_compact(effective).encode()).hexdigest()[:12]
    lines = [(key, _compact(value)) for key, value in sorted(effective.items()) if key != "pools" and value]
    lines += [(f"pools[{pool.get('name')}]", _compact(pool)) for pool in effective.get("pools") or []]
    return digest, lines


def log_effective(settings: Any, worker: bool) -> None:
    """Log the effective config: in full, or (``worker``, forked by a master that logged the same) in one line."""
    digest, lines = sections(settings)
    said = os.environ.get(LOGGED_ENV, "")
    pid, _, logged = said.partition(":")
    if worker and logged == digest and pid != str(os.getpid()):
        log.info("worker config: the effective config logged at start-up (sha256 %s, %d pool(s))", digest,
                 len(settings.pools))
        return
    if not worker and logged == digest:  # the master's hook after a preloaded app already logged it
        return
    log.info("effective config: sha256 %s, %d pool(s), one line per section (secrets shown as **********)",
             digest, len(settings.pools))
    for key, text in lines:
        log.info("effective config.%s: %s", key, text)
    os.environ[LOGGED_ENV] = f"{os.getpid()}:{digest}"
