"""The compose stack's autoscaler boots as shipped: its image's command, under a read-only root with compose's
writable paths only, as its user, answering its own healthcheck (tests/support/container.py emulates the container)."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from tests.support.container import PROBE, ROOT, Container, dockerfile, run

ENV = {"AUTOSCALER_TOKEN": "compose-token-0123456789", "AUTOSCALER_PASSWORD": "compose-password-0123456789",
       "INFLUXDB_TOKEN": "influx-token-0123456789"}
ALERT = {"version": "4", "status": "firing", "alerts": [{
    "status": "firing", "labels": {"alertname": "GPUUtilizationHigh", "autoscaler_pool": "gpu-a100",
                                   "autoscaler_action": "scale_out"},
    "startsAt": "2026-11-21T10:00:00Z", "fingerprint": "c1"}]}


def compose_service() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["autoscaler"])


def _resolve(value: str) -> str:
    """Compose's ${VAR}, ${VAR:?msg} and ${VAR:-default}, from ENV."""
    return re.sub(r"\$\{(\w+)(?::[?-][^}]*)?\}", lambda m: ENV[m.group(1)], value)


def as_compose_runs_it(service: dict[str, Any], with_tmpfs: bool = True) -> Container:
    """The container compose makes of the service: environment, bind mounts, volumes, tmpfs, user, read_only."""
    uid, gid = service["user"].split(":")
    binds, writable = {}, {}
    for volume in service["volumes"]:
        source, target, *_ = volume.split(":")
        if source.startswith("./"):
            binds[target] = ROOT / source
        else:  # a fresh named volume: the image's directory, owned by the image's user
            writable[target] = f"uid={uid},gid={gid},mode=0755"
    if with_tmpfs:
        writable.update({t.split(":")[0]: (t.split(":", 1) + ["defaults"])[1] for t in service.get("tmpfs", [])})
    return Container(env={k: _resolve(str(v)) for k, v in service["environment"].items()}, user=service["user"],
                     binds=binds, writable=writable, read_only=bool(service.get("read_only")))


def _boot(stage: Path, with_tmpfs: bool = True) -> tuple[dict[str, Any], str]:
    service = compose_service()
    health = shlex.join(service["healthcheck"]["test"][1:])  # ["CMD", ...]: compose's own healthcheck
    return run(stage, as_compose_runs_it(service, with_tmpfs), PROBE, health, ENV["AUTOSCALER_TOKEN"],
               json.dumps(ALERT))


def test_compose_service_boots_under_its_read_only_root(stage: Path) -> None:
    service = compose_service()
    assert service["read_only"] is True and service["user"] == dockerfile()["user"]
    found, log = _boot(stage)
    assert found["healthy"], log[-3000:]
    assert found["readyz"] == 200 and found["metrics"] is True, log[-3000:]
    decision = found["decision"]
    assert (decision["pool"], decision["outcome"], decision["from"], decision["to"]) == ("gpu-a100", "scaled", 2, 3)
    assert "No usable temporary directory" not in log and "Read-only file system" not in log


def test_without_compose_tmpfs_it_would_not_boot(stage: Path) -> None:
    """The check above can fail: the same boot without the tmpfs on /tmp is the bug the stack once shipped."""
    found, log = _boot(stage, with_tmpfs=False)
    assert not found["healthy"]
    assert "No usable temporary directory" in log or "Read-only file system" in log, log[-3000:]
