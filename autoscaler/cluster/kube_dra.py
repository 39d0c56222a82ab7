"""The DRA API (``resource.k8s.io/v1``) read for :class:`autoscaler.cluster.kube.KubeCluster`.

Three paged lists with the official client's ``ResourceV1Api``: DeviceClasses, ResourceSlices, ResourceClaims,
under the deadline of the read that needs them (a pool's node and pod read). Inside :meth:`DraReads.once` (the
reconciler's tick) they are read at most once for every pool the tick reads, the first time a read needs them (a
failed read is not re-tried in that scope: every later pool's read fails the same); outside it (a decision's own
read) each read that needs them reads them afresh. A read needs them only when one of its nodes has no
device-plugin GPU or one of its pods asks through ``spec.resourceClaims``: a cluster on the device plugin alone
makes no DRA call at all. A server without the API (404) or RBAC without it (403) is no error: it is logged once
(a 403 with the ClusterRole rule to add) and the pool answer says ``dra: not_read`` with the reason. With 404 no pod
can hold a claim; with 403 the facts say ``unseen`` (:attr:`autoscaler.cluster.dra.Dra.blind`), and a pod with
claims keeps its node and makes it GPU-ready (:mod:`autoscaler.cluster.nodes`, :mod:`autoscaler.decide.inflight`).
"""
from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Iterator, Protocol

from autoscaler.cluster.dra import Dra, dra_state, not_read
from autoscaler.cluster.nodes import ClusterError

log = logging.getLogger(__name__)

_NOT_SERVED = {404: "the API server does not serve resource.k8s.io/v1 (Kubernetes before 1.34, or DRA off)",
               403: "the service account may not list {what} (resource.k8s.io): add get/list on resourceslices, "
                    "resourceclaims and deviceclasses to its ClusterRole"}


#: What the 403 warning adds: what the service does meanwhile and the ClusterRole rule to add.
_UNTIL_GRANTED = ("; until then a node running a pod with spec.resourceClaims is kept from scale-in and counts as "
                  "GPU-ready (its claim is not counted). Add to the ClusterRole: - apiGroups: [\"resource.k8s.io\"] "
                  "resources: [\"resourceslices\", \"resourceclaims\", \"deviceclasses\"] verbs: [\"get\", \"list\"] "
                  "(deploy/kubernetes/rbac.yaml has it)")


class Refused(ClusterError):
    """The API server answered a list with a status the reader handles itself (404, 403)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Lister(Protocol):
    """What the reader needs of the cluster client."""

    def paged(self, what: str, fn: Any, deadline: float | None, **kwargs: Any) -> list[dict[str, Any]]: ...

    def resource_api(self) -> Any: ...


class DraReads:
    """The DRA read of one cluster client: ``state(deadline)``; ``once()`` scopes one read to a tick."""

    def __init__(self, lister: Lister, gpu_classes: list[str]) -> None:
        self.lister = lister
        self.gpu_classes = list(gpu_classes)
        self._local = threading.local()
        self._said: str | None = None  # the last "not read" logged (logged once, again only when it changes)

    @contextlib.contextmanager
    def once(self) -> Iterator[None]:
        """Within this scope (this thread), the API is read at most once."""
        self._local.scope = {}
        try:
            yield
        finally:
            self._local.scope = None

    def state(self, deadline: float | None) -> Dra:
        scope = getattr(self._local, "scope", None)
        if scope is None:
            return self._read(deadline)
        if "dra" not in scope:
            try:
                scope["dra"] = self._read(deadline)
            except ClusterError as exc:
                scope["dra"] = exc
        found = scope["dra"]
        if isinstance(found, ClusterError):
            raise ClusterError(str(found))
        return found  # type: ignore[no-any-return]

    def _read(self, deadline: float | None) -> Dra:
        if not self.gpu_classes:
            return not_read("kubernetes.gpu_device_classes is empty")
        api = self.lister.resource_api()
        lists = (("DeviceClasses", api.list_device_class), ("ResourceSlices", api.list_resource_slice),
                 ("ResourceClaims", api.list_resource_claim_for_all_namespaces))
        got: list[list[dict[str, Any]]] = []
        for what, fn in lists:
            try:
                got.append(self.lister.paged(f"listing {what}", fn, deadline, let=tuple(_NOT_SERVED)))
            except Refused as exc:
                why = f"{exc.status}: " + _NOT_SERVED[exc.status].format(what=what.lower())
                if why != self._said:
                    log.warning("DRA not read (GPUs counted from device-plugin resources only): %s%s", why,
                                _UNTIL_GRANTED if exc.status == 403 else "")
                    self._said = why
                # 404: no pod can hold a claim; 403: the API is there, so a pod's claims may hold GPUs unseen
                return not_read(why, unseen=str(exc.status) if exc.status != 404 else "")
        if self._said is not None:
            log.info("DRA read again (resource.k8s.io/v1)")
            self._said = None
        return dra_state(got[0], got[1], got[2], self.gpu_classes)
