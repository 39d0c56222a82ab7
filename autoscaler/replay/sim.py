"""Run a trace through the real routing, policy and engine on a virtual clock (no sleeping, no HTTP)."""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Generator

from autoscaler.clock import ManualClock
from autoscaler.config.load import Settings
from autoscaler.engine.core import Engine
from autoscaler.engine.parts import Parts
from autoscaler.pool.events import EventLog
from autoscaler.engine.facts import keeps_headroom
from autoscaler.models import Decision, Mode
from autoscaler.reconcile.loop import Reconciler
from autoscaler.replay.alerts import AlertEmulator
from autoscaler.replay.cluster import DEFAULT_GPUS_PER_NODE, POOL_LABEL, ReplayCluster
from autoscaler.replay.trace import STEP, ReplayError, Trace
from autoscaler.sources import alertmanager
from autoscaler.store import SqlStore, Store
from providers import build
from providers.simulated import SimulatedProvider, SimulatedSettings

SAMPLE, EVALUATE, FLUSH, RECONCILE = 0, 1, 2, 3  # order of events at the same instant


def pending_gpus(demand: float, ready: int, gpus_per_node: int) -> float:
    """Unmet demand in GPUs, what a pending-GPU-requests rule watches: (demand - ready, clipped at 0) x GPUs/node."""
    return round(max(0.0, demand - ready) * gpus_per_node, 6)


def utilization(demand: float, ready: int) -> float:
    """min(100, 100 x demand / ready); 100 with demand and no node, 0 with neither."""
    if ready <= 0:
        return 100.0 if demand > 0 else 0.0
    return min(100.0, 100.0 * demand / ready)


@dataclass(frozen=True)
class Minute:
    """One row of the timeline: the pool at the start of the minute and what was decided during it."""

    time: float
    demand: float
    ready: int
    requested: int
    utilization: float
    outcomes: tuple[str, ...]
    by_pool: tuple[tuple[str, int], ...] = ()  # ready nodes of each pool (a group's pools, replayed together)

    def with_outcomes(self, outcomes: list[str]) -> Minute:
        """The same minute with what was decided during it (built directly: ``dataclasses.replace`` is several
        times slower, and the tuner calls this for most minutes of hundreds of replayed weeks)."""
        return Minute(self.time, self.demand, self.ready, self.requested, self.utilization, tuple(outcomes),
                      self.by_pool)


@dataclass
class Run:
    """Everything one replay produced."""

    minutes: list[Minute]
    decisions: list[tuple[float, Decision]]
    notifications: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    interrupted_node_minutes: float = 0.0  # GPU work running on nodes when they were removed (see cluster.py)
    interrupted_pods: int = 0
    evictions: int = 0  # replicas (movable work) that started again elsewhere
    stopped: bool = False  # the ``stop`` hook ended it before the trace did
    reconciles: list[float] = field(default_factory=list)  # times of reconciler ticks that decided something
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE  # what one node of demand is in GPUs (unmet demand's unit)
    ticks: int = 0  # reconciler ticks run (a tick is run only when it may decide something)
    # times the reconciler read the cluster for the headroom (a full tick, or its headroom check alone): each reading
    # is remembered for the scale-in's stabilization window, so a live run must tick at the same moments to match
    headroom_reads: list[float] = field(default_factory=list)
    restarts: int = 0  # nodes started again from stopped (``simulated.stopped``) rather than made new


#: Called with each new minute of a replay; True stops the replay there (the tuner drops a hopeless candidate).
StopHook = Callable[[Minute], bool]


def replay_route(settings: Settings) -> tuple[str, tuple[str, ...]]:
    """The pool or group the rules drive (a trace is one pool's or one group's demand) and its pools; ReplayError
    when that is ambiguous or a pool is not simulated."""
    cfg = settings.config.replay
    if cfg is None:
        raise ReplayError("replay: missing; the config needs a `replay:` section with `rules`")
    route = cfg.rules[0].pool
    for i, rule in enumerate(cfg.rules):
        if rule.pool != route:
            raise ReplayError(f"replay.rules[{i}].pool: every rule must name the same pool as "
                              f"replay.rules[0] ({route}); a trace is one pool's demand")
    members = settings.groups.get(route, (route,))
    for pool in members:
        spec = settings.pools[pool]
        if spec.provider != "simulated":
            index = list(settings.pools).index(pool)
            raise ReplayError(f"pools[{index}].provider: the replay needs the simulated provider "
                              f"(pool {pool} uses {spec.provider})")
    return route, members


def replay_pool(settings: Settings) -> str:
    """The pool the rules drive; for a group, its most preferred pool (whose settings the tuner tunes)."""
    return replay_route(settings)[1][0]


def fixed_step(settings: Settings) -> Settings:
    """The same config with every pool on a fixed step of 1 in both directions (the baseline)."""
    pools = {name: replace(spec, scale_out=replace(spec.scale_out, mode=Mode.STEP, step=1),
                           scale_in=replace(spec.scale_in, mode=Mode.STEP, step=1))
             for name, spec in settings.pools.items()}
    return Settings(config=settings.config, pools=pools, groups=settings.groups)


def victims_of(settings: Settings, pool: str) -> str:
    """The pool's ``scale_in.victims``: cloud, alerted, idle or movable."""
    return settings.pools[pool].victims


def with_victims(settings: Settings, pool: str, victims: str) -> Settings:
    """The same config with the pool's ``scale_in.victims`` set; a pool without ``node_selector`` gets one (the
    replay's cluster holds this pool's nodes only, so any selector selects them)."""
    spec = settings.pools[pool]
    selector = spec.node_selector or ((POOL_LABEL, pool),)
    pools = {**settings.pools, pool: replace(spec, victims=victims, node_selector=selector)}
    return Settings(config=settings.config, pools=pools, groups=settings.groups)


def simulate(settings: Settings, trace: Trace, use_steps: bool = True, store_url: str = "sqlite://",
             victims: str | None = None, store: Store | None = None, stop: StopHook | None = None) -> Run:
    """Replay the trace; the engine is the service's own, with an in-memory store and a virtual clock.

    ``victims`` overrides the pool's ``scale_in.victims`` (``cloud``: a count scale-in, the newest node goes).
    ``store``: a fresh store to use instead of SQLite at ``store_url`` (the tuner's MemoryStore); ``stop``: see
    StopHook.
    """
    replay = Replay(settings, trace, use_steps, store_url, victims, store)
    try:
        return replay.run(stop=stop)
    finally:
        replay.close()


class Replay:
    """A replay that can pause before a minute and go on from there later: the tuner's successive halving scores a
    candidate on the first day, then (if it survives) on more days; the longer rung goes on from the pause instead
    of replaying the first day again. The minutes before a pause are exactly those of a replay of the trace cut
    there (nothing before a minute depends on what comes after it)."""

    def __init__(self, settings: Settings, trace: Trace, use_steps: bool = True, store_url: str = "sqlite://",
                 victims: str | None = None, store: Store | None = None) -> None:
        self._own: SqlStore | None = SqlStore(store_url) if store is None else None  # closed by close()
        used: Store | None = self._own if self._own is not None else store
        assert used is not None
        self.settings = settings
        self._steps = _steps(settings, trace, use_steps, victims, used)
        next(self._steps)  # the setup, up to the first event
        self.done: Run | None = None
        self.so_far = Run([], [])  # the run up to the pause
        self.paused_at = 0  # the minutes replayed so far (the index of the next minute)

    def run(self, until: int | None = None, stop: StopHook | None = None) -> Run:
        """Replay on to the start of minute ``until`` (None: the end of the trace), ``stop`` called with each new
        minute (when it says stop, the replay pauses there: it can go on later, from that minute's other events);
        the run so far (its lists are copies: going on later leaves this one as it is). Once the trace has ended,
        that run again."""
        if self.done is not None:
            return self.done
        try:
            run = self._steps.send((until, stop))
        except StopIteration as ended:
            self.done = self.so_far = ended.value
            self.paused_at = len(self.done.minutes)
            return self.done
        assert run is not None  # only the setup yields none
        self.so_far, self.paused_at = run, len(run.minutes)
        return run

    def close(self) -> None:
        """Done with it: a store of its own (SQLite at ``store_url``) is closed."""
        self._steps.close()
        if self._own is not None:
            self._own.engine.dispose()
            self._own = None


def _steps(settings: Settings, trace: Trace, use_steps: bool, victims: str | None,
           store: Store) -> Generator[Run | None, tuple[int | None, StopHook | None], Run]:
    """The replay's setup and events (see Replay): yields None once set up, then the run so far at each pause; it
    is sent ``(until, stop)``: pause before minute ``until`` (None: never), ``stop`` see StopHook."""
    members = replay_route(settings)[1]
    pool = members[0]
    for member in members:
        if victims is not None and victims != victims_of(settings, member):
            settings = with_victims(settings, member, victims)
        elif victims_of(settings, member) != "cloud" and not settings.pools[member].node_selector:
            settings = with_victims(settings, member, victims_of(settings, member))  # the cluster needs no selector
    cfg = settings.config.replay
    assert cfg is not None
    sims: dict[str, SimulatedSettings] = {name: settings.pools[name].provider_settings for name in members}
    sim = sims[pool]
    now = trace.start
    store.ensure_pools(list(settings.pools))
    providers = {name: build(s.provider, name, s.provider_settings) for name, s in settings.pools.items()}
    simulated = [providers[name] for name in members]
    assert all(isinstance(p, SimulatedProvider) for p in simulated)

    def names() -> tuple[list[str], dict[str, str]]:
        """Every node of the replayed pools, and each node's pool."""
        owners = {node: name for name, p in zip(members, simulated) if isinstance(p, SimulatedProvider)
                  for node in p.node_names()}
        return list(owners), owners

    def follow_at(when: float) -> tuple[list[str], float, dict[str, str]]:
        listed, owners = names()
        return listed, when, owners

    gpus = gpus_per_node(settings, pool)
    start_names, start_owners = names()
    nodes = ReplayCluster(start_names, gpus, sim.provision_seconds, now,
                          pack=cfg.placement == "pack", movable_share=cfg.movable_share, owners=start_owners,
                          provision_by_pool={name: s.provision_seconds for name, s in sims.items()},
                          stopped_by_pool={name: (s.stopped.keep, s.stopped.restart_seconds)
                                           for name, s in sims.items() if s.stopped is not None})
    # The engine's own node-aware scale-in (pick, cordon, re-check, remove by name) runs against the replay's
    # cluster; a forced drain's retries would sleep, the replay never forces one.
    clock = ManualClock(now)
    parts = Parts.build(settings, store, providers, EventLog(store, clock=clock), clock=clock, cluster=nodes)
    parts.hold.renew = False  # the virtual clock stands still during a decision: no lease can lapse
    engine = Engine(parts)
    reconciler = Reconciler(parts, engine)
    reconcile_every = settings.config.server.reconcile_interval or 30.0
    emulator = AlertEmulator(cfg, settings.config.routing, use_steps=use_steps)
    # Each minute's sample is queued when the one before it is taken (a SAMPLE sorts first at its instant, so it is
    # always taken in time): the queue holds a few events, not a week's minutes.
    queue: list[tuple[float, int, int]] = [(trace.start, SAMPLE, 0)] if trace.demand else []
    queue.append((trace.start, EVALUATE, 0))
    demands, first, count, end = trace.demand, trace.start, len(trace.demand), trace.end
    single = len(members) == 1  # one pool: every node is its own, its ready nodes are all the ready nodes
    spec = settings.pools[pool]
    # a window that raises the floor needs a tick to enforce it (its floor depends on the time: every tick looks); a
    # window that only sets the headroom is read by each decision (and topped up below when the cluster is read)
    scheduled = any(w.min > settings.pools[name].min for name in members for w in settings.pools[name].schedules)
    floors = scheduled or any(sims[name].initial_count < settings.pools[name].min or sims[name].capacity is not None
                              for name in members)  # a floor, or a shortfall to record

    def short() -> bool:
        """Whether a tick has a floor or a shortfall to act on: a pool below its min, or nodes it was asked for
        and does not have (a schedule's floor depends on the time: every tick looks)."""
        return scheduled or any(p.undelivered() > 0 or p.asked() < settings.pools[name].min
                                for name, p in zip(members, simulated) if isinstance(p, SimulatedProvider))
    topped_up = keeps_headroom(spec) and bool(spec.node_selector)  # the reconciler keeps headroom from the cluster
    if floors or topped_up:  # otherwise no tick could decide anything
        queue.append((trace.start, RECONCILE, 0))
    reconciles: list[float] = []
    headroom_reads: list[float] = []
    ticks = 0
    spare_enough: tuple[int, int, int] | None = None  # the cluster's usage when the headroom was last found kept
    heapq.heapify(queue)
    minutes: list[Minute] = []
    decisions: list[tuple[float, Decision]] = []
    notifications: list[tuple[float, dict[str, Any]]] = []
    outcomes: list[str] = []
    stopped = False
    bound = len(trace.demand) * (4 + int(STEP / cfg.evaluation_interval)) + 10 * len(cfg.rules) + 100

    def so_far() -> Run:
        """The run up to now, its lists copied (after a pause the replay goes on with its own)."""
        if minutes:
            minutes[-1] = minutes[-1].with_outcomes(outcomes)
        return Run(list(minutes), list(decisions), list(notifications), round(nodes.interrupted_node_minutes, 4),
                   nodes.interrupted_pods, nodes.evictions, stopped, list(reconciles), gpus, ticks,
                   list(headroom_reads), nodes.restarts)

    until, stop = yield None
    for _ in range(bound * 4):
        if not queue:
            break
        if until is not None and queue[0][1] == SAMPLE and queue[0][2] >= until:  # a pause: the minute is next
            until, stop = yield so_far()
            continue
        now, kind, index = heapq.heappop(queue)
        clock.now = nodes.now = now
        if nodes.waiting:
            nodes.place(now)
        if kind == SAMPLE:
            if minutes and outcomes:
                minutes[-1] = minutes[-1].with_outcomes(outcomes)
            outcomes = []
            if index + 1 < count:
                heapq.heappush(queue, (first + STEP * (index + 1), SAMPLE, index + 1))
            demand = demands[index]
            nodes.set_demand(demand, now)
            ready = nodes.ready(now)
            if single:
                shares: tuple[tuple[str, int], ...] = ((pool, ready),)
            else:
                by_pool = nodes.ready_by_pool(now)
                shares = tuple((name, by_pool.get(name, 0)) for name in members)
            minutes.append(Minute(now, demand, ready, nodes.requested, utilization(demand, ready), (), shares))
            if stop is not None and stop(minutes[-1]):
                # stopped here, as a pause: the minute's other events are still queued, so a longer rung whose
                # early stop would not end it here goes on from it (Replay)
                stopped = True
                until, stop = yield so_far()
                stopped = False
        elif kind == EVALUATE:
            at = int((now - first) // STEP)  # trace.at(now), inline: twice a minute of every replay
            demand, ready = demands[at] if 0 <= at < count else 0.0, nodes.ready(now)
            pending = pending_gpus(demand, ready, gpus)
            for item in emulator.evaluate(now, utilization(demand, ready), pending):
                heapq.heappush(queue, (item[0], FLUSH, item[1]))
            nxt = now + cfg.evaluation_interval
            if nxt < end:
                heapq.heappush(queue, (nxt, EVALUATE, 0))
        elif kind == RECONCILE:
            # A tick only for the headroom is run when the cluster shows it short: the others decide nothing (and a
            # full tick, its lease and cloud view, costs more than the minute's replay)
            # Likewise a tick for floors and shortfalls runs only when a pool is below its min or short of nodes.
            due = floors and short()
            if not due and (usage := nodes.usage(now)) != spare_enough:
                # the check counts the requested GPUs itself (the listing's sum, without building the listing); a
                # tick that acts lists the pods as the service does
                used = usage[2] / (spec.gpus_per_node or DEFAULT_GPUS_PER_NODE)
                due = reconciler.headroom_short(spec, nodes.requested, now, used=used) is not None
                spare_enough = None if due else usage
            elif not due and topped_up:  # unchanged since it was last enough: still enough, and the same floor
                reconciler.remember_again(spec, now)
            if topped_up:
                headroom_reads.append(now)
            ticked = reconciler.tick(now).decisions if due else []
            ticks += due
            if ticked:
                reconciles.append(now)
                decisions += [(now, decision) for decision in ticked]
                outcomes += [decision.outcome.value for decision in ticked]
                nodes.follow(*follow_at(now))
            if now + reconcile_every < end:
                heapq.heappush(queue, (now + reconcile_every, RECONCILE, 0))
        else:
            body, again = emulator.flush(now, index)
            if again is not None and again < end:
                heapq.heappush(queue, (again, FLUSH, index))
            if body is not None:
                notifications.append((now, body))
                for decision in engine.handle_notification(alertmanager.parse(body, {})):
                    decisions.append((now, decision))
                    outcomes.append(decision.outcome.value)
                nodes.follow(*follow_at(now))
    else:
        raise ReplayError("replay did not finish: too many events (is evaluation_interval tiny?)")
    return so_far()


def gpus_per_node(settings: Settings, pool: str) -> int:
    """GPUs of one node of the pool: ``pools[].gpus_per_node`` where the pool sets it, else 8 (a default of 1, which
    counts demand in nodes, would make every pod of the work model a whole node)."""
    for raw in settings.config.pools:
        if raw.name == pool and "gpus_per_node" in raw.model_fields_set:
            return int(getattr(raw, "gpus_per_node"))
    return DEFAULT_GPUS_PER_NODE


def static_peak(trace: Trace, gpus: int = DEFAULT_GPUS_PER_NODE) -> Run:
    """The baseline that provisions for the peak all the time."""
    peak = math.ceil(max(trace.demand) - 1e-9) if trace.demand else 0
    minutes = [Minute(trace.start + STEP * i, d, peak, peak, utilization(d, peak), ())
               for i, d in enumerate(trace.demand)]
    return Run(minutes, [], gpus_per_node=gpus)
