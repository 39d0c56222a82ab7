"""ProvisioningRequests (``autoscaling.x-k8s.io/v1``) and PodTemplates for the fake Kubernetes API server.

Serves the list of every namespace's requests (and one namespace's), one request, its ``/status`` subresource
(PUT with the object's ``metadata.resourceVersion``: a stale one answers 409 Conflict, as the API server does;
``conflicts`` makes the next status writes race a writer that got in first), and one PodTemplate.
"""
from __future__ import annotations

import copy
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.support.fakes.httpbase import Reply, Request

GROUP = "autoscaling.x-k8s.io"
_REQS = re.compile(r"^/apis/autoscaling\.x-k8s\.io/v1(?:/namespaces/(?P<ns>[^/]+))?/provisioningrequests"
                   r"(?:/(?P<name>[^/]+)(?P<status>/status)?)?$")
_TEMPLATE = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/podtemplates/(?P<name>[^/]+)$")
ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"


def _status(code: int, reason: str, message: str) -> Reply:
    return Reply(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": message, "reason": reason, "code": code})


@dataclass
class RequestObjects:
    """The requests and templates by (namespace, name); ``calls`` counts each verb and resource."""

    requests: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    templates: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    conflicts: int = 0  # the next status writes that meet a newer resourceVersion (another writer got in first)
    rv: int = 100

    def add_template(self, name: str, *, namespace: str = "ml", gpus: int = 8, node_selector: dict[str, str]
                     | None = None, resource: str = "nvidia.com/gpu", claim_template: str = "") -> None:
        """A PodTemplate whose pod asks for ``gpus`` of ``resource`` (or, with ``claim_template``, through a DRA
        claim template, no GPU resource) and sets ``node_selector``."""
        limits = {resource: str(gpus)} if gpus and not claim_template else {}
        spec: dict[str, Any] = {"containers": [{"name": "train", "image": "train:1",
                                                "resources": {"limits": limits, "requests": {"cpu": "8"}}}]}
        if node_selector:
            spec["nodeSelector"] = dict(node_selector)
        if claim_template:
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": claim_template}]
        self.templates[(namespace, name)] = {"apiVersion": "v1", "kind": "PodTemplate",
                                             "metadata": {"name": name, "namespace": namespace},
                                             "template": {"metadata": {}, "spec": spec}}

    def add_request(self, name: str, pod_sets: list[tuple[str, int]], *, namespace: str = "ml",
                    class_name: str = ATOMIC) -> None:
        self.rv += 1
        self.requests[(namespace, name)] = {
            "apiVersion": f"{GROUP}/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(self.rv),
                         "uid": f"uid-pr-{namespace}-{name}", "generation": 1,
                         "creationTimestamp": "2026-11-20T10:00:00Z"},
            "spec": {"provisioningClassName": class_name,
                     "podSets": [{"podTemplateRef": {"name": t}, "count": c} for t, c in pod_sets]},
            "status": {}}

    def conditions(self, name: str, namespace: str = "ml") -> dict[str, str]:
        """The request's condition types with their status."""
        found = self.requests[(namespace, name)]["status"].get("conditions") or []
        return {c["type"]: c["status"] for c in found}

    def condition(self, name: str, kind: str, namespace: str = "ml") -> dict[str, Any]:
        found = self.requests[(namespace, name)]["status"].get("conditions") or []
        return next(c for c in found if c["type"] == kind)

    def serve(self, request: Request) -> Reply | None:
        """The answer when the path is ours, else None."""
        if m := _TEMPLATE.match(request.path):
            self.calls["GET podtemplates"] += 1
            found = self.templates.get((m.group("ns"), m.group("name")))
            return Reply(200, copy.deepcopy(found)) if found else _status(404, "NotFound", "podtemplate not found")
        m = _REQS.match(request.path)
        if m is None:
            return None
        ns, name = m.group("ns"), m.group("name")
        if name is None:
            self.calls["LIST provisioningrequests"] += 1
            items = [copy.deepcopy(r) for (n, _), r in sorted(self.requests.items()) if ns in (None, n)]
            return Reply(200, {"kind": "ProvisioningRequestList", "apiVersion": f"{GROUP}/v1",
                               "metadata": {"resourceVersion": str(self.rv)}, "items": items})
        held = self.requests.get((ns or "", name))
        if held is None:
            return _status(404, "NotFound", f'provisioningrequests.{GROUP} "{name}" not found')
        if request.method == "GET":
            self.calls["GET provisioningrequests"] += 1
            return Reply(200, copy.deepcopy(held))
        if not m.group("status") or request.method != "PUT":
            return _status(405, "MethodNotAllowed", "only GET and PUT .../status are served here")
        self.calls["UPDATE provisioningrequests/status"] += 1
        if self.conflicts > 0:  # another writer got in first: its change lands, ours is refused
            self.conflicts -= 1
            self.rv += 1
            held["metadata"]["resourceVersion"] = str(self.rv)
            held["status"].setdefault("conditions", []).append(
                {"type": "SomeoneElse", "status": "True", "reason": "Other", "message": "another writer",
                 "lastTransitionTime": "2026-11-20T10:00:00Z"})
        body = request.json()
        if not isinstance(body, dict) or (body.get("metadata") or {}).get("resourceVersion") != \
                held["metadata"]["resourceVersion"]:
            return _status(409, "Conflict", f'Operation cannot be fulfilled on provisioningrequests.{GROUP} "{name}": '
                           "the object has been modified; please apply your changes to the latest version and try "
                           "again")
        self.rv += 1
        held["status"] = copy.deepcopy(body.get("status") or {})
        held["metadata"]["resourceVersion"] = str(self.rv)
        return Reply(200, copy.deepcopy(held))
