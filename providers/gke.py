"""Google Kubernetes Engine node pools through google-cloud-container (REST transport) and the Compute API.

GKE keeps a node pool's size per zone: each zone's managed instance group (MIG) holds the nodes, and
``SetNodePoolSize`` sets every zone's MIG to ``node_count``. So the live size is read where it lives, as the sum of
the MIGs' ``targetSize`` (Compute ``instanceGroupManagers.get`` over REST, with google-auth's AuthorizedSession), and
a target must be a multiple of the pool's zone count (``skipped_limit`` otherwise). A node goes by name with the
zone's MIG ``deleteInstances``, which lowers that MIG's targetSize by one.

The SDKs are imported inside functions. Their own retries are off (``retry=None`` per call);
:func:`providers.retry.call` is the one retry layer. Credentials come from google-auth's default chain
(GOOGLE_APPLICATION_CREDENTIALS, workload identity, the metadata server, gcloud's ADC), never from the config.
"""
from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from autoscaler.clock import SYSTEM, Clock
from autoscaler.config.durations import Duration
from autoscaler.models import CloudLimits, CloudStatus, ProviderRead, Shortfall
from providers import shortfalls
from providers.base import Capabilities, NodeRef, ProviderFactory, RemovingProvider, Tracked, read_of
from providers.errors import Code, PermanentError, TemporaryError, cloud_autoscaler
from providers.named import in_parts, left, machines
from providers.bounded import bound
from providers.google_calls import GOOGLE_ANSWER, classify, compute_attempt, load_google, manager_url
from providers.retry import call

log = logging.getLogger(__name__)

T = TypeVar("T")
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
MAX_PER_ZONE = 1000  # GKE: nodes per node pool per zone
_RUNNING = "RUNNING"
_ACTIVE_OPERATIONS = frozenset({"PENDING", "RUNNING"})
_GCE = re.compile(r"^gce://(?P<project>[^/]+)/(?P<zone>[^/]+)/(?P<instance>[^/]+)$")
_MIG = re.compile(r"/zones/(?P<zone>[^/]+)/instance(?:GroupManagers|Groups)/(?P<name>[^/?]+)$")
_ID = re.compile(r"^[a-z][-a-z0-9]*$")


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
    timeout: Duration = Field(default=5, gt=0, description="Total time of one API attempt, answer included.")
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


@dataclass(frozen=True)
class GkeRead(ProviderRead):
    """The node pool as getNodePool answered it (its instance groups, its conditions)."""

    pool: Any


class GkeProvider(RemovingProvider):
    """One GKE node pool; the sum of its MIGs' targetSize is the count, so the core tracks nothing."""

    capabilities = Capabilities(removes_named_nodes=True)  # the per-zone limits depend on the zones, read live
    needs_read = (True, True)  # the pool's zones (its instance groups)

    def __init__(self, pool: str, settings: GkeSettings, *, credentials: Any = None, clock: Clock = SYSTEM) -> None:
        self.pool = pool
        self.settings = settings
        self._credentials = credentials
        self._clock = clock
        self._cluster_manager: Any = None
        self._session: Any = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        s = self.settings
        return f"projects/{s.project}/locations/{s.location}/clusters/{s.cluster}/nodePools/{s.node_pool}"

    @property
    def where(self) -> str:
        return f"GKE node pool {self.settings.node_pool} of cluster {self.settings.cluster}"

    def check(self) -> None:
        """Read the pool once: it must exist, be readable and not be under GKE's own autoscaling. Changes nothing."""
        pool = read_of(self._read(), GkeRead).pool
        log.info("gke pool=%s node_pool=%s status=%s zones=%d", self.pool, self.settings.node_pool,
                 pool.status.name, len(pool.instance_group_urls))

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        """The MIGs' targetSize summed; busy while the pool is not RUNNING or an operation on it runs."""
        read = self._read()
        pool = read_of(read, GkeRead).pool
        groups = [(url, self._group(url)) for url in pool.instance_group_urls]
        sizes = [_target_size(answer, self.where, url) for url, answer in groups]
        read = replace(read, current=sum(sizes))
        if read.busy:
            return read
        running = self._running_operations()
        if running:
            return replace(read, busy=True, detail=f"{self.where}: operation {running[0]} is still running")
        return replace(read, detail=f"status={_RUNNING} zones={len(sizes)} per-zone targetSize={sizes}",
                       shortfall=self._shortfall(groups, sum(sizes), _conditions(pool)))

    def _shortfall(self, groups: list[tuple[str, dict[str, Any]]], asked: int,
                   conditions: list[tuple[str, str]]) -> Shortfall | None:
        """Instances a MIG keeps trying to create whose ``lastAttempt.errors`` name a capacity or quota code (read
        with ``listManagedInstances`` only where ``currentActions.creating`` says some are being created); else, with
        instances being created, the node pool's condition (GCE_STOCKOUT, GCE_QUOTA_EXCEEDED)."""
        failed: list[tuple[str, str]] = []
        for url, answer in groups:
            if not (answer.get("currentActions") or {}).get("creating"):
                continue
            listed = self._compute("POST", manager_url(url) + "/listManagedInstances", None)
            for item in listed.get("managedInstances") or []:
                errors = ((item.get("lastAttempt") or {}).get("errors") or {}).get("errors") or []
                found = [(str(e.get("code", "")), str(e.get("message", ""))) for e in errors
                         if shortfalls.classify("gke", str(e.get("code", "")), str(e.get("message", "")))]
                if item.get("currentAction") == "CREATING" and found:
                    failed.append(found[0])
        creating = sum(int((answer.get("currentActions") or {}).get("creating") or 0) for _, answer in groups)
        if not failed and creating:  # the node pool's own condition, where the instances do not say why yet
            failed = [(code, message) for code, message in conditions
                      if shortfalls.classify("gke", code, message)][:1] * creating
        if not failed:
            return None
        code, message = failed[0]
        return shortfalls.shortfall("gke", code, message, asked=asked, delivered=asked - len(failed))

    def _read(self) -> CloudStatus:
        """GetNodePool: its zones (and so its limits) and whether it is RUNNING; refuses a pool under GKE's cluster
        autoscaler. The count needs the instance groups (``status``)."""
        pool = self._call("getNodePool", lambda: self._client().get_node_pool(
            name=self.name, retry=None, timeout=self.settings.timeout))
        s = self.settings
        if pool.autoscaling and pool.autoscaling.enabled:
            raise cloud_autoscaler(self.where, "GKE's cluster autoscaler", f"disable it (gcloud container clusters "
                                   f"update {s.cluster} --location {s.location} --node-pool {s.node_pool} "
                                   "--no-enable-autoscaling)")
        zones = len(pool.instance_group_urls)
        if not zones:
            raise PermanentError(f"{self.where} has no instance groups", code=Code.NO_INSTANCE_GROUP)
        state = pool.status.name
        busy = f"{self.where} is {state}: an earlier change is still in progress" if state != _RUNNING else ""
        return CloudStatus(current=None, busy=bool(busy), detail=busy, limits=self._limits(zones), read=GkeRead(pool))

    def _resize(self, status: CloudStatus, current: int, target: int) -> int:
        """SetNodePoolSize with ``target`` / zones nodes per zone; returns once GKE accepted the operation."""
        load_google()
        from google.cloud.container_v1 import SetNodePoolSizeRequest

        zones = len(read_of(status, GkeRead).pool.instance_group_urls)
        request = SetNodePoolSizeRequest(name=self.name, node_count=target // zones)
        operation = self._call("setSize", lambda: self._client().set_node_pool_size(
            request=request, retry=None, timeout=self.settings.timeout))
        log.info("gke pool=%s node_pool=%s requested %d -> %d (%d per zone in %d zones) operation=%s", self.pool,
                 self.settings.node_pool, current, target, target // zones, zones, operation.name)
        return target

    def _remove(self, status: CloudStatus, nodes: Sequence[NodeRef], current: int) -> int:
        """Delete exactly these nodes' VMs with their zone's MIG ``deleteInstances`` (targetSize drops by as many).

        Each node's zone and instance come from ``spec.providerID`` (``gce://project/zone/instance``) and must be a
        managed instance of one of the pool's MIGs (``listManagedInstances``), else nothing is deleted. One call per
        zone. Zones may then differ in size until the next SetNodePoolSize evens them out. GKE does not drain here;
        the engine cordoned and checked the nodes.
        """
        migs = {m.group("zone"): manager_url(url) for url in read_of(status, GkeRead).pool.instance_group_urls
                if (m := _MIG.search(url))}
        managed: dict[str, set[str]] = {}

        def find(node: NodeRef) -> tuple[str, str] | None:
            match = _GCE.match(node.provider_id)
            if not match or match.group("project") != self.settings.project or match.group("zone") not in migs:
                return None
            zone = match.group("zone")
            if zone not in managed:
                managed[zone] = self._managed(migs[zone])
            return (zone, match.group("instance")) if match.group("instance") in managed[zone] else None

        by_zone: dict[str, list[str]] = {}
        for zone, instance in machines(nodes, find, self.where, "instance", "deleted"):
            by_zone.setdefault(zone, []).append(instance)
        done = in_parts(list(by_zone.items()), lambda part: self._compute("POST", migs[part[0]] + "/deleteInstances", {
            "instances": [f"zones/{part[0]}/instances/{i}" for i in part[1]], "skipInstancesOnValidationError": False}),
            lambda part: left(lambda: self._managed(migs[part[0]]), part[1]), lambda part: len(part[1]), current,
            self.where)
        log.info("gke pool=%s node_pool=%s deleting instances=%s %d -> %d", self.pool, self.settings.node_pool,
                 ",".join(i for v in by_zone.values() for i in v), current, current - done)
        return current - done

    def _managed(self, manager_url: str) -> set[str]:
        """Names of the MIG's instances that are not being deleted or abandoned (listManagedInstances)."""
        answer = self._compute("POST", manager_url + "/listManagedInstances", None)
        return {str(i.get("instance", "")).rsplit("/", 1)[-1] for i in answer.get("managedInstances") or []
                if i.get("currentAction") not in ("DELETING", "ABANDONING")}

    def _limits(self, zones: int) -> CloudLimits:
        s = self.settings
        return CloudLimits(low=0, high=MAX_PER_ZONE * max(zones, 1), owner=f"GKE node pool {s.node_pool}",
                           low_name="minimum", high_name=f"{MAX_PER_ZONE} nodes per zone", multiple_of=max(zones, 1),
                           multiple_why=f"GKE sets the node count per zone and the pool spans {zones} zone(s)")

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

    def _group(self, url: str) -> dict[str, Any]:
        """The zone's MIG (instanceGroupManagers.get): its targetSize and currentActions."""
        return self._compute("GET", manager_url(url), None)

    def _call(self, method: str, fn: Callable[[], T]) -> T:
        """One GKE API call through the retry layer."""
        return call(f"{method} {self.where}", lambda _: fn(), budget=self.settings.retry_budget,
                    timeout=self.settings.timeout, clock=self._clock, classify=classify)

    def _compute(self, method: str, url: str, body: Any) -> dict[str, Any]:
        """One Compute API call over REST (google-auth's AuthorizedSession) through the retry layer."""
        return self._call(f"compute {url.rsplit('/', 2)[-1]} of", lambda: compute_attempt(
            self._authorized(), method, url, body, self.settings.timeout))

    def _creds(self) -> Any:
        if self._credentials is None:
            load_google()
            import google.auth

            self._credentials, _ = google.auth.default(scopes=[SCOPE])
        return self._credentials

    def _client(self) -> Any:
        with self._lock:
            if self._cluster_manager is None:
                load_google()
                from google.cloud.container_v1 import ClusterManagerClient

                options = {"api_endpoint": self.settings.api_endpoint} if self.settings.api_endpoint else None
                self._cluster_manager = ClusterManagerClient(credentials=self._creds(), transport="rest",
                                                             client_options=options)
                bound(self._cluster_manager._transport._session, GOOGLE_ANSWER)  # the REST transport's session
            return self._cluster_manager

    def _authorized(self) -> Any:
        with self._lock:
            if self._session is None:
                load_google()
                from google.auth.transport.requests import AuthorizedSession

                self._session = bound(AuthorizedSession(self._creds()), GOOGLE_ANSWER)
            return self._session


FACTORY = ProviderFactory(
    name="gke",
    settings_model=GkeSettings,
    build=lambda pool, settings, clock: GkeProvider(pool, settings, clock=clock),
    description="Google GKE node pool through google-cloud-container (REST) and Compute's instance groups",
    capabilities=lambda settings: GkeProvider.capabilities,
    node_selector=lambda settings: f"cloud.google.com/gke-nodepool={settings.node_pool}",
)


def _target_size(answer: dict[str, Any], where: str, url: str) -> int:
    """A MIG's targetSize; a TemporaryError when the answer has none."""
    size = answer.get("targetSize")
    if not isinstance(size, int):
        raise TemporaryError(f"{where}: instance group {url.rsplit('/', 1)[-1]} reports no targetSize",
                             code=Code.BAD_ANSWER)
    return size


def _conditions(pool: Any) -> list[tuple[str, str]]:
    """A node pool's conditions as (code, message): GKE's StatusCondition codes by name (GCE_STOCKOUT, ...)."""
    out = []
    for condition in getattr(pool, "conditions", None) or []:
        code = getattr(condition.code, "name", str(condition.code))
        out.append((str(code), str(condition.message or "")))
    return out
