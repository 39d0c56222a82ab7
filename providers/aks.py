"""Azure Kubernetes Service: scale one agent pool through ARM with azure-mgmt-containerservice.

The Azure SDK is imported inside functions, so it loads only when a pool uses this provider. One SDK
client per (subscription, ARM endpoint) is built and reused; it never retries by itself (``retry_total=0``)
because :func:`providers.retry.call` is the single retry layer, bounded by a time budget
(:mod:`providers.arm_calls` reads ARM's answers for it).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
import re
import threading
from typing import Any, Callable, Literal, Sequence
from urllib.parse import urlsplit

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from autoscaler.clock import SYSTEM, Clock
from autoscaler.config.durations import Duration
from autoscaler.models import CloudLimits, CloudStatus, ProviderRead, Shortfall
from providers.arm_calls import classify
from providers.base import Capabilities, NodeRef, ProviderFactory, RemovingProvider, Tracked, read_of
from providers.bounded import bounded_session
from providers.errors import Code, PermanentError, cloud_autoscaler
from providers.named import agreed, in_parts, lowered, machines
from providers import shortfalls
from providers.retry import call

log = logging.getLogger(__name__)

PUBLIC_ARM = "https://management.azure.com"
MAX_COUNT = 1000  # AKS: nodes per agent pool
SYSTEM_MIN = 1  # AKS: a System pool keeps at least one node
ARM_ANSWER = 16 * 1024 * 1024  # bytes: the most of one ARM answer read (a page of 100 machines is ~100 KB)
MAX_ATTEMPTS = 8  # ARM throttles per subscription and says how long to wait: a few more, shorter attempts
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
    retry_budget: Duration = Field(default=8.0, ge=0, validation_alias=AliasChoices("retry_budget", "budget"),
                                   description="Total time one read and the change it leads to may take, retries "
                                               "included (`budget` is its older name).")
    timeout: Duration = Field(default=5.0, gt=0, validation_alias=AliasChoices("timeout", "request_timeout"),
                              description="Total time of one HTTP attempt (`request_timeout` is its older name).")
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
    from azure.core.pipeline.transport import RequestsTransport
    from azure.mgmt.containerservice import ContainerServiceClient

    key = (settings.subscription_id, settings.arm_endpoint, settings.authority_host, settings.api_version,
           settings.connect_timeout, settings.timeout, id(credential) if credential is not None else None,
           tuple(sorted((name, id(value)) for name, value in client_kwargs.items())))
    with _LOCK:
        entry = _CLIENTS.get(key)
        if entry is None:
            cred = credential if credential is not None else _default_credential(settings.authority_host)
            extra = dict(client_kwargs)
            if settings.api_version:
                extra["api_version"] = settings.api_version
            # azure-core's read_timeout bounds each socket read; the bounded session makes it the exchange's total
            transport = RequestsTransport(session=bounded_session(ARM_ANSWER), session_owner=True)
            client = ContainerServiceClient(cred, settings.subscription_id, base_url=settings.arm_endpoint,
                                            credential_scopes=[settings.arm_endpoint + "/.default"], retry_total=0,
                                            polling_interval=1, connection_timeout=settings.connect_timeout,
                                            read_timeout=settings.timeout, transport=transport, **extra)
            # keep the credential and kwargs alive with the client, so the ids in the key stay unique
            entry = (client, credential, client_kwargs)
            _CLIENTS[key] = entry
    return entry[0]


def _state(pool: Any) -> tuple[str, str]:
    """Provisioning state and power state of an AgentPool model."""
    power = getattr(pool.power_state, "code", None) or "Running"
    return str(pool.provisioning_state or "Unknown"), str(power)


def capabilities(settings: AksSettings) -> Capabilities:
    """AKS reports its count and deletes named machines; a System pool keeps 1..1000 nodes, a User pool 0..1000."""
    return Capabilities(removes_named_nodes=True, limits=limits(settings.agent_pool, settings.mode == "System"))


def limits(agent_pool: str, system: bool) -> CloudLimits:
    """AKS's own bounds on an agent pool's count."""
    if not system:
        return CloudLimits(low=0, high=MAX_COUNT, owner=f"AKS agent pool {agent_pool}", high_name="maximum")
    return CloudLimits(low=SYSTEM_MIN, high=MAX_COUNT, owner=f"AKS System pool {agent_pool}", low_name="floor",
                       high_name="maximum", why="AKS keeps at least 1 node in a System pool",
                       fix="AKS keeps a System pool (1..1000) at 1 node or more; scale a User pool to zero instead")


@dataclass(frozen=True)
class AksRead(ProviderRead):
    """The agent pool as ARM answered it (its eTag with it) and the end of the budget its read began."""

    pool: Any
    deadline: float


class AksProvider(RemovingProvider):
    """One AKS agent pool. ARM reports the count, so the core tracks nothing."""

    needs_read = (True, True)  # a resize PUTs the pool just read (with its eTag); a removal checks it first

    def __init__(self, pool: str, settings: AksSettings, *, credential: Any = None,
                 clock: Clock = SYSTEM, **client_kwargs: Any) -> None:
        self.pool = pool
        self.settings = settings
        self.capabilities = capabilities(settings)
        self._credential = credential
        self._client_kwargs = client_kwargs
        self._clock = clock

    @property
    def where(self) -> str:
        s = self.settings
        return f"AKS pool {s.agent_pool} of cluster {s.cluster} (resource group {s.resource_group})"

    def _client(self) -> Any:
        return get_client(self.settings, self._credential, **self._client_kwargs)

    def _call(self, what: str, fn: Callable[[float], Any], deadline: float | None = None) -> Any:
        """One ARM call through the retry layer, its SDK errors classified by :func:`arm_calls.classify`."""
        return call(f"{what} {self.where}", fn, budget=self.settings.retry_budget, timeout=self.settings.timeout,
                    clock=self._clock, deadline=deadline, attempts=MAX_ATTEMPTS,
                    classify=classify)

    def _read(self) -> CloudStatus:
        """GET the agent pool (retried inside the budget); the change that follows shares the budget's rest."""
        s = self.settings
        started = self._clock.monotonic()
        agent_pools = self._client().agent_pools
        pool = self._call("reading", lambda timeout: agent_pools.get(
            s.resource_group, s.cluster, s.agent_pool, read_timeout=timeout))
        if pool.enable_auto_scaling:
            raise cloud_autoscaler(self.where, "the cluster autoscaler", "disable it (az aks nodepool update "
                                   f"--resource-group {s.resource_group} --cluster-name {s.cluster} --name "
                                   f"{s.agent_pool} --disable-cluster-autoscaler)")
        state, power = _state(pool)
        count = int(pool.count or 0)
        read = AksRead(pool, started + s.retry_budget)
        if state not in _SETTLED:
            return CloudStatus(current=count, busy=True, read=read,
                               detail=f"{self.where} is {state}: an earlier change is still in progress")
        detail = f"provisioningState={state} powerState={power} mode={pool.mode}"
        if state != _SUCCEEDED:
            detail += f" (the last operation ended {state}; a new change retries it)"
        system = str(pool.mode or "User") == "System"
        return CloudStatus(current=count, detail=detail, read=read,
                           limits=limits(s.agent_pool, True) if system else None,
                           shortfall=self._shortfall(pool, state, count, started + s.retry_budget))

    def _shortfall(self, pool: Any, state: str, count: int, deadline: float) -> Shortfall | None:
        """A Failed pool whose provisioning error is a capacity or quota code: its machines are what was delivered
        (the machines list of the pool); the count may be given back (a PUT of the count it has)."""
        error = getattr(getattr(pool, "status", None), "provisioning_error", None)
        code, message = str(getattr(error, "code", "") or ""), str(getattr(error, "message", "") or "")
        if state != "Failed" or shortfalls.classify("aks", code, message) is None:
            return None
        s = self.settings
        listed = self._call("listing the machines of", lambda timeout: list(self._client().machines.list(
            s.resource_group, s.cluster, s.agent_pool, read_timeout=timeout)), deadline)
        return shortfalls.shortfall("aks", code, message, asked=count, delivered=len(listed))

    def check(self) -> None:
        """Read the pool once: it must exist, be readable, and not be under the cluster autoscaler."""
        pool = read_of(self._read(), AksRead).pool
        state, power = _state(pool)
        log.info("aks pool=%s agent_pool=%s count=%s mode=%s state=%s power=%s vm_size=%s", self.pool,
                 self.settings.agent_pool, pool.count, pool.mode, state, power, pool.vm_size)

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        """ARM's count wins; busy while an operation runs on the pool (provisioning state not settled)."""
        return self._read()

    def _ready(self, status: CloudStatus) -> tuple[Any, float | None]:
        """The pool read for this change and the deadline it shares with that read (None once past: a new
        budget); refuses a stopped pool."""
        read = read_of(status, AksRead)
        pool, deadline = read.pool, read.deadline
        if _state(pool)[1] == "Stopped":
            raise PermanentError(f"{self.where} is stopped; start it (az aks nodepool start) before scaling",
                                 code=Code.POOL_STOPPED)
        return pool, deadline if self._clock.monotonic() < deadline else None

    def _resize(self, status: CloudStatus, current: int, target: int) -> int:
        """PUT the pool with the new count and return once ARM accepted it; the nodes come later."""
        pool, deadline = self._ready(status)
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

    def _remove(self, status: CloudStatus, nodes: Sequence[NodeRef], current: int) -> int:
        """Delete exactly these nodes' machines (agent pool deleteMachines); AKS lowers the count by as many.

        The machines are looked up first (machines list of the pool), by node name (the VM's computer name) or by
        ``spec.providerID`` (``azure://`` + the VMSS instance's resource id). Returns once ARM accepted (202); the
        VMs go later, and the pool reads as busy (``Scaling``) until they are gone. AKS does not drain: the engine
        has cordoned the nodes and checked their pods before this.
        """
        from azure.mgmt.containerservice.models import AgentPoolDeleteMachinesParameter

        pool, deadline = self._ready(status)
        s = self.settings
        listed = self._call("listing the machines of", lambda timeout: list(self._client().machines.list(
            s.resource_group, s.cluster, s.agent_pool, read_timeout=timeout)), deadline)
        by_name = {str(m.name).lower(): str(m.name) for m in listed}
        by_id = {str(getattr(m.properties, "resource_id", "") or "").lower(): str(m.name) for m in listed}
        by_id.pop("", None)

        def find(node: NodeRef) -> str | None:
            resource = node.provider_id.removeprefix("azure://").lower()
            return agreed(node, by_name.get(node.name.lower()), by_id.get(resource) if resource else None, self.where)

        names = machines(nodes, find, self.where, "machine", "deleted")
        body = AgentPoolDeleteMachinesParameter(machine_names=names)
        agent_pools = self._client().agent_pools
        in_parts([names], lambda part: self._call(
            f"deleting machines {', '.join(part)} of", lambda timeout: agent_pools.begin_delete_machines(
                s.resource_group, s.cluster, s.agent_pool, body, polling=False, read_timeout=timeout), deadline),
            lowered(self._read, int(pool.count or 0), len(names)), len, current, self.where)
        log.info("aks pool=%s agent_pool=%s deleting machines=%s count %d -> %d", self.pool, s.agent_pool,
                 ",".join(names), current, current - len(names))
        return current - len(names)


FACTORY = ProviderFactory(
    name="aks",
    settings_model=AksSettings,
    build=lambda pool, settings, clock: AksProvider(pool, settings, clock=clock),
    capabilities=capabilities,
    description="Azure Kubernetes Service agent pool, through ARM (azure-mgmt-containerservice)",
    node_selector=lambda settings: f"kubernetes.azure.com/agentpool={settings.agent_pool}",
)
