"""Lock the pool, read the cloud, decide, act, record: the only place these meet."""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import replace
from typing import Any, Callable

from autoscaler.config import Settings
from autoscaler.events import EventLog
from autoscaler.inflight import from_scale_outs
from autoscaler.models import CloudStatus, Decision, Notification, Outcome, PoolFacts, PoolSpec, PoolState, Signal
from autoscaler.policy import Plan, backoff_seconds, decide, settled
from autoscaler.redact import redact_text
from autoscaler.routing import Router
from autoscaler.schedules import effective_min
from autoscaler.store import DedupConfirm, PoolChange, PoolView, QuickState, Store, StoreUnavailable
from providers import NodePoolProvider, ProviderError, Tracked

log = logging.getLogger(__name__)

LEASE_TTL = 120.0  # the default of server.lease_ttl
Clock = Callable[[], float]


class Engine:
    """Turns notifications and manual requests into decisions, one pool at a time."""

    def __init__(self, settings: Settings, store: Store, providers: dict[str, NodePoolProvider],
                 events: EventLog, clock: Clock = time.time, metrics: Any = None) -> None:
        self.settings = settings
        self.store = store
        self.providers = providers
        self.events = events
        self.clock = clock
        self.metrics = metrics
        self.router = Router(settings.config.routing, settings.config.rules)
        self.lock_wait = settings.config.server.lock_wait
        self.lease_ttl = settings.config.server.lease_ttl
        self.owner_prefix = f"{socket.gethostname()}:{os.getpid()}"
        self._locks: dict[str, threading.Lock] = {name: threading.Lock() for name in settings.pools}
        #: The seam for a view of the cluster: (pool, now) -> (nodes in flight, how counted), or None where it cannot
        #: tell; unset, in flight is counted from the recorded scale-outs (see ``autoscaler.inflight``).
        self.cluster_in_flight: Callable[[PoolSpec, float], tuple[int, str] | None] | None = None

    # -- notifications --------------------------------------------------------------------------------
    def handle_notification(self, note: Notification) -> list[Decision]:
        """One decision per group of alerts that share a pool and action (routing groups them), and one per group
        that routing alone settles (test, resolved, unrouted, unknown pool), recorded as it is."""
        out = []
        for item in self.router.signals(note, self.settings.pools):
            if isinstance(item, Signal):
                out.append(self.handle(item))
            else:
                out.append(self.events.record(item.decision, note.source.value, list(item.alerts), self.clock()))
        return out

    # -- one signal ----------------------------------------------------------------------------------
    def handle(self, signal: Signal) -> Decision:
        """Decide and act on one signal for one pool; records exactly one event."""
        spec = self.settings.pools.get(signal.pool)
        alerts = list(signal.alerts)
        now = self.clock()
        if spec is None:
            decision = Decision(signal.pool, signal.action, Outcome.UNKNOWN_POOL, None, None,
                                f"pool {signal.pool!r} is not configured")
            return self.events.record(decision, signal.source.value, alerts, now)
        claim = uuid.uuid4().hex
        keys = signal.dedup_keys
        duplicate = Decision(spec.name, signal.action, Outcome.SKIPPED_DUPLICATE, None, None,
                             f"{signal.reason}: same notification already handled within "
                             f"the {spec.dedup_window:.0f}s dedup window")
        # The common case under an alert storm: a pool in cooldown (or paused). A read, then one transaction; no
        # lease, no cloud read: nothing the cloud could say would make it act, and what settles it (a pause, a
        # running cooldown) cannot be made untrue by a concurrent decision (a cooldown only ever grows). The clock is
        # read after the state: a scale-out another worker recorded since ``now`` must not look like a cooldown
        # still to run (with a zero cooldown it is not).
        quick = self.store.quick_state(spec.name)
        settled_decision = self._settled(signal, spec, quick, self.clock()) if quick else None
        if settled_decision is not None:
            return self.events.record_settled(spec.name, settled_decision, duplicate, signal.source.value, alerts,
                                              now, keys, claim, now + spec.dedup_window)
        # Claimed for a short while first, for the full window once recorded: a claim left by a lost
        # database connection or a killed worker must not swallow the sender's retries for the whole window.
        pending = min(spec.dedup_window, self.lease_ttl + self.lock_wait)
        if keys and not self.store.claim_dedup(spec.name, keys, now, pending, claim):
            return self.events.record(duplicate, signal.source.value, alerts, now)
        owner = f"{self.owner_prefix}:{claim}"
        deadline = time.monotonic() + self.lock_wait
        # Threads of this process queue here, woken by the kernel, rather than polling the database for the lease.
        lock = self._locks.setdefault(spec.name, threading.Lock())
        if not lock.acquire(timeout=self.lock_wait):
            return self._busy(signal, spec, keys, claim)
        try:
            return self._leased(signal, spec, keys, claim, owner, now, pending, deadline)
        finally:
            lock.release()

    def _leased(self, signal: Signal, spec: PoolSpec, keys: tuple[str, ...], claim: str, owner: str, now: float,
                pending: float, deadline: float) -> Decision:
        """Take the pool's lease, decide, act and record (lease released and dedup keys confirmed with it)."""
        alerts = list(signal.alerts)
        try:
            state = self._acquire(spec.name, owner, deadline)
        except StoreUnavailable:
            self._forget(keys, claim)
            raise
        if state is None:
            return self._busy(signal, spec, keys, claim)
        try:
            decision, change, view = self._decide_and_act(signal, spec, state)
        except BaseException:
            self.store.release(spec.name, owner)
            raise
        if decision.retry_after is not None:
            self.store.release_dedup(keys, claim)  # let the sender's retry act
        confirm = None
        if keys and decision.retry_after is None and spec.dedup_window > pending:
            confirm = DedupConfirm(keys, claim, now + spec.dedup_window)  # in finish's transaction
        recorded = self.events.finish(spec.name, owner, decision, signal.source.value, alerts, self.clock(), change,
                                      confirm)
        self._remember_view(view)
        return recorded

    def _remember_view(self, view: PoolView | None) -> None:
        """Keep what this decision learned of the cloud as the pool's stored view (best effort)."""
        if view is None:
            return
        try:
            self.store.save_view(view)
        except StoreUnavailable:
            log.warning("pool %s: cloud view not stored: store unavailable", view.pool)

    def _settled(self, signal: Signal, spec: PoolSpec, quick: QuickState, now: float) -> Decision | None:
        """The decision when the stored state settles it (see ``policy.settled``), else None."""
        state, current = quick.state, quick.last_count
        if self.providers[spec.name].tracks_count and state.tracked_count is not None:
            current = state.tracked_count
        plan = settled(signal, spec, state, now, current)
        return None if plan is None else self._plan_decision(spec, _said_by(signal, plan))

    def _busy(self, signal: Signal, spec: PoolSpec, keys: tuple[str, ...], claim: str) -> Decision:
        """Give up on a pool whose decision stays taken: free the dedup claim, record skipped_busy."""
        self.store.release_dedup(keys, claim)
        decision = Decision(spec.name, signal.action, Outcome.SKIPPED_BUSY, None,
                            None, f"another decision on pool {spec.name} is still running after "
                                  f"{self.lock_wait:.0f}s; try again")
        return self.events.record(decision, signal.source.value, list(signal.alerts), self.clock())

    def _forget(self, keys: tuple[str, ...], claim: str) -> None:
        """Best effort: drop a claim whose decision never ran (the database went away in between)."""
        try:
            self.store.release_dedup(keys, claim)
        except StoreUnavailable:
            log.warning("dedup claim %s left to expire by itself: store unavailable", claim)

    def _acquire(self, pool: str, owner: str, deadline: float) -> PoolState | None:
        """The pool's state once its lease is ours; None when it stays taken until ``deadline`` (monotonic)."""
        delay = 0.005
        while True:
            state = self.store.acquire(pool, owner, self.clock(), self.lease_ttl)
            if state is not None:
                return state
            if time.monotonic() >= deadline:
                return None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _decide_and_act(self, signal: Signal, spec: PoolSpec,
                        state: PoolState) -> tuple[Decision, PoolChange, PoolView | None]:
        provider = self.providers[spec.name]
        now = self.clock()
        try:
            cloud = provider.status(Tracked(state.tracked_count, state.count_changed_at), now)
        except ProviderError as exc:
            retry = (exc.retry_after or 30.0) if exc.retryable else None
            return Decision(spec.name, signal.action, Outcome.FAILED, None, None,
                            f"{signal.reason + ': ' if signal.reason else ''}pool status: {redact_text(exc.message)}",
                            retry_after=retry, details={"code": exc.code}), PoolChange(), None
        window = spec.scale_in.stabilization_window
        recent = self.store.recommendations(spec.name, now - window) if spec.proportional else []
        facts = self.pool_facts(spec, cloud.current, now)
        plan = decide(signal, spec, state, cloud, now, recent, facts)
        if plan.details.get("recommendation") is not None:
            self.store.add_recommendation(spec.name, now, int(plan.details["recommendation"]), now - window)
        plan = _said_by(signal, plan)
        if plan.outcome is not Outcome.SCALED:
            decision, change = self._plan_decision(spec, plan), PoolChange()
        else:
            decision, change = self._act(provider, spec, state.failures, plan, now)
        return decision, change, _view_after(spec, cloud, facts, decision, now)

    def pool_facts(self, spec: PoolSpec, current: int | None, now: float) -> PoolFacts:
        """Nodes in flight and the floor in force now: what a decision needs besides the cloud's count."""
        floor, floor_how = effective_min(spec, now)
        counted = self.cluster_in_flight(spec, now) if self.cluster_in_flight is not None else None
        if counted is None:
            since = now - spec.provision_time
            counted = from_scale_outs(self.store.scale_outs(spec.name, since), current or 0, now, spec.provision_time)
        return PoolFacts(in_flight=counted[0], in_flight_how=counted[1], floor=floor, floor_how=floor_how)

    @staticmethod
    def _plan_decision(spec: PoolSpec, plan: Plan) -> Decision:
        return Decision(spec.name, plan.action, plan.outcome, plan.from_, plan.to,
                        plan.reason, retry_after=plan.retry_after, details=dict(plan.details))

    def _act(self, provider: NodePoolProvider, spec: PoolSpec, failures: int, plan: Plan,
             now: float) -> tuple[Decision, PoolChange]:
        assert plan.action is not None and plan.from_ is not None and plan.to is not None
        started = time.monotonic()
        try:
            reached = provider.scale(plan.from_, plan.to, now)
        except ProviderError as exc:
            return self._failed(provider, spec, failures, plan, now, exc, time.monotonic() - started)
        except Exception as exc:  # a bug or an SDK surprise: fail this decision, keep serving
            log.exception("provider %s raised unexpectedly for pool %s", spec.provider, spec.name)
            err = ProviderError(f"unexpected {type(exc).__name__}: {redact_text(str(exc))[:300]}", retryable=True)
            return self._failed(provider, spec, failures, plan, now, err, time.monotonic() - started)
        self._observe(spec, "ok", time.monotonic() - started)
        change = PoolChange(at=now, acted=plan.action, failures=0, backoff_until=None,
                            tracked_count=reached if provider.tracks_count else None)
        decision = self._plan_decision(spec, plan)
        return replace(decision, to=reached), change

    def _failed(self, provider: NodePoolProvider, spec: PoolSpec, failures: int, plan: Plan, now: float,
                exc: ProviderError, elapsed: float) -> tuple[Decision, PoolChange]:
        self._observe(spec, exc.code or ("retryable" if exc.retryable else "error"), elapsed)
        failures += 1
        wait = backoff_seconds(failures)
        reached = plan.from_
        if exc.applied is not None and exc.applied != plan.from_:
            reached = exc.applied
        tracked = reached if provider.tracks_count and reached != plan.from_ else None
        change = PoolChange(at=now, failures=failures, backoff_until=now + wait, tracked_count=tracked)
        code = f" [{exc.code}]" if exc.code else ""
        reason = (f"{plan.reason} failed{code}: {redact_text(exc.message)}; "
                  f"backing off {wait:.0f}s (failure {failures})")
        retry = max(wait, exc.retry_after or 0.0) if exc.retryable else None
        return Decision(spec.name, plan.action, Outcome.FAILED, plan.from_, reached,
                        reason, retry_after=retry, details={"code": exc.code, "retryable": exc.retryable}), change

    def _observe(self, spec: PoolSpec, result: str, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.provider_call(spec.provider, spec.name, result, seconds)


def _view_after(spec: PoolSpec, cloud: CloudStatus, facts: PoolFacts, decision: Decision, now: float) -> PoolView:
    """The pool's cloud view once a decision read it and, if it scaled, asked for ``decision.to`` nodes."""
    if decision.outcome is not Outcome.SCALED or decision.to is None or decision.from_ is None:
        return PoolView(spec.name, cloud.current, cloud.busy, cloud.detail, facts.in_flight, None, now)
    added = max(0, decision.to - decision.from_)
    return PoolView(spec.name, decision.to, cloud.busy, f"{decision.from_} -> {decision.to} asked for by this service",
                    min(facts.in_flight + added, decision.to), None, now)


def _said_by(signal: Signal, plan: Plan) -> Plan:
    """The plan with its reason prefixed by what the signal says of itself (e.g. ``alert GPUUtilizationHigh``)."""
    return replace(plan, reason=f"{signal.reason}: {plan.reason}") if signal.reason else plan
