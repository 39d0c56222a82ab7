"""A schedule that never fires (issue 34, item 2): ``0 0 30 2 *`` passed check-config, then croniter's "failed to
find prev date" answered ``GET /api/v1/pools`` and ``/`` with 500, alerts for the pool with 503, dropped
``store_up`` to 0 and failed every reconcile tick, so other pools lost their schedule floors.

check-config now refuses a schedule with no start in the next 4 years, naming its path; and a schedule that still
cannot be evaluated at run time (built here past the config check, as a croniter surprise would be) affects only its
own pool: it is ignored there, logged, and said in the pool's answer."""
from __future__ import annotations

import copy
import logging
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.app import create_app
from autoscaler.config.load import ConfigError, Settings, build_settings
from autoscaler.models import Schedule
from tests.support import AUTH, BASE_CONFIG, FakeClock, am_alert, am_payload

ROOT = Path(__file__).resolve().parents[3]
NEVER = "0 0 30 2 *"
NOW = datetime(2026, 1, 5, 9, 30, tzinfo=timezone.utc).timestamp()  # a Monday, 09:30 UTC


def with_schedule(cron: str, tz: str = "UTC") -> dict[str, Any]:
    raw = copy.deepcopy(BASE_CONFIG)
    raw["pools"][0]["schedules"] = [{"cron": "0 8 * * *", "duration": "1h", "min": 2},
                                    {"cron": cron, "duration": "1h", "min": 3, "timezone": tz}]
    return raw


@pytest.mark.parametrize("cron", [
    pytest.param(NEVER, id="february-30"),
    pytest.param("0 0 31 4 *", id="april-31"),
    pytest.param("0 0 31 2,4,6,9,11 *", id="31st-of-short-months-only"),
])
def test_check_config_refuses_a_schedule_that_never_starts(cron: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_settings(with_schedule(cron), {})
    found = [p for p in info.value.problems if p.startswith("pools[0].schedules[1].cron: ")]
    assert found and "no start in the next 4 years" in found[0], info.value.problems


@pytest.mark.parametrize("cron", [
    pytest.param("0 0 29 2 *", id="leap-day"),
    pytest.param("0 8 * * 1-5", id="office-hours"),
    pytest.param("59 23 31 12 *", id="new-years-eve"),
])
def test_rare_schedules_that_do_start_pass(cron: str) -> None:
    assert build_settings(with_schedule(cron, "Europe/Warsaw"), {}).pools["gpu"].schedules[1].cron == cron


def test_check_config_command_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(with_schedule(NEVER)))
    run = subprocess.run([sys.executable, "-m", "autoscaler", "check-config", str(path)], cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 1 and "pools[0].schedules[1].cron: " in run.stdout + run.stderr, run.stdout + run.stderr


def _settings_with_a_broken_window(tmp_path: Path) -> Settings:
    """``gpu`` gets a window croniter cannot evaluate; ``spare`` keeps a window open now (09:00-11:00 UTC) that
    raises its floor from 0 to 2."""
    raw = copy.deepcopy(BASE_CONFIG)
    raw["store"] = {"url": f"sqlite:///{tmp_path}/state.db"}
    raw["pools"][1]["schedules"] = [{"cron": "0 9 * * *", "duration": "2h", "min": 2}]
    settings = build_settings(raw, {})
    gpu = settings.pools["gpu"]
    broken = replace(gpu, schedules=(Schedule(NEVER, 3600, 4),))
    return replace(settings, pools={**settings.pools, "gpu": broken})


def test_a_schedule_that_cannot_be_evaluated_affects_only_its_pool(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    app = create_app(_settings_with_a_broken_window(tmp_path), clock=FakeClock(NOW), startup_check=False)
    client = app.test_client()

    pools = client.get("/api/v1/pools", headers=AUTH)
    assert pools.status_code == 200, pools.get_data(as_text=True)
    gpu = next(p for p in pools.get_json()["pools"] if p["name"] == "gpu")
    assert gpu["effective_min"] == 1 and NEVER in gpu["effective_min_reason"]
    assert "cannot be evaluated" in gpu["effective_min_reason"]
    assert client.get("/api/v1/pools/gpu", headers=AUTH).status_code == 200
    assert client.get("/", headers=AUTH).status_code == 200
    assert "gpu_autoscaler_store_up 1.0" in client.get("/metrics").get_data(as_text=True)

    alert = client.post("/webhook/alertmanager", json=am_payload(am_alert()), headers=AUTH)
    assert alert.status_code == 200, alert.get_data(as_text=True)
    decision = alert.get_json()["decisions"][0]
    assert decision["pool"] == "gpu" and decision["outcome"] == "scaled"

    reconciler = app.extensions["autoscaler_reconciler"]
    with caplog.at_level(logging.WARNING, logger="autoscaler"):
        first = reconciler.tick(NOW)
        second = reconciler.tick(NOW + 30)
    assert first.held and len(first.views) == 2 and len(second.views) == 2
    raised = [d for d in first.decisions if d.pool == "spare"]
    assert raised and raised[0].outcome.value == "scaled" and raised[0].to == 2  # the other pool's floor holds
    warned = [r.getMessage() for r in caplog.records if NEVER in r.getMessage()]
    assert len(warned) == 1 and "pool=gpu" in warned[0] and "schedules[0]" in warned[0], warned
