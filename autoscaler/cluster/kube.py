"""The cluster as the node-aware scale-in sees it, through the official ``kubernetes`` client.

The client is imported inside functions, so it loads only when the config has a ``kubernetes:`` section. Reads
ask for raw JSON (``_preload_content=False``) and hand plain dicts to :mod:`autoscaler.cluster.nodes`, which decides
what they mean. A pool's read is one node list by label selector and one list of the cluster's unfinished pods (in pages
of ``_PAGE``), grouped by node here, under one deadline (``kubernetes.timeout`` for the whole read, each call's
connecting, headers and body included): the first call that fails fails the read at once. A re-read is one node GET and
one pod list by field selector. ``victims: movable`` also lists PodDisruptionBudgets, once per decision that weighs a
busy node. Where a node has no device-plugin GPU or a pod asks through a claim, the read adds the DRA lists
(:mod:`autoscaler.cluster.kube_dra`); while they are refused (403), the pod-less ``marked`` list reads the pods too, to
see which nodes hold claims.
"""
from __future__ import annotations

import json
import os
import logging
import time
from dataclasses import replace
from typing import Any, ContextManager, Mapping

from autoscaler.config import KubernetesConfig
from autoscaler.cluster.dra import UNUSED, Dra, asks_through_claims
from autoscaler.cluster.gpus import not_extended, pending_gpus, waits_for
from autoscaler.cluster.kube_dra import DraReads, Refused
from autoscaler.cluster.kube_requests import KubeRequests
from autoscaler.cluster.nodes import (CORDON_ANNOTATION, ClusterCapabilities, ClusterError, ClusterUnreachable,
                                      NodeGone, NodeView,
                                      PoolRead, cordon_mark, node_view)
from autoscaler.cluster.pods import Budget, budget_of
from providers.bounded import bound_pool_manager, watched

log = logging.getLogger(__name__)

_MERGE = "application/merge-patch+json"  # the client would send a dict body as json-patch, which the server refuses
_NOT_FINISHED = "status.phase!=Succeeded,status.phase!=Failed"
_PARALLEL = 8  # connections kept to the API server
_PAGE = 5000  # pods per page of the pool's pod list (the API server's own paging, ``limit`` + ``continue``)


class KubeCluster:
    """:class:`autoscaler.cluster.nodes.Cluster` over the Kubernetes API."""

    capabilities = ClusterCapabilities(lists_budgets=True, reads_pools=True, lists_marked=True, reads_requests=True)

    def __init__(self, settings: KubernetesConfig, page: int = _PAGE) -> None:
        self.settings = settings
        self.page = page
        self.patterns = tuple(settings.gpu_resources)
        self._core: Any = None
        self.dra = DraReads(self, list(settings.gpu_device_classes))
        self.requests = KubeRequests(self)  # ProvisioningRequests (docs/gang.md)

    # ---- the client ------------------------------------------------------------------------------------------
    def _api(self) -> Any:
        if self._core is None:
            from kubernetes import client, config

            s = self.settings
            conf = client.Configuration()
            in_pod = s.in_cluster and (not s.kubeconfig or bool(os.environ.get("KUBERNETES_SERVICE_HOST")))
            try:
                if in_pod:
                    config.load_incluster_config(client_configuration=conf)
                elif s.kubeconfig:
                    config.load_kube_config(config_file=s.kubeconfig, context=s.context, client_configuration=conf)
            except (config.ConfigException, OSError, ValueError) as exc:
                where = "in-cluster config" if in_pod else f"kubeconfig {s.kubeconfig}"
                raise ClusterError(f"{where}: {str(exc)[:200]}") from None
            if s.in_cluster or s.kubeconfig:
                _bearer_for_requests(conf)
            else:
                conf.host = (s.host or "").rstrip("/")
                if s.token is not None:
                    conf.api_key = {"BearerToken": s.token.get_secret_value()}
                    conf.api_key_prefix = {"BearerToken": "Bearer"}
                conf.verify_ssl = s.verify_ssl
                conf.ssl_ca_cert = s.ca_cert
            conf.connection_pool_maxsize = max(conf.connection_pool_maxsize or 0, _PARALLEL)
            conf.retries = 1  # bounded: a dead API server costs at most two timeouts per call
            api = client.ApiClient(conf)
            bound_pool_manager(api.rest_client.pool_manager)  # each call's deadline is total (see _exchange)
            self._core = client.CoreV1Api(api)
        return self._core

    def _call(self, what: str, fn: Any, *args: Any, raw: bool = False, gone_is_404: bool = False,
              deadline: float | None = None, let: tuple[int, ...] = (), **kwargs: Any) -> Any:
        """One API call (:meth:`_exchange`); ClusterError with the server's own words on failure (NodeGone for a 404
        with ``gone_is_404``: a change asked of a node deleted since it was listed; the client's Refused for a
        status in ``let``)."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self._exchange(what, fn, *args, raw=raw, deadline=deadline, **kwargs)
        except ApiException as exc:
            if exc.status in let:
                raise Refused(exc.status, f"{what}: {exc.status} {_message(exc)}") from None
            error = NodeGone if gone_is_404 and exc.status == 404 else ClusterError
            raise error(f"{what}: {exc.status} {_message(exc)}") from None

    def _exchange(self, what: str, fn: Any, *args: Any, raw: bool = False, deadline: float | None = None,
                  **kwargs: Any) -> Any:
        """One API call within ``kubernetes.timeout`` (or what is left of the read's ``deadline``), counted over the
        whole call: connecting, sending, the status line, the headers and the body (read here with ``raw``). The
        client's own timeout bounds each socket read, so a server trickling a byte at a time never tripped it; a
        watchdog (:func:`providers.bounded.watched`) shuts the connection down at the deadline. The server's
        errors pass as the client's ApiException; not reaching it, or no whole answer in time, is a ClusterError."""
        from urllib3.exceptions import HTTPError

        timeout = self.settings.timeout
        if deadline is not None:  # what is left of the read's one deadline (monotonic)
            timeout = max(0.05, min(timeout, deadline - time.monotonic()))
        kwargs["_request_timeout"] = (min(timeout, 3.0), timeout)
        if raw:
            kwargs["_preload_content"] = False
        with watched(timeout) as watch:
            try:
                result = fn(*args, **kwargs)
                return json.loads(result.data) if raw else result
            except (HTTPError, OSError) as exc:
                raise ClusterUnreachable(f"{what}: {self._unreachable(exc, watch.expired)}") from None

    def _unreachable(self, exc: BaseException, expired: bool = False) -> str:
        """``API server <host> unreachable (<what went wrong>)``: the address and the cause, not urllib3's class
        (``expired``: the call's deadline cut it, whatever the connection then said)."""
        from urllib3.exceptions import NewConnectionError, TimeoutError as Urllib3Timeout

        cause = getattr(exc, "reason", None) or exc  # MaxRetryError wraps the last attempt's error
        if isinstance(cause, NewConnectionError) and not expired:  # before the timeouts: urllib3 2 derives it from one
            said = str(cause).rpartition("connection: ")[2] or type(cause).__name__
        elif expired or isinstance(cause, (Urllib3Timeout, TimeoutError)):
            said = f"no answer within kubernetes.timeout {self.settings.timeout:g}s"
        else:
            said = type(cause).__name__
        host = self._core.api_client.configuration.host if self._core is not None else self.settings.host
        return f"API server {host} unreachable ({said[:200]}); check kubernetes: host/kubeconfig and the network"

    # ---- reads -----------------------------------------------------------------------------------------------
    def _pods(self, node: str, deadline: float | None = None) -> list[dict[str, Any]]:
        answer = self._call(f"listing pods on {node}", self._api().list_pod_for_all_namespaces, raw=True,
                            field_selector=f"spec.nodeName={node},{_NOT_FINISHED}", deadline=deadline)
        return list(answer.get("items") or [])

    def _all_pods(self, deadline: float | None = None) -> list[dict[str, Any]]:
        """Every unfinished pod of the cluster, page by page (every page within ``deadline``)."""
        return self.paged("listing pods", self._api().list_pod_for_all_namespaces, deadline,
                          field_selector=_NOT_FINISHED)

    def paged(self, what: str, fn: Any, deadline: float | None, **kwargs: Any) -> list[dict[str, Any]]:
        """Every item of a list call, page by page (``limit`` + ``continue``, every page within ``deadline``)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            more: dict[str, Any] = {"_continue": token} if token else {}
            page = self._call(what, fn, raw=True, limit=self.page, deadline=deadline, **kwargs, **more)
            items += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def nodes(self, selector: Mapping[str, str]) -> list[NodeView]:
        return self.read_pool("", selector, pending=False).nodes

    def read_pool(self, pool: str, selector: Mapping[str, str], pending: bool = True) -> PoolRead:
        """The pool's nodes with their pods, and with ``pending`` the GPUs its unscheduled pods wait for: one node
        list, one paged pod list (also for a pool with no node, when ``pending``) and, where a node or pod needs
        them, the DRA lists (once per :meth:`once` scope), all under one deadline."""
        deadline = time.monotonic() + self.settings.timeout  # one deadline for the pool's whole read
        labels = ",".join(f"{k}={v}" if v else k for k, v in selector.items())
        answer = self._call(f"listing nodes {labels}", self._api().list_node, raw=True, label_selector=labels,
                            deadline=deadline)
        items = list(answer.get("items") or [])
        if not items and not pending:
            return PoolRead([], None, UNUSED)
        by_node: dict[str, list[dict[str, Any]]] = {n["metadata"]["name"]: [] for n in items}
        waiting: list[dict[str, Any]] = []
        for pod in self._all_pods(deadline):
            where = (pod.get("spec") or {}).get("nodeName") or ""
            if where in by_node:
                by_node[where].append(pod)
            elif not where and pending and waits_for(pod, pool, selector):
                waiting.append(pod)
        claims = any(asks_through_claims(p) for p in (*waiting, *(p for ps in by_node.values() for p in ps)))
        dra = self._dra(items, deadline, claims)
        views = [node_view(n, by_node[n["metadata"]["name"]], self.patterns, dra) for n in items]
        return PoolRead(views, pending_gpus(waiting, self.patterns, dra) if pending else None, dra.status,
                        dra.reason)

    def _dra(self, nodes: list[dict[str, Any]], deadline: float | None, claims: bool = False) -> Dra:
        """The DRA facts when a node has no device-plugin GPU or a pod asks through claims, else none read."""
        if claims or any(not_extended(n, self.patterns) for n in nodes):
            return self.dra.state(deadline)
        return Dra(status=UNUSED)

    def once(self) -> ContextManager[None]:
        """The reconciler's tick: the DRA lists read at most once for all its pools' reads (this thread)."""
        return self.dra.once()

    def resource_api(self) -> Any:
        """The client's ``ResourceV1Api`` (resource.k8s.io/v1) on the same connection pool."""
        from kubernetes import client

        return client.ResourceV1Api(self._api().api_client)

    def custom_api(self) -> Any:
        """The client's ``CustomObjectsApi`` (ProvisioningRequests) on the same connection pool."""
        from kubernetes import client

        return client.CustomObjectsApi(self._api().api_client)

    def budgets(self) -> list[Budget]:
        """Every PodDisruptionBudget (policy/v1), for ``victims: movable``: one list call."""
        from kubernetes import client

        policy = client.PolicyV1Api(self._api().api_client)
        answer = self._call("listing PodDisruptionBudgets", policy.list_pod_disruption_budget_for_all_namespaces,
                            raw=True)
        return [budget_of(b) for b in answer.get("items") or []]

    def marked(self, selector: Mapping[str, str]) -> list[NodeView]:
        """The pool's nodes without their pods: one call, for the stale-cordon sweep."""
        deadline = time.monotonic() + self.settings.timeout
        labels = ",".join(f"{k}={v}" if v else k for k, v in selector.items())
        answer = self._call(f"listing nodes {labels}", self._api().list_node, raw=True, label_selector=labels,
                            deadline=deadline)
        items = list(answer.get("items") or [])
        dra = self._dra(items, deadline)
        views = [node_view(n, (), self.patterns, dra) for n in items]
        if not dra.blind or not any(v.dra_unread for v in views):
            return views
        # DRA not read (403): a node without device-plugin GPUs whose pods hold claims is GPU-ready all the same
        # (in flight, NodesNotReadyInTime); one more call, the cluster's pods, only while DRA cannot be read
        by_node: dict[str, list[dict[str, Any]]] = {v.name: [] for v in views if v.dra_unread}
        for pod in self._all_pods(deadline):
            where = (pod.get("spec") or {}).get("nodeName") or ""
            if where in by_node:
                by_node[where].append(pod)
        raw = {n["metadata"]["name"]: n for n in items}
        return [replace(v, claims_unread=node_view(raw[v.name], by_node[v.name], self.patterns, dra).claims_unread)
                if by_node.get(v.name) else v for v in views]

    def node(self, name: str) -> NodeView | None:
        try:
            node = self._call(f"reading node {name}", self._api().read_node, name, raw=True, let=(404,))
        except Refused:
            return None
        pods = self._pods(name)
        dra = self._dra([node], None, any(asks_through_claims(p) for p in pods))
        return node_view(node, pods, self.patterns, dra)

    # ---- changes ---------------------------------------------------------------------------------------------
    def cordon(self, name: str, owner: str, now: float) -> None:
        mark = cordon_mark(owner, now)
        body = {"spec": {"unschedulable": True}, "metadata": {"annotations": {CORDON_ANNOTATION: mark}}}
        self._call(f"cordoning {name}", self._api().patch_node, name, body, _content_type=_MERGE, gone_is_404=True)

    def uncordon(self, name: str) -> None:
        body = {"spec": {"unschedulable": None}, "metadata": {"annotations": {CORDON_ANNOTATION: None}}}
        self._call(f"uncordoning {name}", self._api().patch_node, name, body, _content_type=_MERGE)

    def evict(self, namespace: str, pod: str) -> str | None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
        try:
            self._exchange(f"evicting {namespace}/{pod}", self._api().create_namespaced_pod_eviction, pod, namespace,
                           body)
        except ApiException as exc:
            if exc.status == 404:
                return None  # already gone
            if exc.status == 429:
                return _message(exc)
            raise ClusterError(f"evicting {namespace}/{pod}: {exc.status} {_message(exc)}") from None
        return None


def _bearer_for_requests(conf: Any) -> None:
    """kubernetes 36's config loaders store the token as ``api_key["authorization"]`` while its requests read
    ``api_key["BearerToken"]``, so no token is sent (kubernetes-client/python#2584). Copy it across, now and after
    each refresh (service-account tokens rotate); a no-op once the loaders write the new key themselves."""
    def copy(c: Any) -> None:
        if "authorization" in c.api_key:
            c.api_key["BearerToken"] = c.api_key["authorization"]

    loaders_hook = conf.refresh_api_key_hook

    def refresh(c: Any) -> None:
        if loaders_hook is not None:
            loaders_hook(c)
        copy(c)

    copy(conf)
    conf.refresh_api_key_hook = refresh


_WHAT_TO_DO = {
    401: "; the API server refused the credentials: check kubernetes.token, kubeconfig or the service account token",
    403: "; the service account lacks a permission: grant what docs/rbac.md lists for the config (the Helm chart "
         "does; deploy/kubernetes/rbac.yaml grants every row: get, list, patch nodes; list pods; create "
         "pods/eviction; list poddisruptionbudgets; get, list resourceslices, resourceclaims, deviceclasses in "
         "resource.k8s.io)",
}


def _message(exc: Any) -> str:
    """The ``message`` of the API server's Status body, else its reason phrase (never headers), and for 401 and
    403 what to fix (retrying does not help)."""
    try:
        text = json.loads(exc.body or "{}").get("message")
    except (ValueError, AttributeError):
        text = None
    return str(text or exc.reason or "error")[:300] + _WHAT_TO_DO.get(exc.status, "")


def build_cluster(settings: KubernetesConfig) -> KubeCluster:
    """The cluster client for the config's ``kubernetes:`` section (nothing is contacted yet)."""
    return KubeCluster(settings)
