"""What tests share: the one base config, its credentials, a hand-moved clock, payload builders and request helpers.

Tests import from here (never from each other, never from conftest); conftest's fixtures build on it.
"""
from __future__ import annotations

import copy
import json
import logging
import re
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from flask import Flask
from flask.testing import FlaskClient

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from autoscaler.store import EventRecord, QuickState, Shortcut, Store
from providers import NodePoolProvider

TOKEN = "hardening-token-7"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HMAC_SECRET = "hmac-secret-7"

#: The one base config every test starts from (tests change top-level keys, never this dict).
BASE_CONFIG: dict[str, Any] = {
    "server": {"auth": {"bearer_tokens": [TOKEN], "basic": [{"username": "grafana", "password": "pw-7"}]}},
    "defaults": {
        "scale_out": {"step": 1, "cooldown": "5m"},
        "scale_in": {"step": 1, "cooldown": "15m", "delay_after_scale_out": "10m"},
        "dedup_window": "10m",
    },
    "rules": [
        {"match": {"alertname": "GPUUtilizationHigh"}, "pool": "gpu", "action": "scale_out"},
        {"match_re": {"alertname": "GPUUtilizationLow|GPUIdle"}, "pool": "gpu", "action": "scale_in"},
    ],
    "pools": [
        {"name": "gpu", "provider": "simulated", "min": 1, "max": 6, "simulated": {"initial_count": 2}},
        {"name": "spare", "provider": "simulated", "min": 0, "max": 3, "simulated": {"initial_count": 0}},
    ],
}


class FakeClock:
    """The one fake of the service's time source (``autoscaler.clock.Clock``), for every test.

    A wall clock the test moves by hand (``advance``; calling the fake reads it) and a monotonic clock that moves
    with it; ``sleep`` records the wait in ``sleeps`` and moves both, so no test waits out a real backoff.
    ``real_waits``: the monotonic clock and sleep are the machine's (the wall clock stays the test's), for a test
    whose waits stand for a real peer, such as another thread still holding the pool. ``sleeps``: the list to
    record the waits in (a test's own), else a new one."""

    def __init__(self, start: float = 1_800_000_000.0, real_waits: bool = False,
                 sleeps: list[float] | None = None) -> None:
        self.now = start
        self.elapsed = 0.0
        self.real_waits = real_waits
        self.sleeps: list[float] = [] if sleeps is None else sleeps

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return time.monotonic() if self.real_waits else self.elapsed

    def sleep(self, seconds: float) -> None:
        if self.real_waits:
            time.sleep(seconds)
            return
        self.sleeps.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.elapsed += seconds


def config(db_url: str, **changes: Any) -> dict[str, Any]:
    """The base config with a store URL and top-level keys replaced."""
    cfg = copy.deepcopy(BASE_CONFIG)
    cfg["store"] = {"url": db_url}
    cfg.update(copy.deepcopy(changes))
    return cfg


def make_app(db_url: str, clock: FakeClock | None = None, providers: dict[str, NodePoolProvider] | None = None,
             **changes: Any) -> Flask:
    """An app on a fresh config; ``changes`` replace top-level config keys."""
    settings = build_settings(config(db_url, **changes), env={})
    return create_app(settings, clock=clock, providers=providers, startup_check=False)


def am_alert(name: str = "GPUUtilizationHigh", status: str = "firing", fingerprint: str = "fp1",
             starts_at: str = "2026-11-21T10:00:00Z", **labels: str) -> dict[str, Any]:
    """One Alertmanager alert."""
    return {"status": status, "labels": {"alertname": name, **labels}, "annotations": {"summary": "GPU busy"},
            "startsAt": starts_at, "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prom/graph",
            "fingerprint": fingerprint}


def am_payload(*alerts: dict[str, Any], status: str = "firing") -> dict[str, Any]:
    """An Alertmanager version 4 notification."""
    return {"version": "4", "groupKey": "{}:{alertname=\"x\"}", "truncatedAlerts": 0, "status": status,
            "receiver": "autoscaler", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093", "alerts": list(alerts) or [am_alert()]}


OUTCOMES = {"scaled", "dry_run", "skipped_cooldown", "skipped_limit", "skipped_duplicate", "skipped_paused",
            "skipped_busy", "skipped_backoff", "ignored_resolved", "ignored_test", "unrouted", "unknown_pool", "failed",
            "skipped_in_use"}


def post(client: FlaskClient, path: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    return client.post(path, data=json.dumps(body), headers={**AUTH, "Content-Type": "application/json",
                                                            **(headers or {})})


def events(client: FlaskClient, **query: str) -> list[dict[str, Any]]:
    resp = client.get("/api/v1/events", query_string=query, headers=AUTH)
    assert resp.status_code == 200
    return resp.get_json()["events"]


@contextmanager
def logging_kept() -> Iterator[None]:
    """gunicorn's logger runs dictConfig on the root logger: put every touched logger back afterwards."""
    names = ["", "gunicorn.error", "gunicorn.access"]
    saved = [(lg, lg.level, list(lg.handlers), lg.propagate) for lg in map(logging.getLogger, names)]
    try:
        yield
    finally:
        for lg, level, handlers, propagate in saved:
            lg.setLevel(level)
            lg.handlers[:] = handlers
            lg.propagate = propagate


def quick_state(store: Store, pool: str) -> QuickState | None:
    """What ``Store.shortcut`` hands its plan (the short cut's read), with a plan that settles nothing (nothing is
    written)."""
    seen: list[QuickState | None] = []
    assert store.shortcut(pool, lambda quick: seen.append(quick)) is None
    return seen[0]


# 8 parameters: the fields of the Shortcut a plan returns, as the store tests name them.
def record_settled(store: Store, pool: str, keys: tuple[str, ...], claim: str, now: float, expires_at: float,
                   event: EventRecord, duplicate: EventRecord) -> tuple[int, bool]:
    """``Store.shortcut`` with a plan that settles whatever it reads: (the event id, whether it was the duplicate)."""
    written = store.shortcut(pool, lambda _quick: Shortcut(keys, claim, now, expires_at, event, duplicate))
    assert written is not None
    return written


def answered_within(seconds: float, what: str, fn: Callable[[], Any]) -> tuple[float, Any]:
    """``fn()`` on a thread: (how long it took, what it returned or raised); fails when it has no answer within
    ``seconds`` (``what``: the bound the caller expects it within, for the message)."""
    done: list[Any] = []

    def run() -> None:
        try:
            done.append(fn())
        except Exception as exc:  # the outcome under test, compared by the caller
            done.append(exc)

    started = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    took = time.monotonic() - started
    assert done, f"no answer after {took:.1f}s ({what})"
    return took, done[0]


def md_section(text: str, heading: str) -> str:
    """The Markdown text under ``heading`` (a whole line, ``## Name``), up to the next heading of the same or a higher
    level outside code fences."""
    level = len(heading.split(" ", 1)[0])
    lines = text.splitlines()
    assert heading in lines, f"no heading {heading!r}"
    out, fenced = [], False
    for line in lines[lines.index(heading) + 1:]:
        fenced ^= line.startswith("```")
        if not fenced and re.match(rf"#{{1,{level}}} ", line):
            break
        out.append(line)
    return "\n".join(out)

