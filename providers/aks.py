"""Azure Kubernetes Service: scale one agent pool through ARM with azure-mgmt-containerservice.

The Azure SDK is imported inside functions, so it loads only when a pool uses this provider. One SDK
client per (subscription, ARM endpoint) is built and reused; it never retries by itself (``retry_total=0``)
because :mod:`providers.arm_calls` is the single retry layer, bounded by a time budget.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any, Callable, Literal, Sequence
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from autoscaler.durations import Duration
from autoscaler.models import CloudLimits, CloudStatus
from providers.arm_calls import Budget, call_with_budget
from providers.base import NodeRef, ProviderError, ProviderFactory, Tracked

log = logging.getLogger(__name__)

PUBLIC_ARM = "https://management.azure.com"
MAX_COUNT = 1000  # AKS: nodes per agent pool
SYSTEM_MIN = 1  # AKS: a System pool keeps at least one node
_SUCCEEDED = "Succeeded"
_SETTLED = frozenset({"Succeeded", "Failed", "Canceled"})  # no operation is running in these states
_PATH_SEGMENT = re.compile(r"^[^/?#%\s]+$")


class AksSettings(BaseModel):
    """Settings of an AKS agent pool; credentials come from the environment, never from here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    subscription_id: str = Field(min_length=1, description="Azure subscription ID (a GUID).")
    resource_group: str = Field(min_length=1, max_length=90, description="Resource group of the cluster.")
    cluster: str = Field(min_length=1, max_length=63, description="Name of the managed cluster.")
    agent_pool: str = Field(pattern=r"^[a-z][a-z0-9]{0,11}$", description="Agent pool (node pool) name.")
    arm_endpoint: str = Field(default=PUBLIC_ARM, description="ARM endpoint; sovereign clouds use their own.")
    authority_host: str | None = Field(default=None, description="Entra ID authority, e.g. login.chinacloudapi.cn.")
    api_version: str | None = Field(default=None, description="ARM api-version; the SDK's default when unset.")
    mode: Literal["System", "User"] | None = Field(default=None, description="The agent pool's mode, when you "
                                                   "want check-config to warn that a System pool keeps 1 node.")
    budget: Duration = Field(default=8.0, gt=0, description="Total time one read or change may take, retries included.")
    request_timeout: Duration = Field(default=5.0, gt=0, description="Read timeout of one HTTP attempt.")
    connect_timeout: Duration = Field(default=3.0, gt=0, description="Connect timeout of one HTTP attempt.")

    @field_validator("subscription_id")
    @classmethod
    def _segment(cls, value: str) -> str:
        # Not checked as a GUID: placeholders and test IDs pass here and ARM answers a wrong one with 404.
        if not _PATH_SEGMENT.match(value):
            raise ValueError("must be a subscription ID such as 00000000-0000-0000-0000-000000000000 "
                             "(no '/', '?', '#', '%' or spaces)")
        return value

    @field_validator("arm_endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.hostname or parts.query or parts.fragment:
            raise ValueError("must be an https URL such as https://management.azure.com")
        return value.rstrip("/")


_CLIENTS: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_CREDENTIALS: dict[str | None, Any] = {}
_LOCK = threading.Lock()


def _default_credential(authority: str | None) -> Any:
    """One DefaultAzureCredential per authority (environment, workload identity, managed identity, CLI)."""
    from azure.identity import DefaultAzureCredential

    if authority not in _CREDENTIALS:
        _CREDENTIALS[authority] = DefaultAzureCredential(authority=authority) if authority else DefaultAzureCredential()
    return _CREDENTIALS[authority]


def get_client(settings: AksSettings, credential: Any = None, **client_kwargs: Any) -> Any:
    """The shared ContainerServiceClient of this subscription and endpoint (and injected credential)."""
    from azure.mgmt.containerservice import ContainerServiceClient

    key = (
        settings.subscription_id,
        settings.arm_endpoint,
        settings.authority_host,
        settings.api_version,
        settings.connect_timeout,
        settings.request_timeout,
        id(credential) if credential is not None else None,
        tuple(sorted((name, id(value)) for name, value in client_kwargs.items())),
    )
    with _LOCK:
        entry = _CLIENTS.get(key)
        if entry is None:
            cred = credential if credential is not None else _default_credential(settings.authority_host)
            extra = dict(client_kwargs)
            if settings.api_version:
                extra["api_version"] = settings.api_version
            client = ContainerServiceClient(
                cred,
                settings.subscription_id,
                base_url=settings.arm_endpoint,
                credential_scopes=[settings.arm_endpoint + "/.default"],
                retry_total=0,
                polling_interval=1,
                connection_timeout=settings.connect_timeout,
                read_timeout=settings.request_timeout,
                **extra,
            )
            # keep the credential and kwargs alive with the client, so the ids in the key stay unique
            entry = (client, credential, client_kwargs)
            _CLIENTS[key] = entry
    return entry[0]


def _state(pool: Any) -> tuple[str, str]:
    """Provisioning state and power state of an AgentPool model."""
    power = getattr(pool.power_state, "code", None) or "Running"
    return str(pool.provisioning_state or "Unknown"), str(power)


class AksProvider:
    """One AKS agent pool. ARM reports the count, so the core tracks nothing."""

    tracks_count = False

    def __init__(
        self,
        pool: str,
        settings: AksSettings,
        *,
        credential: Any = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        **client_kwargs: Any,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self._credential = credential
        self._client_kwargs = client_kwargs
        self._sleep = sleep
        self._clock = clock
        self._budget = Budget(total=settings.budget)
        self._last_read: tuple[float, Any] | None = None  # (clock at start of the read, AgentPool)
        self._read_lock = threading.Lock()

    @property
    def _where(self) -> str:
        s = self.settings
        return f"AKS pool {s.agent_pool} of cluster {s.cluster} (resource group {s.resource_group})"

    def _client(self) -> Any:
        return get_client(self.settings, self._credential, **self._client_kwargs)

    def _call(self, what: str, fn: Callable[[float], Any], deadline: float | None = None) -> Any:
        return call_with_budget(
            f"{what} {self._where}", fn, budget=self._budget, deadline=deadline,
            attempt_timeout=self.settings.request_timeout, clock=self._clock, sleep=self._sleep,
        )

    def _read(self) -> Any:
        """GET the agent pool (retried inside the budget) and remember it for an immediate scale()."""
        s = self.settings
        started = self._clock()
        agent_pools = self._client().agent_pools
        pool = self._call("reading", lambda timeout: agent_pools.get(
            s.resource_group, s.cluster, s.agent_pool, read_timeout=timeout))
        with self._read_lock:
            self._last_read = (started, pool)
        return pool

    def _refuse_autoscaler(self, pool: Any) -> None:
        if pool.enable_auto_scaling:
            raise ProviderError(
                f"{self._where} has the cluster autoscaler enabled, and AKS refuses manual count changes there: "
                f"disable it (az aks nodepool update --resource-group {self.settings.resource_group} "
                f"--cluster-name {self.settings.cluster} --name {self.settings.agent_pool} "
                "--disable-cluster-autoscaler) or remove this pool from the autoscaler service",
                retryable=False,
                code="ClusterAutoscalerEnabled",
            )

    def check(self) -> None:
        """Read the pool once: it must exist, be readable, and not be under the cluster autoscaler."""
        pool = self._read()
        self._refuse_autoscaler(pool)
        state, power = _state(pool)
        log.info("aks pool=%s agent_pool=%s count=%s mode=%s state=%s power=%s vm_size=%s", self.pool,
                 self.settings.agent_pool, pool.count, pool.mode, state, power, pool.vm_size)

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        """ARM's count wins; busy while an operation runs on the pool (provisioning state not settled)."""
        pool = self._read()
        self._refuse_autoscaler(pool)
        state, power = _state(pool)
        count = int(pool.count or 0)
        if state not in _SETTLED:
            return CloudStatus(current=count, busy=True,
                               detail=f"{self._where} is {state}: an earlier change is still in progress")
        detail = f"provisioningState={state} powerState={power} mode={pool.mode}"
        if state != _SUCCEEDED:
            detail += f" (the last operation ended {state}; a new change retries it)"
        return CloudStatus(current=count, detail=detail, limits=self._cloud_limits(pool))

    def _cloud_limits(self, pool: Any) -> CloudLimits | None:
        """A System pool keeps at least one node: below it is a limit (skipped_limit), not a failure."""
        if str(pool.mode or "User") != "System":
            return None
        return CloudLimits(low=SYSTEM_MIN, high=MAX_COUNT, owner=f"AKS System pool {self.settings.agent_pool}",
                           low_name="floor", high_name="maximum",
                           fix="AKS keeps at least 1 node in a System pool; scale a User pool to zero instead")

    def _check_limits(self, pool: Any, target: int) -> None:
        floor = SYSTEM_MIN if str(pool.mode or "User") == "System" else 0
        if target < floor or target > MAX_COUNT:
            kind = "a System pool" if floor else "an agent pool"
            raise ProviderError(
                f"{self._where}: {target} nodes is outside what AKS allows for {kind} ({floor}..{MAX_COUNT})",
                retryable=False,
                code="OutsideAksLimits",
                limit=True,
            )

    def _fresh_read(self) -> tuple[Any, float | None]:
        """The pool read by status() moments ago (and the deadline it started), or a new read."""
        with self._read_lock:
            last = self._last_read
            self._last_read = None
        if last is not None and self._clock() - last[0] < self._budget.total:
            return last[1], last[0] + self._budget.total
        return self._read(), None

    def _ready_for(self, target: int) -> tuple[Any, float | None]:
        """The pool (read moments ago or now) and its deadline, once it may go to ``target``: else ProviderError."""
        pool, deadline = self._fresh_read()
        self._refuse_autoscaler(pool)
        self._check_limits(pool, target)
        state, power = _state(pool)
        if state not in _SETTLED:
            raise ProviderError(f"{self._where} is {state}: an earlier change is still in progress",
                                retryable=True, code="PoolBusy")
        if power == "Stopped":
            raise ProviderError(f"{self._where} is stopped; start it (az aks nodepool start) before scaling",
                                retryable=False, code="PoolStopped")
        return pool, deadline

    def scale(self, current: int, target: int, now: float) -> int:
        """PUT the pool with the new count and return once ARM accepted it; the nodes come later."""
        if target < 0 or target > MAX_COUNT:
            raise ProviderError(f"{self._where}: {target} nodes is outside 0..{MAX_COUNT}",
                                retryable=False, code="OutsideAksLimits", limit=True)
        pool, deadline = self._ready_for(target)
        s = self.settings
        pool.count = target
        agent_pools = self._client().agent_pools

        def put(timeout: float) -> Any:
            # polling=False: ARM's acceptance (200/201 + Azure-AsyncOperation) is all we wait for
            return agent_pools.begin_create_or_update(
                s.resource_group, s.cluster, s.agent_pool, pool, if_match=pool.e_tag,
                polling=False, read_timeout=timeout)

        self._call(f"scaling to {target} nodes", put, deadline)
        log.info("aks pool=%s agent_pool=%s requested count %d -> %d", self.pool, s.agent_pool, current, target)
        return target

    def remove_nodes(self, nodes: Sequence[NodeRef], current: int, now: float) -> int:
        """Delete exactly these nodes' machines (agent pool deleteMachines); AKS lowers the count by as many.

        The machines are looked up first (machines list of the pool): a node that is not a machine of this pool
        refuses the whole call, so nothing else is ever deleted. Returns once ARM accepted (202); the VMs go
        later, and the pool reads as busy (provisioning state ``Scaling``) until they are gone. AKS does not
        drain: the engine has cordoned the nodes and checked their pods before this.
        """
        from azure.mgmt.containerservice.models import AgentPoolDeleteMachinesParameter

        if not nodes:
            return current
        target = current - len({n.name for n in nodes})
        pool, deadline = self._ready_for(target)
        s = self.settings
        machines_api = self._client().machines
        machines = self._call("listing the machines of", lambda timeout: list(machines_api.list(
            s.resource_group, s.cluster, s.agent_pool, read_timeout=timeout)), deadline)
        names = machine_names(nodes, [(str(m.name), str(getattr(m.properties, "resource_id", "") or ""))
                                      for m in machines], self._where)
        target = current - len(names)
        body = AgentPoolDeleteMachinesParameter(machine_names=names)
        agent_pools = self._client().agent_pools
        try:
            self._call(f"deleting machines {', '.join(names)} of", lambda timeout: agent_pools.begin_delete_machines(
                s.resource_group, s.cluster, s.agent_pool, body, polling=False, read_timeout=timeout), deadline)
        except ProviderError as exc:
            if not self._removal_under_way(int(pool.count or 0), len(names)):
                raise
            log.warning("aks pool=%s: deleting machines failed (%s), but ARM shows the pool lowered by %d and busy: "
                        "an earlier attempt was accepted and its answer lost", self.pool, exc.message, len(names))
        log.info("aks pool=%s agent_pool=%s deleting machines=%s count %d -> %d", self.pool, s.agent_pool,
                 ",".join(names), current, target)
        return target

    def _removal_under_way(self, before: int, removed: int) -> bool:
        """After a failed delete: does ARM show it accepted (count lowered by exactly ``removed``, still busy)?

        A delete whose answer was lost (a dropped connection) and then retried is refused as busy, although the
        first attempt went through; the nodes must not be handed back as kept then.
        """
        try:
            pool = self._read()
        except ProviderError:
            return False
        return _state(pool)[0] not in _SETTLED and int(pool.count or 0) == before - removed


def machine_names(nodes: Sequence[NodeRef], machines: Sequence[tuple[str, str]], where: str) -> list[str]:
    """The agent-pool machine of each node, by node name (the VM's computer name) or by ``spec.providerID``
    (``azure://`` + the VMSS instance's resource id); refuses a node that is no machine of the pool, or whose
    name and providerID point at two different machines."""
    by_name = {name.lower(): name for name, _ in machines}
    by_resource = {resource.lower(): name for name, resource in machines if resource}
    found: list[str] = []
    unknown: list[str] = []
    for node in nodes:
        named = by_name.get(node.name.lower())
        resource = node.provider_id.removeprefix("azure://").lower()
        identified = by_resource.get(resource) if resource else None
        if named and identified and named != identified:
            raise ProviderError(f"{where}: node {node.name} has providerID {node.provider_id}, which is machine "
                                f"{identified}, not {named}; refusing to delete either", retryable=False,
                                code="NodeMachineMismatch")
        machine = named or identified
        if machine is None:
            unknown.append(node.name)
        elif machine not in found:
            found.append(machine)
    if unknown:
        raise ProviderError(f"{where} has no machine for node(s) {', '.join(unknown)} (not in this agent pool, or "
                            "already gone); nothing was deleted", retryable=False, code="NodeNotInPool")
    return found


FACTORY = ProviderFactory(
    name="aks",
    settings_model=AksSettings,
    build=lambda pool, settings: AksProvider(pool, settings),
    description="Azure Kubernetes Service agent pool, through ARM (azure-mgmt-containerservice)",
    node_selector=lambda settings: f"kubernetes.azure.com/agentpool={settings.agent_pool}",
    floor=lambda settings: (SYSTEM_MIN, "AKS keeps at least 1 node in a System pool") if settings.mode == "System"
    else (0, ""),
)
