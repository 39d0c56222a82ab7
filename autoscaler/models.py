"""Typed values the core works with: alerts, signals, pool specs and state, decisions."""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any


class Outcome(str, enum.Enum):
    """What became of one decision; the same word in the API, the logs, the events and the metrics."""

    SCALED = "scaled"
    DRY_RUN = "dry_run"
    SKIPPED_COOLDOWN = "skipped_cooldown"
    SKIPPED_LIMIT = "skipped_limit"
    SKIPPED_DUPLICATE = "skipped_duplicate"
    SKIPPED_PAUSED = "skipped_paused"
    SKIPPED_BUSY = "skipped_busy"
    SKIPPED_BACKOFF = "skipped_backoff"
    IGNORED_RESOLVED = "ignored_resolved"
    IGNORED_TEST = "ignored_test"
    UNROUTED = "unrouted"
    UNKNOWN_POOL = "unknown_pool"
    FAILED = "failed"
    SKIPPED_IN_USE = "skipped_in_use"  # a scale-in found no node it may remove (GPU work, protection)
    NO_CAPACITY = "no_capacity"  # the cloud accepted a size and could not create the nodes (stockout, quota)
    REPAIR_STARTED = "repair_started"  # a node reported unhealthy: cordoned, a replacement asked for
    REPAIRED = "repaired"  # a node in repair was removed by name (or left the cluster by itself)
    SKIPPED_REPAIR_BUDGET = "skipped_repair_budget"  # the pool already has repair.max_unhealthy nodes in repair
    SKIPPED_CANCELLED = "skipped_cancelled"  # a repeat of an alert whose repair an operator cancelled
    PROVISIONED = "provisioned"  # every node of an atomic (all-or-nothing) scale-out is GPU-ready
    ROLLED_BACK = "rolled_back"  # an atomic scale-out fell short by its deadline: the nodes that came removed
    CAPACITY_REVOKED = "capacity_revoked"  # a node booked for a ProvisioningRequest was lost before its pods came


class Action(str, enum.Enum):
    """Direction of a change."""

    SCALE_OUT = "scale_out"
    SCALE_IN = "scale_in"
    REPAIR = "repair"  # replace the node the alert names (``routing.node_label``); see ``autoscaler/repair/start.py``


class AlertStatus(str, enum.Enum):
    """State of one alert as its sender reported it."""

    FIRING = "firing"
    RESOLVED = "resolved"
    IGNORED = "ignored"  # Grafana legacy no_data / paused / pending: not an alert


class Mode(str, enum.Enum):
    """How a direction sizes its change: a fixed step, or in proportion to the alert's value."""

    STEP = "step"
    PROPORTIONAL = "proportional"
    DEMAND = "demand"  # scale-out only: the alert's value is unmet demand in GPUs


class Source(str, enum.Enum):
    """Who sent the signal."""

    ALERTMANAGER = "alertmanager"
    GRAFANA = "grafana"
    GRAFANA_LEGACY = "grafana_legacy"
    AZURE_MONITOR = "azure_monitor"  # Azure Monitor alerts (common alert schema), managed Prometheus among them
    MANUAL = "manual"
    OPERATOR = "operator"  # pause, resume, count correction: an event, not a decision
    SCHEDULE = "schedule"  # the reconciler raising a pool to a schedule's floor at the window's start
    RECONCILE = "reconcile"  # the reconciler bringing a pool that drifted below its min back up


class OperatorOutcome(str, enum.Enum):
    """What an operator's pause, resume or count correction did; the event's outcome (never a decision's)."""

    PAUSED = "paused"
    RESUMED = "resumed"
    COUNT_CORRECTED = "count_corrected"
    REPAIR_CANCELLED = "repair_cancelled"  # ``"cancel": true``: the node uncordoned, its repair ended


@dataclass(frozen=True)
class Alert:
    """One alert of a notification, parsed at the edge; the core never sees the raw payload."""

    name: str
    fingerprint: str
    status: AlertStatus
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    starts_at: str = ""
    value: float | None = None
    dedup_key: str = ""
    is_test: bool = False
    values: dict[str, float] = field(default_factory=dict)  # Grafana: each query's value by ref (A, B, ...)

    def value_for(self, value_ref: str | None) -> float | None:
        """The value a direction reads: the query named ``value_ref`` when the alert has it, else ``value``."""
        if value_ref and self.values.get(value_ref) is not None:
            return self.values[value_ref]
        return self.value

    def ref(self) -> dict[str, str]:
        """The short form stored in events: name and fingerprint, each at most ``MAX_REF`` characters."""
        return {"alertname": _bounded(self.name), "fingerprint": _bounded(self.fingerprint)}


MAX_REF = 200  # characters of an alert's name and fingerprint in an event's ``alerts`` list


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_REF else text[:MAX_REF - 1] + "…"


@dataclass(frozen=True)
class Notification:
    """One webhook delivery: its sender, its alerts and the query parameters of the URL it came to."""

    source: Source
    alerts: tuple[Alert, ...]
    query: dict[str, str] = field(default_factory=dict)


def usable_value(values: list[float]) -> tuple[float | None, str]:
    """The highest finite value, and "" ; else None and why the sender's values are of no use (NaN, Infinity and
    numbers too big for a float, which JSON parsers read as infinity, are values no formula can size with)."""
    finite = [v for v in values if math.isfinite(v)]
    if finite:
        return max(finite), ""
    if values:
        return None, f"{values[0]!r} is not a finite number"
    return None, ""


@dataclass(frozen=True)
class Signal:
    """A request to change one pool, from one or more alerts or from an operator."""

    pool: str
    action: Action | None
    source: Source
    step: int | None = None
    target: int | None = None
    alerts: tuple[Alert, ...] = ()
    force: bool = False
    reason: str = ""
    value: float | None = None  # finite, or None
    value_problem: str = ""  # why the value the sender gave is none (e.g. ``nan is not a finite number``)
    nodes: tuple[str, ...] = ()  # nodes named by the alerts (routing.node_label) or by the operator
    floor: bool = False  # raise the pool to its effective min: a limit, so no cooldown applies (backoff does)
    group: str = ""  # the fallback group the signal was routed to; ``pool`` is then the member chosen to act
    fallback: bool = False  # asks a group for the ``step`` nodes one of its pools could not deliver
    within: frozenset[str] | None = None  # the pools the sender's credential may act on (None: every pool); a group
    # chooses only among them

    @property
    def dedup_keys(self) -> tuple[str, ...]:
        """The alerts' keys for this destination: the same alert routed to another pool or action (a second
        receiver or notification channel) is another request, not a duplicate. A group's alerts are keyed by the
        group, so two replicas that chose different members for one alert still claim the same key."""
        where = f"{self.group or self.pool}|{self.action.value if self.action else '-'}|"
        return tuple(where + a.dedup_key for a in self.alerts if a.dedup_key)


@dataclass(frozen=True)
class Headroom:
    """Spare ready capacity a pool keeps above what it needs (``scale_out.headroom``, or a schedule window's): whole
    nodes, GPUs (a node adds ``gpus_per_node``) or a fraction of the need. One of the three is set."""

    nodes: int = 0
    gpus: int = 0
    fraction: float = 0.0

    def in_nodes(self, need: float, gpus_per_node: int) -> float:
        """The headroom in nodes' worth of capacity for a pool that needs ``need`` nodes' worth of work."""
        return self.nodes + self.gpus / max(gpus_per_node, 1) + self.fraction * max(need, 0.0)

    def describe(self) -> str:
        if self.gpus:
            return f"{self.gpus} GPU(s)"
        if self.fraction:
            return f"{self.fraction:g} of the need"
        return f"{self.nodes} node(s)"


@dataclass(frozen=True)
class DirectionPolicy:
    """Scaling settings of one direction of one pool, defaults already applied."""

    step: int = 1
    cooldown: float = 300.0
    delay_after_scale_out: float = 0.0  # scale-in only
    mode: Mode = Mode.STEP
    target_utilization: float = 70.0
    max_step: int | None = None
    tolerance: float = 0.1
    stabilization_window: float = 300.0  # scale-in only
    value_ref: str | None = None
    headroom: Headroom | None = None  # scale-out only: spare capacity kept above need


@dataclass(frozen=True)
class Schedule:
    """A window that raises a pool's floor: it opens at each ``cron`` time in ``timezone`` and lasts ``duration``."""

    cron: str
    duration: float  # seconds of elapsed time (a window across a DST change is as long as on any other day)
    min: int
    timezone: str = "UTC"
    headroom: Headroom | None = None  # the pool's headroom while the window is open (None: the pool's own)


@dataclass(frozen=True)
class RepairPolicy:
    """``repair:`` of a pool: how many nodes may be in repair at once (a count, or ``percent`` of the pool's nodes;
    at least 1 either way), how long GPU work that cannot move keeps a node, whether a replacement is asked for."""

    max_unhealthy: int = 1
    percent: float | None = None  # set: max_unhealthy was written as a percentage (``max_unhealthy`` unused)
    grace: float = 3600.0
    replace: bool = True


@dataclass(frozen=True)
class PoolSpec:
    """Everything configured for one pool, defaults merged in."""

    name: str
    provider: str
    min: int
    max: int
    dry_run: bool
    scale_out: DirectionPolicy
    scale_in: DirectionPolicy
    dedup_window: float
    provider_settings: Any = None
    victims: str = "cloud"  # scale_in.victims: cloud | alerted | idle | movable (node-aware scale-in)
    drain_timeout: float = 600.0  # scale_in.drain_timeout: how long a drain retries refused evictions
    movable_owners: tuple[str, ...] = ("ReplicaSet", "StatefulSet")  # scale_in.movable_owners (victims: movable)
    forced_removal: bool = True  # scale_in.forced_removal: a manual force may drain (evict) a busy node
    node_selector: tuple[tuple[str, str], ...] = ()  # the pool's nodes' labels (empty: not known)
    node_labels: tuple[tuple[str, str], ...] = ()  # labels every node carries besides the selector's (pods match)
    gpus_per_node: int | None = None  # GPUs one node adds; required by demand mode (the replay assumes 8)
    provision_time: float = 600.0  # request -> GPUs allocatable; nodes asked for within it are "in flight"
    schedules: tuple[Schedule, ...] = ()
    short_for: float = 600.0  # capacity.short_for: how long a pool that could not deliver is passed over
    group: str = ""  # the fallback group the pool is in ("" when none)
    repair: RepairPolicy | None = None  # ``repair:`` (None: the pool's nodes are not repaired)
    cluster: str = "default"  # the cluster (``clusters:`` name; ``kubernetes:`` is "default") its nodes join

    def direction(self, action: Action) -> DirectionPolicy:
        return self.scale_out if action is Action.SCALE_OUT else self.scale_in

    @property
    def proportional(self) -> bool:
        """Whether either direction sizes by the alert's value (recommendations are then kept)."""
        return Mode.PROPORTIONAL in (self.scale_out.mode, self.scale_in.mode)


@dataclass(frozen=True)
class PoolFacts:
    """What the engine knows of a pool beyond the cloud's count when it decides (policy input; pure data).

    ``in_flight``: nodes asked for less than ``provision_time`` ago that are not ready yet (``in_flight_how`` says
    how it was counted). ``floor``: the effective min now (a schedule's, or the pool's own); ``floor_how`` why.
    ``headroom``: the headroom in force (a schedule window's, else None: the pool's ``scale_out.headroom``).
    ``used``: nodes' worth of GPUs requested on the pool's Ready nodes, where the cluster was read (else None).
    """

    in_flight: int = 0
    in_flight_how: str = ""
    floor: int | None = None
    floor_how: str = ""
    headroom: Headroom | None = None
    headroom_how: str = ""
    used: float | None = None
    used_how: str = ""


@dataclass(frozen=True)
class Tracked:
    """The count the store keeps for a provider that cannot read it, and when it last changed."""

    count: int | None
    changed_at: float | None

    def count_or(self, initial: int) -> int:
        """The tracked count, or the pool's configured initial count before the service ever changed it."""
        return initial if self.count is None else self.count


@dataclass(frozen=True)
class PoolState:
    """What the store remembers of a pool between decisions (times are Unix seconds)."""

    name: str
    tracked_count: int | None = None
    count_changed_at: float | None = None
    paused: bool = False
    pause_reason: str = ""
    last_scale_out_at: float | None = None
    last_scale_in_at: float | None = None
    failures: int = 0
    backoff_until: float | None = None
    last_event_id: int | None = None
    short_until: float | None = None  # the cloud could not deliver: passed over by its group until then
    short_reason: str = ""

    def tracked(self) -> Tracked:
        """The count kept for a provider that cannot read it, as the provider's ``status`` takes it."""
        return Tracked(self.tracked_count, self.count_changed_at)


@dataclass(frozen=True)
class CloudLimits:
    """The cloud's own bounds on a pool's size, which the service never widens (EKS minSize/maxSize, GKE's
    per-zone node count). A target outside them, or not a multiple of ``multiple_of``, is ``skipped_limit``."""

    low: int
    high: int
    owner: str  # whose limits, for the reason: "EKS node group gpu-a10"
    low_name: str = "min"  # the cloud's own name of each bound, e.g. minSize
    high_name: str = "max"
    multiple_of: int = 1
    multiple_why: str = ""  # e.g. "GKE sets the node count per zone and the pool spans 3 zones"
    fix: str = ""  # how an operator changes the bounds, e.g. an aws eks command
    why: str = ""  # why the low bound is what it is, for check-config: "AKS keeps at least 1 node in a System pool"

    def refuses(self, target: int) -> str:
        """Why these bounds refuse ``target`` ("" when they allow it); the service never widens them."""
        fix = f"; {self.fix}" if self.fix else ""
        if target > self.high:
            return (f"target {target} is above the {self.owner}'s {self.high_name} ({self.high}), which the "
                    f"service never widens{fix}")
        if target < self.low:
            return (f"target {target} is below the {self.owner}'s {self.low_name} ({self.low}), which the "
                    f"service never lowers{fix}")
        if self.multiple_of > 1 and target % self.multiple_of:
            why = f" ({self.multiple_why})" if self.multiple_why else ""
            return (f"target {target} is not a multiple of {self.multiple_of}{why}; use steps and min/max in "
                    f"multiples of {self.multiple_of}")
        return ""


@dataclass(frozen=True)
class Shortfall:
    """The cloud accepted a size and reports it could not create the nodes: its own code and message, the nodes
    asked for and delivered, whether it is a quota (else capacity: a stockout), and whether the undelivered part
    may be given back by asking for ``delivered`` (cluster-autoscaler's ``DecreaseTargetSize``)."""

    asked: int
    delivered: int
    code: str
    message: str
    quota: bool = False
    give_back: bool = True

    @property
    def undelivered(self) -> int:
        return max(0, self.asked - self.delivered)


class ProviderRead:
    """The base of a provider's own answer behind a :class:`CloudStatus`: each provider that hands its read to the
    change that follows names its own frozen subclass (``AksRead``, ``EksRead``, ``GkeRead``, ``AckRead``)."""


@dataclass(frozen=True)
class CloudStatus:
    """What the provider reports of a pool right now; ``shortfall`` when the cloud says it could not deliver.

    ``read`` is the provider's own answer behind it (an AKS agent pool with its eTag, an EKS node group), typed by
    the provider (``providers.base.read_of`` narrows it), handed back to the provider with the change that follows
    in the same decision; never shown, never compared.
    """

    current: int | None
    busy: bool = False
    detail: str = ""
    limits: CloudLimits | None = None  # the cloud's own bounds, when it has any beyond the pool's min/max
    read: ProviderRead | None = field(default=None, compare=False, repr=False)
    shortfall: Shortfall | None = None


@dataclass(frozen=True)
class Decision:
    """The answer to one signal: an outcome, the sizes before and after, and a reason for a person."""

    pool: str | None
    action: Action | None
    outcome: Outcome
    from_: int | None
    to: int | None
    reason: str
    event_id: int | None = None
    retry_after: float | None = None  # seconds; set when a retry by the sender could help
    details: dict[str, Any] = field(default_factory=dict)
