"""Tune on history: search the settings on the first part of a trace, confirm on the rest, hand over the best.

Why it is fast enough (BENCHMARKS.md "tuning on history"): every candidate runs the service's own engine, but on
``MemoryStore`` (about 3x cheaper than SQLite, the same events); successive halving evaluates many candidates on a
short prefix and only the best third on a longer one; a candidate stops as soon as its saturated minutes exceed the
budget or its node-hours exceed the best feasible candidate's; candidates run in a process pool.
"""
from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import pickle
import queue
import random
import signal
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Sequence

from autoscaler.config.load import build_settings, offline
from autoscaler.replay.report import figures, foresight_node_hours
from autoscaler.models import Outcome
from autoscaler.replay.pooled import NAME as POOLED, scored
from autoscaler.replay.sim import Minute, Replay, Run, simulate
from autoscaler.replay.space import Candidate, Space, apply
from autoscaler.replay.trace import STEP, Trace
from autoscaler.store.memory import MemoryStore

Progress = Callable[[str], None]
WAVE = 12  # candidates scored between two updates of the early-stop bound
PAIR_MOVES = 1 / 3  # the share of neighbours that move two knobs instead of one
#: A hill-climb neighbour stops once costlier than the best feasible by this share of its cost (it could be neither
#: the choice nor a finalist; the robust pick's own band, robust.PICK_NEAR, is narrower).
NEAR = 0.03


@dataclass(frozen=True)
class Budget:
    """Saturated minutes allowed over a span, and on any one whole day of it (None: no daily limit)."""

    total: int
    per_day: int | None = None
    changes: int | None = None  # direction changes allowed over the span (None: any)


@dataclass(frozen=True)
class Score:
    """One candidate's figures on one span of the trace (``stopped``: why it ended early, else empty)."""

    node_hours: float
    saturated_minutes: int
    direction_changes: int
    minutes: int
    stopped: str = ""
    worst_day: int = 0  # the most saturated minutes of any whole day (1440 minutes from the span's start)
    days: tuple[tuple[float, int], ...] = ()  # (node-hours, saturated minutes) of each whole day of the span
    foresight: float = 0.0  # the perfect-foresight node-hours of the minutes replayed (report.foresight_node_hours)
    interrupted: float = 0.0  # node-minutes of GPU work cut by node removals (report's interrupted_node_minutes)
    day_changes: tuple[int, ...] = ()  # direction changes of each whole day of the span
    decisions: int = 0  # the engine's decisions in the replay (what most of a replay's CPU goes to)
    #: minutes and decisions taken over from a paused replay of a shorter rung, not replayed again (Replay)
    resumed: tuple[int, int] = (0, 0)

    @property
    def cost(self) -> float:
        """What the choice minimises: node-hours, plus the interrupted work, which has to run again."""
        return self.node_hours + self.interrupted / 60.0

    @property
    def worst_changes(self) -> int:
        return max(self.day_changes, default=self.direction_changes)

    def feasible(self, budget: Budget) -> bool:
        return (not self.stopped and self.saturated_minutes <= budget.total
                and (budget.per_day is None or self.worst_day <= budget.per_day)
                and (budget.changes is None or self.direction_changes <= budget.changes))

    def rank(self, budget: Budget) -> tuple[float, ...]:
        """Feasible by node-hours, then those stopped for cost, then the rest by how saturated they were."""
        if self.feasible(budget):
            return (0, self.cost, self.direction_changes)
        if self.stopped == "node_hours":
            return (1, self.node_hours / max(self.minutes, 1))
        return (2, -self.minutes, self.saturated_minutes)


#: A node-hours bound: one figure for the whole replay, or one for the end of each whole day (cumulative).
Bound = float | tuple[float, ...]


@dataclass
class _Stop:
    """The early-stop hook: saturated minutes over the budget, or node-hours over the bound (the best feasible so
    far; by day: checked at the end of each whole day against that day's cumulative bound)."""

    budget: int
    bound: Bound | None
    per_day: int | None = None  # and on any whole day (None: no daily limit)
    counted: Sequence[bool] | None = None  # which minutes count (the pooled days' warm-ups do not); None: all
    saturated: int = 0
    day_saturated: int = 0
    ready_minutes: int = 0
    minutes: int = 0
    why: str = ""

    def __call__(self, minute: Minute) -> bool:
        counts = self.counted is None or self.counted[self.minutes]
        short = counts and minute.demand > minute.ready + 1e-9
        self.saturated += short
        self.ready_minutes += minute.ready if counts else 0
        if not self.minutes % 1440:
            self.day_saturated = 0
        self.day_saturated += short
        self.minutes += 1
        if self.saturated > self.budget or (self.per_day is not None and self.day_saturated > self.per_day):
            self.why = "saturated"
        elif self.bound is not None and self.ready_minutes / 60.0 > self._limit(self.bound) + 1e-9:
            self.why = "node_hours"
        return bool(self.why)

    def _limit(self, bound: Bound) -> float:
        if not isinstance(bound, tuple):
            return bound
        day, into = divmod(self.minutes, 1440)
        return bound[day - 1] if not into and 0 < day <= len(bound) else math.inf


#: Paused replays one process keeps at most (each 0.3-0.7 MB on a week of the bench; 243 candidates on 2 processes
#: keep about 120 each): past it a candidate is not paused, and a longer rung replays it from the start (the same
#: score), so a large ``--candidates`` costs CPU, not memory.
MAX_PAUSED = 400

# -- one evaluation (in a worker process) ---------------------------------------------------------------
_WORK: dict[str, Any] = {}


def _init(raw: dict[str, Any], env: dict[str, str], pool: str, trace: Trace,
          stressed: dict[str, Trace] | None = None) -> None:
    #: ``paused``: this process's replays paused at the end of a rung, by candidate_key, until a longer rung goes
    #: on from there (or ``retain`` drops them)
    _WORK.update(raw=raw, env=env, pool=pool, trace=trace, stressed=stressed or {}, paused={})


def retain(keys: set[str]) -> None:
    """Drop this process's paused replays but those of ``keys`` (the candidates that go on to a longer rung)."""
    paused: dict[str, Replay] = _WORK.setdefault("paused", {})
    for key in [k for k in paused if k not in keys]:
        del paused[key]


def evaluate(candidate: Candidate, begin: int, end: int, budget: int | None, bound: Bound | None,
             stress: str = "", per_day: int | None = None, keep: bool = False) -> Score:
    """Replay minutes [begin, end) of the trace (``stress``: of that copy, a stressed one (robust.py) or the pooled
    days (pooled.py)) with the candidate (``budget``/``bound``/``per_day``: stop early; None: never).

    From the span's start on the trace itself, a replay of the candidate paused by an earlier call goes on from its
    pause (when the early stop would not have ended it before there: then it is replayed again from the start), and
    ``keep`` pauses this one at ``end`` for a later call: the same figures as replaying it from the start."""
    trace: Trace = _WORK["stressed"][stress] if stress else _WORK["trace"]
    counted = scored(len(trace.demand) // 1440)[begin:end] if stress == POOLED else None
    stop = _Stop(budget, bound, per_day, counted) if budget is not None else None
    resumable = _resumable(begin, stress)
    key = candidate_key(candidate) if resumable else ""
    replay = _WORK.setdefault("paused", {}).pop(key, None) if resumable else None
    if replay is not None and not _goes_on(replay, end, stop):
        replay = None  # replayed from the start, with an early stop that has seen no minute yet
        stop = _Stop(budget, bound, per_day, counted) if budget is not None else None
    resumed = (replay.paused_at, len(replay.so_far.decisions)) if replay is not None else (0, 0)
    if replay is not None:
        settings = replay.settings
    else:
        settings = build_settings(offline(apply(_WORK["raw"], _WORK["pool"], candidate)), env=_WORK["env"],
                                  replay=True)
    keep = keep and resumable and len(_WORK["paused"]) < MAX_PAUSED
    if replay is None and keep:
        replay = Replay(settings, trace, store=MemoryStore())
    if replay is not None:
        run = replay.run(until=end if end < len(trace.demand) else None, stop=stop)
        if keep and replay.done is None:  # stopped early too: a longer rung may go on from there
            _WORK["paused"][key] = replay
    else:
        span = Trace(trace.start + STEP * begin, trace.demand[begin:end])
        run = simulate(settings, span, store=MemoryStore(), stop=stop)
    if counted is not None:  # the pooled days' warm-ups replayed, not counted
        run = replace(run, minutes=[m for m, c in zip(run.minutes, counted) if c],
                      decisions=[(t, d) for t, d in run.decisions if counted[min(int((t - span.start) // STEP),
                                                                                   len(counted) - 1)]])
    data = figures(run)
    days = [run.minutes[i:i + 1440] for i in range(0, len(run.minutes) - 1439, 1440)]
    daily = tuple((round(sum(m.ready for m in day) / 60.0, 2), sum(1 for m in day if m.demand > m.ready + 1e-9))
                  for day in days)
    worst = max((sat for _, sat in daily), default=0)
    low = settings.pools[_WORK["pool"]].min
    return Score(data["node_hours"], data["saturated_minutes"], data["direction_changes"], data["minutes"],
                 stop.why if stop and run.stopped else "", worst, daily,
                 foresight_node_hours([m.demand for m in run.minutes], low), run.interrupted_node_minutes,
                 changes_by_day(run, len(days)), len(run.decisions), resumed)


def score_figures(score: Score) -> dict[str, Any]:
    """A score as tuning.json holds it (without ``resumed``: how much of it was replayed is the tune's work, counted
    in ``minutes_replayed``, not a figure of the candidate)."""
    return {k: v for k, v in asdict(score).items() if k != "resumed"}


def _goes_on(replay: Replay, end: int, stop: _Stop | None) -> bool:
    """Whether a paused replay can go on to ``end`` as a replay from the start would: it is paused before ``end``,
    and ``stop`` (this call's early stop) would not have ended it before the pause (the stop is then primed with
    the minutes so far)."""
    if replay.paused_at > end:
        return False
    if stop is None:
        return True
    return not any(stop(minute) for minute in replay.so_far.minutes)


def changes_by_day(run: Run, days: int) -> tuple[int, ...]:
    """Direction changes (a scale action the other way from the one before) of each of the first ``days`` days."""
    start = run.minutes[0].time if run.minutes else 0.0
    scaled = [(t, d.action) for t, d in run.decisions if d.outcome is Outcome.SCALED]
    out = [0] * days
    for (_, before), (when, action) in zip(scaled, scaled[1:]):
        day = int((when - start) // 86400)
        if action != before and day < days:
            out[day] += 1
    return tuple(out)


Task = (tuple[int, Candidate, int, int, int | None, Bound | None]
        | tuple[int, Candidate, int, int, int | None, Bound | None, str]
        | tuple[int, Candidate, int, int, int | None, Bound | None, str, int | None]
        | tuple[int, Candidate, int, int, int | None, Bound | None, str, int | None, bool])


def evaluate_task(task: Task) -> tuple[int, Score]:
    index, candidate, begin, end, budget, bound, *rest = task
    return index, evaluate(candidate, begin, end, budget, bound, *rest)


# -- the search ---------------------------------------------------------------------------------------
@dataclass
class Search:
    """Successive halving over sampled candidates on growing prefixes of the tuning span, then neighbours of the
    best on the whole span. ``results`` holds every candidate scored on the whole tuning span without early stop
    (the frontier is drawn from them)."""

    space: Space
    train_minutes: int
    budget_pct: float  # the budget the choice must keep, a % of minutes (the margin already taken off)
    day_pct: float | None = None  # and on every whole day, a % of its minutes (None: no daily limit)
    changes_per_day: float | None = None  # direction changes allowed a day (None: any)
    candidates: int = 243
    eta: int = 3
    neighbours: int = 120
    rounds: int = 4
    seed: int = 0
    #: minutes of the pooled copy of the span the workers hold (pooled.py; 0: none): the first rungs screen on its
    #: prefixes, days made of every searched day's hours, instead of the span's first days
    pooled: int = 0
    #: the candidates the choice may take (None: any); the others are never drawn nor replayed, so that they take
    #: no place among those ranked (issue 47: robust.leaves_a_node_waiting on the GPU cluster's real weeks)
    allowed: Callable[[Candidate], bool] | None = None
    results: list[tuple[Candidate, Score]] = field(default_factory=list)
    evaluated: int = 0
    minutes_replayed: int = 0  # over every replay, early-stopped ones counted as far as they went

    def budget(self, minutes: int) -> Budget:
        per_day = None if self.day_pct is None else int(math.floor(self.day_pct / 100.0 * 1440 + 1e-9))
        changes = None if self.changes_per_day is None else int(self.changes_per_day * minutes / 1440 + 1e-9)
        return Budget(int(math.floor(self.budget_pct / 100.0 * minutes + 1e-9)), per_day, changes)

    def rungs(self) -> list[int]:
        """Prefix lengths in minutes: the whole span, and spans eta, eta^2 ... times shorter, the shortest a day."""
        lengths = [self.train_minutes]
        count = self.candidates
        shortest = min(1440, self.train_minutes)
        while count // self.eta >= 3 * self.eta and lengths[-1] > shortest:
            lengths.append(max(shortest, lengths[-1] // self.eta))
            count //= self.eta
        return lengths[::-1]

    def run(self, pool: Workers | None, progress: Progress) -> None:
        rng = random.Random(self.seed)
        seen: set[str] = set()
        alive: list[Candidate] = []
        while len(alive) < self.candidates and len(seen) < self.candidates * 20:
            cand = self.space.sample(rng)
            if candidate_key(cand) not in seen:
                seen.add(candidate_key(cand))
                if self.allowed is None or self.allowed(cand):
                    alive.append(cand)
        rungs = self.rungs()
        for depth, minutes in enumerate(rungs):
            final = depth == len(rungs) - 1
            progress(f"rung {depth + 1}/{len(rungs)}: {len(alive)} candidates on {minutes / 1440:.1f} days")
            scores = self._score(pool, alive, minutes, early=not final,
                                 copy=POOLED if not final and minutes <= self.pooled else "", keep=not final)
            counted = self._counted(minutes) if not final and minutes <= self.pooled else minutes
            ranked = sorted(zip(alive, scores), key=lambda cs: cs[1].rank(self.budget(counted)))
            if final:
                self.results += ranked
            else:
                alive = [c for c, _ in ranked[:max(1, len(ranked) // self.eta)]]
            # the next rung goes on from where these paused (tune.Replay); the others' pauses are dropped
            retained(pool, set() if final else {candidate_key(c) for c in alive})
        budget = self.budget(self.train_minutes)
        for round_ in range(self.rounds):  # hill-climb: neighbours of the best so far, a few rounds
            best = [c for c, _ in sorted(self.results, key=lambda cs: cs[1].rank(budget))[:6]]
            near: list[Candidate] = []
            for i in range(self.neighbours * 20):
                if len(near) >= self.neighbours // self.rounds:
                    break
                cand = self.space.mutate(rng, best[i % len(best)])
                if rng.random() < PAIR_MOVES:  # two knobs at once: a narrow good point is often two moves away
                    cand = self.space.mutate(rng, cand)
                if candidate_key(cand) not in seen:
                    seen.add(candidate_key(cand))
                    if self.allowed is None or self.allowed(cand):
                        near.append(cand)
            if near:
                progress(f"neighbours {round_ + 1}/{self.rounds}: {len(near)} candidates near the best on "
                         f"{self.train_minutes / 1440:.1f} days")
                bound = self._near_bound(budget)
                # with a feasible candidate known, one over a day's limit could be neither the choice nor a
                # finalist (both are drawn from the feasible): it stops there, as it stops over the span's budget
                scores = self._score(pool, near, self.train_minutes, early=True, bound=bound,
                                     per_day=budget.per_day if bound is not None else None)
                self.results += [(c, s) for c, s in zip(near, scores) if not s.stopped]

    def _counted(self, minutes: int) -> int:
        """The minutes that count among the first ``minutes`` of the pooled days (their warm-ups do not)."""
        return sum(scored(self.pooled // 1440)[:minutes])

    def _near_bound(self, budget: Budget) -> Bound | None:
        """Where a neighbour stops for cost: once its node-hours by the end of a day of the span exceed the best
        feasible candidate's by then, plus NEAR of the best's whole span (a costlier neighbour could be
        neither the choice nor a finalist; most show it within a day or two). Only those replayed to the end are
        kept."""
        feasible = [s for _, s in self.results if s.feasible(budget)]
        if not feasible:
            return None
        best = min(feasible, key=lambda s: s.cost)
        slack = NEAR * best.cost
        if not best.days:
            return best.cost + slack
        return tuple(hours + slack for hours in itertools.accumulate(h for h, _ in best.days))

    def _score(self, pool: Workers | None, cands: list[Candidate], minutes: int,
               early: bool, bound: Bound | None = None, copy: str = "", per_day: int | None = None,
               keep: bool = False) -> list[Score]:
        """Score every candidate on the first ``minutes`` (``copy``: of that copy of the span, the pooled days);
        with ``early``, each stops once it cannot be the best (``bound``: a fixed node-hours bound instead of the
        best feasible of these candidates; ``per_day``: once over that many saturated minutes on a whole day).

        Candidates go in waves of WAVE; the bound (best feasible node-hours) tightens between waves only, so the
        results do not depend on the number of processes or on which finished first."""
        budget = self.budget(self._counted(minutes) if copy == POOLED else minutes)
        scores: list[Score] = []
        best: float | None = None
        for first in range(0, len(cands), WAVE):
            limit = bound if bound is not None else best
            tasks: list[Task] = [(i, cands[i], 0, minutes, budget.total if early else None,
                                  limit if early else None, copy, per_day if early else None, keep)
                                 for i in range(first, min(first + WAVE, len(cands)))]
            for _, score in replays(pool, tasks):
                scores.append(score)
                self.evaluated += 1
                self.minutes_replayed += score.minutes - score.resumed[0]
                if score.feasible(budget):
                    best = score.cost if best is None else min(best, score.cost)
        return scores


def candidate_key(candidate: Candidate) -> str:
    """One string per distinct candidate (its knobs in order), to tell whether it was scored already."""
    return repr(sorted(candidate.items()))


#: Minutes replayed and the engine's decisions in them, by ``replays`` in this process since it started (every
#: replay of a tune goes through it): counts of the tune's work that do not depend on the machine's load, beside its
#: CPU seconds.
REPLAYED = [0, 0]


def replays(pool: Workers | None, tasks: Sequence[Task]) -> list[tuple[int, Score]]:
    """Each task evaluated, in the worker processes or (no pool) in this one; in the order of ``tasks``."""
    done = pool.map(tasks) if pool is not None else [evaluate_task(task) for task in tasks]
    REPLAYED[0] += sum(score.minutes - score.resumed[0] for _, score in done)
    REPLAYED[1] += sum(score.decisions - score.resumed[1] for _, score in done)
    return done


def retained(pool: Workers | None, keys: set[str]) -> None:
    """Paused replays dropped everywhere but those of ``keys`` (``retain`` in each process)."""
    if pool is not None:
        pool.retain(keys)
    else:
        retain(keys)


def _resumable(begin: int, stress: str) -> bool:
    """Whether a replay can pause and go on (Replay): from the span's start, on the trace itself."""
    return begin == 0 and not stress


#: Seconds a worker waits for a task before it looks whether the tune that started it is still alive (a tune killed
#: outright cannot tell its workers to stop: they end by themselves within this).
PARENT_CHECK = 2.0


def _serve(inbox: Any, outbox: Any, initargs: tuple[Any, ...]) -> None:
    """A worker process: tasks from its own inbox (a paused replay stays in the process that paused it). Ctrl-C is
    the parent's to handle (it shuts the workers down): a worker ignores it rather than die with a traceback each."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _init(*initargs)
    parent = multiprocessing.parent_process()
    while True:
        try:
            message = inbox.get(timeout=PARENT_CHECK)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                return  # the tune was killed: nothing will ever come, and nobody would read an answer
            continue
        if message is None:
            return
        kind, position, body = message
        if kind == "retain":
            retain(body)
            continue
        try:
            outbox.put(("done", position, evaluate_task(body)))
        except Exception as exc:  # noqa: BLE001 - handed to the parent, which raises it
            try:
                pickle.dumps(exc)
            except Exception:  # noqa: BLE001 - an error that cannot cross processes is said as text
                exc = RuntimeError(f"{type(exc).__name__}: {exc}")
            outbox.put(("error", position, exc))


class Workers:
    """The tune's worker processes, each given the config and the traces once. Unlike a process pool's, a task
    goes to a chosen process: a candidate's longer rung to the process that paused its shorter one (Replay); the
    others to the process with the fewest tasks of the batch."""

    def __init__(self, count: int, initargs: tuple[Any, ...]) -> None:
        ctx = multiprocessing.get_context()  # the platform's own, as ProcessPoolExecutor's: Linux forks
        self._results = ctx.Queue()
        self._inboxes = [ctx.Queue() for _ in range(count)]
        self._procs = [ctx.Process(target=_serve, args=(inbox, self._results, initargs), daemon=True)
                       for inbox in self._inboxes]
        for proc in self._procs:
            proc.start()
        self._owner: dict[str, int] = {}  # which process paused a candidate's replay

    def map(self, tasks: Sequence[Task]) -> list[tuple[int, Score]]:
        load = [0] * len(self._inboxes)
        for position, task in enumerate(tasks):
            key = candidate_key(task[1]) if _resumable(task[2], task[6] if len(task) > 6 else "") else ""
            worker = self._owner.get(key)
            if worker is None:
                worker = min(range(len(load)), key=load.__getitem__)
            if key and len(task) > 8 and task[8]:
                self._owner[key] = worker
            load[worker] += 1
            self._inboxes[worker].put(("task", position, task))
        done: dict[int, tuple[int, Score]] = {}
        failed: BaseException | None = None
        while len(done) < len(tasks):
            kind, position, body = self._next()
            if kind == "error":
                failed = failed or body
                done[position] = (position, Score(0.0, 0, 0, 0))
            else:
                done[position] = body
        if failed is not None:
            raise failed
        return [done[i] for i in range(len(tasks))]

    @property
    def pids(self) -> list[int | None]:
        return [proc.pid for proc in self._procs]

    def retain(self, keys: set[str]) -> None:
        self._owner = {k: w for k, w in self._owner.items() if k in keys}
        for inbox in self._inboxes:
            inbox.put(("retain", 0, set(keys)))

    def _next(self) -> tuple[str, int, Any]:
        while True:
            try:
                return self._results.get(timeout=1.0)
            except queue.Empty:
                dead = [proc.exitcode for proc in self._procs if not proc.is_alive()]
                if dead:
                    raise RuntimeError(f"a tune worker process ended (exit code {dead[0]})") from None

    def shutdown(self) -> None:
        for inbox in self._inboxes:
            inbox.put(None)
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()


def pareto(results: list[tuple[Candidate, Score]]) -> list[tuple[Candidate, Score]]:
    """The points no other beats on both node-hours and saturated minutes (fewer direction changes break ties)."""
    ordered = sorted(results, key=lambda cs: (cs[1].node_hours, cs[1].saturated_minutes, cs[1].direction_changes))
    out: list[tuple[Candidate, Score]] = []
    for cand, score in ordered:
        if not out or score.saturated_minutes < out[-1][1].saturated_minutes:
            out.append((cand, score))
    return out


def choose(results: list[tuple[Candidate, Score]], budget: Budget,
           day_budget: int | None = None) -> tuple[Candidate, Score, str]:
    """The fewest node-hours within the budget (then fewest direction changes). With none within it on every
    day, the same within the span's budget alone; with none within that, the least saturated. The flag says which:
    ``every_day``, ``span`` or ``over``.

    Robust (``day_budget`` given: the whole budget of one day, ``budget.per_day`` being that less the margin): the
    worst day decides, not the span's total. Within the margin on every day first; else within the budget on every
    day (``span`` is then never used: a span's total hides a bad day); else the least saturated worst day."""
    tries = [("every_day", budget), ("span", Budget(budget.total, None, budget.changes))]
    if day_budget is not None:
        tries = [("every_day", budget), ("every_day_no_margin", Budget(10 ** 9, day_budget, budget.changes))]
    if budget.changes is not None:  # no candidate calm enough: the saturation budget alone, and the report says so
        tries.append(("changes_over", replace(budget, changes=None)))

    def least_saturated(cs: tuple[Candidate, Score]) -> tuple[float, ...]:
        score = cs[1]
        first = (score.worst_day,) if day_budget is not None else ()
        return (*first, score.saturated_minutes, score.node_hours)

    for flag, limit in tries:
        feasible = [cs for cs in results if cs[1].feasible(limit)]
        if feasible:
            cand, score = min(feasible, key=lambda cs: (cs[1].cost, cs[1].direction_changes))
            return cand, score, flag
    cand, score = min(results, key=least_saturated)
    return cand, score, "over"


def make_pool(workers: int, raw: dict[str, Any], env: dict[str, str], pool: str, trace: Trace,
              stressed: dict[str, Trace] | None = None) -> Workers | None:
    """The worker processes (None: evaluate in this process), each given the config and the traces once."""
    _init(raw, env, pool, trace, stressed)
    if workers <= 1:
        return None
    return Workers(workers, (raw, env, pool, trace, stressed))


def default_workers() -> int:
    """Two processes, or fewer on a machine with one core."""
    return max(1, min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


__all__ = ["Budget", "Score", "Search", "candidate_key", "choose", "default_workers", "evaluate", "evaluate_task",
           "make_pool", "pareto", "replays"]
