"""The fake Kubernetes API's ``resource.k8s.io/v1``: DeviceClasses, ResourceSlices, ResourceClaims, as a DRA
driver (NVIDIA's ``gpu.nvidia.com``) and the scheduler leave them.

Shapes follow the Kubernetes API reference (v1): a slice's ``spec{nodeName, driver, pool{name, generation,
resourceSliceCount}, devices[{name, attributes, capacity, taints}]}``; a claim's ``spec.devices.requests[{name,
exactly{deviceClassName, allocationMode, count}}]`` and ``status{allocation.devices.results[{request, driver, pool,
device}], reservedFor[{resource, name, uid}]}``; a class's ``spec.selectors[{cel{expression}}]``. Lists page with
``limit``/``continue``; ``status`` 404 (no API), 403 (RBAC) or any other error code answers every DRA request
with that error.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from tests.support.fakes.httpbase import Reply, Request

PATH = re.compile(r"^/apis/resource\.k8s\.io/v1(?:/namespaces/(?P<ns>[^/]+))?/(?P<kind>deviceclasses|resourceslices|"
                  r"resourceclaims)$")
TEMPLATE = re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/resourceclaimtemplates/(?P<name>[^/]+)$")
DRIVER = "gpu.nvidia.com"
EXTENDED_CLAIM = "resource.kubernetes.io/extended-resource-claim"
_KINDS = {"deviceclasses": "DeviceClass", "resourceslices": "ResourceSlice", "resourceclaims": "ResourceClaim"}


def nvidia_classes() -> list[dict[str, Any]]:
    """NVIDIA's DRA driver's classes: full GPUs and MIG devices, both of driver gpu.nvidia.com."""
    return [device_class("gpu.nvidia.com", f"device.driver == '{DRIVER}' && "
                         f"device.attributes['{DRIVER}'].type == 'gpu'"),
            device_class("mig.nvidia.com", f"device.driver == '{DRIVER}' && "
                         f"device.attributes['{DRIVER}'].type == 'mig'")]


def device_class(name: str, expression: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name, "uid": f"uid-{name}"},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def gpu_device(index: int, kind: str = "gpu", taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    name = f"gpu-{index}" if kind == "gpu" else f"gpu-0-mig-1g10gb-{index}"
    device: dict[str, Any] = {"name": name, "attributes": {
        "type": {"string": kind}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "uuid": {"string": f"GPU-{index:08x}-0000-0000-0000-000000000000"}, "index": {"int": index}},
        "capacity": {"memory": {"value": "80Gi" if kind == "gpu" else "10Gi"}}}
    if taints:
        device["taints"] = taints
    return device


@dataclass
class DraObjects:
    """The DRA objects of the fake cluster; ``status`` 404/403 makes the API absent/forbidden."""

    classes: dict[str, dict[str, Any]] = field(default_factory=lambda: {c["metadata"]["name"]: c
                                                                        for c in nvidia_classes()})
    slices: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    templates: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # ResourceClaimTemplates
    status: int = 200

    def add_slice(self, node: str, devices: list[dict[str, Any]], *, driver: str = DRIVER, pool: str | None = None,
                  generation: int = 1, count: int = 1, index: int = 0) -> None:
        """One ResourceSlice of ``node``'s pool (named after the node, as the NVIDIA driver does)."""
        name = f"{node}-{driver}-{generation}-{index}"
        self.slices[name] = {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name, "uid": f"uid-{name}", "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": f"uid-{node}", "controller": True}]},
            "spec": {"nodeName": node, "driver": driver, "devices": copy.deepcopy(devices),
                     "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count}}}

    def publish(self, node: str, gpus: int = 8) -> None:
        """The driver's kubelet plugin publishing ``gpus`` GPUs of ``node`` in one slice."""
        self.add_slice(node, [gpu_device(i) for i in range(gpus)])

    def add_claim(self, name: str, *, namespace: str = "ml", device_class: str = "gpu.nvidia.com", count: int = 1,
                  mode: str = "ExactCount", node: str | None = None, devices: list[str] | None = None,
                  pods: list[str] | None = None, extended: bool = False) -> None:
        """A claim asking for ``count`` devices of ``device_class``; with ``node``, allocated there (``devices``,
        default the first ``count`` GPUs) and reserved for ``pods``."""
        exactly: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": mode}
        if mode == "ExactCount":
            exactly["count"] = count
        claim: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-claim-{namespace}-{name}",
                         "annotations": {EXTENDED_CLAIM: "true"} if extended else {}},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}, "status": {}}
        if node is not None:
            chosen = devices if devices is not None else [f"gpu-{i}" for i in range(count)]
            claim["status"] = {
                "allocation": {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node,
                                                        "device": d} for d in chosen]},
                               "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                                   {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
                "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{namespace}-{p}"} for p in pods or []]}
        self.claims[(namespace, name)] = claim

    def add_claim_template(self, name: str, *, namespace: str = "ml", requests: list[tuple[str, int]]
                           | None = None) -> None:
        """A ResourceClaimTemplate whose claim asks, per request, ``count`` devices of a class
        (``requests``: [(class, count)], a count of 0 for ``allocationMode: All``; default one GPU)."""
        asked = []
        for i, (device_class, count) in enumerate(requests or [("gpu.nvidia.com", 1)]):
            exactly: dict[str, Any] = {"deviceClassName": device_class,
                                       "allocationMode": "ExactCount" if count else "All"}
            if count:
                exactly["count"] = count
            asked.append({"name": f"req-{i}", "exactly": exactly})
        self.templates[(namespace, name)] = {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-rct-{namespace}-{name}"},
            "spec": {"spec": {"devices": {"requests": asked}}}}

    def serve(self, request: Request) -> Reply | None:
        """The answer to a ``resource.k8s.io/v1`` request, None for any other path."""
        from tests.support.fakes.kube import status

        if (t := TEMPLATE.match(request.path)) is not None and request.method == "GET" and self.status == 200:
            found = self.templates.get((t.group("ns"), t.group("name")))
            return Reply(200, copy.deepcopy(found)) if found else status(
                404, "NotFound", f'resourceclaimtemplates.resource.k8s.io "{t.group("name")}" not found')
        m = PATH.match(request.path if t is None else "/apis/resource.k8s.io/v1/resourceclaims")
        if m is None:
            return None

        if self.status == 404:
            return status(404, "NotFound", "the server could not find the requested resource")
        if self.status == 403:
            return status(403, "Forbidden", f'{m.group("kind")}.resource.k8s.io is forbidden: User '
                          '"system:serviceaccount:gpu-autoscaler:gpu-autoscaler" cannot list resource '
                          f'"{m.group("kind")}" in API group "resource.k8s.io" at the cluster scope')
        if self.status != 200:
            return status(self.status, "InternalError", "etcdserver: request timed out")
        if request.method != "GET":
            return status(405, "MethodNotAllowed", "the server does not allow this method")
        kind = m.group("kind")
        found = {"deviceclasses": self.classes, "resourceslices": self.slices, "resourceclaims": self.claims}[kind]
        items = [v for k, v in sorted(found.items())
                 if m.group("ns") is None or (isinstance(k, tuple) and k[0] == m.group("ns"))]
        start = int(request.param("continue") or 0)
        limit = int(request.param("limit") or 0) or len(items)
        meta: dict[str, Any] = {"resourceVersion": "1"}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        return Reply(200, {"kind": f"{_KINDS[kind]}List", "apiVersion": "resource.k8s.io/v1", "metadata": meta,
                           "items": copy.deepcopy(items[start:start + limit])})


def claim_pod(pod: dict[str, Any], claims: dict[str, str], templates: dict[str, str] | None = None) -> None:
    """Make ``pod`` ask through claims: ``claims`` entry name -> ResourceClaim name; ``templates`` entry name ->
    the claim generated from its template (as ``status.resourceClaimStatuses`` records it)."""
    entries = [{"name": k, "resourceClaimName": v} for k, v in claims.items()]
    entries += [{"name": k, "resourceClaimTemplateName": f"{k}-template"} for k in templates or {}]
    pod["spec"]["resourceClaims"] = entries
    for c in pod["spec"]["containers"]:
        c.setdefault("resources", {})["claims"] = [{"name": e["name"]} for e in entries]
    if templates:
        pod["status"]["resourceClaimStatuses"] = [{"name": k, "resourceClaimName": v} for k, v in templates.items()]
