"""schemathesis fuzzes every operation of /openapi.json against the app: no 5xx, JSON errors, fast answers."""
from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.support import AUTH, FakeClock, make_app

CONTRACT_ERRORS = {400, 401, 403, 404, 405, 409, 413, 415, 422, 503}
MAX_SECONDS = 1.0
POOLS = ("gpu", "spare")


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Any:
    db = Path(tmp_path_factory.mktemp("fuzz")) / "state.db"
    app = make_app(f"sqlite:///{db}", FakeClock())
    return schemathesis.openapi.from_wsgi("/openapi.json", app)


schema = schemathesis.pytest.from_fixture("api_schema")


def error_body_is_json(ctx: Any, response: schemathesis.Response, case: schemathesis.Case) -> None:
    """Every 4xx/5xx answer carries a contract status and a JSON ``{"error": ...}`` body."""
    if response.status_code < 400 or case.path == "/readyz":
        return
    assert response.status_code in CONTRACT_ERRORS, f"status {response.status_code} is not in the contract"
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], body


CHECKS = [schemathesis.checks.not_a_server_error, schemathesis.checks.status_code_conformance,
          schemathesis.checks.content_type_conformance, schemathesis.checks.response_schema_conformance,
          error_body_is_json]


@contextmanager
def collector_cpu() -> Iterator[list[float]]:
    """CPU seconds this thread spent in Python's cyclic garbage collector inside the block (a one-item list).

    A full collection walks every object the *test process* holds (hundreds of tests' worth in a pytest worker:
    0.4-0.5 s each, measured), and falls on whichever allocation crosses the threshold: a cost of the process, not of
    the answer that happened to allocate then."""
    spent, started, thread = [0.0], [0.0], threading.get_ident()

    def callback(phase: str, info: dict[str, int]) -> None:
        if threading.get_ident() != thread:  # a collection on another thread costs this one nothing
            return
        if phase == "start":
            started[0] = time.thread_time()
        else:
            spent[0] += time.thread_time() - started[0]

    gc.callbacks.append(callback)
    try:
        yield spent
    finally:
        gc.callbacks.remove(callback)


@schema.parametrize()
@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much, HealthCheck.data_too_large])
def test_every_operation(case: schemathesis.Case) -> None:
    pool = (case.path_parameters or {}).get("pool")
    if isinstance(pool, str) and len(pool) % 3:  # mostly real pools, sometimes an unknown one
        case.path_parameters["pool"] = POOLS[len(pool) % 2]
    with collector_cpu() as collecting:
        cpu_started = time.thread_time()
        case.call_and_validate(headers=AUTH, checks=CHECKS)
        cpu = time.thread_time() - cpu_started
    # No answer costs more than a second of CPU (the app runs in-process, on this thread; wall time would measure
    # the machine's other tenants as much as this code), the collector's walk over the test process's heap aside.
    own = cpu - collecting[0]
    assert own < MAX_SECONDS, (f"{case.method} {case.formatted_path} took {own:.2f}s of CPU "
                               f"({cpu:.2f}s with {collecting[0]:.2f}s in the garbage collector)")
