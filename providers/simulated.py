"""A stand-in cloud for demos, trials and tests: its node count lives in the store."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from autoscaler.durations import Duration
from autoscaler.models import CloudStatus
from providers.base import ProviderFactory, Tracked


class SimulatedSettings(BaseModel):
    """Settings of a simulated pool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    initial_count: int = Field(default=0, ge=0, description="Nodes the pool starts with.")
    provision_seconds: Duration = Field(default=0, description="How long the pool reports busy after a change "
                                        "(and, in the replay, how long a new node takes to become ready).")
    busy_seconds: Duration | None = Field(default=None, description="How long the pool reports busy after a change "
                                          "when that is shorter than a node's boot (default: provision_seconds).")


class SimulatedProvider:
    """Keeps no state of its own; the core tracks the count and when it changed."""

    tracks_count = True

    def __init__(self, pool: str, settings: SimulatedSettings) -> None:
        self.pool = pool
        self.settings = settings

    def check(self) -> None:
        """Nothing to check: a simulated pool can always be scaled."""

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        count = self.settings.initial_count if tracked.count is None else tracked.count
        busy = self.settings.provision_seconds if self.settings.busy_seconds is None else self.settings.busy_seconds
        if tracked.changed_at is not None and busy > 0:
            remaining = tracked.changed_at + busy - now
            if remaining > 0:
                return CloudStatus(current=count, busy=True, detail=f"provisioning for another {remaining:.0f}s")
        return CloudStatus(current=count)

    def scale(self, current: int, target: int, now: float) -> int:
        return target


FACTORY = ProviderFactory(
    name="simulated",
    settings_model=SimulatedSettings,
    build=lambda pool, settings: SimulatedProvider(pool, settings),
    description="stand-in cloud that keeps its node count in the store",
)
