"""``python -m autoscaler replay --tune --config BASE.yaml --trace HISTORY.csv --max-saturated 1% --out DIR``.

No overfitting: the search sees only the first part of the history (by default the first 5/7: days 1-5 of a week);
the chosen settings and the base config are then replayed on the rest, which the search never saw, and both
spans are reported (stdout and tuning.json).
"""
from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

from autoscaler.config.load import build_settings, load_replay_config, offline
from autoscaler.replay.report import foresight_node_hours
from autoscaler.replay.sim import gpus_per_node, replay_pool
from autoscaler.replay.space import Candidate, Space, apply, busy_windows, describe, show
from autoscaler.replay.outlook import outlook as outlook_of
from autoscaler.replay.pooled import NAME as POOLED, pooled as pooled_days
from autoscaler.replay.peers import PeerRun, peer_figures
from autoscaler.replay.trace import ReplayError, Trace, load_trace
from autoscaler.replay.robust import (STRESSED_FACTOR, Judged, Rule, as_json, burstiest_days, finalists, judge,
                                      leaves_a_node_waiting, settle, stress_note, stressed_copies)
from autoscaler.replay.tune import (REPLAYED, Budget, Score, Search, candidate_key, choose, make_pool, pareto, replays,
                                    score_figures)
from autoscaler.replay import command, peers, tune_files

DEFAULT_HOLDOUT = 2 / 7
DEFAULT_MARGIN = 0.25
MIN_CHANGES = 2  # the default limit of direction changes a day is never under this
#: ... nor under this where the history has busy hours (space.busy_windows: its surges gather in a run of hours, a
#: daily cycle): following the cycle takes two changes a day by itself (up in the morning, down at night), so a calm
#: base config (none on a weak-cycle LLM service) would hold the choice to a pool that never follows it (issue 47).
CYCLE_CHANGES = 6
CHANGES_FACTOR = 2  # ... and is this many times the base config's direction changes a day
#: A day of the history may be saturated this many times the budget (the span as a whole keeps the budget less the
#: margin; a stressed copy, standing in for the worst day never seen, twice the budget): days differ, and a cap at
#: the budget itself on each of the history's days pushed the choice far under the budget on the average day.
DAY_FACTOR = 1.5
AS_IT_WAS = "history"  # the tuning span as it was, beside the stressed copies, where the outlook changed it


#: restart k of ``--restarts`` searches with the seed plus this many times k (restart 0: the seed itself)
RESTART_SEED = 1000
#: how well a restart's choice keeps its limits, best first (choose's flag, then the robust pick's)
WITHIN_ORDER = ("every_day", "span", "every_day_no_margin", "changes_over", "over")
PICKED_ORDER = (None, "robust", "robust_changes_over", "robust_over")


@dataclass
class Restart:
    """One search of a tune and the choice made among its own results (``--restarts``: the best of them is kept)."""

    search: Search
    chosen: Candidate
    score: Score  # the choice's, on the span the candidates were judged on
    within: str  # choose's flag
    picked: str | None  # the robust pick's flag (None: no stressed copies judged)
    judged: list[Judged]
    not_judged: int

    def rank(self) -> tuple[int, int, float]:
        """Limits kept first (a choice within every day's limit and held on the stressed copies before one that
        needed a limit dropped), then the cost on the span searched."""
        return (WITHIN_ORDER.index(self.within), PICKED_ORDER.index(self.picked), self.score.cost)

    def as_json(self) -> dict[str, Any]:
        return {"seed": self.search.seed, "choice": self.within, "stress_choice": self.picked,
                "cost": round(self.score.cost, 4), "node_hours": round(self.score.node_hours, 4),
                "candidates": len(self.search.results), "replays": self.search.evaluated}


def default_neighbours(candidates: int) -> int:
    """The hill-climb's candidates: about half as many as the draws (120, four rounds of 30, for the default 243)."""
    return candidates * 120 // 243


def parse_percent(text: str) -> float:
    """``1%``, ``1`` or ``0.5%`` -> percent of minutes; ValueError otherwise."""
    value = float(text.strip().rstrip("%"))
    if not 0 <= value <= 100:
        raise ValueError("must be between 0% and 100%")
    return value


def _load(config_path: str) -> tuple[dict[str, Any], Any]:
    raw, settings = load_replay_config(config_path)  # a replay serves nothing: no auth needed
    return raw, settings


def tune(config_path: str, trace_path: str, out_dir: str, max_saturated: float, *, candidates: int = 243,
         workers: int = 2, seed: int = 0, holdout: float = DEFAULT_HOLDOUT, margin: float = DEFAULT_MARGIN,
         neighbours: int | None = None, robust: bool = False, max_changes: float | None = None, stress: bool = True,
         utilization_expr: str = tune_files.UTILIZATION_EXPR, pending_expr: str = tune_files.PENDING_EXPR,
         quiet: bool = False, outlook: bool = True, pooled: bool = False, restarts: int = 1) -> dict[str, Any]:
    """Search, confirm and write DIR's files; returns what tuning.json holds. ConfigError / ReplayError on bad
    input. ``outlook``: the candidates are judged on the tuning span as the weeks after it will look (outlook.py);
    the report's figures are the history's as it was. ``pooled``: the search's first rungs screen on days pooled
    from every searched day (pooled.py; measured, not better: BENCHMARKS.md round 11), not on the span's first
    days. ``restarts``: that many whole searches (seeds ``seed``, ``seed + RESTART_SEED``, ...), each choosing among
    its own results; the choice that keeps its limits best, then costs least on the span searched, is kept (about
    ``restarts`` times the CPU)."""
    if restarts < 1:
        raise ReplayError(f"--restarts {restarts}: at least 1")
    started, replayed = time.monotonic(), list(REPLAYED)
    raw, settings = _load(config_path)
    pool = replay_pool(settings)
    trace = load_trace(trace_path)
    total = len(trace.demand)
    train = total if holdout <= 0 else int(round(total * (1 - holdout)))
    if train < 60 or (holdout > 0 and total - train < 60):
        raise ReplayError(f"{trace_path}: {total} minutes is too short to tune on and confirm (at least an hour "
                          "each); give a longer trace or --holdout 0")
    env = dict(os.environ)

    def progress(text: str) -> None:
        if not quiet:
            print(f"tune: {text} ({time.monotonic() - started:.0f}s)", file=sys.stderr, flush=True)

    ahead = outlook_of(trace, train) if outlook else None
    history = trace  # as it was: the report's figures and the confirm span
    if ahead is not None and ahead.changed:  # judged on the outlook; the held-back days are kept as they were
        trace = Trace(trace.start, ahead.demand + trace.demand[train:])
    windows = busy_windows(trace.demand[:train], trace.start)
    space = Space(settings, pool, windows, level=sum(trace.demand[:train]) / train)
    base = describe(settings, pool, space.windows)
    stressed = stressed_copies(trace, train) if stress else {}
    copies = {**stressed, AS_IT_WAS: Trace(history.start, history.demand[:train])} if trace is not history \
        else dict(stressed)
    days_pooled = pooled_days(trace, train) if pooled else None
    if days_pooled is not None:
        copies[POOLED] = days_pooled
    executor = make_pool(workers, raw, env, pool, trace, copies)
    try:
        base_score = replays(None, [(0, base, 0, train, None, None)])[0][1]
        # Flapping has a price: by default at most twice the direction changes a day the base config made on the
        # history (at least MIN_CHANGES, CYCLE_CHANGES on a history with busy hours); --max-direction-changes sets
        # the limit instead.
        days = max(train / 1440, 1.0)
        floor = change_floor(bool(windows))
        limit = change_limit(base_score.direction_changes / days, bool(windows), max_changes)
        # The choice keeps a margin under the budget over the span, and DAY_FACTOR times the budget on each whole
        # day of it: days differ, and the days the search never saw must hold the budget too.
        # Robust: the worst day decides, with the margin on each day (the span's total is then within it too).
        day_pct = max_saturated * (1 - margin) if robust else max_saturated * DAY_FACTOR
        # never a pending threshold that lets a whole node of work wait with no headroom (robust.leaves_a_node_waiting)
        gpus, level = gpus_per_node(settings, pool), sum(trace.demand[:train]) / train

        def allowed(candidate: Candidate) -> bool:
            return not leaves_a_node_waiting(candidate, gpus, level)

        whole_day = int(max_saturated / 100.0 * 1440 + 1e-9)

        @functools.cache
        def searched_peers() -> dict[str, PeerRun]:  # on the searched span: once for every restart's pick and,
            return peers(settings, Trace(trace.start, trace.demand[:train]))  # where the outlook kept it, tuning.json

        def searched(k: int) -> Restart:
            """One search (restart ``k``: seed ``seed + RESTART_SEED * k``) and its choice among its own results."""
            search = Search(space, train, max_saturated * (1 - margin), day_pct=day_pct, changes_per_day=limit,
                            candidates=candidates, neighbours=default_neighbours(candidates) if neighbours is None
                            else neighbours, seed=seed + RESTART_SEED * k,
                            pooled=len(days_pooled.demand) if days_pooled else 0, allowed=allowed)
            if restarts > 1:
                progress(f"restart {k + 1}/{restarts}: search seed {search.seed}")
            search.run(executor, progress)
            if all(cand != base for cand, _ in search.results):  # the base config is a candidate too: never passed
                search.results.append((base, base_score))  # over for a costlier choice it would itself have beaten
            history_day = whole_day if robust else search.budget(train).per_day or whole_day
            choosable = [cs for cs in search.results if allowed(cs[0])] or search.results
            chosen, chosen_score, within = choose(choosable, search.budget(train), whole_day if robust else None)
            judged: list[Judged] = []
            not_judged = 0
            stage = {"every_day": search.budget(train),
                     "every_day_no_margin": Budget(10 ** 9, whole_day, search.budget(train).changes),
                     "changes_over": replace(search.budget(train), changes=None)}.get(within)
            picked = None
            if stressed and stage is not None:
                finals = finalists(space, choosable, stage)
                progress(f"judging {len(finals)} finalists on the worst of the history's days and "
                         f"{len(stressed)} stressed copies of its {len(next(iter(stressed.values())).demand) // 1440} "
                         "burstiest days")
                rule = Rule(history_day, math.ceil(limit), stage.total, STRESSED_FACTOR * whole_day,
                            ceiling=peer_ceiling(searched_peers()))
                judged = judge(executor, finals, search.results, train, stressed, holds=rule.holds)
                not_judged = len(finals) - len(judged)
                if judged:
                    best, picked = settle(executor, judged, rule, train, stressed, allowed)
                    chosen, chosen_score = best.candidate, best.history
            return Restart(search, chosen, chosen_score, within, picked, judged, not_judged)

        runs = [searched(k) for k in range(restarts)]
        # the restart whose choice keeps its limits best, then the cheapest on the span searched (the choice's
        # cost there is what says how it fares after: BENCHMARKS.md rounds 15-16)
        won = min(runs, key=lambda r: r.rank())
        search, chosen, chosen_score, within, picked, judged, not_judged = (
            won.search, won.chosen, won.score, won.within, won.picked, won.judged, won.not_judged)
        if restarts > 1:  # the frontier and the report's candidates: every restart's, each candidate once
            pooled_results = {candidate_key(c): (c, sc) for r in runs for c, sc in r.search.results}
            search = replace(search, results=list(pooled_results.values()),
                             evaluated=sum(r.search.evaluated for r in runs),
                             minutes_replayed=sum(r.search.minutes_replayed for r in runs))
        jobs: list[Any] = []
        if train < total:
            jobs += [(1, chosen, train, total, None, None), (2, base, train, total, None, None)]
        if trace is not history:  # the report's tuning span: the history as it was, not the outlook
            jobs += [(3, chosen, 0, train, None, None, AS_IT_WAS), (4, base, 0, train, None, None, AS_IT_WAS)]
        progress("scoring the base config and confirming on the rest of the history")
        scored = dict(replays(executor, jobs))
        judged_score = chosen_score  # on the span the candidates were judged on
        chosen_score, scored[0] = scored.pop(3, chosen_score), scored.pop(4, base_score)
    finally:
        if executor is not None:
            executor.shutdown()
    frontier = pareto(search.results)

    def budget(minutes: int) -> int:
        return int(max_saturated / 100.0 * minutes + 1e-9)

    spans: dict[str, dict[str, Any]] = {
        "tune": {"minutes": [0, train], "budget": budget(train), "choice_budget": search.budget(train).total,
                 "choice_budget_per_day": search.budget(train).per_day, "base": score_figures(scored[0]),
                 "tuned": score_figures(chosen_score), "tuned_on_outlook": score_figures(judged_score)}}
    if train < total:
        spans["confirm"] = {"minutes": [train, total], "budget": budget(total - train),
                            "base": score_figures(scored[2]), "tuned": score_figures(scored[1])}
    low = settings.pools[pool].min
    span_trace = Trace(history.start, history.demand[:train])
    peer_runs = searched_peers() if trace is history else peers(settings, span_trace)
    data_peers = {name: peer_figures(run, gpus_per_node(settings, pool), foresight_node_hours(span_trace.demand, low))
                  for name, run in peer_runs.items()}
    for span in spans.values():
        first, last = int(span["minutes"][0]), int(span["minutes"][1])
        span["foresight_days"] = [foresight_node_hours(history.demand[d:d + 1440], low)
                                  for d in range(first, last - 1439, 1440)]
    data = {"config": config_path, "trace": trace_path, "pool": pool, "max_saturated_pct": max_saturated,
            "margin": margin, "robust": robust, "max_direction_changes": max_changes, "day_budget": whole_day,
            "day_limit": search.budget(train).per_day,
            "within_budget": within != "over", "choice": within, "candidates": len(search.results),
            "direction_change_limit": limit, "direction_change_floor": floor, "busy_hours": list(windows),
            "base_direction_changes_per_day": round(
                base_score.direction_changes / days, 2), "stress_choice": picked,
            "stressed": {"days": sorted(burstiest_days(trace.demand, train)) if stressed else [],
                         "copies": list(stressed), "finalists": [as_json(j) for j in judged],
                         "not_judged": not_judged},
            "outlook": ahead.as_json() if ahead is not None else None,
            "sampled": candidates * restarts, "replays": search.evaluated + len(jobs),
            "restarts": [r.as_json() for r in runs], "restart": runs.index(won),
            "search_minutes_replayed": search.minutes_replayed, "pooled": search.pooled > 0,
            "minutes_replayed": REPLAYED[0] - replayed[0], "decisions_replayed": REPLAYED[1] - replayed[1],
            "seconds": round(time.monotonic() - started, 1), "workers": workers, "base": base, "tuned": chosen,
            "peers": data_peers,
            "spans": spans}
    _write(out_dir, raw, pool, data, search, frontier, chosen, chosen_score, scored[0], utilization_expr, pending_expr,
           env)
    data["seconds"] = round(time.monotonic() - started, 1)
    return data


def change_limit(base_per_day: float, busy_hours: bool, given: float | None = None) -> float:
    """The direction changes a day the choice may make: ``given`` (--max-direction-changes), else CHANGES_FACTOR
    times the base config's on the history, at least MIN_CHANGES, or CYCLE_CHANGES on a history with busy hours."""
    if given is not None:
        return given
    return max(change_floor(busy_hours), math.ceil(CHANGES_FACTOR * base_per_day - 1e-9))


def change_floor(busy_hours: bool) -> int:
    """The least the default limit of direction changes a day may be."""
    return CYCLE_CHANGES if busy_hours else MIN_CHANGES


def peer_ceiling(runs: dict[str, PeerRun]) -> float:
    """The node-hours cluster-autoscaler with one node of pause pods keeps (``runs``: the peers on the span the
    candidates are judged on): the pick's near-equal stay under it where they can (robust.pick's ``ceiling``)."""
    return sum(runs["cluster_autoscaler_overprovisioned"].ready) / 60.0


def _about(data: dict[str, Any]) -> list[str]:
    span = data["spans"]["tune"]["minutes"]
    total = data["spans"].get("confirm", data["spans"]["tune"])["minutes"][1]
    return [f"trace: {data['trace']} (tuned on minutes {span[0]}-{span[1]} of {total}); base config: {data['config']}",
            f"budget: saturated minutes <= {data['max_saturated_pct']:g}% of the minutes; pool: {data['pool']}"]


def _write(out_dir: str, raw: dict[str, Any], pool: str, data: dict[str, Any], search: Search,
           frontier: list[tuple[Candidate, Score]], chosen: Candidate, chosen_score: Score, base_score: Score,
           utilization_expr: str, pending_expr: str, env: dict[str, str]) -> None:
    tune_files.ensure_dir(out_dir)
    base = data["base"]
    changed = {k.rsplit(".", 1)[0] if k.startswith("rules.") else k.split(".")[0]
               for k in {*base, *chosen} if base.get(k) != chosen.get(k)}
    # Only what changed is written: an unchanged direction or rule keeps the base file's own text.
    tuned_raw = apply(raw, pool, {k: v for k, v in chosen.items()
                                  if (k.rsplit(".", 1)[0] if k.startswith("rules.") else k.split(".")[0]) in changed})
    tuned_settings = build_settings(offline(tuned_raw), env=env, replay=True)
    about = _about(data)
    with open(data["config"], encoding="utf-8") as fh:
        base_text = fh.read()
    data["comments_kept"] = tune_files.write_tuned(os.path.join(out_dir, "tuned.yaml"), base_text, tuned_raw, pool,
                                                   base, chosen, about)
    tune_files.write_frontier(os.path.join(out_dir, "frontier.csv"), frontier)
    budget = data["spans"]["tune"]["choice_budget"]
    title = (f"pool {pool}: {len(search.results)} candidates on minutes {data['spans']['tune']['minutes'][0]}-"
             f"{data['spans']['tune']['minutes'][1]} of {os.path.basename(data['trace'])}")
    tune_files.write_plot(os.path.join(out_dir, "frontier.png"), search.results, frontier, chosen_score, base_score,
                          budget, title, data["peers"])
    assert tuned_settings.config.replay is not None
    rules = tune_files.prometheus_rules(tuned_settings.config.replay, tuned_settings.config.routing, utilization_expr,
                                        pending_expr)
    tune_files.write_rules(os.path.join(out_dir, "prometheus-rules.yml"), rules, about)
    data["alertmanager_route"] = tune_files.alertmanager_route(tuned_settings.config.replay,
                                                                tuned_settings.config.routing)
    tune_files.write_route(os.path.join(out_dir, "alertmanager-route.yml"), data["alertmanager_route"], about)
    data["frontier_points"] = len(frontier)
    with open(os.path.join(out_dir, "tuning.json"), "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, default=str)
        fh.write("\n")


def report(data: dict[str, Any], out_dir: str) -> str:
    """Chosen and base side by side: the settings, then each span's figures."""
    base, tuned = data["base"], data["tuned"]
    rows = [("setting", "base", "tuned")]
    rows += [(k, show(k, base.get(k)), show(k, tuned.get(k))) for k in dict.fromkeys([*base, *tuned])]
    for name, span in data["spans"].items():
        first, last = span["minutes"]
        whole = first % 1440 == 0 and last % 1440 == 0
        days = f"days {first // 1440 + 1}-{last // 1440}" if whole else f"minutes {first}-{last}"
        label = "tuning span" if name == "tune" else "confirm span (never seen by the search)"
        rows.append((f"{label}, {days}", "", ""))
        for key, text in (("node_hours", "node-hours"), ("saturated_minutes", "saturated minutes"),
                          ("direction_changes", "direction changes")):
            def cell(s: dict[str, Any], key: str = key) -> str:
                if key == "saturated_minutes":
                    return f"{s[key]} ({100 * s[key] / max(s['minutes'], 1):.2f}%)"
                return f"{s[key]:.1f}" if isinstance(s[key], float) else str(s[key])
            rows.append((f"  {text}", cell(span["base"]), cell(span["tuned"])))
        rows.append((f"  budget ({data['max_saturated_pct']:g}%)", f"{span['budget']} min",
                     f"chosen within {span['choice_budget']} min (margin {data['margin']:g}), "
                     f"{span['choice_budget_per_day']} a day" if "choice_budget" in span else ""))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines += day_table(data)
    head = (f"tuned pool {data['pool']} on {data['trace']}: {data['candidates']} candidates scored in full, "
            f"{data['replays']} replays, {data['seconds']:.0f}s on {data['workers']} worker(s)")
    tail = [f"-> {out_dir}: tuned.yaml, frontier.csv ({data['frontier_points']} points), frontier.png, "
            "prometheus-rules.yml, alertmanager-route.yml, tuning.json"]
    route = data.get("alertmanager_route")
    if route:
        tail.insert(0, f"Alertmanager: route the pool's alerts as alertmanager-route.yml does (group_wait "
                       f"{route['group_wait']}, group_interval {route['group_interval']}, repeat_interval "
                       f"{route['repeat_interval']}): the tuned settings were measured with that timing")
    if data["choice"] == "changes_over":
        tail.insert(0, f"note: no candidate within the budget kept to {data['direction_change_limit']:g} direction "
                       "changes a day; the choice ignores that limit")
    tail.insert(0, stress_note(data))
    runs = data.get("restarts") or []
    if len(runs) > 1:
        kept = runs[data["restart"]]
        tail.insert(0, f"restarts: {len(runs)} searches (seeds {', '.join(str(r['seed']) for r in runs)}); kept seed "
                       f"{kept['seed']}'s choice, the best within its limits and the cheapest on the searched days ("
                       + ", ".join(f"{r['cost']:.1f}" for r in runs) + " node-hours with the work cut)")
    if data["choice"] == "every_day_no_margin":
        tail.insert(0, "note: no candidate kept the margin under the budget on every day of the tuning span; the "
                       "choice keeps the budget itself on every day")
    if data["choice"] == "over":
        tail.insert(0, "WARNING: no candidate kept saturated minutes within the budget on the tuning span; "
                       "the least saturated one was chosen")
    elif data["choice"] == "span":
        tail.insert(0, "note: no candidate kept the budget on every day of the tuning span; the choice keeps it "
                       "over the span")
    confirm = data["spans"].get("confirm")
    if confirm and confirm["tuned"]["saturated_minutes"] > confirm["budget"]:
        tail.insert(0, f"WARNING: on the confirm span the tuned settings were saturated "
                       f"{confirm['tuned']['saturated_minutes']} min, over the budget of {confirm['budget']}")
    return "\n".join([head, *lines, *tail])


def day_table(data: dict[str, Any]) -> list[str]:
    """Day by day, base and tuned: node-hours, their ratio to perfect foresight, saturated minutes (a mark where
    over the day's budget); the worst day is what a robust choice keeps within the budget."""
    limit = data["day_budget"]
    rows = [f"day by day (budget {limit} saturated min a day, * over it; x: node-hours / perfect foresight; "
            "chg: direction changes):",
            "  day  span     base node-h      x  sat min  chg   tuned node-h      x  sat min  chg"]

    def cells(hours: float, saturated: int, foresight: float, changes: int) -> str:
        ratio = f"{hours / foresight:.2f}" if foresight else "-"
        return f"{hours:11.1f}  {ratio:>5s}  {saturated:5d}{'*' if saturated > limit else ' '}  {changes:3d}"

    for name, span in data["spans"].items():
        first_day = span["minutes"][0] // 1440 + 1
        base, tuned = span["base"], span["tuned"]
        days = zip(base["days"], tuned["days"], span["foresight_days"], base["day_changes"], tuned["day_changes"])
        for i, ((bh, bs), (th, ts), best, bc, tc) in enumerate(days):
            rows.append(f"  {first_day + i:<4d} {name:8s} {cells(bh, bs, best, bc)}   {cells(th, ts, best, tc)}")
    return rows


def run(args: Any) -> int:
    """The CLI: exit 0 with the side-by-side report, 1 with each problem on its own line."""
    try:
        pct = parse_percent(args.max_saturated)
    except ValueError as exc:
        print(f"--max-saturated {args.max_saturated!r}: {exc} (write it like 1%)", file=sys.stderr)
        return 1
    data = command(lambda: tune(args.config, args.trace, args.out, pct, candidates=args.candidates,
                                workers=args.workers, seed=args.seed, holdout=args.holdout, margin=args.margin,
                                robust=args.robust, max_changes=args.max_direction_changes, stress=args.stress,
                                outlook=args.outlook, pooled=args.pooled, restarts=args.restarts,
                                utilization_expr=args.utilization_expr, pending_expr=args.pending_expr),
                   args.config, args.out)
    if data is None:
        return 1
    print(report(data, args.out))
    return 0


__all__ = ["parse_percent", "report", "run", "tune"]
