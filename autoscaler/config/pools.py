"""``defaults:`` and ``pools:``: each direction's settings, node-aware scale-in, schedule windows, one pool."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator,
                      model_validator)

from autoscaler.config.durations import Duration
from autoscaler.config.common import POOL_NAME, Count, Frozen, Step
from autoscaler.config.gang import node_labels as checked_labels
from autoscaler.config.groups import CapacityConfig
from autoscaler.config.node_repair import RepairConfig

def floors_above_max(high: Any, lows: list[Any]) -> list[str]:
    """The rule that a schedule's floor stays within the pool's max, written once: a problem per window whose
    ``min`` exceeds ``max`` (read from the validated pool and, when a field error elsewhere stops that validation,
    from the raw file by ``config``)."""
    return [f"schedules[{i}].min: must be <= max ({high})" for i, low in enumerate(lows)
            if isinstance(low, int) and isinstance(high, int) and low > high]


def needs_gpus_per_node(mode: Any, gpus_per_node: Any) -> bool:
    """The rule that scale_out's demand mode needs ``gpus_per_node`` (the GPUs one node adds), written once."""
    return mode == "demand" and gpus_per_node is None


class HeadroomConfig(Frozen):
    """Spare ready capacity kept above need: exactly one of ``nodes``, ``gpus`` or ``fraction``."""

    nodes: int | None = Field(default=None, ge=0, le=1000, description="Whole nodes kept spare.")
    gpus: int | None = Field(default=None, ge=0, le=64000, description="GPUs kept spare (nodes of "
                             "`gpus_per_node` GPUs, rounded up).")
    fraction: float | None = Field(default=None, ge=0, le=10, description="A fraction of the need kept "
                                   "spare (0.2: 20% above it, rounded up to whole nodes).")

    @field_validator("nodes", "gpus", mode="before")
    @classmethod
    def _whole(cls, v: Any) -> Any:
        if isinstance(v, bool):  # YAML's true would otherwise count as 1
            raise ValueError("a whole number, not true/false")
        return v

    @model_validator(mode="after")
    def _one(self) -> "HeadroomConfig":
        given = [k for k in ("nodes", "gpus", "fraction") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of nodes, gpus or fraction, e.g. {nodes: 2}"
                             + (f" (got {', '.join(given)})" if given else ""))
        return self


class DirectionConfig(Frozen):
    """Settings of one direction; unset keys come from ``defaults``."""

    step: Step | None = None
    cooldown: Duration | None = None
    delay_after_scale_out: Duration | None = None
    mode: Literal["step", "proportional", "demand"] | None = None
    target_utilization: float | None = Field(default=None, gt=0, le=100)
    max_step: Step | None = None
    tolerance: float | None = Field(default=None, ge=0, lt=1)
    stabilization_window: Duration | None = None
    value_ref: str | None = None
    headroom: HeadroomConfig | None = Field(default=None, description="Scale-out only: spare ready capacity kept "
                                            "above need, {nodes: N} | {gpus: G} | {fraction: F}.")


def _not_job(kind: str) -> str:
    if kind == "Job":
        raise ValueError("a Job's pods are never moved (evicting one throws its run away): victims: movable moves "
                         "only work a controller recreates elsewhere, such as ReplicaSet or StatefulSet")
    return kind


#: A Kubernetes kind: ReplicaSet, StatefulSet, a custom resource's kind (RayCluster); never Job.
OwnerKind = Annotated[str, Field(pattern=r"^[A-Z][A-Za-z0-9]{0,62}$"), AfterValidator(_not_job)]
Victims = Literal["cloud", "alerted", "idle", "movable"]
_HEADROOM_OUT = ("scale_in.headroom: headroom is set under scale_out (scale-in never eats into it); move it to "
                 "scale_out.headroom")


class ScaleInConfig(DirectionConfig):
    """Scale-in settings: a direction's, plus which nodes go (node-aware scale-in)."""

    victims: Victims | None = Field(default=None, description="cloud | alerted | idle | movable (default: idle "
                                    "with `kubernetes` and a provider that removes named nodes, else cloud).")
    movable_owners: list[OwnerKind] | None = Field(default=None, max_length=32, description="Owner kinds whose "
                                                   "pods victims: movable may move (default ReplicaSet, "
                                                   "StatefulSet).")
    drain_timeout: Duration | None = Field(default=None, gt=0, description="How long a drain (victims: movable, "
                                           "a forced removal) retries evictions a PodDisruptionBudget refuses "
                                           "(default 10m).")
    forced_removal: bool | None = Field(default=None, description="Whether a manual `\"force\": true` may drain "
                                        "a busy node (evict its pods through the Eviction API); false: it skips "
                                        "cooldown and backoff only, and the service account needs no eviction "
                                        "right (default true).")


class DefaultsConfig(Frozen):
    """Settings every pool inherits."""

    scale_out: DirectionConfig = DirectionConfig(step=1, cooldown=300)
    scale_in: ScaleInConfig = ScaleInConfig(step=1, cooldown=900, delay_after_scale_out=600)
    dedup_window: Duration = 600.0

    @model_validator(mode="after")
    def _demand_scales_out(self) -> "DefaultsConfig":
        if self.scale_in.mode == "demand":
            raise ValueError("scale_in.mode: `demand` sizes scale-outs only (use step or proportional)")
        if self.scale_in.headroom is not None:
            raise ValueError(_HEADROOM_OUT)
        return self


class ScheduleConfig(Frozen):
    """A window that raises the pool's floor: opens at each ``cron`` time in ``timezone``, lasts ``duration``."""

    cron: str = Field(description="Five-field cron expression of the window's starts, in `timezone`.")
    duration: Duration = Field(description="How long each window lasts (elapsed time).")
    min: Count = Field(default=0, description="The pool's floor inside the window (default: the pool's own).")
    timezone: str = Field(default="UTC", description="IANA time zone of the cron expression (Europe/Warsaw).")
    headroom: HeadroomConfig | None = Field(default=None, description="The pool's headroom inside the window "
                                            "(raise or lower it; {nodes: 0} turns it off).")

    @model_validator(mode="after")
    def _says_something(self) -> "ScheduleConfig":
        if "min" not in self.model_fields_set and self.headroom is None:
            raise ValueError("a window sets min, headroom or both")
        return self

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        import time

        from autoscaler.config.cron import starts_within, valid_cron

        if not valid_cron(v):
            raise ValueError(f"{v[:80]!r} is not a five-field cron expression (minute hour day month weekday)")
        if not starts_within(v, time.time()):  # the wall clock: a config is checked when it is loaded
            raise ValueError(f"{v[:80]!r} has no start in the next 4 years (a day no month has, such as 30 February?)")
        return v

    @field_validator("duration")
    @classmethod
    def _duration(cls, v: float) -> float:
        if not 0 < v <= 7 * 86400:
            raise ValueError("must be more than 0 and at most 7d")
        return v

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{v[:80]!r} is not an IANA time zone (e.g. Europe/Warsaw, UTC)") from None
        return v


class PoolConfig(BaseModel):
    """One node pool; the provider's own settings sit under a key named after the provider."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(pattern=POOL_NAME)
    provider: str
    min: Count
    max: Count
    dry_run: bool = False
    scale_out: DirectionConfig = DirectionConfig()
    scale_in: ScaleInConfig = ScaleInConfig()
    dedup_window: Duration | None = None
    node_selector: str | None = Field(default=None, min_length=1, description="Label selector of the pool's "
                                      "nodes, e.g. kubernetes.azure.com/agentpool=gpunp (default per provider).")
    node_labels: Annotated[dict[str, str], BeforeValidator(checked_labels)] = Field(
        default_factory=dict, max_length=32, description="Labels every node of the pool carries (besides "
        "node_selector's): what a pod's nodeSelector is matched against, at 0 nodes too (docs/gang.md).")
    gpus_per_node: int | None = Field(default=None, ge=1, le=64, description="GPUs one node adds (demand mode "
                                      "divides by it and needs it; the replay assumes 8 without it).")
    provision_time: Duration | None = Field(default=None, description="Request to GPUs allocatable; nodes asked "
                                            "for within it and not ready yet are in flight (default 10m; a "
                                            "simulated pool: its provision_seconds).")
    schedules: list[ScheduleConfig] = Field(default_factory=list)
    cluster: str | None = Field(default=None, min_length=1, description="The cluster (a name in `clusters:`) this "
                                "pool's nodes join (default: the only one).")
    capacity: CapacityConfig = CapacityConfig()
    repair: RepairConfig | None = Field(default=None, description="Replace nodes that alerts report unhealthy "
                                        "(action repair); needs `kubernetes:` and a provider that removes named "
                                        "nodes.")

    @field_validator("node_selector", mode="before")
    @classmethod
    def _selector_string(cls, v: Any) -> Any:
        if isinstance(v, dict):  # a Kubernetes nodeSelector mapping: say the string it means
            text = ",".join(f"{k}={val}" for k, val in v.items())
            raise ValueError(f'a mapping; write the selector as one string: node_selector: "{text}"')
        return v

    @field_validator("provision_time")
    @classmethod
    def _provision_time(cls, v: float | None) -> float | None:
        if v is not None and not 0 <= v <= 86400:
            raise ValueError("must be from 0 to 24h")
        return v

    @model_validator(mode="after")
    def _demand_and_floors(self) -> "PoolConfig":
        if self.scale_in.mode == "demand":
            raise ValueError("scale_in.mode: `demand` sizes scale-outs only (use step or proportional)")
        if self.scale_in.headroom is not None:
            raise ValueError(_HEADROOM_OUT)
        above = floors_above_max(self.max, [window.min for window in self.schedules])
        if above:
            raise ValueError(above[0])
        return self

    @field_validator("max")
    @classmethod
    def _max_ge_min(cls, v: int, info: Any) -> int:
        low = info.data.get("min")
        if low is not None and v < low:
            raise ValueError(f"must be >= min ({low})")
        return v

    @field_validator("provider")
    @classmethod
    def _known(cls, v: str, info: ValidationInfo) -> str:
        """Checked against the provider names the loader passes in ``context["providers"]`` (the settings never
        look the registry up themselves: they are a leaf)."""
        known = (info.context or {}).get("providers")
        if known is not None and v not in known:
            raise ValueError(f"unknown provider {v!r} (known: {', '.join(known)})")
        return v
