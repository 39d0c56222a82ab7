"""Run the image's command as a container would, without a container engine: the Dockerfile's files at a staged copy
of the container's paths, a private mount and network namespace (`unshare -m -n`, as root) where every filesystem
is read-only but the writable paths the deployment declares, the image's user, and a probe inside the namespace.

Used by tests/deploy/test_compose_boot.py (the compose service) and tests/deploy/test_helm_chart.py (the chart's pod).
"""
from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


ROOT = Path(__file__).resolve().parents[2]
PSEUDO = {"proc", "sysfs", "cgroup", "cgroup2", "devtmpfs", "devpts", "mqueue", "securityfs", "debugfs", "bpf",
          "tracefs", "pstore", "configfs", "fusectl", "hugetlbfs", "autofs", "binfmt_misc"}


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


@dataclass
class Container:
    """What a deployment makes of the image: its environment, files, writable paths, user and root."""

    env: dict[str, str]
    user: str                                                # "uid:gid"
    binds: dict[str, Path] = field(default_factory=dict)     # container path -> a host file, read-only
    writable: dict[str, str] = field(default_factory=dict)   # container path -> tmpfs options
    read_only: bool = True
    command: list[str] | None = None                         # None: the image's CMD




def _copy_image(image: dict[str, Any], root: Path) -> None:
    """The Dockerfile's COPY lines, into ``root`` standing for the container's /."""
    (root / image["workdir"].lstrip("/")).mkdir(parents=True)
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


def _readonly_lines() -> list[str]:
    """Remount every real filesystem of the namespace read-only (the machinery's own mounts are left alone)."""
    lines = []
    for row in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = row.split()
        point, fstype = fields[4], fields[fields.index("-") + 1]
        if fstype in PSEUDO or point.startswith(("/proc", "/sys", "/dev/pts", "/mnt/sandboxing")):
            continue
        lines.append(f"mount -o remount,bind,ro {shlex.quote(point)}")
    return lines


def _inside(root: Path, path: str) -> str:
    """A container path's place: under ``root``, except /tmp and below, which the namespace mounts for real."""
    return path if path == "/tmp" or path.startswith("/tmp/") else str(root / path.lstrip("/"))


def _mounts(container: Container, root: Path) -> tuple[list[str], list[str]]:
    """Shell lines before the root goes read-only (binds, mount points) and after (the writable tmpfs mounts)."""
    before, after = [], []
    for path, source in container.binds.items():
        place = Path(_inside(root, path))
        place.parent.mkdir(parents=True, exist_ok=True)
        place.touch()
        before.append(f"mount --bind {shlex.quote(str(source))} {place} && mount -o remount,bind,ro {place}")
    for path, options in sorted(container.writable.items()):  # /tmp before /tmp/prometheus-multiproc
        point = _inside(root, path)
        if not any(path.startswith(other.rstrip("/") + "/") for other in container.writable):
            before.append(f"mkdir -p {point}")  # a container engine makes a missing mount point in the image
        after.append(f"mkdir -p {point} && mount -t tmpfs -o {options} tmpfs {point}")
    return before, after


def _keep_interpreter(stage: Path) -> tuple[list[str], list[str]]:
    """Shell lines that keep this interpreter (the venv the service runs from) at its own path when it lies under
    /tmp (a clone checked out there), where the namespace's tmpfs would hide it: held aside before, put back after."""
    prefix = Path(sys.prefix)
    if _inside(stage, str(prefix)) != str(prefix):  # not under /tmp: the read-only root shows it as it is
        return [], []
    held = stage / "interpreter"
    held.mkdir()
    return ([f"mount --bind {shlex.quote(str(prefix))} {held}"],
            [f"mkdir -p {shlex.quote(str(prefix))} && mount --bind {held} {shlex.quote(str(prefix))} "
             f"&& mount -o remount,bind,ro {shlex.quote(str(prefix))}"])


def run(stage: Path, container: Container, probe: str, *args: str) -> tuple[dict[str, Any], str]:
    """Start the image's command in the namespace, run ``probe`` (Python, as root, in the namespace) with the
    service's pid and ``args``; the probe's last JSON line and the service's log."""
    image = dockerfile()
    root = stage / "root"
    _copy_image(image, root)
    before, after = _mounts(container, root)
    keep_before, keep_after = _keep_interpreter(stage)
    before, after = before + keep_before, after + keep_after
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    workdir = root / image["workdir"].lstrip("/")
    env = {**image["env"], **container.env, "HOME": str(workdir),
           "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin"}
    env = {k: _inside(root, v) if k == "AUTOSCALER_CONFIG" else v for k, v in env.items()}
    (stage / "probe.py").write_text(probe)
    uid, gid = container.user.split(":")
    command = shlex.join(["env", "-i", *(f"{k}={v}" for k, v in env.items()), "setpriv", f"--reuid={uid}",
                          f"--regid={gid}", "--clear-groups", *(container.command or image["cmd"])])
    logs = stage / "logs"  # the test's own writable place, outside what the service may write
    logs.mkdir()
    script = "\n".join([
        "set -e", "ip link set lo up", *before, f"mount -t tmpfs -o mode=0700 tmpfs {logs}",
        *(_readonly_lines() if container.read_only else []), *after,
        *(["touch /root-is-read-only 2>/dev/null && echo 'ROOT WRITABLE' && exit 9"] if container.read_only else []),
        f"cd {workdir}",
        f"{command} > {logs}/service.log 2>&1 &",
        "pid=$!",
        f"{sys.executable} {stage / 'probe.py'} $pid {shlex.join(args)} || true",
        "kill -TERM $pid 2>/dev/null || true", "wait $pid || true",
        f"echo '--- service log'; cat {logs}/service.log",
    ])
    out = subprocess.run(["unshare", "-m", "-n", "--propagation", "private", "bash", "-c", script],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    head, _, log = out.stdout.partition("--- service log\n")
    lines = [line for line in head.splitlines() if line.startswith("{")]
    assert lines, out.stdout + out.stderr
    return json.loads(lines[-1]), log


#: The probe: wait (40 s at most) for the health check to pass or the service to exit, then one webhook.
PROBE = '''
import json, os, subprocess, sys, time, urllib.request
pid, health, token, body = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
found = {"healthy": False}
deadline = time.monotonic() + 40
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        found["exited"] = True
        break
    if subprocess.run(["sh", "-c", health], env={"PATH": os.environ["PATH"]}, capture_output=True).returncode == 0:
        found["healthy"] = True
        break
    time.sleep(0.2)
if found["healthy"]:
    def call(path, data=None):
        req = urllib.request.Request("http://127.0.0.1:8080" + path, method="POST" if data else "GET",
                                     data=data.encode() if data else None,
                                     headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    found["readyz"] = call("/readyz")[0]
    found["decision"] = json.loads(call("/webhook/alertmanager", body)[1])["decisions"][0]
    found["metrics"] = "gpu_autoscaler_decisions_total" in call("/metrics")[1]
print(json.dumps(found))
'''
