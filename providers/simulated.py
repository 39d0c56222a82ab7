"""A stand-in cloud for demos, trials and tests: its node count lives in the store, its node names in the process."""
from __future__ import annotations

import logging
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from autoscaler.durations import Duration
from autoscaler.models import CloudStatus
from providers.base import Capabilities, NodeRef, ProviderFactory, RemovingProvider, Tracked
from providers.named import machines

log = logging.getLogger(__name__)


class SimulatedSettings(BaseModel):
    """Settings of a simulated pool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    initial_count: int = Field(default=0, ge=0, description="Nodes the pool starts with (len(nodes) when named).")
    provision_seconds: Duration = Field(default=0, description="How long the pool reports busy after a change "
                                        "(and, in the replay, how long a new node takes to become ready).")
    busy_seconds: Duration | None = Field(default=None, description="How long the pool reports busy after a change "
                                          "when that is shorter than a node's boot (default: provision_seconds).")
    nodes: tuple[str, ...] | None = Field(
        default=None, description="Names of the nodes the pool starts with, oldest first; default: generated "
                                  "names <pool>-node-0001, -0002, … (the highest is the newest).")

    @field_validator("nodes")
    @classmethod
    def _unique_names(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        for name in value:
            if not name.strip():
                raise ValueError("a node name must not be empty")
        seen = {name for i, name in enumerate(value) if name in value[:i]}
        if seen:
            raise ValueError(f"node names must be unique: {', '.join(sorted(seen))} given twice")
        return value

    @model_validator(mode="before")
    @classmethod
    def _count_from_names(cls, data: Any) -> Any:
        """``nodes`` sets the starting count; an ``initial_count`` that says otherwise is a mistake."""
        if not isinstance(data, dict) or not isinstance(data.get("nodes"), (list, tuple)):
            return data
        count = len(data["nodes"])
        if "initial_count" in data and data["initial_count"] != count:
            raise ValueError(f"initial_count ({data['initial_count']}) must equal the number of nodes ({count}), "
                             "or be left out")
        return {**data, "initial_count": count}


class SimulatedProvider(RemovingProvider):
    """The core tracks the count and when it changed; the provider keeps names for that many nodes.

    The names live in this process, oldest first. Each call first brings them to the count the core passes in
    (generated names added, the newest dropped), so a process that missed a change made by another worker agrees
    on the count again, though not necessarily on which names a named removal took.
    """

    capabilities = Capabilities(removes_named_nodes=True, reports_count=False)

    def __init__(self, pool: str, settings: SimulatedSettings) -> None:
        self.pool = pool
        self.settings = settings
        self._names: list[str] = list(settings.nodes or ())
        self._serial = 0
        self.sync(settings.initial_count)

    def check(self) -> None:
        """Nothing to check: a simulated pool can always be scaled."""

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        count = tracked.count_or(self.settings.initial_count)
        self.sync(count)
        busy = self.settings.provision_seconds if self.settings.busy_seconds is None else self.settings.busy_seconds
        if tracked.changed_at is not None and busy > 0:
            remaining = tracked.changed_at + busy - now
            if remaining > 0:
                return CloudStatus(current=count, busy=True, detail=f"provisioning for another {remaining:.0f}s")
        return CloudStatus(current=count)

    @property
    def where(self) -> str:
        return f"simulated pool {self.pool}"

    def _resize(self, status: CloudStatus, current: int, target: int) -> int:
        """New nodes get the next generated names; a scale-in drops the newest (the cloud's pick, here)."""
        self.sync(current)
        self.sync(target)
        return target

    def _remove(self, status: CloudStatus, nodes: Sequence[NodeRef], current: int) -> int:
        """Remove exactly the named nodes; a name the pool does not have fails the whole call, nothing removed."""
        self.sync(current)
        names = machines(nodes, lambda node: node.name if node.name in self._names else None, self.where, "node")
        self._names = [name for name in self._names if name not in names]
        log.info("provider=simulated pool=%s action=scale_in from=%d to=%d nodes=%s", self.pool, current,
                 len(self._names), ",".join(names) or "-")
        return len(self._names)

    def node_names(self) -> tuple[str, ...]:
        """The pool's nodes, oldest first (the last is the newest)."""
        return tuple(self._names)

    def sync(self, count: int) -> None:
        """Bring the names to ``count``: generated names are added, the newest names dropped."""
        del self._names[max(count, 0):]
        while len(self._names) < count:
            self._serial += 1
            name = f"{self.pool}-node-{self._serial:04d}"
            if name not in self._names:
                self._names.append(name)


FACTORY = ProviderFactory(
    name="simulated",
    settings_model=SimulatedSettings,
    build=lambda pool, settings: SimulatedProvider(pool, settings),
    capabilities=lambda settings: SimulatedProvider.capabilities,
    description="stand-in cloud that keeps its node count in the store and names its nodes",
)
