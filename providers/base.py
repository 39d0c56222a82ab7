"""The contract every cloud implements, and the errors it raises.

The core (``autoscaler.engine``) talks to a cloud only through :class:`NodePoolProvider`. It always asks
for an *absolute* target size; a provider that can only add or remove nodes in steps (a trigger hook)
turns the difference into steps itself. A provider that cannot read the size of its pool sets
``tracks_count = True``: the core then keeps the expected count in the store and passes it in.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from pydantic import BaseModel

from autoscaler.models import CloudStatus


class ProviderError(Exception):
    """A change or a read that did not work.

    ``retryable`` says whether the same call later could succeed (throttling, 5xx, timeouts, a busy pool),
    which decides whether the webhook answers 503 so the sender retries. ``code`` is the cloud's own error
    code when it gave one. ``applied`` is the size the pool really reached when a multi-call change stopped
    half-way (an ACK hook scale-in of 3 nodes where the second call failed). The message must never hold a
    secret: providers redact URLs and never include credentials.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        code: str | None = None,
        applied: int | None = None,
        retry_after: float | None = None,
        limit: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.limit = limit  # the target is outside what the cloud allows: a limit (skipped_limit), not a failure
        self.retryable = retryable
        self.code = code
        self.applied = applied
        self.retry_after = retry_after


@dataclass(frozen=True)
class Tracked:
    """The count the store keeps for a provider that cannot read it, and when it last changed."""

    count: int | None
    changed_at: float | None


@runtime_checkable
class NodePoolProvider(Protocol):
    """One node pool in one cloud.

    Methods may block on network I/O for as long as the provider's own time budget allows (a few seconds,
    so the webhook answer stays within Alertmanager's and Grafana's timeouts); they must not wait for nodes
    to come up. They are called with the pool's lease held, never inside a database transaction.
    """

    #: True when the cloud cannot report the pool's size and the core must track it in the store.
    tracks_count: bool

    def check(self) -> None:
        """Verify at start-up (``check-config --online`` and app start) that the pool can be managed.

        Optional: raise ProviderError for a pool that can never be scaled by us (for example AKS with the
        cluster autoscaler enabled). Must not change anything.
        """

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        """Read the pool's current size and whether the cloud is still working on an earlier change.

        Required. A provider with ``tracks_count`` returns ``tracked.count``. Raise ProviderError when the
        cloud cannot be read, or when the pool is in a state we must refuse (say why in the message).
        """

    def scale(self, current: int, target: int, now: float) -> int:
        """Ask the cloud to bring the pool from ``current`` to ``target`` nodes; return the size requested.

        Required. Returns as soon as the cloud accepted the request (it does not wait for nodes). Raises
        ProviderError on failure; when part of a stepped change went through it sets ``applied``.
        """


@dataclass(frozen=True)
class NodeRef:
    """A Kubernetes node the engine chose to remove: its name and ``spec.providerID`` (the cloud's id of its
    machine, e.g. ``azure:///subscriptions/…/virtualMachines/3``, ``aws:///us-east-1a/i-0abc…``,
    ``gce://project/zone/instance``; empty where the cluster did not say)."""

    name: str
    provider_id: str = ""


@runtime_checkable
class RemovesNamedNodes(Protocol):
    """The second capability (cluster-autoscaler's ``DeleteNodes``): a provider that can remove *named* nodes.

    A provider declares it by implementing ``remove_nodes``. The engine, not the provider, picks the nodes (only
    idle, unprotected ones, already cordoned); a provider without it can only change its count, and the cloud
    picks which machine goes.
    """

    def remove_nodes(self, nodes: Sequence[NodeRef], current: int, now: float) -> int:
        """Remove exactly ``nodes`` from the pool and lower its size by as many; return the size requested.

        Required for this capability. Returns once the cloud accepted the request (it does not wait for the
        machines to go). Raises ProviderError on failure; ``applied`` is set when some nodes went and some did not.
        Never removes a node it was not given.
        """


@dataclass(frozen=True)
class ProviderFactory:
    """How the registry builds a provider: its settings model and a constructor."""

    name: str
    settings_model: type[BaseModel]
    build: Callable[[str, Any], NodePoolProvider]  # (pool name, validated settings) -> provider
    description: str = ""
    #: The Kubernetes label selector of the pool's nodes, from the provider's settings (None: the pool must set
    #: ``node_selector`` itself), e.g. AKS: ``kubernetes.azure.com/agentpool=<agent_pool>``.
    node_selector: Callable[[Any], str | None] | None = None
    #: The fewest nodes the cloud allows the pool, from its settings, and why (check-config warns when a pool's
    #: ``min`` is below it; the provider reports the live floor in ``CloudStatus.floor``). None: 0.
    floor: Callable[[Any], tuple[int, str]] | None = None
