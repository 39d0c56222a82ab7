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
from autoscaler.models import (Action, Alert, Decision, Notification, Outcome, PoolSpec, PoolState,
                               Signal, Source)
from autoscaler.policy import Plan, backoff_seconds, decide, settled
from autoscaler.redact import redact_text
from autoscaler.routing import Router
from autoscaler.store import DedupConfirm, Store, StoreUnavailable
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

    # -- notifications --------------------------------------------------------------------------------
    def handle_notification(self, note: Notification) -> list[Decision]:
        """One decision per group of alerts that share a pool and action (and one per ignored group)."""
        groups: dict[tuple[Any, ...], list[Alert]] = {}
        steps: dict[tuple[Any, ...], int] = {}
        for alert in note.alerts:
            route = self.router.route(alert, note.query)
            if alert.is_test:
                key: tuple[Any, ...] = ("test", route.pool, None, "")
            elif alert.status != "firing":
                key = (alert.status, route.pool, route.action, "")
            elif route.problem:
                key = ("unrouted", route.pool, None, route.problem)
            elif route.pool not in self.settings.pools:
                key = ("unknown", route.pool, route.action, "")
            else:
                key = ("act", route.pool, route.action, "")
                if route.step:
                    steps[key] = max(steps.get(key, 0), route.step)
            groups.setdefault(key, []).append(alert)
        return [self._group(note.source, key, alerts, steps.get(key)) for key, alerts in groups.items()]

    def _group(self, source: Source, key: tuple[Any, ...], alerts: list[Alert], step: int | None) -> Decision:
        kind, pool, action, problem = key
        action_text = action.value if isinstance(action, Action) else None
        names = ", ".join(sorted({a.name or "(unnamed)" for a in alerts}))
        if kind == "test":
            return self._note(source, pool, None, Outcome.IGNORED_TEST, alerts,
                              "Grafana test notification: recorded, never acted on")
        if kind == "resolved":
            return self._note(source, pool, action_text, Outcome.IGNORED_RESOLVED, alerts,
                              f"resolved notification for {names}: resolving never scales")
        if kind == "ignored":
            states = ", ".join(sorted({a.annotations.get("state", "?") for a in alerts}))
            return self._note(source, pool, action_text, Outcome.IGNORED_RESOLVED, alerts,
                              f"Grafana legacy state {states} for {names} is not an alert; ignored")
        if kind == "unrouted":
            return self._note(source, pool, None, Outcome.UNROUTED, alerts, f"{names}: {problem}")
        if kind == "unknown":
            return self._note(source, pool, action_text, Outcome.UNKNOWN_POOL, alerts,
                              f"{names} asks for pool {pool!r}, which is not configured")
        values = [v for v in (self._value(a, pool, action) for a in alerts) if v is not None]
        signal = Signal(pool=pool, action=action, source=source, step=step, alerts=tuple(alerts),
                        reason=f"alert {names}", value=max(values) if values else None)
        return self.handle(signal)

    def _value(self, alert: Alert, pool: str, action: Action) -> float | None:
        """The alert's value; for Grafana, the query named by the direction's ``value_ref`` when it has one."""
        ref = self.settings.pools[pool].direction(action).value_ref
        if ref and alert.values.get(ref) is not None:
            return alert.values[ref]
        return alert.value

    def _note(self, source: Source, pool: str | None, action: str | None, outcome: Outcome,
              alerts: list[Alert], reason: str) -> Decision:
        decision = Decision(pool=pool, action=action, outcome=outcome, from_=None, to=None, reason=reason)
        return self.events.record(decision, source.value, alerts, self.clock())

    # -- one signal ----------------------------------------------------------------------------------
    def handle(self, signal: Signal) -> Decision:
        """Decide and act on one signal for one pool; records exactly one event."""
        spec = self.settings.pools.get(signal.pool)
        alerts = list(signal.alerts)
        action = signal.action.value if signal.action else None
        now = self.clock()
        if spec is None:
            decision = Decision(signal.pool, action, Outcome.UNKNOWN_POOL, None, None,
                                f"pool {signal.pool!r} is not configured")
            return self.events.record(decision, signal.source.value, alerts, now)
        claim = uuid.uuid4().hex
        keys = signal.dedup_keys
        duplicate = Decision(spec.name, action, Outcome.SKIPPED_DUPLICATE, None, None,
                             f"{signal.reason}: same notification already handled within "
                             f"the {spec.dedup_window:.0f}s dedup window")
        # The common case under an alert storm: a pool in cooldown (or paused). A read and one transaction, no lease,
        # no cloud read: nothing the cloud could say would make it act. The clock is read after the state: a
        # scale-out another worker recorded since ``now`` must not look like a cooldown still to run (with a zero
        # cooldown it is not).
        quick = self.events.settle(spec.name, signal.source.value, alerts, now, keys, claim, now + spec.dedup_window,
                                   lambda state, last: self._settled(signal, spec, state, last, self.clock()),
                                   duplicate)
        if quick is not None:
            return quick
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
            decision, changes = self._decide_and_act(signal, spec, state)
        except BaseException:
            self.store.release(spec.name, owner)
            raise
        if decision.retry_after is not None:
            self.store.release_dedup(keys, claim)  # let the sender's retry act
        confirm = None
        if keys and decision.retry_after is None and spec.dedup_window > pending:
            confirm = DedupConfirm(keys, claim, now + spec.dedup_window)  # in finish's transaction
        return self.events.finish(spec.name, owner, decision, signal.source.value, alerts, self.clock(), changes,
                                  confirm)

    def _settled(self, signal: Signal, spec: PoolSpec, state: PoolState, last_count: int | None,
                 now: float) -> Decision | None:
        """The decision when the stored state settles it (see ``policy.settled``), else None."""
        current = last_count
        if self.providers[spec.name].tracks_count and state.tracked_count is not None:
            current = state.tracked_count
        plan = settled(signal, spec, state, now, current)
        return None if plan is None else self._plan_decision(spec, _said_by(signal, plan))

    def _busy(self, signal: Signal, spec: PoolSpec, keys: tuple[str, ...], claim: str) -> Decision:
        """Give up on a pool whose decision stays taken: free the dedup claim, record skipped_busy."""
        self.store.release_dedup(keys, claim)
        decision = Decision(spec.name, signal.action.value if signal.action else None, Outcome.SKIPPED_BUSY, None,
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

    def _decide_and_act(self, signal: Signal, spec: PoolSpec, state: PoolState) -> tuple[Decision, dict[str, Any]]:
        provider = self.providers[spec.name]
        now = self.clock()
        try:
            cloud = provider.status(Tracked(state.tracked_count, state.count_changed_at), now)
        except ProviderError as exc:
            retry = (exc.retry_after or 30.0) if exc.retryable else None
            return Decision(spec.name, signal.action.value if signal.action else None, Outcome.FAILED, None, None,
                            f"{signal.reason + ': ' if signal.reason else ''}pool status: {redact_text(exc.message)}", retry_after=retry,
                            details={"code": exc.code}), {}
        proportional = "proportional" in (spec.scale_out.mode, spec.scale_in.mode)
        window = spec.scale_in.stabilization_window
        recent = self.store.recommendations(spec.name, now - window) if proportional else []
        plan = decide(signal, spec, state, cloud, now, recent)
        if plan.details.get("recommendation") is not None:
            self.store.add_recommendation(spec.name, now, int(plan.details["recommendation"]), now - window)
        plan = _said_by(signal, plan)
        if plan.outcome is not Outcome.SCALED:
            return self._plan_decision(spec, plan), {}
        return self._act(provider, spec, state.failures, plan, now)

    @staticmethod
    def _plan_decision(spec: PoolSpec, plan: Plan) -> Decision:
        return Decision(spec.name, plan.action.value if plan.action else None, plan.outcome, plan.from_, plan.to,
                        plan.reason, retry_after=plan.retry_after, details=dict(plan.details))

    def _act(self, provider: NodePoolProvider, spec: PoolSpec, failures: int, plan: Plan,
             now: float) -> tuple[Decision, dict[str, Any]]:
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
        changes: dict[str, Any] = {"failures": 0, "backoff_until": None,
                                   f"last_{plan.action.value}_at": now}
        if provider.tracks_count:
            changes.update(tracked_count=reached, count_changed_at=now)
        decision = self._plan_decision(spec, plan)
        return replace(decision, to=reached), changes

    def _failed(self, provider: NodePoolProvider, spec: PoolSpec, failures: int, plan: Plan, now: float,
                exc: ProviderError, elapsed: float) -> tuple[Decision, dict[str, Any]]:
        self._observe(spec, exc.code or ("retryable" if exc.retryable else "error"), elapsed)
        failures += 1
        wait = backoff_seconds(failures)
        changes: dict[str, Any] = {"failures": failures, "backoff_until": now + wait}
        reached = plan.from_
        if exc.applied is not None and exc.applied != plan.from_:
            reached = exc.applied
            if provider.tracks_count:
                changes.update(tracked_count=exc.applied, count_changed_at=now)
        code = f" [{exc.code}]" if exc.code else ""
        reason = (f"{plan.reason} failed{code}: {redact_text(exc.message)}; "
                  f"backing off {wait:.0f}s (failure {failures})")
        retry = max(wait, exc.retry_after or 0.0) if exc.retryable else None
        return Decision(spec.name, plan.action.value if plan.action else None, Outcome.FAILED, plan.from_, reached,
                        reason, retry_after=retry, details={"code": exc.code, "retryable": exc.retryable}), changes

    def _observe(self, spec: PoolSpec, result: str, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.provider_call(spec.provider, spec.name, result, seconds)


def _said_by(signal: Signal, plan: Plan) -> Plan:
    """The plan with its reason prefixed by what the signal says of itself (e.g. ``alert GPUUtilizationHigh``)."""
    return replace(plan, reason=f"{signal.reason}: {plan.reason}") if signal.reason else plan
