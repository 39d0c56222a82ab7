"""What a replay writes: timeline.csv, summary.json and replay.png."""
from __future__ import annotations

import csv
import json
import math
import os
import textwrap
from collections import Counter
from typing import Any, Mapping, Sequence

from autoscaler.config.durations import rfc3339
from autoscaler.models import Action, Outcome
from autoscaler.config.load import Settings
from autoscaler.replay.peers import PeerRun
from autoscaler.replay.sim import Run

TIMELINE_HEADER = ["timestamp", "demand", "ready", "requested", "utilization", "outcomes"]


def figures(run: Run) -> dict[str, Any]:
    """The summary figures of one run; node-hours count ready nodes at the start of each minute."""
    minutes = run.minutes
    scaled = [d for _, d in run.decisions if d.outcome is Outcome.SCALED]
    changes = sum(1 for a, b in zip(scaled, scaled[1:]) if a.action != b.action)
    saturated = sum(1 for m in minutes if m.demand > m.ready + 1e-9)
    by_pool: dict[str, float] = {}
    for m in minutes:
        for pool, ready in m.by_pool:
            by_pool[pool] = by_pool.get(pool, 0.0) + ready / 60.0
    return {
        "node_hours": round(sum(m.ready for m in minutes) / 60.0, 4),
        "node_hours_by_pool": {pool: round(hours, 4) for pool, hours in by_pool.items()},
        "unmet_demand_gpu_minutes": round(sum(max(0.0, m.demand - m.ready) for m in minutes) * run.gpus_per_node, 4),
        "saturated_minutes": saturated,
        "minutes_above_90": sum(1 for m in minutes if m.utilization > 90.0),
        "scale_actions": len(scaled),
        "direction_changes": changes,
        "minutes": len(minutes),
        "saturated_pct": round(100.0 * saturated / len(minutes), 3) if minutes else 0.0,
        "peak_ready": max((m.ready for m in minutes), default=0),
        "outcomes": dict(sorted(Counter(d.outcome.value for _, d in run.decisions).items())),
        "interrupted_node_minutes": run.interrupted_node_minutes,
        "interrupted_pods": run.interrupted_pods,
        "evictions": run.evictions,
        "restarted_nodes": run.restarts,
        "fallbacks": fallbacks(run),
    }


def fallbacks(run: Run) -> list[dict[str, Any]]:
    """Each shortfall (``no_capacity``) with the scale-out the cloud could not deliver and the next pool's request
    that followed it: when each happened and how long after the undelivered request the fallback asked."""
    out = []
    for i, (when, short) in enumerate(run.decisions):
        if short.outcome is not Outcome.NO_CAPACITY:
            continue
        asked = max((t for t, d in run.decisions[:i] if d.pool == short.pool and d.outcome is Outcome.SCALED
                     and d.action is Action.SCALE_OUT), default=None)
        after = next(((t, d) for t, d in run.decisions[i + 1:] if d.pool != short.pool
                      and d.outcome is Outcome.SCALED and d.to is not None and d.from_ is not None
                      and d.to > d.from_), None)
        row: dict[str, Any] = {"pool": short.pool, "no_capacity_at": rfc3339(when),
                               "undelivered": short.details.get("asked", 0) - short.details.get("delivered", 0)}
        if asked is not None:
            row["asked_at"] = rfc3339(asked)
        if after is not None:
            row.update(fallback_pool=after[1].pool, fallback_at=rfc3339(after[0]))
            if asked is not None:
                row["seconds_to_fallback"] = round(after[0] - asked, 1)
        out.append(row)
    return out


def foresight_node_hours(demand: Sequence[float], low: int) -> float:
    """The perfect-foresight limit: ceil(demand) ready nodes every minute, never below the pool's min, and no
    provisioning time (a bound no reactive autoscaler reaches; every other figure is compared with it)."""
    return round(sum(max(low, math.ceil(d - 1e-9)) for d in demand) / 60.0, 4)


def summary(run: Run, static: Run, step: Run, cloud: Run | None = None, victims: str = "cloud",
            idle: Run | None = None, low: int = 0) -> dict[str, Any]:
    """summary.json: the run's figures and the baselines', savings against static provisioning, and the
    perfect-foresight limit for the same trace (``low``: the pool's min) with the run's ratio to it.

    ``cloud`` is the same config with ``victims: cloud`` (a count scale-in, the cloud removing the newest node),
    whose interrupted work is set beside the pool's own ``victims`` setting's; ``idle`` (for ``victims: movable``)
    the same with ``victims: idle``.
    """
    out = figures(run)
    foresight = foresight_node_hours([m.demand for m in run.minutes], low)
    out["foresight_node_hours"] = foresight
    out["vs_foresight"] = round(out["node_hours"] / foresight, 4) if foresight else None
    out["victims"] = victims
    out["baselines"] = {"static_peak": figures(static), "fixed_step": figures(step)}
    if cloud is not None:
        out["baselines"]["cloud_newest"] = figures(cloud)
    if idle is not None:
        out["baselines"]["idle"] = figures(idle)
    out["interrupted_node_minutes_by_victims"] = {
        victims: out["interrupted_node_minutes"],
        "cloud": out["baselines"].get("cloud_newest", out)["interrupted_node_minutes"],
        **({"idle": out["baselines"]["idle"]["interrupted_node_minutes"]} if idle is not None else {})}
    peak_hours = out["baselines"]["static_peak"]["node_hours"]
    out["node_hours_saved_vs_static_peak_pct"] = (
        round(100.0 * (1 - out["node_hours"] / peak_hours), 2) if peak_hours else 0.0)
    return out


def write_timeline(path: str, run: Run) -> None:
    """timeline.csv, one row a minute."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(TIMELINE_HEADER)
        for m in run.minutes:
            writer.writerow([rfc3339(m.time).replace(".000Z", "Z"), f"{m.demand:g}", m.ready, m.requested,
                             f"{m.utilization:.1f}", ";".join(m.outcomes)])


def stockouts(settings: Settings | None, pools: Sequence[str]) -> list[tuple[float, float, str]]:
    """(start, end, pool) of each simulated capacity window of the replayed pools (shaded in replay.png)."""
    out = []
    for name in pools if settings is not None else ():
        capacity = getattr(settings.pools[name].provider_settings, "capacity", None) if settings else None
        for window in capacity if isinstance(capacity, list) else ():
            out.append((window.start.timestamp(), window.end.timestamp(), f"{name} stockout (<= {window.nodes})"))
    return out


def write_plot(path: str, run: Run, title: str, peers: Mapping[str, PeerRun] | None = None,
               settings: Settings | None = None) -> None:
    """replay.png (see ``plot``)."""
    from matplotlib import pyplot as plt

    fig = plot(run, title, peers, settings)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot(run: Run, title: str, peers: Mapping[str, PeerRun] | None = None, settings: Settings | None = None) -> Any:
    """The replay's figure: demand, ready and requested nodes (a line per pool for a group, each pool's decisions
    on its own line), the peers' ready nodes, stockouts shaded; utilisation below. The caller closes it."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    start = run.minutes[0].time if run.minutes else 0.0
    hours = [(m.time - start) / 3600 for m in run.minutes]
    pools = [name for name, _ in run.minutes[0].by_pool] if run.minutes else []
    group = len(pools) > 1
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(13, 7.5), sharex=True, height_ratios=[3, 1])
    top.plot(hours, [m.demand for m in run.minutes], color="black", lw=1, label="demand (nodes of work)")
    top.step(hours, [m.ready for m in run.minutes], where="post", color="tab:blue", lw=1.6,
             label="ready nodes" + (" (group total)" if group else ""))
    top.step(hours, [m.requested for m in run.minutes], where="post", color="tab:orange", lw=1, ls="--",
             label="requested nodes" + (" (group total)" if group else ""))
    colors = ("tab:cyan", "tab:olive", "tab:pink", "tab:brown")
    for i, pool in enumerate(pools if group else []):
        top.step(hours, [dict(m.by_pool).get(pool, 0) for m in run.minutes], where="post", lw=1.2,
                 color=colors[i % len(colors)], label=f"ready nodes of {pool}")
    for name, style in zip(peers or {}, (":", "-.")):
        peer = (peers or {})[name]
        top.step(hours[:len(peer.ready)], peer.ready, where="post", color="dimgray", lw=1, ls=style,
                 label=f"{name.replace('_', '-')} ready nodes (peer)")
    for first, last, label in stockouts(settings, pools):
        top.axvspan((first - start) / 3600, (last - start) / 3600, color="tab:red", alpha=0.08, label=label)
    for action, marker, color in (("scale_out", "^", "tab:green"), ("scale_in", "v", "tab:red"),
                                  ("no_capacity", "x", "black")):
        points = [((t - start) / 3600, d.to) for t, d in run.decisions if d.to is not None and (
            (d.outcome is Outcome.SCALED and d.action == action) or (action == d.outcome.value))]
        if points:
            top.scatter(*zip(*points), marker=marker, color=color, zorder=3,
                        label=f"{action} decision" + (" (at the pool's own count)" if group else ""))
    top.set_ylabel("nodes")
    top.set_title(textwrap.fill(title, 150), fontsize=9, loc="left")
    top.legend(loc="upper left", fontsize=7, ncol=2)
    top.grid(alpha=0.3)
    bottom.plot(hours, [m.utilization for m in run.minutes], color="tab:purple", lw=1)
    bottom.set_ylabel("utilisation %")
    bottom.set_xlabel("hours since start of trace")
    bottom.set_ylim(0, 105)
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def write_all(out_dir: str, run: Run, data: dict[str, Any], title: str,
              peers: Mapping[str, PeerRun] | None = None, settings: Settings | None = None) -> None:
    """Write the three files into ``out_dir`` (created if missing)."""
    os.makedirs(out_dir, exist_ok=True)
    write_timeline(os.path.join(out_dir, "timeline.csv"), run)
    with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
        fh.write("\n")
    write_plot(os.path.join(out_dir, "replay.png"), run, title, peers, settings)
