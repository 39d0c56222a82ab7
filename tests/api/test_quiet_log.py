"""A quiet log at the default level (issue 46, item 3): with an AKS pool, the Azure SDK logged every ARM request
and response, headers included, at INFO on every reconcile tick, where the README promises one INFO line per
decision. The real app and the real Azure SDK over HTTP against the fake ARM, the reconciler ticking through a
simulated minute on a hand-moved clock; the SDKs' HTTP logging comes back when the operator asks for DEBUG."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator

import pytest

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from autoscaler.logjson import SDK_LOGGERS
from providers.aks import AksProvider
from tests.support.cloud_stack import AksCloud, AllowHttp, StaticCredential, service_config
from tests.support import FakeClock, am_alert, am_payload, post

TICK = 15.0  # server.reconcile_interval: four ticks a minute
NOISE = ("azure", "urllib3", "msal", "botocore", "boto3", "google", "kubernetes")


@pytest.fixture(autouse=True)
def sdk_levels() -> Iterator[None]:
    """The SDK loggers' levels are the process's: each test here leaves them as it found them."""
    saved = {name: logging.getLogger(name).level for name in SDK_LOGGERS}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


def minute(tmp_path: Path, aks: AksCloud, caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records of one simulated minute after start-up: four reconciler ticks and two alerts' decisions."""
    clock = FakeClock(1_800_000_000.0)
    cfg = service_config(tmp_path, [aks.pool_config("gpu", min_size=1, max_size=6)], [])
    cfg["server"]["reconcile_interval"] = f"{TICK:.0f}s"
    settings = build_settings(cfg)
    provider = AksProvider("gpu", settings.pools["gpu"].provider_settings, credential=StaticCredential(aks.token),
                           per_call_policies=[AllowHttp()], clock=clock)
    app = create_app(settings, clock=clock, providers={"gpu": provider}, startup_check=False)
    reconciler = app.extensions["autoscaler_reconciler"]
    client = app.test_client()
    caplog.clear()  # start-up said its piece: from here on, the minute
    for i in range(4):
        clock.advance(TICK)
        reconciler.tick(clock())
        if i in (1, 3):
            alert = am_alert("GPUUtilizationHigh", fingerprint=f"fp-{i}", autoscaler_pool="gpu",
                             autoscaler_action="scale_out")
            assert post(client, "/webhook/alertmanager", am_payload(alert)).status_code == 200
            aks.arm.finish_operations()
    return list(caplog.records)


def test_a_minute_at_the_default_level_logs_the_decisions_and_no_sdk_request(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOG_LEVEL", raising=False)
    caplog.set_level(logging.INFO)  # the service's root level by default (gunicorn.conf.py's logconfig)
    with AksCloud(count=2) as aks:
        records = minute(tmp_path, aks, caplog)
    noisy = [r for r in records if r.name.split(".")[0] in NOISE]
    decisions = [r for r in records if r.name == "autoscaler.decision"]
    print(f"records in the minute: {len(records)} ({len(noisy)} from the SDKs, {len(decisions)} decisions)")
    assert noisy == [], f"{len(noisy)} SDK records, first: {noisy[0].name}: {noisy[0].getMessage()[:200]}"
    assert len(decisions) == 2
    # Besides: the provider's line of each change it asked of ARM, and the reconciler's lease taken at its first tick
    others = sorted((r.name, r.getMessage().split(" by ")[0].split(" count ")[0]) for r in records
                    if r not in decisions)
    assert others == [("autoscaler.reconcile.loop", "reconciler lease taken")] + [
        ("providers.aks", "aks pool=gpu agent_pool=gpunp requested")] * 2, others
    assert all(r.levelno == logging.INFO for r in records)


def test_debug_brings_the_sdks_http_logging_back(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOG_LEVEL", "DEBUG")
    caplog.set_level(logging.DEBUG)
    with AksCloud(count=2) as aks:
        records = minute(tmp_path, aks, caplog)
    http = [r for r in records if r.name == "azure.core.pipeline.policies.http_logging_policy"]
    assert http and any("Request URL" in r.getMessage() for r in http)
