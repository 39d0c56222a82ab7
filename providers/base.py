"""The seam between the core and the clouds: what a pool can do, how it is read and changed, and the one guard.

The core (``autoscaler.engine.core``) talks to a cloud only through :class:`NodePoolProvider`. It always asks for an
*absolute* target size; a provider that can only add or remove nodes in steps (a trigger hook) turns the difference
into steps itself. What a pool can do is declared by its factory from the pool's settings alone
(:class:`Capabilities`, like cluster-autoscaler's ``NodeGroup``): check-config, the engine and the API read that
declaration, never the provider's methods. Errors are the types of :mod:`providers.errors`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol, Sequence, TypeVar, runtime_checkable

from pydantic import BaseModel

from autoscaler.clock import Clock
from autoscaler.models import CloudLimits, CloudStatus, ProviderRead, Tracked
from providers.errors import BusyError, Code, LimitError, PermanentError, ProviderError

__all__ = ["Capabilities", "NodePoolProvider", "NodeRef", "Provider", "ProviderError", "ProviderFactory",
           "RemovesNamedNodes", "RemovingProvider", "Tracked", "guard"]  # ProviderError: the errors' base, at hand


@dataclass(frozen=True)
class Capabilities:
    """What a pool can do, from its settings alone (cluster-autoscaler's ``NodeGroup`` methods, declared)."""

    #: sets the pool's size (``scale``; ``IncreaseSize`` / ``DecreaseTargetSize``)
    resize: bool = True
    #: removes exactly the nodes it is given (``remove_nodes``; ``DeleteNodes``); the engine picks them
    removes_named_nodes: bool = False
    #: reads the pool's size from the cloud; False: the service keeps the count in the store and passes it in
    reports_count: bool = True
    #: the cloud's own bounds known from the settings (an AKS System pool: 1..1000); the live ones come in
    #: ``CloudStatus.limits``
    limits: CloudLimits | None = None


@dataclass(frozen=True)
class NodeRef:
    """A Kubernetes node the engine chose to remove: its name and ``spec.providerID`` (the cloud's id of its
    machine, e.g. ``azure:///subscriptions/…/virtualMachines/3``, ``aws:///us-east-1a/i-0abc…``,
    ``gce://project/zone/instance``; empty where the cluster did not say)."""

    name: str
    provider_id: str = ""


@runtime_checkable
class NodePoolProvider(Protocol):
    """One node pool in one cloud.

    Methods may block on network I/O for as long as the provider's own time budget allows (a few seconds, so the
    webhook answer stays within Alertmanager's and Grafana's timeouts); they must not wait for nodes to come up.
    They are called with the pool's lease held, never inside a database transaction. They raise only the errors of
    :mod:`providers.errors`.
    """

    #: what this pool can do: its factory's declaration for its settings
    capabilities: Capabilities

    def check(self) -> None:
        """Required. Verify (app start, ``check-config --online``) that the pool can be managed; change nothing.

        Raise PermanentError for a pool we can never scale (AKS with the cluster autoscaler enabled). A provider
        that cannot look without acting (a trigger hook) returns at once and says so in its docstring.
        """

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        """Required. The pool's size, whether the cloud still works on an earlier change, and its own limits.

        A provider that does not report its count returns ``tracked``'s. ``CloudStatus.read`` keeps what the
        provider read, for the change that may follow (:meth:`scale`, :meth:`remove_nodes`): nothing is cached.
        """

    def scale(self, current: int, target: int, now: float, status: CloudStatus | None = None) -> int:
        """Required. Ask the cloud to bring the pool from ``current`` to ``target`` nodes; return the size asked.

        ``status`` is what the caller read for this decision (the engine always hands it over); without it the
        provider reads what the change needs. Returns once the cloud accepted (never waits for nodes). Busy and the
        cloud's limits refuse the change before any call (:func:`guard`); when part of a stepped change went
        through, the error's ``applied`` says the size reached.
        """


@runtime_checkable
class RemovesNamedNodes(Protocol):
    """The method behind ``Capabilities.removes_named_nodes`` (cluster-autoscaler's ``DeleteNodes``)."""

    def remove_nodes(self, nodes: Sequence[NodeRef], current: int, now: float,
                     status: CloudStatus | None = None) -> int:
        """Remove exactly ``nodes`` and lower the pool's size by as many; return the size asked.

        Only for a pool that declares the capability. The engine, not the provider, picks the nodes (idle,
        unprotected, already cordoned). Returns once the cloud accepted; never removes a node it was not given,
        and refuses the whole call when one is not the pool's. ``applied`` is set when some went and some did not.
        """


ReadT = TypeVar("ReadT", bound=ProviderRead)


def read_of(status: CloudStatus, kind: type[ReadT]) -> ReadT:
    """The provider's own read behind ``status``, as the ``kind`` the provider wrote (a status another provider
    wrote, or one without a read, is a bug: TypeError)."""
    if not isinstance(status.read, kind):
        raise TypeError(f"expected a status carrying {kind.__name__}, got {type(status.read).__name__}")
    return status.read


def guard(where: str, status: CloudStatus, target: int, declared: CloudLimits | None, *, named: bool = False) -> None:
    """The one place busy and the cloud's own limits refuse a change, for every provider, before any call.

    ``named``: a removal of named nodes, which no resize granularity (GKE's zones) constrains.
    """
    if status.busy:
        raise BusyError(status.detail or f"{where} is still working on an earlier change")
    limits = status.limits or declared
    if limits is not None and named:
        limits = replace(limits, multiple_of=1)
    why = limits.refuses(target) if limits is not None else ""
    if why:
        raise LimitError(f"{where}: {why}")


class Provider:
    """What every provider shares: the declared capabilities, the status handed from read to change, the guard.

    A subclass sets ``capabilities`` and ``pool``, implements ``check``, ``status`` and ``_resize`` (and
    ``_remove`` when it removes named nodes); one whose change needs its own read of the cloud sets ``needs_read``
    and implements ``_read``.
    """

    capabilities: Capabilities
    pool: str
    #: whether a change needs the provider's own read (``CloudStatus.read``): for a resize, for a named removal
    needs_read: tuple[bool, bool] = (False, False)

    @property
    def where(self) -> str:
        """The pool as a person finds it in the cloud, for messages."""
        return f"pool {self.pool}"

    def scale(self, current: int, target: int, now: float, status: CloudStatus | None = None) -> int:
        """See :meth:`NodePoolProvider.scale`."""
        status = self._handed(status, current, named=False)
        guard(self.where, status, target, self.capabilities.limits)
        return self._resize(status, current, target)

    def _handed(self, status: CloudStatus | None, current: int, *, named: bool) -> CloudStatus:
        """The status a change works from: the one handed over, else (or when it lacks the read the change needs)
        the provider's own read, else just the count given."""
        if not self.needs_read[named]:
            return status if status is not None else CloudStatus(current=current)
        return status if status is not None and status.read is not None else self._read()

    def _read(self) -> CloudStatus:
        """The light read a change needs when no status was handed over (only with ``needs_read``)."""
        raise NotImplementedError

    def _resize(self, status: CloudStatus, current: int, target: int) -> int:
        raise NotImplementedError


class RemovingProvider(Provider):
    """A provider with the method behind ``removes_named_nodes`` (the declaration still decides per pool)."""

    def remove_nodes(self, nodes: Sequence[NodeRef], current: int, now: float,
                     status: CloudStatus | None = None) -> int:
        """See :meth:`RemovesNamedNodes.remove_nodes`."""
        if not nodes:
            return current
        if not self.capabilities.removes_named_nodes:
            raise PermanentError(f"{self.where} cannot name the nodes to remove (its settings cannot carry node "
                                 "names)", code=Code.NODES_NOT_SUPPORTED)
        status = self._handed(status, current, named=True)
        guard(self.where, status, current - len({n.name for n in nodes}), self.capabilities.limits, named=True)
        return self._remove(status, nodes, current)

    def _remove(self, status: CloudStatus, nodes: Sequence[NodeRef], current: int) -> int:
        raise NotImplementedError


@dataclass(frozen=True)
class ProviderFactory:
    """How the registry builds a provider, and what a pool of it can do."""

    name: str
    settings_model: type[BaseModel]
    #: (pool name, validated settings, the service's time source for its retries) -> provider
    build: Callable[[str, Any, Clock], NodePoolProvider]
    #: the declaration, from the pool's validated settings alone (the provider built from them carries the same)
    capabilities: Callable[[Any], Capabilities]
    description: str = ""
    #: The Kubernetes label selector of the pool's nodes, from the provider's settings (None: the pool must set
    #: ``node_selector`` itself), e.g. AKS: ``kubernetes.azure.com/agentpool=<agent_pool>``.
    node_selector: Callable[[Any], str | None] | None = None
