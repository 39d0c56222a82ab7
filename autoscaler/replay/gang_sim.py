"""The gang replay: a trace of all-or-nothing requests through the service's own code on a virtual clock (docs/gang.md).

Two runs of the same trace, each with the real engine, reconciler and simulated clouds (each pool's
``simulated.capacity`` the most nodes it delivers: the spot shortfall; ``simulated.provision_seconds`` its boot):

- ``atomic``: each request asked of the group as ``POST /api/v1/pools/{group}/scale`` with ``"atomic": true`` asks
  it (:func:`autoscaler.gang.ask.ask_group`); the reconciler's tick provisions it or rolls the short pool back and
  asks the next; the job starts when its gang is ``provisioned``.
- ``plain``: each request a plain scale-out of the group by its nodes (as an alert routed to the group asks it); the
  nodes that came stay, a shortfall is asked of the group's next pool by the reconciler; the job starts once as
  many nodes as it needs are ready.

A request the group cannot take now (busy, at max) is asked again at each tick; in the plain run, so is one left
short with nothing more on its way (the cloud fell short and the group could not take the rest), for what it lacks.
Each new node goes to the earliest
request still short of nodes (in the atomic run, the one whose gang waits on that node's pool: a pool serves one gang
at a time; once provisioned, a job holds exactly the nodes its gang's ``provisioned`` names). Once the job has run for
its ``duration``, its nodes are removed by name (a forced manual scale-in). Node-hours count GPU-ready nodes, as the
replay's ``node_hours``; a node *waits* from ready until its job starts (or it is removed), and waits *past
provision_time* after its pool's ``provision_time`` from when it was asked for.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from autoscaler.clock import ManualClock
from autoscaler.cluster.nodes import NodeView
from autoscaler.cluster.requests import nodes_needed
from autoscaler.config.load import Settings
from autoscaler.engine.core import Engine
from autoscaler.engine.parts import Parts
from autoscaler.gang.ask import Ask, ask_group, ask_pool
from autoscaler.models import Action, Decision, Outcome, Signal, Source
from autoscaler.pool.events import EventLog
from autoscaler.reconcile.loop import Reconciler
from autoscaler.replay.cluster import ReplayCluster
from autoscaler.replay.gang_trace import GangRow
from autoscaler.replay.trace import ReplayError
from autoscaler.store import Store
from autoscaler.store.memory import MemoryStore
from providers import build
from providers.simulated import SimulatedProvider

ARRIVE, TICK, END = 0, 1, 2  # order of events at the same instant
HORIZON = 86400.0  # a request waiting longer after the last row: the replay stops and says so


class GangCluster(ReplayCluster):
    """The replay's cluster for named pools: each pool's nodes selected by its own ``node_selector``; ``marked``
    (what the gang's tick reads) is the pool's nodes (no pods run on them here)."""

    def __init__(self, selectors: Mapping[str, Mapping[str, str]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.selectors = {tuple(sorted(s.items())): pool for pool, s in selectors.items()}

    def nodes(self, selector: Mapping[str, str]) -> list[NodeView]:
        pool = self.selectors.get(tuple(sorted(selector.items())), "")
        return [self._view(n) for n in self._nodes.values() if n.pool == pool]

    def marked(self, selector: Mapping[str, str]) -> list[NodeView]:
        return self.nodes(selector)

    def ready_at(self, name: str) -> float:
        return self._nodes[name].ready_at

    def created(self, name: str) -> float:
        return self._nodes[name].created


@dataclass
class Job:
    """One request as it went: when asked, started and done; its nodes; the waiting node-seconds it cost."""

    row: GangRow
    key: str
    nodes: int  # the nodes it needs of the group's first pool (gpus_per_node counted)
    taken: float | None = None  # when the group first took it (a scaled decision)
    started: float | None = None
    ended: float | None = None
    pools: set[str] = field(default_factory=set)  # atomic: the pools its gangs wait on
    held: list[str] = field(default_factory=list)  # nodes it holds (those it runs on, once started)
    waiting: float = 0.0  # node-seconds ready before the job could start
    past: float = 0.0  # of which past the pool's provision_time from the ask


@dataclass
class GangRun:
    """One run's jobs, decisions and figures."""

    mode: str
    jobs: list[Job]
    decisions: list[tuple[float, Decision]]
    node_seconds: float
    ticks: int


def route(settings: Settings) -> tuple[str, tuple[str, ...]]:
    """The group the trace asks (the config's first), or its only pool; ReplayError when a pool is not simulated or
    has no node_selector."""
    name = next(iter(settings.groups), "") or (next(iter(settings.pools)) if len(settings.pools) == 1 else "")
    if not name:
        raise ReplayError("groups: the gang replay asks a group (the config's first) or the config's only pool; "
                          "give a group")
    members = settings.groups.get(name, (name,))
    for pool in members:
        spec = settings.pools[pool]
        index = list(settings.pools).index(pool)
        if spec.provider != "simulated":
            raise ReplayError(f"pools[{index}].provider: the replay needs the simulated provider (pool {pool} uses "
                              f"{spec.provider})")
        if not spec.node_selector:
            raise ReplayError(f"pools[{index}].node_selector: an atomic scale-out needs one (pool {pool})")
    return name, members


def simulate_gangs(settings: Settings, rows: Sequence[GangRow], mode: str, store: Store | None = None) -> GangRun:
    """Replay ``rows`` with ``mode`` ``atomic`` or ``plain``."""
    name, members = route(settings)
    store = store or MemoryStore()
    store.ensure_pools(list(settings.pools))
    providers = {p: build(s.provider, p, s.provider_settings) for p, s in settings.pools.items()}
    sims = {p: settings.pools[p].provider_settings for p in members}
    first = settings.pools[members[0]]
    start = rows[0].time
    cluster = GangCluster({p: dict(settings.pools[p].node_selector) for p in members}, names=[], gpus_per_node=(
        first.gpus_per_node or 8), provision_seconds=float(sims[members[0]].provision_seconds), start=start,
        provision_by_pool={p: float(s.provision_seconds) for p, s in sims.items()})
    clock = ManualClock(start)
    parts = Parts.build(settings, store, providers, EventLog(store, clock=clock), clock=clock, cluster=cluster)
    parts.hold.renew = False  # the virtual clock stands still during a decision
    engine = Engine(parts)
    reconciler = Reconciler(parts, engine)
    every = settings.config.server.reconcile_interval or 30.0
    jobs = [Job(r, f"replay/line-{r.line}", nodes_needed(r.nodes, r.gpus_per_node or first.gpus_per_node or 1,
                                                          first.gpus_per_node or 1) if r.gpus_per_node else r.nodes)
            for r in rows]
    book = _Book(cluster, providers, members, jobs, mode, settings, store)
    horizon = rows[-1].time + HORIZON
    queue: list[tuple[float, int, int]] = [(r.time, ARRIVE, i) for i, r in enumerate(rows)]
    heapq.heapify(queue)
    decisions: list[tuple[float, Decision]] = []
    next_tick = start
    ticks = 0
    while queue:
        now, kind, index = heapq.heappop(queue)
        clock.now = cluster.now = now
        book.advance(now)
        made: list[Decision] = []
        if kind == ARRIVE or kind == TICK:
            if kind == TICK:
                ticks += 1
                made += reconciler.tick(now).decisions
                book.follow(now, made)
            for job in book.untaken():
                if job.nodes == 0 or job.nodes > max(settings.pools[p].max for p in members):
                    job.ended = job.taken = now  # never holdable: Failed at once, nothing asked
                    continue
                asked = _ask(parts, engine, name, job, mode, now)
                made.append(asked)
                if asked.outcome is Outcome.SCALED:
                    job.taken = now
                    job.pools.add(str(asked.pool))
                book.follow(now, [asked])
        else:
            made += book.finish(jobs[index], engine, now)
        decisions += [(now, d) for d in made]
        for job in book.started_now(now):
            heapq.heappush(queue, (job.started + job.row.duration, END, jobs.index(job)))  # type: ignore[operator]
        if book.pending() and not any(q[1] == TICK for q in queue):
            while next_tick <= now:
                next_tick += every
            if next_tick > horizon:
                raise ReplayError(f"a request still waits {HORIZON / 3600:.0f} h after the trace's last row: "
                                  "can any pool of the group hold it?")
            heapq.heappush(queue, (next_tick, TICK, 0))
    book.advance(clock.now)
    return GangRun(mode, jobs, decisions, book.node_seconds, ticks)


def _ask(parts: Parts, engine: Engine, name: str, job: Job, mode: str, now: float) -> Decision:
    reason = f"gang replay: trace line {job.row.line}"
    if mode == "atomic":
        ask = Ask(nodes=job.nodes, source=Source.MANUAL.value, reason=reason, request=job.key)
        if name in parts.settings.groups:
            return ask_group(parts, name, ask, now)
        return ask_pool(parts, parts.settings.pools[name], ask, now)
    return engine.handle(Signal(pool=name, action=Action.SCALE_OUT, source=Source.MANUAL,
                                step=job.nodes - len(job.held), reason=reason))  # asked again: what it lacks


class _Book:
    """Who holds which node, and the node-seconds billed and waited."""

    def __init__(self, cluster: GangCluster, providers: Mapping[str, Any], members: Sequence[str], jobs: list[Job],
                 mode: str, settings: Settings, store: Store) -> None:
        self.cluster, self.providers, self.members, self.jobs, self.mode = cluster, providers, members, jobs, mode
        self.store = store
        self.settings = settings
        self.owner: dict[str, Job] = {}
        self.pool_of: dict[str, str] = {}
        self.node_seconds = 0.0
        self.at = min((j.row.time for j in jobs), default=0.0)
        self._started: list[Job] = []

    def untaken(self) -> list[Job]:
        """Arrived requests the group has not taken yet (asked again at each tick)."""
        return [j for j in self.jobs if j.row.time <= self.at and j.taken is None]

    def pending(self) -> bool:
        """Whether a tick may still change something: a request arrived and not started."""
        return any(j.row.time <= self.at and j.started is None and j.ended is None for j in self.jobs)

    def advance(self, now: float) -> None:
        """Bill from ``self.at`` to ``now``: every ready node; a node held by a job not started, as waiting."""
        for name, pool in self.pool_of.items():
            ready = self.cluster.ready_at(name)
            lo, hi = max(self.at, ready), now
            if hi <= lo:
                continue
            self.node_seconds += hi - lo
            job = self.owner.get(name)
            end = hi if job is None or job.started is None else min(hi, job.started)
            if job is not None and end > lo:
                job.waiting += end - lo
                due = self.cluster.created(name) + self.settings.pools[pool].provision_time
                job.past += max(0.0, end - max(lo, due))
        self.at = now

    def follow(self, now: float, made: Sequence[Decision]) -> None:
        """The clouds' nodes into the cluster; new ones to the earliest request short of nodes; gangs settled."""
        owners = {n: p for p in self.members for n in self._names(p)}
        self.cluster.follow(list(owners), now, owners)
        for name in [n for n in self.pool_of if n not in owners]:
            del self.pool_of[name]
            job = self.owner.pop(name, None)
            if job is not None and name in job.held:
                job.held.remove(name)
        for d in made:
            key = str(d.details.get("request", ""))
            job = next((j for j in self.jobs if j.key == key), None)
            if job is None:
                continue
            if d.outcome is Outcome.SCALED:
                job.pools.add(str(d.pool))
            if d.outcome is Outcome.PROVISIONED:  # its nodes are those the service provisioned for it
                nodes = [str(n) for n in d.details.get("nodes") or ()]
                for name in job.held:
                    if name not in nodes:
                        self.owner.pop(name, None)
                for name in nodes:
                    other = self.owner.get(name)
                    if other is not None and other is not job and name in other.held:
                        other.held.remove(name)
                    self.owner[name] = job
                job.held = nodes
                self._start(job, now)
        if self.mode == "atomic":  # every pool it was asked of fell short: asked again at the next tick
            waiting = {g.request for g in self.store.gangs()}
            for job in self.jobs:
                if job.taken is not None and job.started is None and job.ended is None and job.key not in waiting:
                    job.taken, job.pools = None, set()
        waits = {g.pool: g.request for g in self.store.gangs()} if self.mode == "atomic" else {}
        for name, pool in owners.items():
            if name in self.pool_of:
                continue
            self.pool_of[name] = pool
            job = next((j for j in self.jobs if j.taken is not None and j.started is None and j.ended is None
                        and len(j.held) < j.nodes and (self.mode == "plain" or waits.get(pool) == j.key)), None)
            if job is not None:
                self.owner[name] = job
                job.held.append(name)
        if self.mode == "plain" and not any(self._coming(p) for p in self.members):
            for job in self.jobs:  # short, and nothing more on its way (the group could not take the rest): again
                if job.taken is not None and job.started is None and job.ended is None and len(job.held) < job.nodes:
                    job.taken = None
        if self.mode == "plain":
            for job in self.jobs:
                if job.started is None and job.ended is None and len(job.held) >= job.nodes:
                    ready = max(self.cluster.ready_at(n) for n in job.held)
                    self._start(job, max(ready, now))

    def _coming(self, pool: str) -> int:
        """Nodes of the pool on their way to no one yet: asked of the cloud and not delivered, or not held."""
        provider = self.providers[pool]
        assert isinstance(provider, SimulatedProvider)
        return provider.undelivered() + sum(1 for n, p in self.pool_of.items() if p == pool and n not in self.owner)

    def _start(self, job: Job, when: float) -> None:
        job.started = when
        self._started.append(job)

    def started_now(self, now: float) -> list[Job]:
        """Jobs whose start is known (plain: maybe later, when its last node is ready)."""
        out, self._started = self._started, []
        return out

    def finish(self, job: Job, engine: Engine, now: float) -> list[Decision]:
        """The job done: its nodes removed by name, pool by pool (a forced manual scale-in)."""
        job.ended = now
        out = []
        for pool in self.members:
            names = tuple(n for n in job.held if self.pool_of.get(n) == pool)
            if names:
                out.append(engine.handle(Signal(pool=pool, action=Action.SCALE_IN, source=Source.MANUAL,
                                                nodes=names, step=len(names), force=True,
                                                reason=f"job of line {job.row.line} done")))
        self.follow(now, out)
        return out

    def _names(self, pool: str) -> tuple[str, ...]:
        provider = self.providers[pool]
        assert isinstance(provider, SimulatedProvider)
        return provider.node_names()
