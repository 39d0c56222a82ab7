"""``replay:``: how the what-if replay emulates Prometheus and Alertmanager (read only by ``replay``)."""
from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from autoscaler.config.durations import Duration
from autoscaler.models import Action
from autoscaler.config.common import Frozen, Step

class ReplayRule(Frozen):
    """One emulated alerting rule on the pool's average utilisation (0-100) of ready nodes (``above``/``below``), or
    on its unmet demand in GPUs (``pending_above``: (demand - ready, clipped at 0) x gpus_per_node)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    alert: str = Field(min_length=1)
    above: float | None = Field(default=None, ge=0, le=100)
    below: float | None = Field(default=None, ge=0, le=100)
    pending_above: float | None = Field(default=None, ge=0)
    for_: Duration = Field(default=0.0, alias="for")
    pool: str
    action: Action
    step: Step | None = None
    labels: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_threshold(self) -> "ReplayRule":
        if self.action is Action.REPAIR:
            raise ValueError("action: a replayed rule scales (scale_out or scale_in); a repair names a node, which "
                             "a utilisation or demand rule cannot")
        if sum(x is not None for x in (self.above, self.below, self.pending_above)) != 1:
            raise ValueError("give exactly one of `above`, `below` or `pending_above`")
        return self


class ReplayConfig(Frozen):
    """Read only by ``python -m autoscaler replay``: how Prometheus and Alertmanager are emulated."""

    evaluation_interval: Duration = 30.0
    group_wait: Duration = 30.0
    group_interval: Duration = 300.0
    repeat_interval: Duration = 300.0
    rules: list[ReplayRule] = Field(min_length=1)
    placement: Literal["spread", "pack"] = Field(
        default="spread", description="How the work lands on nodes: spread (kube-scheduler's default, "
                                      "LeastAllocated) or pack (MostAllocated: the fullest node that fits).")
    movable_share: float = Field(default=0.0, ge=0, le=1, description="Share of the work's pods that are "
                                 "inference replicas (a ReplicaSet's: victims: movable may move them); the rest "
                                 "are Jobs' pods.")

    @field_validator("evaluation_interval", "group_interval", "repeat_interval")
    @classmethod
    def _positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("must be more than 0")
        return v
