"""A local stand-in for the ACK OpenAPI (cs 2015-12-15) node-pool endpoints the `ack` provider uses.

``GET /clusters/{cluster}/nodepools/{nodepool}`` answers DescribeClusterNodePoolDetail and
``PUT`` of the same path takes ModifyClusterNodePool's JSON body; a changed ``desired_size`` puts the pool
into state ``scaling`` until :meth:`FakeAckApi.settle` is called, as the real service does while it works.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.httpbase import FakeHttpServer, Reply, Request

_PATH = re.compile(r"^/clusters/([^/]+)/nodepools/([^/?]+)$")


@dataclass
class Pool:
    """The fields of one node pool the provider reads."""

    desired_size: int = 2
    total_nodes: int = 2
    state: str = "active"
    auto_scaling: bool = False
    name: str = "gpu-t4"


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
    failures: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # answered before the real ones

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        FakeHttpServer.__init__(self)

    name = "fake-ack-api"

    @property
    def endpoint(self) -> str:
        """``host:port`` as the SDK's ``endpoint`` wants it."""
        return self.url.removeprefix("http://")

    def fail_next(self, status: int, code: str, message: str) -> None:
        """Answer the next request with an OpenAPI error body."""
        with self._lock:
            self.failures.append((status, {"code": code, "message": message, "requestId": f"req-{code}"}))

    def settle(self) -> None:
        """Finish every pending change: nodes join or leave, pools go back to ``active``."""
        with self._lock:
            for pool in self.pools.values():
                pool.total_nodes, pool.state = pool.desired_size, "active"

    def handle(self, request: Request) -> Reply:
        self.requests.append(Recorded(request.method, request.path, request.query, request.headers, request.raw))
        status, answer = self._answer(request.method, request.path, request.json())
        return Reply(status, answer, content_type="application/json;charset=utf-8")

    def _answer(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if self.failures:
                return self.failures.pop(0)
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
                "status": {"state": pool.state, "total_nodes": pool.total_nodes,
                           "healthy_nodes": pool.total_nodes, "serving_nodes": pool.total_nodes},
            }
