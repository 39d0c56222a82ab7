"""``python -m autoscaler status|events|scale|pause|resume`` against a running gunicorn."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Iterator

import pytest
import yaml

from tests.support.servers import ROOT, Service, free_port
from tests.support import TOKEN, config


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("cli")
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(config(f"sqlite:///{tmp}/s.db")))
    with Service(None, tmp, workers=1, env={"AUTOSCALER_CONFIG": str(path)}, graceful_timeout=2) as running:
        yield running


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCALER_")}
    full.update({"PYTHONPATH": str(ROOT), **(env or {})})
    return subprocess.run([sys.executable, "-m", "autoscaler", *args], capture_output=True, text=True, env=full,
                          cwd=ROOT, timeout=30)


@pytest.mark.slow
def test_operator_session(server: Service) -> None:
    env = {"AUTOSCALER_URL": server.url, "AUTOSCALER_TOKEN": TOKEN}
    status = cli("status", env=env)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0].split()[:3] == ["POOL", "PROVIDER", "CURRENT"]
    assert lines[1].split()[:4] == ["gpu", "simulated", "2", "1-6"]

    scaled = cli("scale", "gpu", "out", "--step", "2", "--reason", "batch job", env=env)
    assert scaled.returncode == 0 and "gpu: scaled 2 -> 4" in scaled.stdout
    again = cli("scale", "gpu", "out", env=env)
    assert again.returncode == 3 and "skipped_cooldown" in again.stdout  # decided not to act: scripts can tell

    paused = cli("pause", "spare", "--reason", "driver upgrade", "--json", env=env)
    assert paused.returncode == 0 and json.loads(paused.stdout)["pause_reason"] == "driver upgrade"
    assert "yes" in cli("status", env=env).stdout.splitlines()[2].split()[5]
    assert json.loads(cli("resume", "spare", "--json", env=env).stdout)["paused"] is False

    events = cli("events", "--pool", "gpu", env=env)
    assert events.returncode == 0
    rows = events.stdout.splitlines()
    assert rows[0].startswith("ID") and "skipped_cooldown" in rows[1] and "scaled" in rows[2]
    assert "manual request by" in rows[2] or "batch job" in rows[2] or "scale out 2 -> 4" in rows[2]
    as_json = json.loads(cli("events", "--limit", "1", "--json", env=env).stdout)
    assert len(as_json["events"]) == 1
    long = "driver upgrade of every H100 node, then NCCL all-reduce burn-in tests before release"
    assert cli("pause", "gpu", "--reason", long, env=env).returncode == 0
    reason = json.loads(cli("events", "--pool", "gpu", "--limit", "1", "--json", env=env).stdout)["events"][0]["reason"]
    assert len(reason) > 70 and long in reason
    cut = cli("events", "--pool", "gpu", "--limit", "1", env=env).stdout
    assert reason not in cut and reason[:69] + "…" in cut
    assert reason in cli("events", "--pool", "gpu", "--limit", "1", "--wide", env=env).stdout
    assert long in cli("status", "--wide", env=env).stdout and long not in cli("status", env=env).stdout
    assert cli("resume", "gpu", env=env).returncode == 0


@pytest.mark.slow
def test_flags_override_env_and_errors_exit_1(server: Service) -> None:
    ok = cli("status", "--url", server.url, "--token", TOKEN, env={"AUTOSCALER_URL": "http://127.0.0.1:1"})
    assert ok.returncode == 0
    wrong = cli("status", "--url", server.url, "--token", "not-the-token")
    assert wrong.returncode == 1 and "401" in wrong.stderr and "not-the-token" not in wrong.stderr
    missing = cli("scale", "nope", "in", "--url", server.url, "--token", TOKEN)
    assert missing.returncode == 1 and "404" in missing.stderr and "nope" in missing.stderr
    down = cli("status", "--url", f"http://127.0.0.1:{free_port()}", "--token", TOKEN)
    assert down.returncode == 1 and "cannot reach" in down.stderr
    usage = cli("scale", "gpu", "sideways")
    assert usage.returncode == 2


@pytest.mark.slow
def test_common_options_work_before_the_subcommand_too(server: Service) -> None:
    before = cli("--url", server.url, "--token", TOKEN, "events", "--limit", "1", "--json")
    assert before.returncode == 0, before.stderr
    assert len(json.loads(before.stdout)["events"]) <= 1
    # the subcommand's own flag wins over the one before it
    after = cli("--url", f"http://127.0.0.1:{free_port()}", "status", "--url", server.url, "--token", TOKEN)
    assert after.returncode == 0, after.stderr
    down = cli("--url", f"http://127.0.0.1:{free_port()}", "--token", TOKEN, "status")
    assert down.returncode == 1 and "cannot reach" in down.stderr


@pytest.mark.slow
def test_a_reader_that_stops_ends_the_output_quietly(server: Service) -> None:
    """``python -m autoscaler events | head``: the pipe closes before the table is written; no traceback."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before a line is written: every write meets EPIPE
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCALER_")}
    env.update({"PYTHONPATH": str(ROOT), "AUTOSCALER_URL": server.url, "AUTOSCALER_TOKEN": TOKEN})
    try:
        done = subprocess.run([sys.executable, "-m", "autoscaler", "events", "--limit", "50"], stdout=write,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, timeout=30)
    finally:
        os.close(write)
    assert done.returncode == 0 and done.stderr == "", done.stderr
