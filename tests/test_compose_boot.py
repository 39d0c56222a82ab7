"""The compose stack's autoscaler boots as shipped: its image's command, under a read-only root with compose's
writable paths only, as its user, answering its own healthcheck.

No docker engine here, so the container is rebuilt from the two files that define it: the Dockerfile (WORKDIR,
ENV, COPY, USER, CMD) and the compose service (environment, volumes, tmpfs, read_only, user, healthcheck). The
command runs in a private mount and network namespace (`unshare -m -n`, as root) where every filesystem is
remounted read-only, compose's tmpfs mounts and the data volume are the only writable places, and the image's
files sit at a staged copy of the container's paths.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PSEUDO = {"proc", "sysfs", "cgroup", "cgroup2", "devtmpfs", "devpts", "mqueue", "securityfs", "debugfs", "bpf",
          "tracefs", "pstore", "configfs", "fusectl", "hugetlbfs", "autofs", "binfmt_misc"}
ENV = {"AUTOSCALER_TOKEN": "compose-token-0123456789", "AUTOSCALER_PASSWORD": "compose-password-0123456789",
       "INFLUXDB_TOKEN": "influx-token-0123456789"}


def dockerfile() -> dict[str, Any]:
    """WORKDIR, ENV, COPY, USER and CMD of the Dockerfile (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    image: dict[str, Any] = {"env": {}, "copy": []}
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "WORKDIR":
            image["workdir"] = rest.strip()
        elif word == "ENV":
            image["env"].update(dict(pair.split("=", 1) for pair in shlex.split(rest)))
        elif word == "COPY":
            *sources, dest = rest.split()
            image["copy"].append((sources, dest))
        elif word in ("USER", "CMD"):
            image[word.lower()] = json.loads(rest) if word == "CMD" else rest.strip()
    return image


def compose_service() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["autoscaler"])


def _resolve(value: str) -> str:
    """Compose's ${VAR}, ${VAR:?msg} and ${VAR:-default}, from ENV."""
    return re.sub(r"\$\{(\w+)(?::[?-][^}]*)?\}", lambda m: ENV[m.group(1)], value)


def _stage(image: dict[str, Any], service: dict[str, Any], root: Path) -> tuple[dict[str, str], list[str]]:
    """The image's files under ``root`` (the container's / ), and the shell lines that mount compose's volumes."""
    workdir = root / image["workdir"].lstrip("/")
    workdir.mkdir(parents=True)
    for sources, dest in image["copy"]:
        target = Path(dest) if dest.startswith("/") else Path(image["workdir"]) / dest
        for source in sources:
            into = root / str(target).lstrip("/")
            if dest.endswith("/") or dest == "." or len(sources) > 1:
                into = into / Path(source).name
            into.parent.mkdir(parents=True, exist_ok=True)
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, into, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(ROOT / source, into)
    mounts = []
    for volume in service["volumes"]:
        source, target, *_ = volume.split(":")
        inside = root / target.lstrip("/")
        if source.startswith("./"):  # a bind of a repo file, read-only
            inside.parent.mkdir(parents=True, exist_ok=True)
            inside.touch()
            mounts.append(f"mount --bind {ROOT / source} {inside} && mount -o remount,bind,ro {inside}")
        else:  # a fresh named volume: the image's directory, owned by the image's user
            inside.mkdir(parents=True, exist_ok=True)
            uid, gid = image["user"].split(":")
            mounts.append(f"mount -t tmpfs -o uid={uid},gid={gid},mode=0755 tmpfs {inside}")
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    root.chmod(0o755)
    env = {**image["env"], **{k: _resolve(str(v)) for k, v in service["environment"].items()}}
    env = {k: str(root / v.lstrip("/")) if k == "AUTOSCALER_CONFIG" else v for k, v in env.items()}
    env.update(HOME=str(workdir), PATH=f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin")
    return env, mounts


def _readonly_lines() -> list[str]:
    """Remount every real filesystem of this namespace read-only (compose's read_only: true)."""
    lines = []
    for row in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = row.split()
        point, fstype = fields[4], fields[fields.index("-") + 1]
        if fstype in PSEUDO or point.startswith(("/proc", "/sys", "/dev/pts", "/mnt/sandboxing")):
            continue
        lines.append(f"mount -o remount,bind,ro {shlex.quote(point)}")
    return lines


@pytest.fixture()
def staged() -> Iterator[Path]:
    """A staging directory outside /tmp (a tmpfs covers /tmp inside the namespace)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("setpriv") is None:
        reason = "needs root, unshare and setpriv (util-linux) for a private read-only mount namespace"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    path = Path(tempfile.mkdtemp(prefix="compose-boot-", dir="/var/tmp"))
    path.chmod(0o755)  # the image's user reads its files below it
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def boot(stage: Path, with_tmpfs: bool = True) -> tuple[dict[str, Any], str]:
    """Run the service's command in the namespace; the probe's findings and gunicorn's log."""
    image, service = dockerfile(), compose_service()
    env, mounts = _stage(image, service, stage / "root")
    targets = [(t.split(":")[0], (t.split(":", 1) + ["defaults"])[1]) for t in service.get("tmpfs", [])]
    points = [f"mkdir -p {path}" for path, _ in targets]  # docker makes a missing mount point in the image
    tmpfs = [f"mount -t tmpfs -o {options} tmpfs {path}" for path, options in targets] if with_tmpfs else []
    probe = stage / "probe.py"
    probe.write_text(PROBE)
    uid, gid = image["user"].split(":")
    command = shlex.join(["env", "-i", *(f"{k}={v}" for k, v in env.items()),
                          "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *image["cmd"]])
    health = shlex.join(service["healthcheck"]["test"][1:])
    logs = stage / "logs"  # the test's own writable place, outside what the service may write
    logs.mkdir()
    script = "\n".join([
        "set -e", "ip link set lo up", *mounts, f"mount -t tmpfs -o mode=0700 tmpfs {logs}", *points,
        *(_readonly_lines() if service.get("read_only") else []), *tmpfs,
        "touch /probe-root-is-read-only 2>/dev/null && echo 'ROOT WRITABLE' && exit 9",
        f"cd {stage / 'root' / image['workdir'].lstrip('/')}",
        f"{command} > {logs}/gunicorn.log 2>&1 &",
        "pid=$!",
        f"{sys.executable} {probe} $pid {shlex.quote(health)} {ENV['AUTOSCALER_TOKEN']} || true",
        "kill -TERM $pid 2>/dev/null || true", "wait $pid || true",
        f"echo '--- gunicorn log'; cat {logs}/gunicorn.log",
    ])
    out = subprocess.run(["unshare", "-m", "-n", "--propagation", "private", "bash", "-c", script],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    head, _, log = out.stdout.partition("--- gunicorn log\n")
    lines = [line for line in head.splitlines() if line.startswith("{")]
    assert lines, out.stdout + out.stderr
    return json.loads(lines[-1]), log


PROBE = '''
import json, os, subprocess, sys, time, urllib.request
pid, health, token = int(sys.argv[1]), sys.argv[2], sys.argv[3]
found = {"healthy": False}
deadline = time.monotonic() + 40
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        found["exited"] = True
        break
    env = {"PATH": os.environ["PATH"]}
    if subprocess.run(["sh", "-c", health], env=env, capture_output=True).returncode == 0:
        found["healthy"] = True
        break
    time.sleep(0.2)
if found["healthy"]:
    def call(path, body=None):
        req = urllib.request.Request("http://127.0.0.1:8080" + path, method="POST" if body else "GET",
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    found["readyz"] = call("/readyz")[0]
    alert = {"status": "firing", "labels": {"alertname": "GPUUtilizationHigh", "autoscaler_pool": "gpu-a100",
             "autoscaler_action": "scale_out"}, "startsAt": "2026-11-21T10:00:00Z", "fingerprint": "c1"}
    found["decision"] = json.loads(call("/webhook/alertmanager", {"version": "4", "status": "firing",
                                                                  "alerts": [alert]})[1])["decisions"][0]
    found["metrics"] = "gpu_autoscaler_decisions_total" in call("/metrics")[1]
print(json.dumps(found))
'''


def test_compose_service_boots_under_its_read_only_root(staged: Path) -> None:
    service = compose_service()
    assert service["read_only"] is True and service["user"] == dockerfile()["user"]
    found, log = boot(staged)
    assert found["healthy"], log[-3000:]
    assert found["readyz"] == 200 and found["metrics"] is True, log[-3000:]
    decision = found["decision"]
    assert (decision["pool"], decision["outcome"], decision["from"], decision["to"]) == ("gpu-a100", "scaled", 2, 3)
    assert "No usable temporary directory" not in log and "Read-only file system" not in log


def test_without_compose_tmpfs_it_would_not_boot(staged: Path) -> None:
    """The check above can fail: the same boot without the tmpfs on /tmp is the bug the stack once shipped."""
    found, log = boot(staged, with_tmpfs=False)
    assert not found["healthy"]
    assert "No usable temporary directory" in log or "Read-only file system" in log, log[-3000:]
