"""A local fake of Azure Resource Manager for AKS agent pools, served over HTTP in a thread.

It answers GET and PUT of agent pools the way ARM does (JSON shape, 200/201 + ``Azure-AsyncOperation``,
``{"error": {"code", "message"}}`` bodies, 409 OperationNotAllowed while an operation runs), checks the
bearer token and ``api-version``, records every request, and can be told to fail the next requests.
"""
from __future__ import annotations

import re
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tests.support.fakes.httpbase import FakeHttpServer, Reply, Request

_POOL_PATH = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.ContainerService"
    r"/managedClusters/(?P<cluster>[^/]+)/agentPools/(?P<pool>[^/]+)$",
    re.IGNORECASE,
)
_OP_PATH = re.compile(r"^/subscriptions/[^/]+/providers/Microsoft\.ContainerService/locations/[^/]+"
                      r"/(?:operations|operationresults)/(?P<op>[^/]+)$", re.IGNORECASE)
_SUB_PATH = re.compile(r"^(?P<pool_path>.+/agentPools/[^/]+)/(?P<sub>machines|deleteMachines)$", re.IGNORECASE)
_DEFAULT_CODES = {
    400: ("InvalidParameter", "The value of parameter agentPoolProfile.count is invalid."),
    401: ("InvalidAuthenticationToken", "The access token is invalid."),
    403: ("AuthorizationFailed", "The client does not have authorization to perform action "
                                 "'Microsoft.ContainerService/managedClusters/agentPools/write'."),
    404: ("ResourceNotFound", "The Resource was not found."),
    409: ("OperationNotAllowed", "Operation is not allowed because there's an in progress scale "
                                 "node pool operation on the agent pool."),
    429: ("TooManyRequests", "The request is being throttled as the limit has been reached."),
    500: ("InternalServerError", "An internal error occurred."),
    503: ("ServiceUnavailable", "The service is temporarily unavailable."),
}


class Recorded(Request):
    """One request as the fake saw it; ``body`` is the parsed JSON."""

    @property
    def body(self) -> Any:
        return self.json()


@dataclass
class Fault:
    """An answer the fake gives instead of the real one: an HTTP error, or ``reset`` (drop the connection)."""

    status: int
    code: str = ""
    message: str = ""
    retry_after: str | None = None
    method: str | None = None  # only requests with this method consume the fault
    reset: bool = False
    delay: float = 0.0  # seconds to wait before answering (to trip the client's read timeout)
    applied: bool = False  # with reset: ARM did the work, only its answer is lost


@dataclass
class Operation:
    """An ARM async operation: InProgress for ``polls`` GETs of its URL, then Succeeded."""

    pool: str
    polls: int
    status: str = "InProgress"
    error: dict[str, str] | None = None  # how it ends when it fails (a stockout): ARM's error body


@dataclass
class FakeArm(FakeHttpServer):
    """The fake ARM; use as a context manager, then ``url`` is the ``arm_endpoint``."""

    name = "fake-arm"

    subscription: str
    resource_group: str
    cluster: str
    token: str
    location: str = "westeurope"
    operation_polls: int = 2
    pools: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    faults: deque[Fault] = field(default_factory=deque)
    operations: dict[str, Operation] = field(default_factory=dict)
    #: each pool's VMSS instance ids; machine i is ``aks-<pool>-12345678-vmss`` + i in base 36 (6 digits)
    machines: dict[str, list[int]] = field(default_factory=dict)
    machine_page_size: int = 100  # machines list answers this many per page, then a nextLink
    #: pools out of stock: the most machines each can have, and the error its scale-ups then end with
    stockouts: dict[str, tuple[int, str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        FakeHttpServer.__init__(self)

    # -- set-up -------------------------------------------------------------------------------
    def add_pool(self, name: str, count: int = 0, *, mode: str = "User", enable_auto_scaling: bool = False,
                 provisioning_state: str = "Succeeded", power_state: str = "Running") -> None:
        """An agent pool shaped like the GPU user pool of Azure's DCGM article."""
        self.pools[name] = {
            "count": count, "vmSize": "Standard_NC40ads_H100_v5", "osDiskSizeGB": 128, "osDiskType": "Managed",
            "kubeletDiskType": "OS", "maxPods": 30, "type": "VirtualMachineScaleSets", "mode": mode,
            "enableAutoScaling": enable_auto_scaling, "provisioningState": provisioning_state,
            "powerState": {"code": power_state}, "orchestratorVersion": "1.31.2",
            "currentOrchestratorVersion": "1.31.2", "nodeImageVersion": "AKSUbuntu-2204gen2containerd-202501.12.0",
            "osType": "Linux", "osSKU": "Ubuntu", "nodeLabels": {"accelerator": "nvidia"},
            "nodeTaints": ["sku=gpu:NoSchedule"], "enableNodePublicIP": False, "eTag": uuid.uuid4().hex,
            **({"minCount": 0, "maxCount": 4} if enable_auto_scaling else {}),
        }
        self.machines[name] = list(range(count))

    def fail_next(self, status: int, *, times: int = 1, code: str | None = None, message: str | None = None,
                  retry_after: str | None = None, method: str | None = None, reset: bool = False,
                  delay: float = 0.0) -> None:
        """The next ``times`` requests (of ``method``, when given) answer ``status`` with an ARM error body."""
        default_code, default_message = _DEFAULT_CODES.get(status, ("Error", "Something failed."))
        for _ in range(times):
            self.faults.append(Fault(status, code or default_code, message or default_message, retry_after,
                                     method, reset, delay))

    def lose_next_answer(self, method: str) -> None:
        """The next request of ``method`` is carried out, but the connection drops before the answer."""
        self.faults.append(Fault(0, method=method, reset=True, applied=True))

    def stock_out(self, pool: str, capacity: int, code: str = "ZonalAllocationFailed",
                  message: str = "Allocation failed. We do not have sufficient capacity for the requested VM size in "
                                 "this zone. Read more about improving likelihood of allocation success at "
                                 "http://aka.ms/allocation-guidance") -> None:
        """From now on the pool gets at most ``capacity`` machines: a PUT above it is accepted (200 + an async
        operation), then the operation ends Failed with ``code`` and the pool reads provisioningState Failed with
        status.provisioningError, as AKS reports an allocation failure."""
        self.stockouts[pool] = (capacity, code, message)

    def restock(self, pool: str) -> None:
        """Capacity is back for the pool."""
        self.stockouts.pop(pool, None)

    def finish_operations(self) -> None:
        """Every running operation ends now: its pool goes back to Succeeded."""
        with self._lock:
            for op in self.operations.values():
                self._finish(op)

    def machine_name(self, pool: str, instance: int) -> str:
        """The machine (and node) name of VMSS instance ``instance``, as AKS names it."""
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"
        suffix = ""
        for _ in range(6):
            instance, rest = divmod(instance, 36)
            suffix = digits[rest] + suffix
        return f"aks-{pool}-12345678-vmss{suffix}"

    def machine_resource_id(self, pool: str, instance: int) -> str:
        """The VMSS instance's resource id (a node's ``spec.providerID`` is ``azure://`` + this)."""
        return (f"/subscriptions/{self.subscription}/resourceGroups/MC_{self.resource_group}_{self.cluster}_"
                f"{self.location}/providers/Microsoft.Compute/virtualMachineScaleSets/aks-{pool}-12345678-vmss"
                f"/virtualMachines/{instance}")

    def machine_names(self, pool: str) -> list[str]:
        """The names of the pool's machines now."""
        return [self.machine_name(pool, i) for i in self.machines.get(pool, [])]

    def calls(self, method: str | None = None, kind: str = "agentPools") -> list[Recorded]:
        """Recorded requests to agent pools (or ``operations``), optionally of one method."""
        return [r for r in self.requests if kind in r.path and (method is None or r.method == method)]

    # -- ARM behaviour ------------------------------------------------------------------------
    def pool_json(self, name: str) -> dict[str, Any]:
        base = (f"/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}/providers/"
                f"Microsoft.ContainerService/managedClusters/{self.cluster}/agentPools/{name}")
        return {"id": base, "name": name, "type": "Microsoft.ContainerService/managedClusters/agentPools",
                "properties": dict(self.pools[name])}

    def _finish(self, op: Operation) -> None:
        op.status = "Failed" if op.error else "Succeeded"
        if op.pool in self.pools:
            self.pools[op.pool]["provisioningState"] = op.status
            if op.error:
                self.pools[op.pool]["status"] = {"provisioningError": dict(op.error)}
            else:
                self.pools[op.pool].pop("status", None)

    def handle(self, request: Request) -> Reply:
        """Answer as ARM does, with its request-id headers; a fault may drop the connection instead."""
        with self._lock:
            self.requests.append(Recorded(request.method, request.path, request.query, request.headers, request.raw))
            fault = next((f for f in self.faults if f.method in (None, request.method)), None)
            if fault is not None:
                self.faults.remove(fault)
                if fault.applied:
                    self._answer(request.method, request.path, request.query, request.headers, request.json())
                if fault.reset or fault.delay:
                    return Reply(delay=fault.delay, reset=True)
                extra = {"Retry-After": fault.retry_after} if fault.retry_after else {}
                status, headers, body = fault.status, extra, _error(fault.code, fault.message)
            else:
                status, headers, body = self._answer(request.method, request.path, request.query, request.headers,
                                                     request.json())
        ids = {"x-ms-request-id": str(uuid.uuid4()), "x-ms-correlation-request-id": str(uuid.uuid4())}
        return Reply(status, body, {**ids, **headers}, content_type="application/json; charset=utf-8")

    def _answer(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str],
                body: Any) -> tuple[int, dict[str, str], Any]:
        """The answer to one request: status, extra headers, JSON body."""
        if headers.get("authorization") != f"Bearer {self.token}":
            return 401, {}, _error("AuthenticationFailed", "Authentication failed. The 'Authorization' "
                                   "header is missing or invalid.")
        if "api-version" not in query:
            return 400, {}, _error("MissingApiVersionParameter", "The api-version query parameter "
                                   "(?api-version=) is required for all requests.")
        op_match = _OP_PATH.match(path)
        if op_match and method == "GET":
            return self._operation(op_match.group("op"))
        sub = _SUB_PATH.match(path)
        match = _POOL_PATH.match(sub["pool_path"] if sub else path)
        if not match or (match["sub"], match["rg"].lower(), match["cluster"]) != (
                self.subscription, self.resource_group.lower(), self.cluster) or match["pool"] not in self.pools:
            return 404, {}, _error("ResourceNotFound", f"The Resource '{path}' was not found.")
        if sub and sub["sub"].lower() == "machines" and method == "GET":
            return self._machines(match["pool"], path, query)
        if sub and sub["sub"].lower() == "deletemachines" and method == "POST":
            return self._delete_machines(match["pool"], body)
        if sub:
            return 405, {}, _error("MethodNotAllowed", f"{method} is not supported here.")
        if method == "GET":
            return 200, {}, self.pool_json(match["pool"])
        if method == "PUT":
            return self._put(match["pool"], headers, body)
        return 405, {}, _error("MethodNotAllowed", f"{method} is not supported here.")

    def _machines(self, name: str, path: str, query: dict[str, list[str]]) -> tuple[int, dict[str, str], Any]:
        """Machines_List: one page of ``{"value": [Machine], "nextLink"}``."""
        start = int((query.get("$skipToken") or ["0"])[0])
        ids = self.machines[name]
        page = ids[start:start + self.machine_page_size]
        base = (f"/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}/providers/"
                f"Microsoft.ContainerService/managedClusters/{self.cluster}/agentPools/{name}/machines")
        value = [{"id": f"{base}/{self.machine_name(name, i)}", "name": self.machine_name(name, i),
                  "type": "Microsoft.ContainerService/managedClusters/agentPools/machines", "zones": ["1"],
                  "properties": {"network": {"ipAddresses": [{"ip": f"10.224.0.{4 + i % 250}", "family": "IPv4"}]},
                                 "resourceId": self.machine_resource_id(name, i)}} for i in page]
        answer: dict[str, Any] = {"value": value}
        if start + self.machine_page_size < len(ids):
            answer["nextLink"] = f"{self.url}{path}?api-version=2025-10-01&$skipToken={start + len(page)}"
        return 200, {}, answer

    def _delete_machines(self, name: str, body: Any) -> tuple[int, dict[str, str], Any]:
        """AgentPools_DeleteMachines: 202 + Location, the count lowered by as many, the pool Scaling.

        Which code real ARM gives a machine name outside the pool is not documented; 400 InvalidParameter here.
        """
        pool = self.pools[name]
        if pool["provisioningState"] not in ("Succeeded", "Failed", "Canceled"):
            return 409, {}, _error(*_DEFAULT_CODES[409])
        wanted = (body or {}).get("machineNames") if isinstance(body, dict) else None
        if not isinstance(wanted, list) or not wanted or not all(isinstance(n, str) for n in wanted):
            return 400, {}, _error("InvalidParameter", "machineNames must be a non-empty list of machine names.")
        by_name = {self.machine_name(name, i): i for i in self.machines[name]}
        missing = [n for n in wanted if n not in by_name]
        if missing:
            return 400, {}, _error("InvalidParameter", f"Machine(s) {', '.join(missing)} not found in agent pool "
                                                       f"{name}.")
        count = pool["count"] - len(set(wanted))
        if pool["mode"] == "System" and count < 1:
            return 400, {}, _error("InvalidParameter", "A System mode agent pool must have at least 1 node.")
        self.machines[name] = [i for i in self.machines[name] if self.machine_name(name, i) not in wanted]
        pool.update(count=count, provisioningState="Scaling", eTag=uuid.uuid4().hex)
        op_id = str(uuid.uuid4())
        self.operations[op_id] = Operation(name, self.operation_polls)
        location = (f"{self.url}/subscriptions/{self.subscription}/providers/Microsoft.ContainerService/locations/"
                    f"{self.location}/operationresults/{op_id}?api-version=2017-08-31")
        return 202, {"Location": location}, None

    def _operation(self, op_id: str) -> tuple[int, dict[str, str], Any]:
        op = self.operations.get(op_id)
        if op is None:
            return 404, {}, _error("NotFound", "Operation not found.")
        if op.status == "InProgress":
            if op.polls <= 0:
                self._finish(op)
            op.polls -= 1
        answer = {"name": op_id, "status": op.status, "startTime": "2025-01-01T00:00:00Z"}
        if op.status == "Failed" and op.error:
            answer["error"] = dict(op.error)
        return 200, {}, answer

    def _put(self, name: str, headers: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        pool = self.pools[name]
        props = (body or {}).get("properties", {}) if isinstance(body, dict) else {}
        if pool["provisioningState"] not in ("Succeeded", "Failed", "Canceled"):
            return 409, {}, _error(*_DEFAULT_CODES[409])
        if headers.get("if-match") not in (None, pool["eTag"]):
            return 412, {}, _error("PreconditionFailed", "The eTag in If-Match does not match the agent pool.")
        count = props.get("count")
        if not isinstance(count, int) or count < 0 or count > 1000:
            return 400, {}, _error("InvalidParameter", f"The value of parameter count is invalid: {count!r}.")
        if pool["mode"] == "System" and count < 1:
            return 400, {}, _error("InvalidParameter", "A System mode agent pool must have at least 1 node.")
        if pool["enableAutoScaling"] and count != pool["count"]:
            return 400, {}, _error("InvalidParameter", "Cannot set count on an autoscaler-enabled agent pool.")
        ids = self.machines.setdefault(name, [])
        room, code, message = self.stockouts.get(name, (count, "", ""))
        while len(ids) < min(count, max(room, len(ids))):  # new VMSS instances get the next ids, as many as there are
            ids.append(max(ids, default=-1) + 1)
        del ids[count:]  # a count PUT lets AKS pick; the fake drops the newest
        pool.update(count=count, provisioningState="Scaling", eTag=uuid.uuid4().hex)
        op_id = str(uuid.uuid4())
        failed = {"code": code, "message": message} if len(ids) < count else None
        self.operations[op_id] = Operation(name, self.operation_polls, error=failed)
        op_url = (f"{self.url}/subscriptions/{self.subscription}/providers/Microsoft.ContainerService/locations/"
                  f"{self.location}/operations/{op_id}?api-version=2016-03-30")
        return 200, {"Azure-AsyncOperation": op_url}, self.pool_json(name)


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
