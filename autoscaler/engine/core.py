"""Lock the pool, read the cloud, decide, act, record: the only place these meet."""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Sequence

from autoscaler.engine import fallback
from autoscaler.repair import alerts as repair_alerts
from autoscaler.repair import start as repair
from autoscaler.pool.attempt import Attempt, DedupClaim
from autoscaler.engine.facts import keeps_headroom, pool_facts, view_after
from autoscaler.pool.hold import Held
from autoscaler.engine.parts import Parts
from autoscaler.models import (Action, Decision, Notification, Outcome, PoolFacts, PoolSpec, Signal, Source)
from autoscaler.cluster.nodes import NodeView
from autoscaler.pool.door import error_details, said_by
from autoscaler.pool.stamps import pulled_back
from autoscaler.decide.policy import decide, shortcut
from autoscaler.redact import redact_text
from autoscaler.nodes.removals import Seen
from autoscaler.store import PoolChange, PoolView, QuickState, StoreUnavailable
from autoscaler.store.gangs import GangRecord
from providers import ProviderError

log = logging.getLogger(__name__)

LEASE_TTL = 30.0  # the default of server.lease_ttl; a running decision renews it every third of it
UNEXPECTED_RETRY = 30.0  # Retry-After for a decision that failed on an unexpected error


class Engine:
    """Turns notifications and manual requests into decisions, one pool at a time."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.settings = parts.settings
        self.store = parts.store
        self.providers = parts.providers
        self.events = parts.events
        self.wall = parts.clock.wall
        self.router = parts.router
        self.lock_wait = parts.settings.config.server.lock_wait
        self.lease_ttl = parts.settings.config.server.lease_ttl
        self.hold = parts.hold  # the one way anything changes a pool
        self.door = parts.door  # the one way a cloud is asked for a change
        self.node_actions = parts.nodes

    # -- notifications --------------------------------------------------------------------------------
    def handle_notification(self, note: Notification, within: frozenset[str] | None = None) -> list[Decision]:
        """One decision per group of alerts that share a pool and action (routing groups them), and one per group
        that routing alone settles (test, resolved, unrouted, unknown pool), recorded as it is. ``within``: the
        pools the sender's credential may act on (None: every pool), for a group's choice."""
        out = []
        for item in self.router.signals(note, self.settings.pools):
            if isinstance(item, Signal):
                out.append(self.handle(item if within is None else replace(item, within=within)))
            else:
                repair_alerts.resolved(self.store, item.decision, item.alerts)
                out.append(self.events.record(item.decision, note.source.value, list(item.alerts), self.wall()))
        return out

    # -- one signal ----------------------------------------------------------------------------------
    def handle(self, signal: Signal) -> Decision:
        """Decide and act on one signal for one pool; records one event (and, when the cloud refused a group's pool
        for capacity, the next pool's decision for the same nodes as its own event)."""
        if signal.action is Action.REPAIR:  # a node to replace, not a size: its own way (docs/repair.md)
            return repair.start(self.parts.repairs, signal, self.handle)
        spec = self.settings.pools.get(signal.pool)
        if spec is None and signal.pool in self.settings.groups:
            routed = fallback.route(self.settings, self.store, self.providers, signal, self.wall())
            if isinstance(routed, Decision):
                return self.events.record(routed, signal.source.value, list(signal.alerts), self.wall())
            signal, spec = routed, self.settings.pools[routed.pool]
        if spec is None:
            decision = Decision(signal.pool, signal.action, Outcome.UNKNOWN_POOL, None, None,
                                f"pool {signal.pool!r} is not configured")
            return self.events.record(decision, signal.source.value, list(signal.alerts), self.wall())
        claim = DedupClaim(self.store, spec.name, signal.dedup_keys, spec.dedup_window)
        self.events.write_kept()  # a record lost while the store was away goes first (a resend finds it here)
        try:
            attempt, settled_decision = self._shortcut(signal, spec, claim)
            decision = self._handle(attempt) if settled_decision is None else settled_decision
        except StoreUnavailable:
            raise  # the request is answered 503; a claim left behind lapses after its short pending window
        except Exception as exc:  # a bug or a library's surprise: this decision fails, the others go on
            return self._unexpected(signal, spec, claim, exc)
        if decision.outcome is Outcome.NO_CAPACITY and spec.group:  # the rest goes to the next pool at once
            self.handle(fallback.signal_for_rest(spec, decision, signal.source, signal.within))
        return decision

    def _shortcut(self, signal: Signal, spec: PoolSpec, claim: DedupClaim) -> tuple[Attempt, Decision | None]:
        """The signal's attempt, and its decision when the pool's stored state settles it: the common case under an
        alert storm (a pool in cooldown, or paused), read, decided and recorded in one transaction (see
        ``EventLog.shortcut``). The clock is read once, after the state: a scale-out another worker recorded since
        must not look like a cooldown still to run (with a zero cooldown it is not)."""
        made: list[Attempt] = []

        def settles(quick: QuickState | None) -> tuple[Attempt, Decision] | None:
            attempt = Attempt(signal, spec, self.providers[spec.name], claim, self.hold.owner(claim.id),
                              self.wall(), self.hold.deadline())
            made.append(attempt)
            decision = self._shortcut_plan(attempt, quick) if quick else None
            return None if decision is None else (attempt, _in_group(signal, decision))

        decision = self.events.shortcut(spec.name, settles)
        return made[-1], decision

    def _handle(self, attempt: Attempt) -> Decision:
        """Claim, hold the pool, decide, act and record: what the stored state alone did not settle."""
        spec = attempt.spec
        # Claimed for a short while first, for the full window once recorded: a claim left by a lost
        # database connection or a killed worker must not swallow the sender's retries for the whole window.
        if not attempt.claim.take(attempt.now, self._pending(spec)):
            return self.events.record(attempt.duplicate(), attempt.source, attempt.alerts, attempt.now)
        try:
            held = self.hold.take(spec.name, attempt.owner, attempt.deadline)
        except StoreUnavailable:
            attempt.claim.forget()
            raise
        if held is None:
            return self._busy(attempt)
        with held:
            return self._held(attempt, held)

    def _pending(self, spec: PoolSpec) -> float:
        """How long a dedup claim holds before its decision is recorded."""
        return min(spec.dedup_window, self.lease_ttl + self.lock_wait)

    def _held(self, attempt: Attempt, held: Held) -> Decision:
        """Decide, act and record on the held pool (the lease released and the dedup keys confirmed with the
        record; a failure before it lets the hold give the lease back)."""
        # The decision's time: read once, now that the pool's state is ours (see ``handle`` for why after).
        decided = replace(attempt, now=self.wall())
        decision, change, view = self._decide_and_act(decided, held)
        decision = _in_group(attempt.signal, decision)
        if decision.retry_after is not None:
            attempt.claim.release()  # let the sender's retry act
        confirm = None
        if decision.retry_after is None and attempt.spec.dedup_window > self._pending(attempt.spec):
            confirm = attempt.claim.confirm(attempt.now, attempt.expires_at)  # in finish's transaction
        recorded = held.finish(decided, decision, change, confirm)
        self._remember_view(view)
        return recorded

    def _unexpected(self, signal: Signal, spec: PoolSpec, claim: DedupClaim, exc: Exception) -> Decision:
        """An error no code path expects: log it, free the dedup claim (the sender's retry must act, not be
        ``skipped_duplicate``) and record ``failed`` with a retry, so that the notification's other signals still
        count and the sender is answered 503. Pool state is left alone: this is not the cloud's failure."""
        log.exception("unexpected error deciding on pool %s", spec.name)
        claim.forget()
        decision = Decision(spec.name, signal.action, Outcome.FAILED, None, None,
                            f"{signal.reason + ': ' if signal.reason else ''}unexpected error ({type(exc).__name__}) "
                            "while deciding; see the service log. A retry can act", retry_after=UNEXPECTED_RETRY,
                            details={"code": "internal"})
        return self.events.record(decision, signal.source.value, list(signal.alerts), self.wall())

    def _remember_view(self, view: PoolView | None) -> None:
        """Keep what this decision learned of the cloud as the pool's stored view (best effort)."""
        if view is None:
            return
        try:
            self.store.save_view(view)
        except StoreUnavailable:
            log.warning("pool %s: cloud view not stored: store unavailable", view.pool)

    def _shortcut_plan(self, attempt: Attempt, quick: QuickState) -> Decision | None:
        """The decision when the stored state settles it (see ``policy.shortcut``), else None."""
        state, current = quick.state, quick.last_count
        if pulled_back(state, attempt.now, attempt.spec.short_for)[0]:
            return None  # a time stamped ahead of this clock: the held decision brings it back first (stamps.py)
        if not attempt.provider.capabilities.reports_count and state.tracked_count is not None:
            current = state.tracked_count
        plan = shortcut(attempt.signal, attempt.spec, state, attempt.now, current)
        return None if plan is None else said_by(attempt.signal, plan)

    def _busy(self, attempt: Attempt) -> Decision:
        """Give up on a pool whose decision stays taken (our lock or lease, maybe a dead worker's until it lapses):
        free the dedup claim, record skipped_busy with a Retry-After, so the sender tries again and that try acts."""
        attempt.claim.release()
        name = attempt.spec.name
        decision = Decision(name, attempt.signal.action, Outcome.SKIPPED_BUSY, None,
                            None, f"another decision on pool {name} is still running after "
                                  f"{self.lock_wait:g}s (its lease lapses within {self.lease_ttl:g}s if its worker "
                                  f"died); try again", retry_after=self.hold.retry_after,
                            details={"busy": "lease"})
        return self.events.record(decision, attempt.source, attempt.alerts, self.wall())

    def names_nodes(self, spec: PoolSpec) -> bool:
        """Whether this pool's nodes can be removed by name (see ``NodeActions.names_nodes``)."""
        return self.node_actions.names_nodes(spec, self.providers[spec.name])

    def _decide_and_act(self, attempt: Attempt, held: Held) -> tuple[Decision, PoolChange, PoolView | None]:
        signal, spec, provider, now = attempt.signal, attempt.spec, attempt.provider, attempt.now
        state = held.state
        try:
            cloud = provider.status(state.tracked(), now)
        except ProviderError as exc:
            retry = (exc.retry_after or 30.0) if exc.retryable else None
            return Decision(spec.name, signal.action, Outcome.FAILED, None, None,
                            attempt.said(f"pool status: {redact_text(exc.message)}"),
                            retry_after=retry, details=error_details(exc)), PoolChange(), None
        attempt = replace(attempt, status=cloud)  # the status this decision is made on, handed to the provider
        window = spec.scale_in.stabilization_window
        recent = (self.store.recommendations(spec.name, now - window)
                  if spec.proportional or (keeps_headroom(spec) and signal.action is Action.SCALE_IN) else [])
        named = self.names_nodes(spec) and (spec.victims != "cloud" or (signal.source is Source.MANUAL
                                                                         and bool(signal.nodes)))
        sizing = signal.action is Action.SCALE_OUT or signal.target is not None  # where in flight changes the size
        views = self.node_actions.marked(spec) if sizing else None  # one node list, shared with the sweep below
        pods = (self.node_actions.with_pods(spec) if keeps_headroom(spec) and signal.action is not None
                and signal.target is None else None)
        undelivered = cloud.shortfall.undelivered if cloud.shortfall is not None else 0
        facts = self.pool_facts(spec, cloud.current, now, views, pods, undelivered)
        plan = decide(signal, spec, state, cloud, now, recent, facts, named_scale_in=named)
        if plan.details.get("recommendation") is not None:
            self.store.add_recommendation(spec.name, now, int(plan.details["recommendation"]), now - window)
        plan = said_by(signal, plan)
        by_name = named and plan.action is Action.SCALE_IN
        if _grows(plan) or (_shrinks(plan) and not by_name):
            plan = _gang_first(self.store.gangs(spec.name), plan, now)
        if plan.outcome is Outcome.SCALED and by_name:
            decision, change = self.node_actions.remove(attempt, plan, state.failures, held.lease)
            return decision, change, view_after(spec, cloud, facts, decision, now)
        if self.names_nodes(spec):
            self.node_actions.sweep(spec, now, views, Seen(cloud, provider.capabilities.reports_count))
        if plan.outcome is Outcome.DRY_RUN and by_name and not signal.nodes:
            preview = self.node_actions.preview(attempt, plan)
            return preview, PoolChange(), view_after(spec, cloud, facts, preview, now)
        if plan.outcome is not Outcome.SCALED:
            decision, change = plan, PoolChange()
        else:
            decision, change = self.door.resize(spec, provider, plan, now, attempt.status, state.failures)
        return decision, change, view_after(spec, cloud, facts, decision, now)

    def pool_facts(self, spec: PoolSpec, current: int | None, now: float,
                   nodes: Sequence[NodeView] | None = None, pods: Sequence[NodeView] | None = None,
                   undelivered: int = 0) -> PoolFacts:
        """Nodes in flight, the floor and the headroom in force now (see ``facts.pool_facts``)."""
        return pool_facts(self.store, spec, current, now, nodes, pods, undelivered)


def _in_group(signal: Signal, decision: Decision) -> Decision:
    """A decision taken for a group names the group in its details (the pool that acted is its ``pool``)."""
    return replace(decision, details={**decision.details, "group": signal.group}) if signal.group else decision


def _grows(plan: Decision) -> bool:
    return plan.outcome is Outcome.SCALED and plan.from_ is not None and plan.to is not None and plan.to > plan.from_


def _shrinks(plan: Decision) -> bool:
    return plan.outcome is Outcome.SCALED and plan.from_ is not None and plan.to is not None and plan.to < plan.from_


def _gang_first(gangs: Sequence[GangRecord], plan: Decision, now: float) -> Decision:
    """A plain scale-out of a pool an atomic scale-out waits on waits too (``skipped_busy``, retried once the gang
    is settled): the nodes that come could not be told from the gang's, which counts every new node as its own and
    removes them on a roll-back (docs/gang.md). So does a scale-in by size (the cloud picks the machine): it could
    take a node that came for the gang (a scale-in by name passes the gang's nodes over)."""
    if not gangs:
        return plan
    gang = gangs[0]
    why = ("its nodes are told apart only so" if _grows(plan) else
           "the cloud picks which machine a scale-in by size removes, and it could be one that came for it")
    return replace(plan, outcome=Outcome.SKIPPED_BUSY, to=plan.from_, retry_after=max(30.0, gang.deadline - now),
                   reason=f"{plan.reason}: an atomic scale-out of {gang.asked} node(s) waits on pool {plan.pool} "
                          f"(gang {gang.id}); asked once it is settled ({why})",
                   details={**plan.details, "gang": gang.id})
