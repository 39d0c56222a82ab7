"""A local stand-in for the ACK OpenAPI (cs 2015-12-15) node-pool endpoints the `ack` provider uses.

``GET /clusters/{cluster}/nodepools/{nodepool}`` answers DescribeClusterNodePoolDetail and
``PUT`` of the same path takes ModifyClusterNodePool's JSON body; a changed ``desired_size`` puts the pool
into state ``scaling`` until :meth:`FakeAckApi.settle` is called, as the real service does while it works.
``GET /clusters/{cluster}/nodes?nodepool_id=&pageSize=&pageNumber=`` answers DescribeClusterNodes, and
``DELETE /clusters/{cluster}/nodepools/{nodepool}/nodes?instance_ids=["i-…"]&drain_node=&release_node=`` answers
RemoveNodePoolNodes: the instances leave the pool, ``desired_size`` drops by as many, state ``removing`` until
settled. Which error code the real service gives an instance outside the pool is not documented; here 400
``ErrorInstanceNotInNodePool`` (our name). :meth:`FakeAckApi.trickle_next` sends an answer a byte at a time.
"""
from __future__ import annotations

import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.support.fakes.httpbase import FakeHttpServer, Reply, Request

_PATH = re.compile(r"^/clusters/([^/]+)/nodepools/([^/?]+)$")
_POOL_NODES = re.compile(r"^/clusters/([^/]+)/nodepools/([^/?]+)/nodes$")
_CLUSTER_NODES = re.compile(r"^/clusters/([^/]+)/nodes$")
_TASKS = re.compile(r"^/clusters/([^/]+)/tasks$")
REGION = "cn-hangzhou"
_NODE_SEQUENCE = itertools.count()


@dataclass
class Pool:
    """The fields of one node pool the provider reads."""

    desired_size: int = 2
    total_nodes: int = 2
    state: str = "active"
    auto_scaling: bool = False
    name: str = "gpu-t4"
    #: the pool's nodes as (node name, ECS instance id); made from ``total_nodes`` when not given
    nodes: list[tuple[str, str]] = field(default_factory=list)
    #: a stockout: the most nodes the pool can have, and the error code and message its scale-out task fails with
    stockout: tuple[int, str, str] | None = None
    failed_nodes: int = 0

    def __post_init__(self) -> None:
        if not self.nodes:
            for _ in range(self.total_nodes):
                self.add_node()

    def add_node(self) -> tuple[str, str]:
        """One more node: ACK names nodes ``<region>.<private ip>``; instance ids look like ``i-bp1…``."""
        index = next(_NODE_SEQUENCE)  # unique across pools, as in one cluster
        node = (f"{REGION}.10.{index // 62500 % 250}.{index // 250 % 250}.{4 + index % 250}", f"i-bp1gpu{index:012d}")
        self.nodes.append(node)
        return node

    def provider_id(self, node_name: str) -> str:
        """The node's ``spec.providerID`` as ACK's cloud controller sets it: ``<region>.<instance id>``."""
        return f"{REGION}.{dict(self.nodes)[node_name]}"


class Recorded(Request):
    """One request the fake received; ``body`` is the parsed JSON."""

    @property
    def body(self) -> Any:
        return self.json()


@dataclass
class FakeAckApi(FakeHttpServer):
    """Threaded HTTP server on 127.0.0.1 holding node pools by (cluster, nodepool)."""

    pools: dict[tuple[str, str], Pool] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    #: answered before the real ones: (status, body, only for this x-acs-action or None for any)
    failures: list[tuple[int, dict[str, Any], str | None]] = field(default_factory=list)
    lost_answers: list[str] = field(default_factory=list)  # actions carried out whose answer is then dropped
    tasks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # each cluster's tasks, newest first
    trickled: dict[str, float] = field(default_factory=dict)  # action -> seconds between its next answer's bytes

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        FakeHttpServer.__init__(self)

    name = "fake-ack-api"

    @property
    def endpoint(self) -> str:
        """``host:port`` as the SDK's ``endpoint`` wants it."""
        return self.url.removeprefix("http://")

    def fail_next(self, status: int, code: str, message: str, *, action: str | None = None) -> None:
        """Answer the next request (of OpenAPI ``action``, when given) with an OpenAPI error body."""
        with self._lock:
            self.failures.append((status, {"code": code, "message": message, "requestId": f"req-{code}"}, action))

    def lose_next_answer(self, action: str) -> None:
        """The next ``action`` request is carried out, but the connection drops before the answer."""
        with self._lock:
            self.lost_answers.append(action)

    def trickle_next(self, action: str, every: float) -> None:
        """The next ``action`` answer is the real one, its body sent a byte every ``every`` seconds (the headers at
        once): a stuck peer that still sends, so no single read waits long."""
        with self._lock:
            self.trickled[action] = every

    def stock_out(self, cluster: str, nodepool: str, capacity: int, code: str = "OperationDenied.NoStock",
                  message: str = "The requested resource is sold out in the specified zone; try other types of "
                                 "resources or other regions and zones.") -> None:
        """From now on the pool gets at most ``capacity`` nodes: a larger desired size is accepted, then its
        scale-out task fails with ``code`` (DescribeClusterTasks) and the missing nodes count as failed."""
        with self._lock:
            self.pools[(cluster, nodepool)].stockout = (capacity, code, message)

    def settle(self) -> None:
        """Finish every pending change: nodes join (as many as there are) or leave, pools go back to ``active``."""
        with self._lock:
            for (cluster, _), pool in self.pools.items():
                room = pool.stockout[0] if pool.stockout else pool.desired_size
                while len(pool.nodes) < min(pool.desired_size, max(room, len(pool.nodes))):
                    pool.add_node()
                del pool.nodes[pool.desired_size:]
                pool.total_nodes, pool.state = len(pool.nodes), "active"
                pool.failed_nodes = pool.desired_size - len(pool.nodes)
                if pool.failed_nodes and pool.stockout:
                    self.tasks.setdefault(cluster, []).insert(0, {
                        "task_id": f"T-{len(self.requests)}", "task_type": "nodepool_scaleout", "state": "fail",
                        "created": "2026-11-24T13:00:00+08:00", "updated": "2026-11-24T13:02:00+08:00",
                        "error": {"code": pool.stockout[1], "message": pool.stockout[2]}})

    def handle(self, request: Request) -> Reply:
        self.requests.append(Recorded(request.method, request.path, request.query, request.headers, request.raw))
        status, answer = self._answer(request.method, request.path, request.json(), request)
        action = request.headers.get("x-acs-action")
        with self._lock:
            if action in self.lost_answers:
                self.lost_answers.remove(action)
                return Reply(reset=True)
            every = self.trickled.pop(action, 0.0) if action else 0.0
        return Reply(status, answer, content_type="application/json;charset=utf-8", trickle=every)

    def _answer(self, method: str, path: str, body: Any, request: Request) -> tuple[int, dict[str, Any]]:
        with self._lock:
            action = request.headers.get("x-acs-action")
            failure = next((f for f in self.failures if f[2] in (None, action)), None)
            if failure is not None:
                self.failures.remove(failure)
                return failure[0], failure[1]
            tasks = _TASKS.match(path)
            if tasks and method == "GET":
                listed = self.tasks.get(tasks.group(1), [])[:int(request.param("page_size") or 10)]
                return 200, {"tasks": listed, "page_info": {"page_number": 1, "page_size": 10,
                                                            "total_count": len(listed)}}
            cluster_nodes = _CLUSTER_NODES.match(path)
            if cluster_nodes and method == "GET":
                return self._describe_nodes(cluster_nodes.group(1), request)
            pool_nodes = _POOL_NODES.match(path)
            if pool_nodes and method == "DELETE":
                return self._remove_nodes(self.pools.get((pool_nodes.group(1), pool_nodes.group(2))), request)
            match = _PATH.match(path)
            pool = self.pools.get((match.group(1), match.group(2))) if match else None
            if pool is None:
                return 404, {"code": "ErrorNodePoolNotFound", "message": "node pool not found", "requestId": "r404"}
            if method == "PUT":
                size = ((body or {}).get("scaling_group") or {}).get("desired_size")
                if size is not None and size != pool.desired_size:
                    pool.desired_size, pool.state = int(size), "scaling"
                return 202, {"task_id": "T-1", "request_id": "r-put"}
            return 200, {
                "auto_scaling": {"enable": pool.auto_scaling, "max_instances": 10, "min_instances": 0},
                "nodepool_info": {"name": pool.name, "nodepool_id": match.group(2) if match else ""},
                "scaling_group": {"desired_size": pool.desired_size, "instance_types": ["ecs.gn6i-c4g1.xlarge"]},
                "status": {"state": pool.state, "total_nodes": pool.total_nodes, "failed_nodes": pool.failed_nodes,
                           "healthy_nodes": pool.total_nodes, "serving_nodes": pool.total_nodes},
            }

    def _describe_nodes(self, cluster: str, request: Request) -> tuple[int, dict[str, Any]]:
        """DescribeClusterNodes: the cluster's nodes (of ``nodepool_id`` when given), one page."""
        wanted = request.param("nodepool_id")
        rows = [(pool_id, name, instance) for (c, pool_id), pool in self.pools.items() if c == cluster
                for name, instance in pool.nodes if wanted in (None, "", pool_id)]
        size, number = int(request.param("pageSize") or 10), int(request.param("pageNumber") or 1)
        page = rows[(number - 1) * size:number * size]
        nodes = [{"node_name": name, "instance_id": instance, "nodepool_id": pool_id, "state": "running",
                  "instance_status": "Running", "instance_role": "Worker", "instance_type": "ecs.gn6i-c4g1.xlarge",
                  "ip_address": [name.split(".", 1)[1]], "host_name": f"iZbp1{instance[-6:]}Z",
                  "instance_charge_type": "PostPaid", "is_aliyun_node": True} for pool_id, name, instance in page]
        return 200, {"nodes": nodes, "page": {"page_number": number, "page_size": size, "total_count": len(rows)}}

    def _remove_nodes(self, pool: Pool | None, request: Request) -> tuple[int, dict[str, Any]]:
        """RemoveNodePoolNodes: the named instances leave the pool and desired_size drops by as many."""
        if pool is None:
            return 404, {"code": "ErrorNodePoolNotFound", "message": "node pool not found", "requestId": "r404"}
        if pool.state != "active":
            return 400, {"code": "ErrorNodePoolStatusNotAllowed", "message": f"node pool is {pool.state}",
                         "requestId": "r-busy"}
        try:
            ids = json.loads(request.param("instance_ids") or "[]")
        except ValueError:
            ids = None
        if not isinstance(ids, list) or not ids:
            return 400, {"code": "InvalidParameter", "message": "instance_ids is required", "requestId": "r400"}
        in_pool = {instance for _, instance in pool.nodes}
        missing = [i for i in ids if i not in in_pool]
        if missing:
            return 400, {"code": "ErrorInstanceNotInNodePool", "message": f"instances {missing} are not in the node "
                         "pool", "requestId": "r-missing"}
        pool.nodes = [(name, instance) for name, instance in pool.nodes if instance not in ids]
        pool.desired_size -= len(set(ids))
        pool.state = "removing"
        return 200, {"request_id": "r-remove", "task_id": f"T-remove-{len(self.requests)}"}
