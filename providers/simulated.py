"""A stand-in cloud for demos, trials and tests: its node count lives in the store, its node names in the process."""
from __future__ import annotations

import logging
from typing import Any, Sequence

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from autoscaler.config.durations import Duration
from autoscaler.models import CloudStatus, Shortfall
from providers.base import Capabilities, NodeRef, ProviderFactory, RemovingProvider, Tracked
from providers.named import machines

log = logging.getLogger(__name__)


class CapacityWindow(BaseModel):
    """A time the simulated cloud can deliver only ``nodes`` nodes to the pool (a stockout, for trials and the
    replay)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start: AwareDatetime = Field(description="RFC 3339 with a zone, e.g. 2026-11-24T13:00:00Z.")
    end: AwareDatetime
    nodes: int = Field(ge=0, description="The most nodes the pool can have between start and end.")

    @model_validator(mode="after")
    def _ordered(self) -> "CapacityWindow":
        if self.end <= self.start:
            raise ValueError("end must be after start")
        return self


class StoppedNodes(BaseModel):
    """A pool that stops the nodes a scale-in removes instead of deleting them, and starts those again first on a
    scale-out (AKS ``scaleDownMode: Deallocate``, EC2 Auto Scaling warm pools). Read by the replay only: a stopped
    node is no ready node (no node-hours), and it is ready ``restart_seconds`` after it is asked for again."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keep: int = Field(ge=1, description="The most removed nodes kept stopped; one removed beyond them is deleted.")
    restart_seconds: Duration = Field(description="How long a stopped node takes to be ready again (measure it on "
                                                  "your cloud: the replay only takes it as given).")


#: The code the simulated cloud reports when it could not deliver (its own, as each cloud has its own).
STOCKOUT = "SimulatedStockout"


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
    stopped: StoppedNodes | None = Field(
        default=None, description="Removed nodes kept stopped and started again first (the replay's model of AKS "
                                  "scaleDownMode: Deallocate or a warm pool); default: removed nodes are deleted.")
    capacity: int | list[CapacityWindow] | None = Field(
        default=None, description="The most nodes the cloud delivers: a number (always), or windows of "
                                  "{start, end, nodes} (unlimited outside them). It accepts any size and reports "
                                  "what it could not deliver.")

    @field_validator("capacity")
    @classmethod
    def _capacity(cls, value: int | list[CapacityWindow] | None) -> int | list[CapacityWindow] | None:
        if isinstance(value, int) and value < 0:
            raise ValueError("must be 0 or more")
        return value

    def capacity_at(self, now: float) -> int | None:
        """The most nodes the cloud delivers at ``now`` (None: no limit)."""
        if self.capacity is None or isinstance(self.capacity, int):
            return self.capacity
        caps = [w.nodes for w in self.capacity if w.start.timestamp() <= now < w.end.timestamp()]
        return min(caps) if caps else None

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

    The names live in this process, oldest first, and are a machine's for the pool's life: the cloud names a machine
    once. Each read shows the count the core passes in (so a process that missed a change made by another worker
    agrees on the count again): machines beyond it are hidden, not dropped, and shown again by a later read of a
    larger count before any new name is made; so a read passed a stale count (a tick that read the store before a
    change was stored and the cloud after it) never renames the pool's machines. A change (scale, named removal)
    starts from the count it is given: the machines hidden beyond it are gone, and a new machine gets a new name.
    """

    capabilities = Capabilities(removes_named_nodes=True, reports_count=False)

    def __init__(self, pool: str, settings: SimulatedSettings) -> None:
        self.pool = pool
        self.settings = settings
        self._names: list[str] = list(settings.nodes or ())
        self._hidden: list[str] = []  # machines a read's count did not show (oldest first): shown again, not renamed
        self._serial = 0
        self._at: float | None = None  # the time of the change being made (the capacity depends on it)
        self._seen: float | None = None  # the latest time a read or a change was made at
        self._asked = settings.initial_count  # the count last asked for (the names may be fewer: a stockout)
        self.reads = 0  # status calls answered (what a tick costs the cloud: bench/gang_ticks.py)
        self.sync(settings.initial_count)

    def check(self) -> None:
        """Nothing to check: a simulated pool can always be scaled."""

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        """The asked-for count; once the cloud is no longer busy with it, what it could not deliver."""
        self.reads += 1
        count = tracked.count_or(self.settings.initial_count)
        self.sync(count, now)
        busy = self.settings.provision_seconds if self.settings.busy_seconds is None else self.settings.busy_seconds
        if tracked.changed_at is not None and busy > 0:
            remaining = tracked.changed_at + busy - now
            if remaining > 0:
                return CloudStatus(current=count, busy=True, detail=f"provisioning for another {remaining:.0f}s")
        return CloudStatus(current=count, shortfall=self.shortfall(count, now))

    def shortfall(self, asked: int, now: float) -> Shortfall | None:
        """What the simulated cloud could not deliver of ``asked`` nodes (None: all delivered)."""
        delivered = len(self._names)
        if delivered >= asked:
            return None
        cap = self.settings.capacity_at(now)
        return Shortfall(asked=asked, delivered=delivered, code=STOCKOUT,
                         message=f"simulated pool {self.pool} can deliver at most "
                                 f"{cap if cap is not None else delivered} node(s) now; {asked} asked for, "
                                 f"{delivered} delivered")

    @property
    def where(self) -> str:
        return f"simulated pool {self.pool}"

    def scale(self, current: int, target: int, now: float, status: CloudStatus | None = None) -> int:
        """Any size is accepted; new nodes come up to the capacity at ``now`` (what could not be delivered shows in
        ``status``)."""
        self._at = now
        try:
            return super().scale(current, target, now, status)
        finally:
            self._at = None

    def _resize(self, status: CloudStatus, current: int, target: int) -> int:
        """New nodes get the next generated names up to the capacity; a scale-in drops the newest (the cloud's
        pick, here)."""
        self._commit(current, self._at)
        del self._names[max(target, 0):]
        self.sync(target, self._at)
        return target

    def _remove(self, status: CloudStatus, nodes: Sequence[NodeRef], current: int) -> int:
        """Remove exactly the named nodes; a name the pool does not have fails the whole call, nothing removed."""
        self._commit(current)
        names = machines(nodes, lambda node: node.name if node.name in self._names else None, self.where, "node")
        self._names = [name for name in self._names if name not in names]
        self._asked = len(self._names)  # the size is now what is left: the removed machines are not owed
        log.info("provider=simulated pool=%s action=scale_in from=%d to=%d nodes=%s", self.pool, current,
                 len(self._names), ",".join(names) or "-")
        return len(self._names)

    def undelivered(self) -> int:
        """Nodes of the count last asked for that the pool does not have (a stockout; 0: all delivered)."""
        return max(0, self._asked - len(self._names))

    def asked(self) -> int:
        """The count last asked for (by a change or a read)."""
        return self._asked

    def node_names(self) -> tuple[str, ...]:
        """The pool's nodes, oldest first (the last is the newest)."""
        return tuple(self._names)

    def _commit(self, current: int, now: float | None = None) -> None:
        """A change starts from ``current`` machines: those hidden beyond it are gone for good."""
        self.sync(current, now)
        self._hidden.clear()

    def sync(self, count: int, now: float | None = None) -> None:
        """Show ``count`` names: the newest hidden (not dropped) beyond it, hidden ones shown again first, then
        generated names added up to the capacity at ``now`` (else at the latest time seen; nodes the pool has stay
        when a stockout starts)."""
        if now is not None:
            self._seen = now if self._seen is None else max(self._seen, now)
        self._asked = max(count, 0)
        while len(self._names) > self._asked:
            self._hidden.insert(0, self._names.pop())
        while len(self._names) < self._asked and self._hidden:
            self._names.append(self._hidden.pop(0))
        cap = self.settings.capacity_at(self._seen) if self._seen is not None else None
        while len(self._names) < (count if cap is None else min(count, max(cap, len(self._names)))):
            self._serial += 1
            name = f"{self.pool}-node-{self._serial:04d}"
            if name not in self._names and name not in self._hidden:
                self._names.append(name)


FACTORY = ProviderFactory(
    name="simulated",
    settings_model=SimulatedSettings,
    build=lambda pool, settings, clock: SimulatedProvider(pool, settings),  # no waits: simulated time
    capabilities=lambda settings: SimulatedProvider.capabilities,
    description="stand-in cloud that keeps its node count in the store and names its nodes",
)
