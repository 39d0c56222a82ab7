"""What a reconciler tick costs at the Kubernetes API with 0, 10 and 500 ProvisioningRequests (issue 48's closing
note): the real app in-process, the real kubernetes client against the fake API server (which counts every call),
two simulated H100 pools in a group (tests/support/gang_rig.py), whose status calls the simulated cloud counts. Each
request asks for 1 node of 8 GPUs; the calls are counted over one tick in each state:

- ``new``: the first tick over requests too large for any pool (sized from their PodTemplate, then Failed);
- ``finished``: the next tick (every request Failed);
- ``waiting_for_room``: requests a pool could hold but not now (both pools paused): asked again every tick;
- ``provisioned``: every request Provisioned (its node booked) and within its booking (0 and 2 requests: the rig's
  spot pool holds 2 nodes).

``python -m bench.gang_ticks [--json]``
"""
from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from tests.support import post
from tests.support.fakes.kube import FakeKube
from tests.support.gang_rig import H100, Rig

COUNTS = (0, 10, 500)
PRS = {"provisioning_requests": {"booking": "1h"}}


def _calls(kube: FakeKube, rig: Rig) -> dict[str, Any]:
    """One tick's calls: the total and by method and resource; and the cloud status calls (both pools)."""
    start, reads = len(kube.log), _reads(rig)
    rig.tick()
    made = kube.log[start:]
    kinds = Counter(f"{method} {_resource(path)}" for method, path in made)
    return {"total": len(made), "by_call": dict(sorted(kinds.items())), "cloud_status": _reads(rig) - reads}


def _reads(rig: Rig) -> int:
    return sum(rig.provider(pool).reads for pool in ("spot", "ondemand"))


def _resource(path: str) -> str:
    path = path.split("?", 1)[0]
    for name in ("provisioningrequests", "podtemplates", "pods", "nodes"):
        if f"/{name}" in path:
            return name + ("/status" if path.endswith("/status") else "")
    return path


def _asked(tmp: Path, kube: FakeKube, n: int, nodes: int) -> Rig:
    """The rig, and ``n`` requests ``r0``... of ``nodes`` nodes of 8 GPUs each (one PodTemplate)."""
    rig = Rig(tmp, kube, **PRS)
    kube.prs.add_template("tmpl", gpus=8, node_selector=dict(H100))
    for i in range(n):
        kube.prs.add_request(f"r{i}", [("tmpl", nodes)])
    return rig


def finished(tmp: Path, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    with FakeKube() as kube:
        rig = _asked(tmp, kube, n, 9)  # 9 nodes: over both pools' max (8)
        return _calls(kube, rig), _calls(kube, rig)


def waiting_for_room(tmp: Path, n: int) -> dict[str, Any]:
    with FakeKube() as kube:
        rig = _asked(tmp, kube, n, 1)
        for pool in ("spot", "ondemand"):
            assert post(rig.client, f"/api/v1/pools/{pool}/pause", {"reason": "bench"}).status_code == 200
        rig.tick()
        return _calls(kube, rig)


def provisioned(tmp: Path, n: int) -> dict[str, Any]:
    """``n`` requests of one node each, provisioned one after the other."""
    with FakeKube() as kube:
        rig = _asked(tmp, kube, n, 1)
        done = 0
        for _ in range(4 * n + 4):  # one request asked a tick (its pool busy meanwhile), each provisioned
            rig.tick()
            rig.arrive("spot")
            rig.arrive("ondemand")
            done = sum(kube.prs.conditions(f"r{i}").get("Provisioned") == "True" for i in range(n))
            if done == n:
                break
        return {**_calls(kube, rig), "provisioned": done}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in COUNTS:
            first, nxt = finished(Path(tmp) / f"f{n}", n)
            out[str(n)] = {"new": first, "finished": nxt, "waiting_for_room": waiting_for_room(Path(tmp) / f"w{n}", n)}
        for n in (0, 2):
            out.setdefault(str(n), {})["provisioned"] = provisioned(Path(tmp) / f"p{n}", n)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for n, states in out.items():
        print(f"{n} requests: " + "; ".join(f"{state} {v['total']} {v['by_call']} cloud status {v['cloud_status']}"
                                            for state, v in states.items()))


if __name__ == "__main__":
    main()
