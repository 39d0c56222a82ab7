"""What the tuner searches: the pool's scale-out/scale-in settings and the replay rules' thresholds and ``for``.

A candidate is a flat mapping from a setting's name (``scale_out.cooldown``, ``rules.1.below``) to its value
(durations in seconds). ``apply`` writes one into the config as the user wrote it (``${VAR}`` kept), so a candidate
runs through the same ``build_settings`` as the service, and the chosen one becomes ``tuned.yaml`` as it is. The
base config's Alertmanager timing, limits, provider and everything else stay as they are.
"""
from __future__ import annotations

import copy
from dataclasses import asdict
import random
import typing
from typing import Any, Sequence

from autoscaler.config.load import Settings
from autoscaler.config import DirectionConfig
from autoscaler.models import Action, DirectionPolicy, PoolSpec

Candidate = dict[str, Any]

#: Every direction key the tuner sets; the rest of a pool's direction (value_ref, victims, ...) is kept.
TUNED_KEYS = ("mode", "step", "target_utilization", "max_step", "tolerance", "cooldown", "delay_after_scale_out",
              "stabilization_window", "headroom")
#: Spare capacity kept above need (``scale_out.headroom``), roughly in increasing size; None: none.
HEADROOM: tuple[dict[str, Any] | None, ...] = (None, {"fraction": 0.1}, {"nodes": 1}, {"fraction": 0.25},
                                                {"nodes": 2}, {"nodes": 3}, {"fraction": 0.5}, {"nodes": 4},
                                                {"nodes": 6})
GRID: dict[str, dict[str, tuple[Any, ...]]] = {
    "scale_out": {"step": (1, 2, 3, 4, 6), "target_utilization": (40, 50, 60, 70, 80, 90),
                  "max_step": (2, 4, 8, 16), "tolerance": (0.0, 0.05, 0.1, 0.2), "cooldown": (60, 120, 180, 300, 600),
                  "headroom": HEADROOM},
    "scale_in": {"step": (1, 2, 3), "target_utilization": (40, 50, 60, 70, 80, 90), "max_step": (1, 2, 4, 8),
                 "tolerance": (0.0, 0.05, 0.1, 0.2), "cooldown": (120, 300, 600, 900, 1800),
                 "delay_after_scale_out": (0, 300, 600, 1200, 1800), "stabilization_window": (60, 300, 600, 1200)},
}
MODE_KEYS = {
    "step": ("step", "cooldown"),
    "proportional": ("target_utilization", "max_step", "tolerance", "cooldown"),
    "demand": ("cooldown",),  # scale-out only, on a pending-GPUs rule (the alert's value is unmet demand in GPUs)
}
SCALE_IN_ONLY = {"step": ("delay_after_scale_out",),
                 "proportional": ("delay_after_scale_out", "stabilization_window")}
#: The modes each kind of rule can drive: utilisation (above/below) sizes by steps or in proportion; pending GPUs
#: (pending_above, where the schema has it) by steps or by the demand it reports.
UTILIZATION_MODES = ("step", "proportional")
PENDING_MODES = ("step", "demand")
PENDING_ABOVE = (0, 1, 2, 4, 8, 16)  # GPUs
ABOVE = (40, 50, 60, 70, 75, 80, 85, 90, 95)
BELOW = (10, 20, 30, 40, 50, 60, 70)
FOR = {Action.SCALE_OUT: (0, 30, 60, 120, 180, 300), Action.SCALE_IN: (60, 120, 300, 600, 900, 1800)}
#: A pending-GPUs scale-out rule's ``for``: pending GPUs are work already waiting (not a utilisation to debounce),
#: so every second of ``for`` is a second of saturation on every scale-out; ``pending_above`` filters the noise.
PENDING_FOR = (0, 30, 60, 90, 120, 180)
#: A large pool's utilisation thresholds (issue 47, real weeks): at ``n`` nodes one node is 100/n points of
#: utilisation, finer than ABOVE's and BELOW's steps once n >= FINE_NODES, where a pool at 47-48 nodes could only
#: keep a spare node (above 95 fires at 98%; below 70 never does). There the rules' grids also hold the thresholds
#: of a scaler that follows whole nodes, as cluster-autoscaler does: scale out half a node short of full, scale in
#: with one and a half (and two and a half) nodes idle, at the history's mean level.
FINE_NODES = 20.0


def fine_thresholds(level: float) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ABOVE and BELOW values added for a history whose mean demand is ``level`` nodes (none under
    FINE_NODES, nor any a grid holds already)."""
    if level < FINE_NODES:
        return (), ()
    node = 100.0 / level
    above = tuple(v for v in (round(100 - node / 2),) if max(ABOVE) < v < 100)
    below = tuple(sorted({v for v in (round(100 - 2.5 * node), round(100 - 1.5 * node)) if max(BELOW) < v < 100}))
    return above, below


#: The busy-hours headroom window (``window.*``): a daily schedule window, from the hour of the day (UTC) where the
#: history's surges start, that keeps its own headroom; outside it the pool's ``scale_out.headroom`` holds. Its hours
#: are the shortest run of whole hours holding SURGE_SHARES of the surges (5-minute rises of at least SURGE_NODES
#: nodes' worth, weighted by their size); its headroom (None: no window) is searched over HEADROOM.
SURGE_NODES = 1.0
SURGE_MINUTES = 5
SURGE_SHARES = (0.75, 0.9, 0.97)
MAX_WINDOW_HOURS = 16  # a window longer than two thirds of the day is no busy-hours window: surges come at any hour
WINDOW_HEADROOM: tuple[dict[str, Any] | None, ...] = (None, *HEADROOM[1:])


def busy_windows(demand: Sequence[float], start: float) -> tuple[str, ...]:
    """The busy-hours windows of a history (minute ``i`` at ``start + 60 i``), one per SURGE_SHARES, as ``HH-HH``
    (UTC, start to end; ``08-18``); none when the history has no surge, or for a share that takes a window of over
    MAX_WINDOW_HOURS."""
    volume = [0.0] * 24
    for i in range(len(demand) - SURGE_MINUTES):
        rise = demand[i + SURGE_MINUTES] - demand[i]
        if rise >= SURGE_NODES:
            volume[int((start + 60 * i) // 3600) % 24] += rise
    total = sum(volume)
    out: list[str] = []
    for share in SURGE_SHARES if total > 0 else ():
        found = next(((hour, hours) for hours in range(1, 24) for hour in range(24)
                      if sum(volume[(hour + k) % 24] for k in range(hours)) >= share * total - 1e-9), None)
        if found is not None and found[1] <= MAX_WINDOW_HOURS:
            text = f"{found[0]:02d}-{(found[0] + found[1]) % 24:02d}"
            if text not in out:
                out.append(text)
    return tuple(out)


def window_schedule(hours: str, headroom: dict[str, Any]) -> dict[str, Any]:
    """The ``schedules`` entry of a busy-hours window ``HH-HH`` keeping ``headroom``: daily, in UTC."""
    first, last = (int(part) for part in hours.split("-"))
    return {"cron": f"0 {first} * * *", "duration": f"{(last - first) % 24 or 24}h", "headroom": headroom}


def modes() -> tuple[str, ...]:
    """The modes the config schema offers that the tuner knows how to search."""
    offered: set[str] = set()
    for arg in typing.get_args(DirectionConfig.model_fields["mode"].annotation):
        offered.update(typing.get_args(arg))
    return tuple(m for m in MODE_KEYS if m in offered)


class Space:
    """The knobs of one config's replay pool and rules, their grids, and how to sample and mutate candidates."""

    def __init__(self, settings: Settings, pool: str, windows: Sequence[str] = (), level: float = 0.0) -> None:
        """``windows``: the history's busy-hours windows; ``level``: its mean demand in nodes (fine_thresholds)."""
        assert settings.config.replay is not None
        self.pool = pool
        # the busy-hours window (busy_windows of the history), for a pool with no schedule of its own
        self.windows = tuple(windows) if not settings.pools[pool].schedules else ()
        offered = modes()
        fine_above, fine_below = fine_thresholds(level)
        self.rules: dict[str, tuple[Any, ...]] = {}
        pending_out = False
        for i, rule in enumerate(settings.config.replay.rules):
            if rule.above is not None:
                self.rules[f"rules.{i}.above"] = ABOVE + fine_above
            elif rule.below is not None:
                self.rules[f"rules.{i}.below"] = BELOW + fine_below
            elif getattr(rule, "pending_above", None) is not None:
                self.rules[f"rules.{i}.pending_above"] = PENDING_ABOVE
                pending_out = pending_out or rule.action is Action.SCALE_OUT
            pending = getattr(rule, "pending_above", None) is not None and rule.action is Action.SCALE_OUT
            self.rules[f"rules.{i}.for"] = PENDING_FOR if pending else FOR[rule.action]
        self.pending_out = pending_out
        self.cluster = reads_cluster(settings.pools[pool])
        out: tuple[str, ...] = PENDING_MODES if pending_out else UTILIZATION_MODES
        if "demand" in out and not getattr(settings.pools[pool], "gpus_per_node", None):
            out = tuple(m for m in out if m != "demand")  # demand mode needs the pool's gpus_per_node
        self.modes = {"scale_out": tuple(m for m in out if m in offered),
                      "scale_in": tuple(m for m in UTILIZATION_MODES if m in offered)}

    def grid(self, key: str) -> tuple[Any, ...]:
        """The values one knob takes."""
        if key in self.rules:
            return self.rules[key]
        if key == "window.hours":
            return self.windows
        if key == "window.headroom":
            return WINDOW_HEADROOM
        direction, name = key.split(".", 1)
        return self.modes[direction] if name == "mode" else GRID[direction][name]

    def direction_keys(self, direction: str, mode: str) -> tuple[str, ...]:
        return direction_keys(direction, mode, self.cluster)

    def _direction(self, rng: random.Random, direction: str, mode: str) -> Candidate:
        out = {f"{direction}.{k}": mode if k == "mode" else rng.choice(GRID[direction][k])
               for k in self.direction_keys(direction, mode)}
        if direction == "scale_out" and mode == "step" and self.pending_out:
            out["scale_out.headroom"] = None  # the step's alert value is pending GPUs, not a utilisation to size by
        return out

    def sample(self, rng: random.Random) -> Candidate:
        """One candidate drawn uniformly, knob by knob."""
        out: Candidate = {}
        for direction in ("scale_out", "scale_in"):
            out.update(self._direction(rng, direction, rng.choice(self.modes[direction])))
        out.update({k: rng.choice(grid) for k, grid in self.rules.items()})
        if self.windows:
            out.update({"window.hours": rng.choice(self.windows), "window.headroom": rng.choice(WINDOW_HEADROOM)})
        return ordered(self._plain(out))

    def _plain(self, candidate: Candidate) -> Candidate:
        """Without a window its hours say nothing: None, so that equal configs are equal candidates."""
        if self.windows and candidate.get("window.headroom") is None:
            candidate["window.hours"] = None
        return candidate

    def mutate(self, rng: random.Random, candidate: Candidate) -> Candidate:
        """A neighbour: one knob moved one step along its grid (a mode switch redraws that direction)."""
        key = rng.choice(sorted(k for k in candidate if (len(self.grid(k)) > 1 or k.endswith(".mode"))
                                and not (k == "window.hours" and candidate[k] is None)))
        out = dict(candidate)
        if key.endswith(".mode"):
            direction = key.split(".")[0]
            others = [m for m in self.modes[direction] if m != candidate[key]] or [candidate[key]]
            for k in list(out):
                if k.startswith(direction + "."):
                    del out[k]
            out.update(self._direction(rng, direction, rng.choice(others)))
            return ordered(out)
        if key == "scale_out.headroom" and candidate["scale_out.mode"] == "step" and self.pending_out:
            return out  # kept at none (see _direction)
        grid = self.grid(key)
        at = grid.index(candidate[key]) if candidate[key] in grid else 0
        out[key] = grid[max(0, min(len(grid) - 1, at + rng.choice((-1, 1))))]
        if key == "window.headroom" and out[key] is not None and out["window.hours"] is None:
            out["window.hours"] = rng.choice(self.windows)  # a window opened: where, drawn as a sample draws it
        return self._plain(out)


def reads_cluster(spec: PoolSpec) -> bool:
    """Whether the replay reads the pool's nodes (a ``node_selector``, or victims other than ``cloud``, which the
    replay gives one): its headroom is then kept from the cluster, and its scale-in, in any mode, stops at the
    highest headroom floor of its stabilization window (README "Headroom"), so the window is searched for the step
    mode too."""
    return bool(spec.node_selector) or spec.victims != "cloud"


def direction_keys(direction: str, mode: str, cluster: bool = False) -> tuple[str, ...]:
    """The knobs of one direction in one mode (``cluster``: the pool's headroom is kept from the cluster, so a
    step scale-in has a stabilization window too)."""
    extra = SCALE_IN_ONLY[mode] if direction == "scale_in" else ("headroom",)
    if cluster and direction == "scale_in" and "stabilization_window" not in extra:
        extra = (*extra, "stabilization_window")
    return ("mode", *MODE_KEYS[mode], *extra)


def ordered(candidate: Candidate) -> Candidate:
    """The candidate's knobs in one fixed order: scale-out, scale-in (each as TUNED_KEYS), then the rules."""
    def key(name: str) -> tuple[int, int, str]:
        head, rest = name.split(".", 1)
        if head == "rules":
            return 2, int(rest.split(".")[0]), rest
        if head == "window":
            return 3, 0, rest
        return (0 if head == "scale_out" else 1), TUNED_KEYS.index(rest), ""
    return {k: candidate[k] for k in sorted(candidate, key=key)}


def describe(settings: Settings, pool: str, windows: Sequence[str] = ()) -> Candidate:
    """The base config's values of every knob the tuner sets (defaults applied), in the candidates' form
    (``windows``: the Space's busy-hours windows)."""
    spec = settings.pools[pool]
    out: Candidate = {}
    for direction, policy in (("scale_out", spec.scale_out), ("scale_in", spec.scale_in)):
        mode = policy.mode.value
        keys = direction_keys(direction, mode, reads_cluster(spec)) if mode in MODE_KEYS else ("mode", "cooldown")
        out.update({f"{direction}.{k}": _policy_value(policy, k) for k in keys})
    assert settings.config.replay is not None
    for i, rule in enumerate(settings.config.replay.rules):
        if rule.above is not None:
            out[f"rules.{i}.above"] = rule.above
        elif rule.below is not None:
            out[f"rules.{i}.below"] = rule.below
        elif getattr(rule, "pending_above", None) is not None:
            out[f"rules.{i}.pending_above"] = rule.pending_above
        out[f"rules.{i}.for"] = rule.for_
    if windows and not spec.schedules:
        out.update({"window.hours": None, "window.headroom": None})  # the base has no busy-hours window
    return ordered(out)


def _policy_value(policy: DirectionPolicy, key: str) -> Any:
    value = getattr(policy, key)
    if key == "headroom":
        return None if value is None else {k: v for k, v in asdict(value).items() if v} or {"nodes": 0}
    return value.value if key == "mode" else value


def apply(raw: dict[str, Any], pool: str, candidate: Candidate) -> dict[str, Any]:
    """A copy of the raw config with the candidate's values written into the pool and the replay rules."""
    out = copy.deepcopy(raw)
    spec = next(p for p in out["pools"] if p.get("name") == pool)
    for direction in ("scale_out", "scale_in"):
        chosen = {k.split(".", 1)[1]: v for k, v in candidate.items() if k.startswith(direction + ".")}
        if not chosen:
            continue
        kept = {k: v for k, v in (spec.get(direction) or {}).items() if k not in TUNED_KEYS}
        spec[direction] = {**kept, **{k: duration_text(v) if _is_duration(k) else v for k, v in chosen.items()
                                      if not (k == "headroom" and v is None)}}
    if candidate.get("window.headroom") is not None:  # a busy-hours window (None: none, the base's schedules kept)
        spec["schedules"] = [window_schedule(candidate["window.hours"], candidate["window.headroom"])]
    for key, value in candidate.items():
        if key.startswith("rules."):
            _, index, name = key.split(".")
            out["replay"]["rules"][int(index)][name] = duration_text(value) if name == "for" else value
    return out


def _is_duration(key: str) -> bool:
    return key in ("cooldown", "delay_after_scale_out", "stabilization_window")


def duration_text(seconds: float) -> str:
    """Seconds as the shortest exact duration text (``90s``, ``5m``, ``1h``), valid for us and for Prometheus."""
    whole = int(round(seconds))
    for unit, size in (("h", 3600), ("m", 60)):
        if whole and whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def settings_text(candidate: Candidate) -> str:
    """One line: ``key=value`` pairs separated by spaces (durations as text), for frontier.csv and the report."""
    return " ".join(f"{k}={show(k, v)}" for k, v in candidate.items())


def show(key: str, value: Any) -> str:
    """A knob's value as a person reads it."""
    if value is None:
        return "-"
    if isinstance(value, dict):  # headroom
        return ",".join(f"{k}:{v:g}" for k, v in value.items())
    name = key.rsplit(".", 1)[-1]
    if _is_duration(name) or name == "for":
        return duration_text(float(value))
    return f"{value:g}" if isinstance(value, float) else str(value)
