"""What ``replay --tune`` writes: tuned.yaml, frontier.csv, frontier.png, prometheus-rules.yml and
alertmanager-route.yml."""
from __future__ import annotations

import csv
import os
import re
from datetime import datetime, timezone
from typing import Any

import yaml

from autoscaler.config import ReplayConfig, RoutingConfig
from autoscaler.replay.space import Candidate, duration_text, settings_text, show
from autoscaler.replay.tune import Score
from autoscaler.replay.yaml_edit import edit

#: Average GPU utilisation (0-100) of one pool's GPUs and the GPUs its pending pods request: the recording rules of
#: deploy/prometheus/gpu-autoscaler-rules.yml and gpu-demand-rules.yml, which put dcgm-exporter's and
#: kube-state-metrics' series on their pool by the node's pool label (docs/rules.md); ``{pool}`` filled in.
UTILIZATION_EXPR = 'autoscaler_pool:gpu_utilization:avg{autoscaler_pool="{pool}"}'
PENDING_EXPR = 'autoscaler_pool:gpus_pending:sum{autoscaler_pool="{pool}"}'
FRONTIER_HEADER = ["node_hours", "saturated_minutes", "direction_changes", "settings"]
#: The receiver alertmanager-route.yml names: the one that posts to the service (README "Pointing Alertmanager at it",
#: deploy/alertmanager/alertmanager.yml).
RECEIVER = "gpu-autoscaler"


def write_tuned(path: str, base_text: str, raw: dict[str, Any], pool: str, base: Candidate, chosen: Candidate,
                about: list[str]) -> bool:
    """The base config with the chosen values, under a header that says what was tuned, on what, and from what.

    The changed mappings are edited into the base file's own text (comments and layout kept, see ``yaml_edit``);
    when that cannot give exactly ``raw``, the whole config is written out instead (``${VAR}`` references kept as
    written, comments lost). Returns whether the comments were kept."""
    changed = {k for k in {*base, *chosen} if base.get(k) != chosen.get(k)}
    directions = [d for d in ("scale_out", "scale_in") if any(k.startswith(d + ".") for k in changed)]
    if any(k.startswith("window.") for k in changed):
        directions.append("schedules")  # the busy-hours window (space.window_schedule)
    rules = sorted({int(k.split(".")[1]) for k in changed if k.startswith("rules.")})
    body = edit(base_text, raw, pool, directions, rules)
    kept = body is not None
    if body is None:
        body = yaml.safe_dump(raw, sort_keys=False, default_flow_style=False, allow_unicode=True, width=120)
    lines = [f"#   {k}: {show(k, base.get(k))} -> {show(k, chosen.get(k))}" for k in chosen if k in changed]
    lines += [f"#   {k}: {show(k, base[k])} -> (not used by the new mode)" for k in base if k not in chosen]
    header = ["# Tuned by `python -m autoscaler replay --tune` on " +
              datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), *[f"# {line}" for line in about],
              "# Changed from the base config (base -> tuned):", *(lines or ["#   nothing: the base config won"]),
              "# Everything else is the base config's (limits, provider, Alertmanager timing, store, auth)" +
              ("; its comments are below as they were." if kept else "; its comments could not be kept."), ""]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(header) + "\n" + body)
    return kept


def write_frontier(path: str, frontier: list[tuple[Candidate, Score]]) -> None:
    """frontier.csv: one row per Pareto-optimal setting, fewest node-hours first."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(FRONTIER_HEADER)
        for cand, score in frontier:
            writer.writerow([f"{score.node_hours:.2f}", score.saturated_minutes, score.direction_changes,
                             settings_text(cand)])


def write_plot(path: str, results: list[tuple[Candidate, Score]], frontier: list[tuple[Candidate, Score]],
               chosen: Score, base: Score, budget: int, title: str,
               peers: dict[str, dict[str, Any]] | None = None) -> None:
    """frontier.png: node-hours against saturated minutes of every fully scored candidate, the frontier, the
    budget, the chosen point, the base config's and the peers' (cluster-autoscaler) on the same span."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    ax.scatter([s.saturated_minutes for _, s in results], [s.node_hours for _, s in results], s=10,
               color="lightgray", label=f"candidates ({len(results)})")
    ax.step([s.saturated_minutes for _, s in frontier], [s.node_hours for _, s in frontier], where="post",
            color="tab:blue", marker="o", ms=4, lw=1.2, label="frontier (Pareto-optimal)")
    ax.axvline(budget, color="tab:red", ls="--", lw=1, label=f"choice budget: {budget} saturated min")
    ax.scatter([base.saturated_minutes], [base.node_hours], marker="X", s=120, color="black", zorder=4,
               label=f"base config ({base.node_hours:.0f} node-h, {base.saturated_minutes} min)")
    ax.scatter([chosen.saturated_minutes], [chosen.node_hours], marker="*", s=260, color="tab:orange", zorder=5,
               edgecolor="black", label=f"chosen ({chosen.node_hours:.0f} node-h, {chosen.saturated_minutes} min)")
    for (name, peer), marker in zip((peers or {}).items(), ("s", "D")):
        ax.scatter([peer["saturated_minutes"]], [peer["node_hours"]], marker=marker, s=70, color="tab:purple",
                   zorder=4, label=f"{name.replace('_', '-')} ({peer['node_hours']:.0f} node-h, "
                                   f"{peer['saturated_minutes']} min, {peer['direction_changes']} changes)")
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlabel("saturated minutes (demand above ready nodes)")
    ax.set_ylabel("node-hours")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def prometheus_rules(replay: ReplayConfig, routing: RoutingConfig, utilization_expr: str,
                     pending_expr: str = PENDING_EXPR) -> dict[str, Any]:
    """Alerting rules for Prometheus with the chosen thresholds and ``for``, carrying our routing labels."""
    rules = []
    for rule in replay.rules:
        pending = getattr(rule, "pending_above", None)
        if pending is not None:
            op, threshold, query = ">", pending, pending_expr
            summary = f"Pods wait for more than {pending:g} GPUs of pool {rule.pool}"
        else:
            op, threshold = (">", rule.above) if rule.above is not None else ("<", rule.below)
            query = utilization_expr
            word = "above" if op == ">" else "below"
            summary = f"Average GPU utilisation of pool {rule.pool} is {word} {threshold:g}%"
        labels = {**rule.labels, routing.pool_label: rule.pool, routing.action_label: rule.action.value}
        if rule.step:
            labels[routing.step_label] = str(rule.step)
        query = query.replace("{pool_label}", routing.pool_label).replace("{pool}", rule.pool)
        if re.search(r"\s(or|and|unless)\s", query, re.IGNORECASE):
            query = f"({query})"  # set operators bind looser than the comparison that follows
        rules.append({
            "alert": rule.alert,
            "expr": f"{query} {op} {threshold:g}",
            "for": duration_text(rule.for_),
            "labels": labels,
            "annotations": {"summary": summary, "value": "{{ $value }}"},
        })
    # evaluated as often as the replay evaluated them (Prometheus's own default is every minute)
    return {"groups": [{"name": "gpu-autoscaler-tuned", "interval": duration_text(replay.evaluation_interval),
                        "rules": rules}]}


def alertmanager_route(replay: ReplayConfig, routing: RoutingConfig) -> dict[str, Any]:
    """The Alertmanager route the replay emulated for the tuned rules: their pool's (or group's: the replay's rules
    all name one) scaling alerts to the service, one group per rule and pool, with the replay's ``group_wait``,
    ``group_interval`` and ``repeat_interval``."""
    actions = sorted({rule.action.value for rule in replay.rules})
    return {"receiver": RECEIVER,
            "matchers": [f'{routing.pool_label}="{replay.rules[0].pool}"',
                         f'{routing.action_label}=~"{"|".join(actions)}"'],
            "group_by": ["alertname", routing.pool_label],
            "group_wait": duration_text(replay.group_wait),
            "group_interval": duration_text(replay.group_interval),
            "repeat_interval": duration_text(replay.repeat_interval)}


def write_route(path: str, route: dict[str, Any], about: list[str]) -> None:
    """alertmanager-route.yml: one entry for a route's ``routes:`` list, with a header saying why its timing matters."""
    header = "".join(f"# {line}\n" for line in [
        "The Alertmanager route the tuned settings were measured with by `python -m autoscaler replay --tune`.", *about,
        "Alertmanager's timing is part of what was tuned: a firing alert is re-sent every repeat_interval, and a",
        "repeat is what lets a pool that is still short (or still idle) scale again; slower timing is slower scaling",
        "than the replay measured. Put this entry under your route's `routes:`, above any route that would take these",
        "alerts first, with `receiver` naming the receiver that posts to the service (README \"Pointing Alertmanager",
        "at it\"). Run the service with tuned.yaml as it is: its `dedup_window` decides which repeats act (one inside",
        "it is skipped as a duplicate), in the replay as in the service."])
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(header + yaml.safe_dump([route], sort_keys=False, width=200))


def write_rules(path: str, rules: dict[str, Any], about: list[str]) -> None:
    """prometheus-rules.yml, with a header saying where the thresholds came from."""
    header = "".join(f"# {line}\n" for line in
                     ["Alert rules tuned by `python -m autoscaler replay --tune`.", *about,
                      "Load it in Prometheus (rule_files) in place of the rules it replaces."])
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(header + yaml.safe_dump(rules, sort_keys=False, width=200))


def ensure_dir(path: str) -> None:
    os.makedirs(path, exist_ok=True)
