"""A fake of the two Google APIs a GKE node pool's scaling touches, served over HTTP for the real clients.

GKE (container v1, REST): ``GET …/nodePools/{np}``, ``POST …/nodePools/{np}:setSize``,
``GET …/locations/{l}/operations``.
Compute (v1): ``GET …/instanceGroupManagers/{mig}`` (targetSize), ``POST …/listManagedInstances`` and
``POST …/deleteInstances``. One node pool spread over ``zones``, one MIG per zone, as GKE builds it; the node pool's
``instanceGroupUrls`` point back at this server. Every request must carry ``Authorization: Bearer <token>``.
Operations stay RUNNING until :meth:`FakeGke.settle` (GKE's take minutes); ``fail_next`` queues error answers.
"""
from __future__ import annotations

import itertools
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.support.fakes.httpbase import FakeHttpServer, Reply, Request

_POOL = re.compile(r"^/v1/projects/(?P<p>[^/]+)/locations/(?P<l>[^/]+)/clusters/(?P<c>[^/]+)/nodePools/(?P<np>[^/:]+)"
                   r"(?P<verb>:setSize)?$")
_OPS = re.compile(r"^/v1/projects/(?P<p>[^/]+)/locations/(?P<l>[^/]+)/operations$")
_MIG = re.compile(r"^/compute/v1/projects/(?P<p>[^/]+)/zones/(?P<z>[^/]+)/instanceGroupManagers/(?P<m>[^/]+)"
                  r"(?P<verb>/listManagedInstances|/deleteInstances)?$")
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
           409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}


@dataclass
class Mig:
    """One zone's managed instance group."""

    zone: str
    name: str
    instances: list[str] = field(default_factory=list)
    failing: list[str] = field(default_factory=list)  # asked for, not created: retried, lastAttempt.errors set
    capacity: int | None = None  # a stockout: the most instances the zone can have
    error: tuple[str, str] = ("", "")  # the code and message of the instances that cannot be created

    @property
    def target_size(self) -> int:
        return len(self.instances) + len(self.failing)


class FakeGke(FakeHttpServer):
    """One project, location, cluster and node pool (``zones`` MIGs of ``per_zone`` nodes each)."""

    name = "fake-gke"

    def __init__(self, token: str, *, project: str = "gpu-proj", location: str = "us-central1",
                 cluster: str = "prod", node_pool: str = "gpu-l4", zones: tuple[str, ...] = ("us-central1-a",
                 "us-central1-b"), per_zone: int = 1, autoscaling: bool = False) -> None:
        super().__init__()
        self.token = token
        self.project, self.location, self.cluster, self.node_pool = project, location, cluster, node_pool
        self.autoscaling = autoscaling
        self.status = "RUNNING"
        self.conditions: list[dict[str, str]] = []  # the node pool's conditions (code names, as the REST API gives)
        self.quiet_instances = False  # failing instances without lastAttempt.errors (the pool's condition says why)
        self.operations: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.failures: list[Reply] = []
        self.lose_answer_to: str | None = None  # a path suffix: handle the next such request, then drop the answer
        self._serial = itertools.count(1)
        self._lock = threading.Lock()
        self.migs = {zone: Mig(zone, f"gke-{cluster}-{node_pool}-{i:08x}-grp") for i, zone in enumerate(zones)}
        for mig in self.migs.values():
            mig.instances = [self._new_instance(mig) for _ in range(per_zone)]

    # -- what tests look at -------------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return sum(m.target_size for m in self.migs.values())

    def provider_id(self, zone: str, instance: str) -> str:
        return f"gce://{self.project}/{zone}/{instance}"

    def settle(self) -> None:
        """Every operation is DONE (GKE finished resizing)."""
        with self._lock:
            for op in self.operations:
                op["status"] = "DONE"

    def add_operation(self, target: str, kind: str = "UPGRADE_NODES") -> None:
        """An operation someone else started (an upgrade of this pool or of the cluster), RUNNING."""
        with self._lock:
            self.operations.append(self._operation(kind, target))

    def fail_next(self, *replies: Reply) -> None:
        self.failures.extend(replies)

    # -- the APIs -----------------------------------------------------------------------------------------------
    def handle(self, request: Request) -> Reply:
        self.requests.append((request.method, request.path))
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _error(401, "Request had invalid authentication credentials.")
        if self.failures:
            return self.failures.pop(0)
        reply = self._answer(request)
        if self.lose_answer_to and request.path.endswith(self.lose_answer_to):
            self.lose_answer_to = None
            return Reply(reset=True)
        return reply

    def _answer(self, request: Request) -> Reply:
        with self._lock:
            if match := _POOL.match(request.path):
                return self._pool(request, match)
            if (match := _OPS.match(request.path)) and request.method == "GET":
                if (match["p"], match["l"]) != (self.project, self.location):
                    return _error(404, f"Location {match['l']} not found.")
                return Reply(body={"operations": [dict(op) for op in self.operations]})
            if match := _MIG.match(request.path):
                return self._mig(request, match)
        return _error(404, f"no route {request.method} {request.path}")

    def _pool(self, request: Request, match: re.Match[str]) -> Reply:
        if (match["p"], match["l"], match["c"], match["np"]) != (self.project, self.location, self.cluster,
                                                                 self.node_pool):
            return _error(404, f"Not found: projects/{match['p']}/locations/{match['l']}/clusters/{match['c']}/"
                               f"nodePools/{match['np']}.")
        if request.method == "GET" and not match["verb"]:
            return Reply(body=self._pool_json())
        if request.method == "POST" and match["verb"] == ":setSize":
            if any(op["status"] == "RUNNING" for op in self.operations):
                return _error(400, "Cluster is running incompatible operation operation-1.", "FAILED_PRECONDITION")
            count = int((request.json() or {}).get("nodeCount", -1))
            if count < 0:
                return _error(400, "nodeCount must be >= 0")
            for mig in self.migs.values():
                del mig.failing[:]
                while mig.target_size < count:
                    room = mig.capacity is None or len(mig.instances) < mig.capacity
                    (mig.instances if room else mig.failing).append(self._new_instance(mig))
                del mig.instances[count:]
            op = self._operation("SET_NODE_POOL_SIZE", self._pool_link())
            self.operations.append(op)
            return Reply(body=dict(op))
        return _error(400, "unsupported")

    def _mig(self, request: Request, match: re.Match[str]) -> Reply:
        mig = self.migs.get(match["z"])
        if match["p"] != self.project or mig is None or mig.name != match["m"]:
            return _error(404, f"The resource 'projects/{match['p']}/zones/{match['z']}/instanceGroupManagers/"
                               f"{match['m']}' was not found")
        if request.method == "GET" and not match["verb"]:
            return Reply(body={"name": mig.name, "zone": mig.zone, "targetSize": mig.target_size,
                               "baseInstanceName": mig.name.removesuffix("-grp"),
                               "currentActions": {"none": len(mig.instances), "creating": len(mig.failing),
                                                  "deleting": 0, "recreating": 0},
                               "status": {"isStable": not mig.failing}})
        if request.method == "POST" and match["verb"] == "/listManagedInstances":
            base = f"{self.url}/compute/v1/projects/{self.project}/zones/{mig.zone}/instances/"
            code, message = mig.error
            errors = {} if self.quiet_instances else {"errors": {"errors": [{"code": code, "message": message}]}}
            failing = [{"instance": base + i, "currentAction": "CREATING", "lastAttempt": errors}
                       for i in mig.failing]
            return Reply(body={"managedInstances": [{"instance": base + i, "currentAction": "NONE",
                                                     "instanceStatus": "RUNNING"} for i in mig.instances] + failing})
        if request.method == "POST" and match["verb"] == "/deleteInstances":
            names = [str(i).rsplit("/", 1)[-1] for i in (request.json() or {}).get("instances", [])]
            missing = [n for n in names if n not in mig.instances]
            if missing:
                return _error(400, f"Instance {missing[0]} is not a member of the instance group {mig.name}")
            mig.instances = [i for i in mig.instances if i not in names]
            return Reply(body={"kind": "compute#operation", "name": f"operation-{next(self._serial)}",
                               "operationType": "compute.instanceGroupManagers.deleteInstances", "status": "RUNNING"})
        return _error(400, "unsupported")

    def stock_out(self, zone: str, capacity: int, code: str = "ZONE_RESOURCE_POOL_EXHAUSTED",
                  message: str = "The zone 'projects/gpu-proj/zones/us-central1-a' does not have enough resources "
                                 "available to fulfill the request. Try a different zone, or try again later.") -> None:
        """From now on the zone's MIG creates at most ``capacity`` instances; the rest stay CREATING, retried, with
        ``lastAttempt.errors`` naming ``code``, as Compute reports a stockout."""
        with self._lock:
            mig = self.migs[zone]
            mig.capacity, mig.error = capacity, (code, message)

    def _pool_json(self) -> dict[str, Any]:
        urls = [f"{self.url}/compute/v1/projects/{self.project}/zones/{m.zone}/instanceGroupManagers/{m.name}"
                for m in self.migs.values()]
        return {"name": self.node_pool, "status": self.status, "initialNodeCount": 1, "locations": list(self.migs),
                "instanceGroupUrls": urls, "config": {"machineType": "g2-standard-8"},
                "autoscaling": {"enabled": True, "minNodeCount": 0, "maxNodeCount": 4} if self.autoscaling else {},
                "selfLink": self._pool_link(), **({"conditions": self.conditions} if self.conditions else {})}

    def _pool_link(self) -> str:
        return (f"https://container.googleapis.com/v1/projects/{self.project}/locations/{self.location}/clusters/"
                f"{self.cluster}/nodePools/{self.node_pool}")

    def _operation(self, kind: str, target: str) -> dict[str, Any]:
        return {"name": f"operation-{next(self._serial)}", "operationType": kind, "status": "RUNNING",
                "zone": self.location, "targetLink": target}

    def _new_instance(self, mig: Mig) -> str:
        return f"{mig.name.removesuffix('-grp')}-{next(self._serial):04x}"


def _error(status: int, message: str, code: str | None = None) -> Reply:
    """Google's JSON error body."""
    return Reply(status, {"error": {"code": status, "message": message, "status": code or _STATUS.get(status, "")}})
