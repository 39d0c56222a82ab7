"""Shared fixtures: the real Prometheus + Alertmanager pipeline, started once per session."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pipeline_stack import Stack, start_stack


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """dcgm stand-in -> Prometheus (250 ms) -> Alertmanager; tests route its webhook where they need it."""
    stack = start_stack(tmp_path_factory.mktemp("pipeline"))
    try:
        yield stack
    finally:
        stack.stop()
