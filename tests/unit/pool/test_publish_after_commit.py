"""Publishing an event (log line, metrics, sinks) happens after its decision is committed: a failure there must
neither undo nor repeat the decision. The sender's retry is ``skipped_duplicate`` and the event is recorded once."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterator

import pytest

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from tests.support import AUTH, FakeClock, am_payload, config, events, post


class FailingSink:
    """A sink whose delivery raises, as a sink with a bug would."""

    def __init__(self) -> None:
        self.calls = 0

    def emit(self, event: dict[str, Any]) -> None:
        self.calls += 1
        raise RuntimeError("sink exploded")

    def close(self) -> None:
        pass


class BrokenShipper(logging.Handler):
    """A log handler (a log shipper) whose ``handle`` raises: logging only guards ``emit``."""

    def handle(self, record: logging.LogRecord) -> bool:
        raise OSError("log shipper queue full")


@pytest.fixture
def broken_decision_log(request: pytest.FixtureRequest) -> Iterator[None]:
    logger = logging.getLogger("autoscaler.decision")
    handler = BrokenShipper()
    if request.param:
        logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


@pytest.mark.parametrize("broken_decision_log", [pytest.param(False, id="failing_sink"),
                                                 pytest.param(True, id="failing_sink_and_log_handler")],
                         indirect=True)
def test_a_failing_publish_neither_undoes_nor_repeats_a_committed_decision(tmp_path: Path,
                                                                          broken_decision_log: None) -> None:
    sink = FailingSink()
    settings = build_settings(config(f"sqlite:///{tmp_path}/state.db"), env={})
    client = create_app(settings, clock=FakeClock(), sinks=[sink], startup_check=False).test_client()
    body = am_payload()

    first = post(client, "/webhook/alertmanager", body)
    assert first.status_code == 200, first.get_data(as_text=True)
    assert [d["outcome"] for d in first.get_json()["decisions"]] == ["scaled"]
    retry = post(client, "/webhook/alertmanager", body)
    assert retry.status_code == 200, retry.get_data(as_text=True)
    assert [d["outcome"] for d in retry.get_json()["decisions"]] == ["skipped_duplicate"]

    assert [e["outcome"] for e in events(client, pool="gpu")].count("scaled") == 1
    assert sink.calls == 2
    scrape = client.get("/metrics", headers=AUTH).get_data(as_text=True)
    assert 'gpu_autoscaler_event_sink_dropped_total{sink="FailingSink"} 2.0' in scrape
