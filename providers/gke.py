"""Google Kubernetes Engine node pools through google-cloud-container (REST transport) and the Compute API.

GKE keeps a node pool's size per zone: each zone's managed instance group (MIG) holds the nodes, and
``SetNodePoolSize`` sets every zone's MIG to ``node_count``. So the live size is read where it lives, as the sum of
the MIGs' ``targetSize`` (Compute ``instanceGroupManagers.get`` over REST, with google-auth's AuthorizedSession), and
a target must be a multiple of the pool's zone count (``skipped_limit`` otherwise). A node goes by name with the
zone's MIG ``deleteInstances``, which lowers that MIG's targetSize by one.

The SDKs are imported inside functions. Their own retries are off (``retry=None`` per call); :mod:`providers._http`'s
policy is the one retry layer. Credentials come from google-auth's default chain (GOOGLE_APPLICATION_CREDENTIALS,
workload identity, the metadata server, gcloud's ADC), never from the config.
"""
from __future__ import annotations

import logging
import re
import threading
import time
import warnings
from typing import Any, Callable, Sequence, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from autoscaler.durations import Duration
from autoscaler.models import CloudLimits, CloudStatus
from autoscaler.redact import redact_text
from providers._http import Sleep, Transient, call_with_retries
from providers.base import NodeRef, ProviderError, ProviderFactory, Tracked

log = logging.getLogger(__name__)

T = TypeVar("T")
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
MAX_PER_ZONE = 1000  # GKE: nodes per node pool per zone
_RUNNING = "RUNNING"
_ACTIVE_OPERATIONS = frozenset({"PENDING", "RUNNING"})
_BUSY_STATUS = frozenset({409, 412})
_GCE = re.compile(r"^gce://(?P<project>[^/]+)/(?P<zone>[^/]+)/(?P<instance>[^/]+)$")
_MIG = re.compile(r"/zones/(?P<zone>[^/]+)/instance(?:GroupManagers|Groups)/(?P<name>[^/?]+)$")
_ID = re.compile(r"^[a-z][-a-z0-9]*$")


def _load_google() -> None:
    """Import google-api-core and the GKE client, once, with their notice about this Python version's support window
    silenced: a dated FutureWarning about the runtime, printed at import, not about anything this provider does
    (under pytest's warnings-as-errors it would fail the first call instead)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.")
        import google.api_core  # noqa: F401
        import google.cloud.container_v1  # noqa: F401


class GkeSettings(BaseModel):
    """Settings of a GKE node pool; credentials come from google-auth's default chain, never from here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    project: str = Field(min_length=1, max_length=30, description="Google Cloud project ID.")
    location: str = Field(pattern=r"^[a-z]+-[a-z]+\d+(-[a-z])?$",
                          description="Cluster location: a region (us-central1) or a zone (us-central1-a).")
    cluster: str = Field(min_length=1, max_length=40, description="GKE cluster name.")
    node_pool: str = Field(min_length=1, max_length=40, description="Node pool name.")
    api_endpoint: str | None = Field(default=None, description="GKE API address (tests, private endpoints); "
                                                               "container.googleapis.com when unset.")
    timeout: Duration = Field(default=5, gt=0, description="Time one API attempt may take.")
    retry_budget: Duration = Field(default=8, ge=0, description="Total time one call may spend on retries.")

    @field_validator("project", "cluster", "node_pool")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _ID.match(value) or value.endswith("-"):
            raise ValueError("must be lower-case letters, digits and '-', starting with a letter")
        return value

    @field_validator("api_endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(https?://)?[^/?#\s]+/?$", value):
            raise ValueError("must be a host[:port] or an http(s) URL with a host only, e.g. container.googleapis.com")
        return value


class GkeProvider:
    """One GKE node pool; the sum of its MIGs' targetSize is the count, so the core tracks nothing."""

    tracks_count = False

    def __init__(self, pool: str, settings: GkeSettings, *, credentials: Any = None, sleep: Sleep = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pool = pool
        self.settings = settings
        self._credentials = credentials
        self._sleep = sleep
        self._clock = clock
        self._last: tuple[float, Any] | None = None  # (clock, NodePool) read by status()
        self._cluster_manager: Any = None
        self._session: Any = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        s = self.settings
        return f"projects/{s.project}/locations/{s.location}/clusters/{s.cluster}/nodePools/{s.node_pool}"

    @property
    def _where(self) -> str:
        return f"GKE node pool {self.settings.node_pool} of cluster {self.settings.cluster}"

    def check(self) -> None:
        """Read the pool once: it must exist, be readable and not be under GKE's own autoscaling. Changes nothing."""
        pool = self._node_pool()
        log.info("gke pool=%s node_pool=%s status=%s zones=%d", self.pool, self.settings.node_pool,
                 pool.status.name, len(pool.instance_group_urls))

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        """The MIGs' targetSize summed; busy while the pool is not RUNNING or an operation on it runs."""
        pool = self._node_pool()
        migs = list(pool.instance_group_urls)
        sizes = [self._target_size(url) for url in migs]
        current = sum(sizes)
        limits = self._limits(len(migs))
        state = pool.status.name
        if state != _RUNNING:
            return CloudStatus(current=current, busy=True, limits=limits,
                               detail=f"{self._where} is {state}: an earlier change is still in progress")
        running = self._running_operations()
        if running:
            return CloudStatus(current=current, busy=True, limits=limits,
                               detail=f"{self._where}: operation {running[0]} is still running")
        return CloudStatus(current=current, limits=limits,
                           detail=f"status={state} zones={len(migs)} per-zone targetSize={sizes}")

    def scale(self, current: int, target: int, now: float) -> int:
        """SetNodePoolSize with ``target`` / zones nodes per zone; returns once GKE accepted the operation."""
        _load_google()
        from google.cloud.container_v1 import SetNodePoolSizeRequest

        pool = self._recent()
        zones = len(pool.instance_group_urls)
        why = self._limits(zones).refuses(target) if zones else f"{self._where} has no instance groups"
        if why:
            raise ProviderError(f"{self._where}: {why}", retryable=False, code="OutsideNodePoolLimits",
                                limit=bool(zones))
        request = SetNodePoolSizeRequest(name=self.name, node_count=target // zones)
        operation = self._call("setSize", lambda: self._client().set_node_pool_size(
            request=request, retry=None, timeout=self.settings.timeout))
        log.info("gke pool=%s node_pool=%s requested %d -> %d (%d per zone in %d zones) operation=%s", self.pool,
                 self.settings.node_pool, current, target, target // zones, zones, operation.name)
        return target

    def remove_nodes(self, nodes: Sequence[NodeRef], current: int, now: float) -> int:
        """Delete exactly these nodes' VMs with their zone's MIG ``deleteInstances`` (targetSize drops by as many).

        Each node's zone and instance come from ``spec.providerID`` (``gce://project/zone/instance``) and must be a
        managed instance of one of the pool's MIGs (``listManagedInstances``), else nothing is deleted. One call per
        zone; when a later zone fails, ``applied`` says the size reached. Zones may then differ in size until the
        next SetNodePoolSize evens them out. GKE does not drain here; the engine cordoned and checked the nodes.
        """
        if not nodes:
            return current
        pool = self._recent()
        if pool.status.name != _RUNNING:
            raise ProviderError(f"{self._where} is {pool.status.name}: an earlier change is still in progress",
                                retryable=True, code="NodePoolBusy")
        migs = {m.group("zone"): url for url in pool.instance_group_urls if (m := _MIG.search(url))}
        by_zone = self._victims(nodes, migs)
        done = 0
        for zone, instances in by_zone.items():
            url = _manager_url(migs[zone])
            body = {"instances": [f"zones/{zone}/instances/{i}" for i in instances],
                    "skipInstancesOnValidationError": False}
            try:
                self._compute("POST", url + "/deleteInstances", body)
            except ProviderError as exc:
                if self._deleting(url, instances):
                    log.warning("gke pool=%s: deleteInstances in %s failed (%s), but the instances are leaving their "
                                "group: an earlier attempt was accepted and its answer lost", self.pool, zone,
                                exc.message)
                    done += len(instances)
                    continue
                gone = f"{done} node(s) went before" if done else "nothing was deleted"
                raise ProviderError(f"{exc.message}; {gone}", retryable=exc.retryable, code=exc.code,
                                    applied=current - done if done else None) from None
            done += len(instances)
        log.info("gke pool=%s node_pool=%s deleting instances=%s %d -> %d", self.pool, self.settings.node_pool,
                 ",".join(i for v in by_zone.values() for i in v), current, current - done)
        return current - done

    def _victims(self, nodes: Sequence[NodeRef], migs: dict[str, str]) -> dict[str, list[str]]:
        """zone -> instance names, each checked against its zone MIG's managed instances; refuses a stranger."""
        wanted: dict[str, list[str]] = {}
        unknown: list[str] = []
        for node in nodes:
            match = _GCE.match(node.provider_id)
            if not match or match.group("project") != self.settings.project or match.group("zone") not in migs:
                unknown.append(f"{node.name} ({node.provider_id or 'no providerID'})")
            elif match.group("instance") not in wanted.setdefault(match.group("zone"), []):
                wanted[match.group("zone")].append(match.group("instance"))
        for zone, instances in wanted.items():
            managed = self._managed(_manager_url(migs[zone]))
            unknown += [f"{i} (zone {zone})" for i in instances if i not in managed]
        if unknown:
            raise ProviderError(f"{self._where} has no instance for node(s) {', '.join(unknown)} (not in its instance "
                                "groups, or already gone); nothing was deleted", retryable=False, code="NodeNotInPool")
        return {zone: found for zone, found in wanted.items() if found}

    def _managed(self, manager_url: str) -> set[str]:
        """Names of the MIG's instances that are not being deleted or abandoned (listManagedInstances)."""
        answer = self._compute("POST", manager_url + "/listManagedInstances", None)
        return {str(i.get("instance", "")).rsplit("/", 1)[-1] for i in answer.get("managedInstances") or []
                if i.get("currentAction") not in ("DELETING", "ABANDONING")}

    def _deleting(self, manager_url: str, instances: list[str]) -> bool:
        """After a failed deleteInstances: are all these instances already leaving the group (a lost answer)?"""
        try:
            return not set(instances) & self._managed(manager_url)
        except ProviderError:
            return False

    def _limits(self, zones: int) -> CloudLimits:
        s = self.settings
        return CloudLimits(low=0, high=MAX_PER_ZONE * max(zones, 1), owner=f"GKE node pool {s.node_pool}",
                           low_name="minimum", high_name=f"{MAX_PER_ZONE} nodes per zone", multiple_of=max(zones, 1),
                           multiple_why=f"GKE sets the node count per zone and the pool spans {zones} zone(s)")

    def _recent(self) -> Any:
        """The node pool status() read moments ago (one GetNodePool per decision), or a new read."""
        with self._lock:
            last, self._last = self._last, None
        if last is not None and self._clock() - last[0] < self.settings.retry_budget + self.settings.timeout:
            return last[1]
        return self._node_pool()

    def _node_pool(self) -> Any:
        """GetNodePool; refuses a pool under GKE's cluster autoscaler."""
        started = self._clock()
        pool = self._call("getNodePool", lambda: self._client().get_node_pool(
            name=self.name, retry=None, timeout=self.settings.timeout))
        if pool.autoscaling and pool.autoscaling.enabled:
            s = self.settings
            raise ProviderError(
                f"{self._where} has GKE's cluster autoscaler enabled, and GKE owns its size then: disable it (gcloud "
                f"container clusters update {s.cluster} --location {s.location} --node-pool {s.node_pool} "
                "--no-enable-autoscaling) or remove this pool from the autoscaler service",
                retryable=False, code="GkeAutoscalingEnabled")
        with self._lock:
            self._last = (started, pool)
        return pool

    def _running_operations(self) -> list[str]:
        """Operations PENDING/RUNNING on this pool or its cluster (ListOperations of the location, one call; GKE
        runs one cluster-level operation at a time and refuses a resize meanwhile)."""
        s = self.settings
        answer = self._call("listOperations", lambda: self._client().list_operations(
            parent=f"projects/{s.project}/locations/{s.location}", retry=None, timeout=s.timeout))
        pool_path = f"/clusters/{s.cluster}/nodePools/{s.node_pool}"
        cluster_path = f"/clusters/{s.cluster}"
        return [f"{op.name} ({op.operation_type.name})" for op in answer.operations
                if op.status.name in _ACTIVE_OPERATIONS
                and (op.target_link.endswith(pool_path) or op.target_link.endswith(cluster_path))]

    def _target_size(self, url: str) -> int:
        answer = self._compute("GET", _manager_url(url), None)
        size = answer.get("targetSize")
        if not isinstance(size, int):
            raise ProviderError(f"{self._where}: instance group {url.rsplit('/', 1)[-1]} reports no targetSize",
                                retryable=True, code="NoTargetSize")
        return size

    def _call(self, method: str, call: Callable[[], T]) -> T:
        """One GKE API call with our retry layer."""
        what = f"{method} {self._where}"
        return call_with_retries(self.settings.retry_budget, self._sleep, what, _translated, call, what)

    def _compute(self, method: str, url: str, body: Any) -> dict[str, Any]:
        """One Compute API call over REST (google-auth's AuthorizedSession) with our retry layer."""
        return self._call(f"compute {url.rsplit('/', 2)[-1]} of", lambda: _compute_attempt(
            self._authorized(), method, url, body, self.settings.timeout))

    def _creds(self) -> Any:
        if self._credentials is None:
            _load_google()
            import google.auth

            self._credentials, _ = google.auth.default(scopes=[SCOPE])
        return self._credentials

    def _client(self) -> Any:
        with self._lock:
            if self._cluster_manager is None:
                _load_google()
                from google.cloud.container_v1 import ClusterManagerClient

                options = {"api_endpoint": self.settings.api_endpoint} if self.settings.api_endpoint else None
                self._cluster_manager = ClusterManagerClient(credentials=self._creds(), transport="rest",
                                                             client_options=options)
            return self._cluster_manager

    def _authorized(self) -> Any:
        with self._lock:
            if self._session is None:
                _load_google()
                from google.auth.transport.requests import AuthorizedSession

                self._session = AuthorizedSession(self._creds())
            return self._session


def _manager_url(url: str) -> str:
    """The instanceGroupManagers URL of a node pool's instance group URL (GKE lists the managers; be lenient)."""
    return url.replace("/instanceGroups/", "/instanceGroupManagers/")


def _compute_attempt(session: Any, method: str, url: str, body: Any, timeout: float) -> dict[str, Any]:
    """One Compute REST request; a non-2xx answer raised as google-api-core's exception for its status."""
    _load_google()
    from google.api_core import exceptions

    response = session.request(method, url, json=body, timeout=timeout)
    if response.status_code >= 300:
        raise exceptions.from_http_response(response)
    data = response.json() if response.content else {}
    return data if isinstance(data, dict) else {}


def _google_error(exc: Any) -> tuple[str, str]:
    """Google's status name (``NOT_FOUND``) and message from the JSON error body, else what the exception says."""
    try:
        body = exc.response.json()
        error = body.get("error", {}) if isinstance(body, dict) else {}
    except Exception:  # noqa: BLE001 - no body, or not JSON: fall back on the exception
        error = {}
    code = error.get("status") or getattr(exc, "reason", None) or type(exc).__name__
    return str(code), str(error.get("message") or exc.message or "")


def _translated(call: Callable[[], T], what: str) -> T:
    """Run one call; errors become Transient (retry now) or ProviderError with Google's status and message."""
    import requests
    _load_google()
    from google.api_core import exceptions
    from google.auth.exceptions import DefaultCredentialsError, RefreshError, TransportError

    try:
        return call()
    except exceptions.GoogleAPICallError as exc:
        status = int(exc.code or 0)
        reason, said = _google_error(exc)
        message = redact_text(" ".join(said.split()))[:300]
        text = f"{what}: Google answered {status} {reason}: {message}"
        if status == 429:
            raise ProviderError(text + " (quota or rate limit)", retryable=True, code=reason) from None
        if status >= 500:
            raise Transient(text, status) from None
        busy = status in _BUSY_STATUS or (status == 400 and "operation" in message.lower())
        raise ProviderError(text + (" (busy; try again later)" if busy else ""), retryable=busy,
                            code=reason) from None
    except DefaultCredentialsError as exc:
        raise ProviderError(f"{what}: no Google credentials ({type(exc).__name__}); set "
                            "GOOGLE_APPLICATION_CREDENTIALS or use workload identity", retryable=False,
                            code="NoCredentials") from None
    except RefreshError as exc:
        raise ProviderError(f"{what}: Google credentials could not get a token ({type(exc).__name__})",
                            retryable=False, code="RefreshError") from None
    except (TransportError, requests.ConnectionError, requests.Timeout) as exc:
        raise Transient(f"no answer from Google ({type(exc).__name__})") from None


FACTORY = ProviderFactory(
    name="gke",
    settings_model=GkeSettings,
    build=lambda pool, settings: GkeProvider(pool, settings),
    description="Google GKE node pool through google-cloud-container (REST) and Compute's instance groups",
    node_selector=lambda settings: f"cloud.google.com/gke-nodepool={settings.node_pool}",
)
