"""The one loop for everything periodic: schedule floors, the stored cloud view, drift below min, pruning.

One loop runs in every process (each gunicorn worker, each replica); only the holder of the store lease
``reconciler`` acts, so across workers and replicas one tick runs at a time. Each tick, for every pool:
read the cloud once and store the view (count, busy, in flight, time) that ``GET /api/v1/pools``, the status page
and ``/metrics`` show; then, when the pool's count is below its effective min (a schedule's floor while a window is
open, else its own ``min``), ask the engine for the floor (source ``schedule`` or ``reconcile``). The engine does it
as any decision: the pool's lease, a fresh cloud read, backoff and pause; no cooldown (a floor is a limit). Then,
at most once a minute, expired dedup keys and events past ``store.retain_events`` are pruned (``retention.py``);
with ``reconcile_interval: 0`` the loop still runs for that, once a minute, and reads no cloud.

Headroom top-up (CapacityBuffer-style): a pool that keeps ``scale_out.headroom`` and whose nodes and pods the service
reads (``kubernetes:``) is raised to ``ceil(GPUs requested on Ready nodes + headroom)`` when new work has taken its
spare, without waiting for an alert (source ``reconcile``; the scale-out cooldown applies). Without a cluster the
spare is known only from alerts' values, so only decisions keep it.
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from dataclasses import dataclass, field, replace
from typing import ContextManager, Sequence

from autoscaler.engine.core import Engine
from autoscaler.gang import carry as gang_carry, requests as gang_requests
from autoscaler.reconcile import shortage
from autoscaler.repair import carry as repair_carry
from autoscaler.engine.facts import headroom_facts, keeps_headroom, pool_facts
from autoscaler.engine.parts import Parts
from autoscaler.decide.headroom import Floor, floor as headroom_floor
from autoscaler.decide.inflight import NOT_REGISTERED, unregistered
from autoscaler.models import Action, CloudStatus, Decision, PoolFacts, PoolSpec, PoolState, Shortfall, Signal, Source
from autoscaler.decide.policy import cooldown_remaining
from autoscaler.pool import stamps
from autoscaler.redact import redact_text
from autoscaler.answers import dump, node_body
from autoscaler.reconcile.retention import Pruner
from autoscaler.decide.schedules import unusable
from autoscaler.cluster.nodes import ClusterError, ClusterUnreachable, NodeView, PoolRead, with_gangs
from autoscaler.reconcile.fleet import Fleet
from autoscaler.store import NodesView, PoolView, StoreUnavailable
from providers import ProviderError

log = logging.getLogger(__name__)

LEASE = "reconciler"


@dataclass
class Tick:
    """What one tick did (for tests and the log)."""

    held: bool
    views: list[PoolView] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    pruned: int | None = None  # rows pruned; None: pruning was not due (or this reconciler prunes nothing)


class Reconciler:
    """``tick(now)`` does one round; ``start()`` runs it every ``interval`` on a daemon thread. ``pruner``: the
    store's retention, run from the tick (the service's; a replay prunes nothing)."""

    def __init__(self, parts: Parts, engine: Engine, interval: float | None = None,
                 pruner: Pruner | None = None) -> None:
        settings = parts.settings
        self.parts = parts
        self.settings = settings
        self.store = parts.store
        self.providers = parts.providers
        self.engine = engine  # the floors and top-ups are decisions: asked of it (``handle``)
        self.clock = parts.clock
        self.interval = settings.config.server.reconcile_interval if interval is None else interval
        self.pruner = pruner
        self.ttl = max(3 * self.interval, 60.0)  # a dead holder is replaced within a few ticks
        self.owner = f"{socket.gethostname()}:{os.getpid()}:reconciler"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._holding = False
        self._unusable: set[tuple[str, int]] = set()  # schedule windows already logged as unusable
        self._floors: dict[str, int] = {}  # each pool's headroom floor as last read from the cluster
        self.fleet = Fleet(parts)  # each cluster's pools on their own thread (fleet.py)

    def tick(self, now: float, pools: bool = True) -> Tick:
        """One round, if this process holds (or can take) the lease: each pool (unless ``pools`` is False), then
        pruning when it is due."""
        held = self.store.hold_lease(LEASE, self.owner, now, self.ttl)
        if held != self._holding:
            log.info("reconciler lease %s by %s", "taken" if held else "held elsewhere, not", self.owner)
            self._holding = held
        if not held:
            return Tick(held=False)
        out = Tick(held=True)
        specs = list(self.settings.pools.values()) if pools else []
        rounds = self.fleet.run(self.fleet.groups(specs), lambda name, group: self._round(name, group, now),
                                self._wait())
        done = {pool: part for each, _ in rounds.values() for pool, part in each.items()}
        for spec in specs:  # in config order, whichever cluster's thread ran the pool
            if spec.name in done:
                out.views += done[spec.name].views
                out.decisions += done[spec.name].decisions
        for name in rounds:  # then each cluster's ProvisioningRequests (docs/gang.md)
            out.decisions += rounds[name][1]
        if self.pruner is not None:
            out.pruned = self.pruner.maybe_run(now)
        return out

    def _round(self, cluster: str, specs: list[PoolSpec], now: float) -> tuple[dict[str, Tick], list[Decision]]:
        """One cluster's pools (or those no cluster reads), each in turn; the DRA lists read at most once for all
        of them, and once the cluster's API could not be reached the rest of its pools are not listed this tick.
        Then the cluster's ProvisioningRequests, served by its pools from their listing of this tick (not asked of
        a cluster found unreachable): the decisions they made."""
        out: dict[str, Tick] = {}
        unreachable: list[str] = []
        listed: dict[str, list[NodeView] | None] = {}
        seen: dict[str, CloudStatus] = {}
        with self._one_read(cluster):
            for spec in specs:
                out[spec.name] = Tick(held=True)
                self._pool(spec, now, out[spec.name], unreachable, listed, seen)
        served = gang_requests.serve(self.parts, cluster, specs, listed, now, seen) if not unreachable else []
        return out, served

    def _wait(self) -> float:
        """How long a tick waits for its clusters' rounds: a few of the slowest cluster's deadlines."""
        return max([30.0] + [3 * c.timeout for c in self.settings.config.cluster_settings().values()])

    def _pool(self, spec: PoolSpec, now: float, out: Tick, unreachable: list[str] | None = None,
              listings: dict[str, list[NodeView] | None] | None = None,
              seen: dict[str, CloudStatus] | None = None) -> None:
        """One pool's round: its stored state read once (again only after a repair step changed the pool), its
        nodes listed once (the view, in flight, repairs, the headroom and the ProvisioningRequests' bookings all
        read that listing: ``listings``), its cloud once (kept in ``seen`` for the ProvisioningRequests' round when
        nothing changed the pool after the read)."""
        self._log_unusable(spec, now)
        out.decisions += gang_carry.carry_on(self.parts, spec, now)  # all-or-nothing scale-outs: docs/gang.md
        state = stamps.read(self.store, spec, now)
        listed = self.refresh_nodes(spec, now, unreachable)
        if listings is not None:
            listings[spec.name] = listed
        view, facts, short = self.refresh(spec, state, now, listed)
        out.views.append(view)
        carried = repair_carry.carry_on(self.parts.repairs, spec, now, listed)  # docs/repair.md
        if carried:
            out.decisions += carried
            state = self.store.pool(spec.name)
        if short is not None:  # the cloud accepted a size it could not deliver: say so, give back, ask the group
            if gang_carry.waiting(self.parts, spec):  # a gang's pool: rolled back now (the cloud said no more)
                out.decisions += gang_carry.fell_short(self.parts, spec, short, now, listed)
            else:
                out.decisions += self._short(spec, now, short)
            return
        decision = self._floor(spec, state, view, facts, now) or self._headroom(spec, state, view, now, listed)
        if decision is not None:
            out.decisions.append(decision)
        elif seen is not None and not carried and view.error is None and view.read_at == now:
            seen[spec.name] = CloudStatus(current=view.current, busy=view.busy, detail=view.detail)

    def _one_read(self, name: str) -> ContextManager[None]:
        cluster = self.parts.clusters.get(name)
        return cluster.once() if cluster is not None and cluster.capabilities.reads_pools else contextlib.nullcontext()

    def _log_unusable(self, spec: PoolSpec, now: float) -> None:
        """A schedule window that cannot be evaluated is ignored (``schedules.py``); say so once per process."""
        for index, why in unusable(spec, now):
            if (spec.name, index) not in self._unusable:
                self._unusable.add((spec.name, index))
                log.warning("schedule pool=%s schedules[%d]: %s; the pool's other windows and the other pools go on",
                            spec.name, index, why)

    def _short(self, spec: PoolSpec, now: float, short: Shortfall) -> list[Decision]:
        """``no_capacity`` for the pool, then what it did not deliver asked of its group's next pool."""
        recorded = shortage.check(self.parts, spec, now, short if short.code == NOT_REGISTERED else None)
        if recorded is None:
            return []
        given_up = gang_carry.given_up(self.parts, spec)  # its gang's next pool was asked for all of it already
        fallback = None if given_up else shortage.fall_back(self.engine.handle, spec, recorded)
        return [recorded] + ([fallback] if fallback is not None else [])

    def refresh(self, spec: PoolSpec, state: PoolState, now: float,
                listed: Sequence[NodeView] | None) -> tuple[PoolView, PoolFacts, Shortfall | None]:
        """Read the pool's cloud once and store what it said (or why it could not be read); and whether the cloud
        reports nodes it accepted and could not deliver. ``listed``: the pool's nodes as this tick listed them,
        what in flight and the nodes that never registered are counted from where the cluster lists nodes so."""
        try:
            cloud = self.providers[spec.name].status(state.tracked(), now)
            error = None
        except ProviderError as exc:
            cloud, error = CloudStatus(current=None), redact_text(exc.message)
        if cloud.shortfall is None and cloud.current:
            nodes = listed if self.parts.nodes.lists_marked(spec) else None  # GPU-ready or not
            cloud = replace(cloud, shortfall=self._unregistered(spec, state, cloud.current, now, nodes))
        else:
            nodes = None
        undelivered = cloud.shortfall.undelivered if cloud.shortfall is not None else 0
        facts = pool_facts(self.store, spec, cloud.current, now, nodes=nodes, undelivered=undelivered)
        view = PoolView(spec.name, cloud.current, cloud.busy, cloud.detail, facts.in_flight, error, now)
        last = self.store.views().get(spec.name) if error else None
        if last is not None:  # keep the last good read and its time: the view's age (and its alert) shows the outage
            view = replace(last, error=error)
        self.store.save_view(view)
        return view, facts, cloud.shortfall if undelivered > 0 else None

    def _unregistered(self, spec: PoolSpec, state: PoolState, asked: int, now: float,
                      nodes: Sequence[NodeView] | None) -> Shortfall | None:
        """With ``kubernetes:`` (the pool's ``nodes``), nodes asked for by the service's scale-outs that never
        registered Ready with GPUs within ``provision_time``: a shortfall the cloud did not report (kept as asked:
        which machine is missing is the cloud's to say, so nothing is given back)."""
        if nodes is None:
            return None
        outs = self.store.scale_outs(spec.name, now - 86400)
        noticed = state.short_until - spec.short_for if state.short_until is not None else None
        found = unregistered(nodes, asked, now, spec.provision_time, max((t for t, _, _ in outs), default=None),
                             noticed)
        if found is None:
            return None
        return Shortfall(asked=asked, delivered=found[0], code=NOT_REGISTERED, message=found[1], give_back=False)

    def refresh_nodes(self, spec: PoolSpec, now: float,
                      unreachable: list[str] | None = None) -> list[NodeView] | None:
        """List a node-aware pool's nodes (with their pods) and store them for the pages and the API, which never
        list them per request: a hung API server then costs this loop a read, not every page a thread. A failed
        list keeps the last good nodes, with the error and their time. The fresh listing (the headroom's top-up
        reads it too), or None: not node-aware, or the list failed. ``unreachable``: this tick's failures to reach
        the pool's cluster (one is enough: the pool's list is not asked of it again this tick)."""
        cluster = self.parts.cluster_for(spec)
        if cluster is None or not spec.node_selector:
            return None
        try:
            if unreachable:
                raise ClusterUnreachable(unreachable[0])
            read = (cluster.read_pool(spec.name, dict(spec.node_selector)) if cluster.capabilities.reads_pools
                    else PoolRead(cluster.nodes(dict(spec.node_selector)), None, ""))
            listed = with_gangs(read.nodes, ((g.id, set(g.known)) for g in self.store.gangs(spec.name)))
            gpus = {"allocatable": sum(v.gpu_allocatable for v in listed),
                    "requested": sum(v.gpus_used() for v in listed)} | (
                {"pending": read.pending} if read.pending is not None else {})
            view = NodesView(spec.name, [dump(node_body(v)) for v in sorted(listed, key=lambda v: (-v.created,
                                                                                                  v.name))],
                             None, now, gpus, read.dra, read.dra_reason)
        except ClusterError as exc:
            if isinstance(exc, ClusterUnreachable) and unreachable is not None and not unreachable:
                unreachable.append(str(exc))
            said = f"cluster {spec.cluster}: {exc}" if len(self.parts.clusters) > 1 else str(exc)
            self._failed(spec, now, redact_text(said))
            return None
        self.store.save_nodes(view)
        return listed

    def _failed(self, spec: PoolSpec, now: float, error: str) -> None:
        """A failed listing: the last good nodes kept with the error, and since when the listing fails."""
        last = self.store.nodes_view(spec.name)
        since = (last.failing_since or now) if last is not None and last.error else now
        self.store.save_nodes(replace(last, error=error, failing_since=since) if last is not None
                              else NodesView(spec.name, [], error, now, failing_since=since))

    def _floor(self, spec: PoolSpec, state: PoolState, view: PoolView, facts: PoolFacts,
               now: float) -> Decision | None:
        """Raise a pool below its effective min to it through the engine; None when there is nothing to do."""
        if view.current is None or view.busy or view.error:  # unread now: nothing to act on
            return None
        floor = facts.floor if facts.floor is not None else spec.min
        if view.current >= floor:
            return None
        if state.paused or (state.backoff_until is not None and now < state.backoff_until):
            return None  # a paused pool changes for nothing; backoff: the next tick after it tries again
        scheduled = floor > spec.min
        source = Source.SCHEDULE if scheduled else Source.RECONCILE
        why = facts.floor_how if scheduled else f"pool below its min ({spec.min}): {view.current} nodes"
        decision = self.engine.handle(Signal(pool=spec.name, action=None, source=source, target=floor, floor=True,
                                             reason=why))
        log.info("reconcile pool=%s source=%s outcome=%s from=%s to=%s", spec.name, source.value,
                 decision.outcome.value, decision.from_, decision.to)
        return decision

    def headroom_short(self, spec: PoolSpec, current: int, now: float,
                       listed: Sequence[NodeView] | None = None, used: float | None = None) -> Floor | None:
        """The headroom's floor when the cluster shows the pool below it (``current`` nodes asked for), else None:
        no headroom kept, no cluster to read, or spare enough. ``listed``: the pool's nodes with their pods, already
        read this tick (else they are read here); ``used``: instead of a listing, the nodes' worth of GPUs requested
        on the pool's Ready, schedulable nodes as the caller counted them (the replay, which holds the cluster)."""
        if not keeps_headroom(spec):
            return None
        if used is not None:
            facts = replace(headroom_facts(spec, now, None), used=used)
        else:
            pods = listed if listed is not None else self.parts.nodes.with_pods(spec)
            if pods is None:
                return None
            facts = headroom_facts(spec, now, pods)
        room = headroom_floor(Signal(pool=spec.name, action=Action.SCALE_OUT, source=Source.RECONCILE), spec,
                              current, facts)
        if room is not None:
            self._remember(spec, room.nodes, now)
        return room if room is not None and room.nodes > current else None

    def _remember(self, spec: PoolSpec, nodes: int, now: float) -> None:
        """The floor read now, remembered as a recommendation: a scale-in within the stabilization window stops at
        the highest floor seen in it, so a need that dips for minutes does not give back what its return would make
        the top-up add again (a direction change each way)."""
        self._floors[spec.name] = nodes
        self.store.add_recommendation(spec.name, now, nodes, now - spec.scale_in.stabilization_window)

    def remember_again(self, spec: PoolSpec, now: float) -> None:
        """The last floor read, remembered again at ``now``: for the replay, which knows the cluster is as it was
        at the last reading and skips reading it (the service reads it every tick)."""
        if spec.name in self._floors:
            self._remember(spec, self._floors[spec.name], now)

    def _headroom(self, spec: PoolSpec, state: PoolState, view: PoolView, now: float,
                  listed: Sequence[NodeView] | None) -> Decision | None:
        """Top a pool up to its headroom where this tick's listing shows less spare than it keeps; None otherwise
        (no listing: not node-aware, or the cluster could not be read)."""
        if view.current is None or view.busy or view.error or listed is None:
            return None
        room = self.headroom_short(spec, view.current, now, listed)
        if room is None:
            return None
        if (state.paused or (state.backoff_until is not None and now < state.backoff_until)
                or cooldown_remaining(spec, state, now)["scale_out"] > 0):
            return None
        decision = self.engine.handle(Signal(pool=spec.name, action=None, source=Source.RECONCILE, target=room.nodes,
                                             reason=f"spare below the {room.how}"))
        log.info("reconcile pool=%s headroom outcome=%s from=%s to=%s", spec.name, decision.outcome.value,
                 decision.from_, decision.to)
        return decision

    # -- the background loop ------------------------------------------------------------------------
    def start(self) -> threading.Thread | None:
        """Run ``tick`` now and every ``interval`` on a daemon thread (with an interval of 0, only the pruning, once
        a minute; nothing at all without a pruner)."""
        if self._period() <= 0 or (self._thread is not None and self._thread.is_alive()):
            return None
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="autoscaler-reconciler", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and give up the lease so another process takes over at its next tick."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self.store.release_lease(LEASE, self.owner)
        except StoreUnavailable:
            pass

    def _period(self) -> float:
        """Seconds between two ticks of the loop (0: no loop)."""
        if self.interval > 0:
            return self.interval
        return self.pruner.interval if self.pruner is not None else 0.0

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick(self.clock.wall(), pools=self.interval > 0)
            except StoreUnavailable as exc:
                log.warning("reconcile skipped: %s", exc)
            except Exception:  # a bug here must never take the worker down
                log.exception("reconcile failed")
            self._stop.wait(self._period())
