"""ProvisioningRequests and PodTemplates through the official client (``CustomObjectsApi``, ``CoreV1Api``) for
:class:`autoscaler.cluster.kube.KubeCluster`: one list of every namespace's requests a tick, a PodTemplate read per
pod set of a request not taken yet (and each DRA claim template its pod names), and the status written through the
``/status`` subresource with the resourceVersion it was read at. A conflict (409: another writer got in first) reads
the request again and writes the condition onto what it holds now, once; nothing another writer wrote is overwritten."""
from __future__ import annotations

import logging
import time
from typing import Any, Mapping, Protocol

from autoscaler.cluster.nodes import BOOKED_ANNOTATION, ClusterError
from autoscaler.cluster.requests import GROUP, PLURAL, VERSION, ProvisioningRequest, parse_request, with_condition

log = logging.getLogger(__name__)


class Calls(Protocol):
    """What the requests' reader needs of the cluster client (``KubeCluster``)."""

    settings: Any

    def _api(self) -> Any: ...

    def custom_api(self) -> Any: ...

    def resource_api(self) -> Any: ...

    def _call(self, what: str, fn: Any, *args: Any, raw: bool = False, gone_is_404: bool = False,
              deadline: float | None = None, let: tuple[int, ...] = (), **kwargs: Any) -> Any: ...


class Conflict(ClusterError):
    """The request changed since it was read (409): read it again."""


class KubeRequests:
    """The ProvisioningRequests of one cluster."""

    def __init__(self, cluster: Calls) -> None:
        self.cluster = cluster

    def _custom(self) -> Any:
        return self.cluster.custom_api()

    def list(self) -> list[ProvisioningRequest]:
        """Every namespace's requests: one call, within ``kubernetes.timeout``."""
        deadline = time.monotonic() + self.cluster.settings.timeout
        answer = self.cluster._call("listing ProvisioningRequests", self._custom().list_cluster_custom_object,
                                    GROUP, VERSION, PLURAL, raw=True, deadline=deadline)
        out = []
        for raw in answer.get("items") or ():
            parsed = parse_request(raw) if isinstance(raw, Mapping) else None
            if parsed is not None:
                out.append(parsed)
        return out

    def get(self, namespace: str, name: str) -> ProvisioningRequest | None:
        raw = self.cluster._call(f"reading ProvisioningRequest {namespace}/{name}",
                                 self._custom().get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name,
                                 raw=True)
        return parse_request(raw)

    def pod_template(self, namespace: str, name: str) -> Mapping[str, Any]:
        return self.cluster._call(f"reading PodTemplate {namespace}/{name}",  # type: ignore[no-any-return]
                                  self.cluster._api().read_namespaced_pod_template, name, namespace, raw=True)

    def claim_template(self, namespace: str, name: str) -> Mapping[str, Any]:
        """A ResourceClaimTemplate (``resource.k8s.io/v1``) a pod of a new request asks its GPUs through."""
        return self.cluster._call(f"reading ResourceClaimTemplate {namespace}/{name}",  # type: ignore[no-any-return]
                                  self.cluster.resource_api().read_namespaced_resource_claim_template, name,
                                  namespace, raw=True)

    def book(self, node: str, request: str | None) -> None:
        """Mark ``node`` booked for ``request`` (``namespace/name``), or take the mark off (None)."""
        body = {"metadata": {"annotations": {BOOKED_ANNOTATION: request}}}
        self.cluster._call(f"booking {node}" if request else f"ending the booking of {node}",
                           self.cluster._api().patch_node, node, body, _content_type="application/merge-patch+json",
                           gone_is_404=True)

    def set_condition(self, request: ProvisioningRequest, new: Mapping[str, Any]) -> None:
        """Write ``new`` into the request's conditions; on a conflict, once more onto the request as read again."""
        try:
            self._put(request, new)
        except Conflict:
            fresh = self.get(request.namespace, request.name)
            if fresh is None:
                raise ClusterError(f"ProvisioningRequest {request.key}: unreadable after a conflict") from None
            log.info("ProvisioningRequest %s changed meanwhile (409): written again onto version %s", request.key,
                     fresh.resource_version)
            self._put(fresh, new)

    def _put(self, request: ProvisioningRequest, new: Mapping[str, Any]) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ProvisioningRequest",
                "metadata": {"name": request.name, "namespace": request.namespace,
                             "resourceVersion": request.resource_version},
                "spec": dict(request.raw.get("spec") or {}),
                "status": {**dict(request.raw.get("status") or {}),
                           "conditions": with_condition(request.conditions, new)}}
        from autoscaler.cluster.kube_dra import Refused

        try:
            self.cluster._call(f"writing the status of ProvisioningRequest {request.key}",
                               self._custom().replace_namespaced_custom_object_status, GROUP, VERSION,
                               request.namespace, PLURAL, request.name, body, let=(409,))
        except Refused as exc:
            raise Conflict(str(exc)) from None
