"""A small fake Kubernetes API server that the real ``kubernetes`` client talks to over HTTP.

It serves what the node-aware scale-in uses: list/get/patch nodes (``labelSelector``), list pods
(``fieldSelector`` on ``spec.nodeName``, ``status.phase``, ``metadata.*``; ``limit`` and ``continue`` pages), list
PodDisruptionBudgets (policy/v1), and the Eviction subresource, which answers 429 for a pod a budget protects
(a budget object whose selector matches the pod and that allows no disruption, or the ``pdb`` refusal count). Pods
carry owner references (controller), labels, requests, volumes and affinity. It checks the bearer token, answers errors
as ``Status`` objects, counts calls per verb and resource, and has hooks to land a pod while a node is being cordoned.
"""
from __future__ import annotations

import copy
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from tests.support.fakes.httpbase import FakeHttpServer, Reply, Request
from tests.support.fakes.kube_dra import DraObjects, claim_pod
from tests.support.fakes.kube_requests import RequestObjects

_NODE = re.compile(r"^/api/v1/nodes(?:/(?P<name>[^/]+))?$")
_PODS = re.compile(r"^/api/v1(?:/namespaces/(?P<ns>[^/]+))?/pods$")
_EVICT = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/eviction$")
_PDBS = re.compile(r"^/apis/policy/v1(?:/namespaces/(?P<ns>[^/]+))?/poddisruptionbudgets$")
MERGE_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


def status(code: int, reason: str, message: str) -> Reply:
    return Reply(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": message, "reason": reason, "code": code})


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch, in place (None deletes)."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _selector(text: str | None) -> list[tuple[str, str, str | None]]:
    """``a=b,c!=d,e`` -> [(key, op, value)]; op one of =, !=, exists."""
    out: list[tuple[str, str, str | None]] = []
    for term in filter(None, (text or "").split(",")):
        if "!=" in term:
            k, v = term.split("!=", 1)
            out.append((k.strip(), "!=", v.strip()))
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            out.append((k.strip(), "=", v.strip()))
        else:
            out.append((term.strip(), "exists", None))
    return out


def _matches(values: dict[str, Any], terms: list[tuple[str, str, str | None]]) -> bool:
    for key, op, want in terms:
        have = values.get(key)
        if op == "exists" and have is None:
            return False
        if op == "=" and have != want:
            return False
        if op == "!=" and have == want:
            return False
    return True


def _pod_fields(pod: dict[str, Any]) -> dict[str, Any]:
    return {"spec.nodeName": pod["spec"].get("nodeName", ""), "status.phase": pod["status"].get("phase", ""),
            "metadata.name": pod["metadata"]["name"], "metadata.namespace": pod["metadata"]["namespace"]}


@dataclass
class FakeKube(FakeHttpServer):
    """The fake API server; use as a context manager, then ``url`` is the client's ``host``."""

    name = "fake-kube"

    token: str = "kube-test-token"
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    #: pods a PDB protects: how many more evictions to refuse with 429 (a large number: always)
    pdb: dict[tuple[str, str], int] = field(default_factory=dict)
    #: PodDisruptionBudget objects by (namespace, name); ``status.disruptionsAllowed`` 0 refuses matching evictions
    budgets: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    #: called with the node's name when a PATCH makes it unschedulable, before it is applied (land a pod here)
    on_cordon: Callable[[str], None] | None = None
    #: resource.k8s.io/v1 (tests/support/fakes/kube_dra.py): ``dra.status`` 404 or 403 takes the API away
    dra: DraObjects = field(default_factory=DraObjects)
    #: autoscaling.x-k8s.io/v1 ProvisioningRequests and PodTemplates (tests/support/fakes/kube_requests.py)
    prs: RequestObjects = field(default_factory=RequestObjects)
    calls: Counter[str] = field(default_factory=Counter)  # "GET nodes", "LIST pods", "PATCH nodes", ...
    log: list[tuple[str, str]] = field(default_factory=list)  # (method, path) of every request
    #: set: every request waits (up to a minute) until it is cleared, as an API server that hangs
    hung: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self._rv = 1

    def _handler(self) -> Any:
        handler = super()._handler()
        handler.disable_nagle_algorithm = True  # headers and body go out in two writes: no delayed-ACK stall
        return handler

    # ---- the cluster's state, for tests ---------------------------------------------------------------------
    def add_node(self, name: str, labels: dict[str, str], *, created: str = "2026-11-20T10:00:00Z",
                 provider_id: str = "", ready: bool = True, gpus: int = 8,
                 annotations: dict[str, str] | None = None) -> None:
        self.nodes[name] = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels), "annotations": dict(annotations or {}),
                         "creationTimestamp": created, "resourceVersion": "1", "uid": f"uid-{name}"},
            "spec": {"providerID": provider_id},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "allocatable": {"cpu": "96", "memory": "512Gi", "nvidia.com/gpu": str(gpus)}},
        }

    def add_pod(self, name: str, node: str, *, namespace: str = "ml", gpus: int = 0, resource: str = "nvidia.com/gpu",
                phase: str = "Running", owner: str | None = "Job", annotations: dict[str, str] | None = None,
                labels: dict[str, str] | None = None, volumes: list[dict[str, Any]] | None = None,
                cpu: str = "1", memory: str | None = None, affinity: dict[str, Any] | None = None) -> None:
        """A pod bound to ``node``; ``owner`` is its controller's kind (None: a bare pod)."""
        limits = {resource: str(gpus)} if gpus else {}
        requests = {"cpu": cpu, **({"memory": memory} if memory else {})}
        refs = [{"kind": owner, "name": f"{name}-owner", "apiVersion": "apps/v1", "uid": f"uid-{name}-owner",
                 "controller": True}] if owner else []
        self.pods[(namespace, name)] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {}),
                         "labels": dict(labels or {}), "ownerReferences": refs,
                         "creationTimestamp": "2026-11-20T10:00:00Z", "uid": f"uid-{namespace}-{name}"},
            "spec": {"nodeName": node, "volumes": list(volumes or []), "containers": [
                {"name": "main", "image": "train:1", "resources": {"limits": limits, "requests": requests}}]},
            "status": {"phase": phase},
        }
        if affinity is not None:
            self.pods[(namespace, name)]["spec"]["affinity"] = affinity

    def add_dra_node(self, name: str, labels: dict[str, str], *, gpus: int = 8, publish: bool = True,
                     **kwargs: Any) -> None:
        """A node whose GPUs come through DRA: no ``nvidia.com/gpu`` allocatable, ``gpus`` devices in a slice
        (``publish`` False: the driver has not published them yet)."""
        self.add_node(name, labels, gpus=0, **kwargs)
        del self.nodes[name]["status"]["allocatable"]["nvidia.com/gpu"]
        if publish:
            self.dra.publish(name, gpus)

    def add_claim_pod(self, name: str, node: str, *, gpus: int = 1, claim: str | None = None, shared: bool = False,
                      namespace: str = "ml", device_class: str = "gpu.nvidia.com", devices: list[str] | None = None,
                      **kwargs: Any) -> None:
        """A pod on ``node`` (``""``: unscheduled) holding ``gpus`` devices through a claim: generated from a
        template (the default) or the named ResourceClaim ``claim`` (``shared``: made before, reserved for more
        pods too). Allocated on ``node`` when there is one."""
        self.add_pod(name, node, namespace=namespace, **kwargs)
        claim_name = claim or f"{name}-gpu-x7k2p"
        if not shared:
            self.dra.add_claim(claim_name, namespace=namespace, device_class=device_class, count=gpus,
                               node=node or None, devices=devices, pods=[name] if node else [])
        else:
            reserved = self.dra.claims[(namespace, claim_name)]["status"].setdefault("reservedFor", [])
            reserved.append({"resource": "pods", "name": name, "uid": f"uid-{namespace}-{name}"})
        pod = self.pods[(namespace, name)]
        if claim is not None:
            claim_pod(pod, {"gpu": claim_name})
        else:
            claim_pod(pod, {}, {"gpu": claim_name})
        if not node:
            pod["spec"].pop("nodeName", None)
            pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                                  "reason": "Unschedulable"}],
                             **({"resourceClaimStatuses": pod["status"]["resourceClaimStatuses"]}
                                if "resourceClaimStatuses" in pod["status"] else {})}

    def add_budget(self, name: str, match_labels: dict[str, str], *, namespace: str = "ml",
                   allowed: int = 0) -> None:
        """A PodDisruptionBudget over the pods with ``match_labels``, allowing ``allowed`` disruptions now."""
        self.budgets[(namespace, name)] = {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-pdb-{namespace}-{name}"},
            "spec": {"selector": {"matchLabels": dict(match_labels)}, "maxUnavailable": allowed},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
                       "expectedPods": 1, "observedGeneration": 1},
        }

    def _budget_refuses(self, pod: dict[str, Any]) -> bool:
        labels = pod["metadata"].get("labels") or {}
        return any(b["metadata"]["namespace"] == pod["metadata"]["namespace"]
                   and b["status"]["disruptionsAllowed"] <= 0
                   and all(labels.get(k) == v for k, v in b["spec"]["selector"]["matchLabels"].items())
                   for b in self.budgets.values())

    def node_pods(self, node: str) -> list[str]:
        return sorted(f"{ns}/{n}" for (ns, n), p in self.pods.items() if p["spec"].get("nodeName") == node)

    # ---- the API ---------------------------------------------------------------------------------------------
    def handle(self, request: Request) -> Reply:
        self.log.append((request.method, request.path))
        until = time.monotonic() + 60
        while self.hung.is_set() and time.monotonic() < until:
            time.sleep(0.05)
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return status(401, "Unauthorized", "Unauthorized")
        with self.lock:
            if m := _NODE.match(request.path):
                return self._nodes(request, m.group("name"))
            if m := _PODS.match(request.path):
                self.calls["LIST pods"] += 1
                return self._list_pods(request, m.group("ns"))
            if m := _PDBS.match(request.path):
                self.calls["LIST poddisruptionbudgets"] += 1
                items = [copy.deepcopy(b) for (ns, _), b in sorted(self.budgets.items())
                         if m.group("ns") in (None, ns)]
                return Reply(200, {"kind": "PodDisruptionBudgetList", "apiVersion": "policy/v1",
                                   "metadata": {"resourceVersion": str(self._rv)}, "items": items})
            if (answer := self.prs.serve(request)) is not None:
                return answer
            if (answer := self.dra.serve(request)) is not None:
                templated = "/resourceclaimtemplates/" in request.path
                self.calls["GET resourceclaimtemplates" if templated
                           else f"LIST {request.path.rsplit('/', 1)[-1]}"] += 1
                return answer
            if (m := _EVICT.match(request.path)) and request.method == "POST":
                self.calls["CREATE eviction"] += 1
                return self._evict(m.group("ns"), m.group("name"))
        return status(404, "NotFound", f"the server could not find the requested resource ({request.path})")

    def _nodes(self, request: Request, name: str | None) -> Reply:
        if name is None:
            self.calls["LIST nodes"] += 1
            terms = _selector(request.param("labelSelector"))
            items = [copy.deepcopy(n) for n in self.nodes.values() if _matches(n["metadata"]["labels"], terms)]
            return Reply(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self._rv)},
                               "items": items})
        node = self.nodes.get(name)
        if node is None:
            self.calls[f"{request.method} nodes"] += 1
            return status(404, "NotFound", f'nodes "{name}" not found')
        if request.method == "GET":
            self.calls["GET nodes"] += 1
            return Reply(200, copy.deepcopy(node))
        if request.method != "PATCH":
            return status(405, "MethodNotAllowed", "the server does not allow this method")
        self.calls["PATCH nodes"] += 1
        if request.headers.get("Content-Type", "").split(";")[0] not in MERGE_TYPES:
            return status(415, "UnsupportedMediaType", "the body of the request was in an unknown format")
        patch = request.json()
        if not isinstance(patch, dict):
            return status(400, "BadRequest", "the body of the request was not a JSON object")
        if (patch.get("spec") or {}).get("unschedulable") and self.on_cordon:
            self.lock.release()  # the hook adds pods through the public helpers
            try:
                self.on_cordon(name)
            finally:
                self.lock.acquire()
        merge(node, patch)
        self._rv += 1
        node["metadata"]["resourceVersion"] = str(self._rv)
        return Reply(200, copy.deepcopy(node))

    def _list_pods(self, request: Request, namespace: str | None) -> Reply:
        terms = _selector(request.param("fieldSelector"))
        items = [p for p in self.pods.values()
                 if (namespace is None or p["metadata"]["namespace"] == namespace) and _matches(_pod_fields(p), terms)]
        start = int(request.param("continue") or 0)
        limit = int(request.param("limit") or 0) or len(items)
        meta = {"resourceVersion": str(self._rv)}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)  # a real server's token is opaque; an offset serves here
        return Reply(200, {"kind": "PodList", "apiVersion": "v1", "metadata": meta,
                           "items": copy.deepcopy(items[start:start + limit])})

    def _evict(self, namespace: str, name: str) -> Reply:
        key = (namespace, name)
        if key not in self.pods:
            return status(404, "NotFound", f'pods "{name}" not found')
        if self.pdb.get(key, 0) > 0 or self._budget_refuses(self.pods[key]):
            if self.pdb.get(key, 0) > 0:
                self.pdb[key] -= 1
            return status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
        del self.pods[key]  # the kubelet stops it at once here: no grace period in the fake
        return Reply(201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})
