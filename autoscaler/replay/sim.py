"""Run a trace through the real routing, policy and engine on a virtual clock (no sleeping, no HTTP)."""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace
from typing import Any

from autoscaler.config import Settings
from autoscaler.engine import Engine
from autoscaler.events import EventLog
from autoscaler.models import Decision, Mode, Outcome
from autoscaler.reconciler import Reconciler
from autoscaler.replay.alerts import AlertEmulator
from autoscaler.replay.trace import STEP, ReplayError, Trace
from autoscaler.sources import alertmanager
from autoscaler.store import SqlStore
from providers import build
from providers.simulated import SimulatedSettings

SAMPLE, EVALUATE, FLUSH, RECONCILE = 0, 1, 2, 3  # order of events at the same instant


@dataclass
class Nodes:
    """The pool as the cloud has it: nodes requested at t are ready at t + provision_seconds."""

    ready: int
    provision_seconds: float
    pending: list[float] = field(default_factory=list)  # ready times, ascending

    @property
    def requested(self) -> int:
        return self.ready + len(self.pending)

    def advance(self, now: float) -> None:
        """Bring up every node whose provisioning is over."""
        while self.pending and self.pending[0] <= now:
            self.pending.pop(0)
            self.ready += 1

    def resize(self, to: int, now: float) -> None:
        """Ask for ``to`` nodes: new ones start provisioning, removals take pending nodes first."""
        if to > self.requested:
            self.pending.extend([now + self.provision_seconds] * (to - self.requested))
            self.pending.sort()
        while self.requested > to and self.pending:
            self.pending.pop()
        self.ready = min(self.ready, to)
        self.advance(now)


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


@dataclass
class Run:
    """Everything one replay produced."""

    minutes: list[Minute]
    decisions: list[tuple[float, Decision]]
    notifications: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    reconciles: list[float] = field(default_factory=list)  # times of reconciler ticks that decided something


def replay_pool(settings: Settings) -> str:
    """The pool the rules drive (a trace is one pool's demand); ReplayError when that is ambiguous."""
    cfg = settings.config.replay
    if cfg is None:
        raise ReplayError("replay: missing; the config needs a `replay:` section with `rules`")
    pool = cfg.rules[0].pool
    for i, rule in enumerate(cfg.rules):
        if rule.pool != pool:
            raise ReplayError(f"replay.rules[{i}].pool: every rule must name the same pool as "
                              f"replay.rules[0] ({pool}); a trace is one pool's demand")
    spec = settings.pools[pool]
    if spec.provider != "simulated":
        index = list(settings.pools).index(pool)
        raise ReplayError(f"pools[{index}].provider: the replay needs the simulated provider "
                          f"(pool {pool} uses {spec.provider})")
    return pool


def fixed_step(settings: Settings) -> Settings:
    """The same config with every pool on a fixed step of 1 in both directions (the baseline)."""
    pools = {name: replace(spec, scale_out=replace(spec.scale_out, mode=Mode.STEP, step=1),
                           scale_in=replace(spec.scale_in, mode=Mode.STEP, step=1))
             for name, spec in settings.pools.items()}
    return Settings(config=settings.config, pools=pools)


def simulate(settings: Settings, trace: Trace, use_steps: bool = True, store_url: str = "sqlite://") -> Run:
    """Replay the trace; the engine is the service's own, with an in-memory store and a virtual clock."""
    pool = replay_pool(settings)
    cfg = settings.config.replay
    assert cfg is not None
    sim: SimulatedSettings = settings.pools[pool].provider_settings
    now = trace.start
    store = SqlStore(store_url)
    store.ensure_pools(list(settings.pools))
    providers = {name: build(spec.provider, name, spec.provider_settings) for name, spec in settings.pools.items()}
    engine = Engine(settings, store, providers, EventLog(store), clock=lambda: now)
    spec = settings.pools[pool]
    reconciler = Reconciler(settings, store, providers, engine, clock=lambda: now)
    reconcile_every = settings.config.server.reconcile_interval or 30.0
    emulator = AlertEmulator(cfg, settings.config.routing, use_steps=use_steps)
    nodes = Nodes(ready=sim.initial_count, provision_seconds=sim.provision_seconds)
    queue: list[tuple[float, int, int]] = [(trace.start + STEP * i, SAMPLE, i) for i in range(len(trace.demand))]
    queue.append((trace.start, EVALUATE, 0))
    if spec.schedules or sim.initial_count < spec.min:  # otherwise no tick could decide anything
        queue.append((trace.start, RECONCILE, 0))
    reconciles: list[float] = []
    heapq.heapify(queue)
    minutes: list[Minute] = []
    decisions: list[tuple[float, Decision]] = []
    notifications: list[tuple[float, dict[str, Any]]] = []
    outcomes: list[str] = []
    bound = len(trace.demand) * (4 + int(STEP / cfg.evaluation_interval)) + 10 * len(cfg.rules) + 100
    for _ in range(bound * 4):
        if not queue:
            break
        now, kind, index = heapq.heappop(queue)
        nodes.advance(now)
        if kind == SAMPLE:
            if minutes:
                minutes[-1] = replace(minutes[-1], outcomes=tuple(outcomes))
            outcomes = []
            demand = trace.demand[index]
            minutes.append(Minute(now, demand, nodes.ready, nodes.requested, utilization(demand, nodes.ready), ()))
        elif kind == EVALUATE:
            demand = trace.at(now)
            pending = pending_gpus(demand, nodes.ready, spec.gpus_per_node)
            for item in emulator.evaluate(now, utilization(demand, nodes.ready), pending):
                heapq.heappush(queue, (item[0], FLUSH, item[1]))
            nxt = now + cfg.evaluation_interval
            if nxt < trace.end:
                heapq.heappush(queue, (nxt, EVALUATE, 0))
        elif kind == RECONCILE:
            ticked = reconciler.tick(now).decisions
            if ticked:
                reconciles.append(now)
            for decision in ticked:
                decisions.append((now, decision))
                outcomes.append(decision.outcome.value)
                if decision.outcome is Outcome.SCALED and decision.pool == pool and decision.to is not None:
                    nodes.resize(decision.to, now)
            if now + reconcile_every < trace.end:
                heapq.heappush(queue, (now + reconcile_every, RECONCILE, 0))
        else:
            body, again = emulator.flush(now, index)
            if again is not None and again < trace.end:
                heapq.heappush(queue, (again, FLUSH, index))
            if body is not None:
                notifications.append((now, body))
                for decision in engine.handle_notification(alertmanager.parse(body, {})):
                    decisions.append((now, decision))
                    outcomes.append(decision.outcome.value)
                    if decision.outcome is Outcome.SCALED and decision.pool == pool and decision.to is not None:
                        nodes.resize(decision.to, now)
    else:
        raise ReplayError("replay did not finish: too many events (is evaluation_interval tiny?)")
    if minutes:
        minutes[-1] = replace(minutes[-1], outcomes=tuple(outcomes))
    store.engine.dispose()
    return Run(minutes, decisions, notifications, reconciles)


def static_peak(trace: Trace) -> Run:
    """The baseline that provisions for the peak all the time."""
    peak = math.ceil(max(trace.demand) - 1e-9) if trace.demand else 0
    minutes = [Minute(trace.start + STEP * i, d, peak, peak, utilization(d, peak), ())
               for i, d in enumerate(trace.demand)]
    return Run(minutes, [])
