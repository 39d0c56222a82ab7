"""The event log: every decision is one event, logged once, counted once and sent to the sinks."""
from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Callable

from autoscaler.answers import event_json
from autoscaler.pool.attempt import Attempt
from autoscaler.clock import SYSTEM, Clock
from autoscaler.pool.final_write import Final, FinalWrites, Pending
from autoscaler.logjson import json_logs
from autoscaler.models import Alert, Decision, OperatorOutcome, Source
from autoscaler.redact import active, redact_text
from autoscaler.sinks import EventSink
from autoscaler.storable import MAX_ALERTS_LISTED, clean
from autoscaler.store import EventRecord, PoolChange, QuickState, Shortcut, Store, tables

log = logging.getLogger("autoscaler.decision")
_ACTOR: ContextVar[str | None] = ContextVar("actor", default=None)


@contextmanager
def acting_as(name: str) -> Iterator[None]:
    """Every event recorded inside (on this thread) names ``name`` as its actor: the credential of the request that
    caused it, so the engine need not carry who asked through every decision path."""
    token = _ACTOR.set(name)
    try:
        yield
    finally:
        _ACTOR.reset(token)


_POOL_WIDTH: int | None = getattr(tables.events.c.pool.type, "length", None)


def _pool_text(pool: str | None) -> str | None:
    """A pool as an event names it: an unknown or unrouted alert's label may be anything, the column holds 64."""
    return None if pool is None else clean(pool, _POOL_WIDTH)


def _redacted(details: dict[str, Any]) -> dict[str, Any]:
    redactor = active()
    return redactor.tree(details) if redactor and details else details


@dataclass(frozen=True)
class OperatorAct:
    """An operator's pause, resume or count correction on one pool, as its event says it: who, what and why."""

    pool: str
    action: str
    outcome: OperatorOutcome
    reason: str
    actor: str
    from_: int | None = None
    to: int | None = None
    details: dict[str, Any] | None = None


class EventLog:
    """Writes events to the store and fans them out to the log, the metrics and the sinks."""

    def __init__(self, store: Store, sinks: list[EventSink] | None = None, metrics: Any = None,
                 clock: Clock = SYSTEM) -> None:
        self.store = store
        self.sinks = list(sinks or [])
        self.metrics = metrics
        self.json_logs = json_logs()
        self.final = FinalWrites(store, clock.sleep, clock.monotonic)

    def _record_for(self, d: Decision, source: str, alerts: list[Alert], now: float) -> EventRecord:
        details = {k: v for k, v in d.details.items() if v is not None}
        actor = _ACTOR.get()
        if actor:
            details["actor"] = actor
        if len(alerts) > MAX_ALERTS_LISTED:  # every alert counted, a bounded number listed
            details["alerts_not_listed"] = len(alerts) - MAX_ALERTS_LISTED
        # redacted and made storable before it is stored: the event log, the API, the status page, the log line
        # and the sinks all read it from here
        return EventRecord(time=now, pool=_pool_text(d.pool), source=source,
                           action=d.action.value if d.action else None, outcome=d.outcome.value, from_=d.from_,
                           to=d.to, reason=clean(redact_text(d.reason)),
                           alerts=[a.ref() for a in alerts[:MAX_ALERTS_LISTED]], details=_redacted(details))

    def record(self, d: Decision, source: str, alerts: list[Alert], now: float) -> Decision:
        """Record a decision that changes no pool state."""
        ev = self._record_for(d, source, alerts, now)
        event_id = self.store.record(ev)
        return self._published(d, replace(ev, id=event_id))

    def finish(self, held: Final, d: Decision, source: str, alerts: list[Alert], now: float,
               change: PoolChange) -> Decision:
        """The final write of a held pool's record (``Held.record``): the event at ``now``, its change to the pool's
        state, the lease released (``held.release``), the dedup keys confirmed and the repairs marked as ``held`` says,
        in one transaction; retried until ``held.until`` (monotonic: the lease's end) while the store is away, then
        kept and written once it is back (see ``final_write``)."""
        ev = self._record_for(d, source, alerts, now)
        pending = Pending(held.pool, held.owner, ev, change, held.confirm,
                          lambda event_id: self._published(d, replace(ev, id=event_id)), held.release,
                          held.repairs)
        event_id = self.final.write(pending, held.until)
        return self._published(d, replace(ev, id=event_id))

    def write_kept(self) -> None:
        """Write the final writes kept while the store was away (best effort; they are retried in the background)."""
        self.final.flush()

    def shortcut(self, pool: str,
               settles: Callable[[QuickState | None], tuple[Attempt, Decision] | None]) -> Decision | None:
        """The short cut (``Store.shortcut``): ``settles`` says, from the pool's stored state, which decision that state
        settles (None: none; nothing is recorded and None is returned). In the same transaction as the read, that
        decision is recorded with the attempt's dedup keys claimed for the full window, or the attempt's duplicate
        when every key was already claimed."""
        made: list[tuple[Decision, EventRecord]] = []

        def plan(quick: QuickState | None) -> Shortcut | None:
            settled = settles(quick)
            if settled is None:
                return None
            attempt, d = settled
            duplicate = attempt.duplicate()
            ev = self._record_for(d, attempt.source, attempt.alerts, attempt.now)
            dup = self._record_for(duplicate, attempt.source, attempt.alerts, attempt.now)
            made[:] = [(d, ev), (duplicate, dup)]
            return Shortcut(attempt.claim.keys, attempt.claim.id, attempt.now, attempt.expires_at, ev, dup)

        written = self.store.shortcut(pool, plan)
        if written is None:
            return None
        event_id, was_duplicate = written
        d, ev = made[was_duplicate]
        return self._published(d, replace(ev, id=event_id))

    def operator(self, act: OperatorAct, change: PoolChange, now: float) -> int:
        """Apply an operator's change to a pool (pause, resume, count correction) and record who made it, in one
        transaction, so the event log is the whole audit trail; return the event id."""
        ev = EventRecord(time=now, pool=act.pool, source=Source.OPERATOR.value, action=act.action,
                         outcome=act.outcome.value, from_=act.from_, to=act.to, reason=clean(redact_text(act.reason)),
                         alerts=[], details=_redacted({"actor": act.actor, **(act.details or {})}))
        event_id = self.store.update_pool(act.pool, ev, change)
        self._publish(replace(ev, id=event_id), count=False)  # not a decision: no decisions_total sample
        return event_id or 0

    def repair_cancelled(self, act: OperatorAct, node: str, now: float) -> int:
        """An operator's cancel: forget ``node``'s repair and record who cancelled it, in one transaction."""
        ev = EventRecord(time=now, pool=act.pool, source=Source.OPERATOR.value, action=act.action,
                         outcome=act.outcome.value, from_=None, to=None, reason=clean(redact_text(act.reason)),
                         alerts=[], details=_redacted({"actor": act.actor, **(act.details or {})}))
        event_id = self.store.end_repair(act.pool, node, ev)
        self._publish(replace(ev, id=event_id), count=False)
        return event_id or 0

    def _published(self, d: Decision, ev: EventRecord) -> Decision:
        self._publish(ev)
        return replace(d, event_id=ev.id)

    def _publish(self, ev: EventRecord, count: bool = True) -> None:
        """Log, count and send an event already committed. Nothing here may raise: an exception would reach the
        engine's unexpected-error handling, which frees the dedup claims, so the sender's retry would act a second
        time on a decision that already happened (and the answer would say ``failed``)."""
        try:
            self._emit(ev, count)
        except Exception:  # a log handler, the metrics' files, an event's serialisation
            self._dropped("_publish")
            try:
                log.error("event %s (pool %s) committed, but publishing it failed", ev.id, ev.pool, exc_info=True)
            except Exception:  # noqa: BLE001 - the log itself is what failed
                pass

    def _dropped(self, sink: str) -> None:
        """Count one event a sink (or the publishing step, ``_publish``) did not take; best effort."""
        try:
            if self.metrics is not None:
                self.metrics.sink_dropped.labels(sink[:64]).inc()
        except Exception:  # noqa: BLE001 - counting must not fail a committed decision either
            pass

    def _emit(self, ev: EventRecord, count: bool = True) -> None:
        body = event_json(ev) if self.json_logs or self.sinks else {}
        if self.json_logs:
            log.info(json.dumps({"msg": "decision", **body}))
        else:
            alerts = ",".join(a.get("alertname", "") for a in ev.alerts[:10])
            log.info("decision pool=%s action=%s outcome=%s from=%s to=%s source=%s alerts=%s event_id=%s reason=%s",
                     ev.pool, ev.action, ev.outcome, ev.from_, ev.to, ev.source, alerts or "-", ev.id,
                     json.dumps(ev.reason))
        if self.metrics is not None and count:
            self.metrics.decision(ev.pool, ev.action, ev.outcome)
        for sink in self.sinks:
            try:
                sink.emit(body)
            except Exception:  # a sink must never fail a decision
                self._dropped(type(sink).__name__)
                log.warning("event sink %s failed", type(sink).__name__, exc_info=True)
