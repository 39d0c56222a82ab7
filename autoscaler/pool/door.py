"""The one door to act: every change asked of a cloud goes through here.

Whatever decides (an alert or a person, a floor or headroom top-up, a capacity give-back, a repair's replacement and
its removal, a scale-in's named removal), :class:`Door` asks the provider, measures the call (the provider-call
metrics), turns an error no provider should raise into ``TemporaryError`` (code ``Internal``), and the functions
below map what came back to the ``Decision`` and ``PoolChange`` to record (the tracked count for a provider that
cannot read its own: :func:`changed`). The record itself is written through the caller's hold (``Held.finish`` or
``Held.record``: the final write, retried and kept while the store is away), so a change the cloud accepted is never
left unrecorded. Outside ``providers/``, only this module calls a provider's ``scale`` or ``remove_nodes``
(``tests/unit/pool/test_door.py`` checks the tree).
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Callable, Sequence

from autoscaler.clock import SYSTEM, Clock
from autoscaler.models import Action, CloudStatus, Decision, Outcome, PoolSpec, Signal
from autoscaler.decide.policy import backoff_seconds
from autoscaler.redact import redact_text
from autoscaler.store import PoolChange
from providers import (Code, LimitError, NoCapacityError, NodePoolProvider, NodeRef, ProviderError,
                       RemovesNamedNodes, TemporaryError)

log = logging.getLogger(__name__)


class Door:
    """Asks a pool's provider for a change, measured; one per process, built with the service's parts."""

    def __init__(self, metrics: Any = None, clock: Clock = SYSTEM) -> None:
        self.metrics = metrics
        self.clock = clock

    def scale(self, spec: PoolSpec, provider: NodePoolProvider, current: int, target: int, now: float,
              status: CloudStatus | None) -> int:
        """``provider.scale`` (``status``: the cloud's status the change was decided on); the size it reached.
        ProviderError as the provider raised it (an unexpected error as ``TemporaryError``)."""
        return self._call(spec, lambda: provider.scale(current, target, now, status=status))

    def remove(self, spec: PoolSpec, provider: RemovesNamedNodes, refs: Sequence[NodeRef], current: int,
               now: float, status: CloudStatus | None) -> int:
        """``provider.remove_nodes``: exactly ``refs`` removed; the size it reached (errors as :meth:`scale`)."""
        return self._call(spec, lambda: provider.remove_nodes(list(refs), current, now, status=status))

    def resize(self, spec: PoolSpec, provider: NodePoolProvider, plan: Decision, now: float,
               status: CloudStatus | None, failures: int) -> tuple[Decision, PoolChange]:
        """Act on a size plan (an alert's, a person's, a floor's or headroom's top-up): what to record."""
        assert plan.action is not None and plan.from_ is not None and plan.to is not None
        try:
            reached = self.scale(spec, provider, plan.from_, plan.to, now, status)
        except NoCapacityError as exc:  # refused at once for capacity or quota: short, not failing
            return refused_for_capacity(spec, plan, now, exc)
        except LimitError as exc:  # the cloud's own limit (an AKS System pool below 1 node): nothing failed
            return replace(plan, outcome=Outcome.SKIPPED_LIMIT, to=plan.from_,
                           reason=f"{plan.reason}: {redact_text(exc.message)}", retry_after=None,
                           details=error_details(exc)), PoolChange()
        except ProviderError as exc:
            return failed(spec, not provider.capabilities.reports_count, failures, plan, now, exc)
        return replace(plan, to=reached), changed(provider, now, reached, plan.action)

    def _call(self, spec: PoolSpec, call: Callable[[], int]) -> int:
        started = self.clock.monotonic()
        try:
            reached = call()
        except ProviderError as exc:
            self._observe(spec, result_label(exc), started)
            if isinstance(exc, NoCapacityError) and self.metrics is not None:
                self.metrics.no_capacity(spec.name, exc.shown_code)
            raise
        except Exception as exc:  # a bug or an SDK surprise: fail this change, keep serving
            log.exception("provider %s raised unexpectedly for pool %s", spec.provider, spec.name)
            error = TemporaryError(f"unexpected {type(exc).__name__}: {redact_text(str(exc))[:300]}",
                                   code=Code.INTERNAL)
            self._observe(spec, result_label(error), started)
            raise error from None
        self._observe(spec, "ok", started)
        return reached

    def _observe(self, spec: PoolSpec, result: str, started: float) -> None:
        if self.metrics is not None:
            self.metrics.provider_call(spec.provider, spec.name, result, self.clock.monotonic() - started)


def changed(provider: NodePoolProvider, at: float, reached: int, acted: Action | None = None) -> PoolChange:
    """The pool's stored change after the cloud took a change at ``at``: the size it reached kept as the tracked
    count where the provider cannot read it; ``acted`` (a scale-out or scale-in) starts its cooldown and clears a
    backoff."""
    tracked = reached if not provider.capabilities.reports_count else None
    if acted is None:
        return PoolChange(at=at, tracked_count=tracked)
    return PoolChange(at=at, acted=acted, failures=0, backoff_until=None, tracked_count=tracked)


def said_by(signal: Signal, plan: Decision) -> Decision:
    """The plan with its reason prefixed by what the signal says of itself (e.g. ``alert GPUUtilizationHigh``)."""
    return replace(plan, reason=f"{signal.reason}: {plan.reason}") if signal.reason else plan


def result_label(exc: ProviderError) -> str:
    """The ``result`` label of the provider-call metric for a failed act: our code (``Code``), a bounded vocabulary;
    the cloud's own code goes to the event's details."""
    return exc.code.value


def failed(spec: PoolSpec, tracks_count: bool, failures: int, plan: Decision, now: float,
           exc: ProviderError) -> tuple[Decision, PoolChange]:
    """A failed act: one more failure, backing off (``policy.backoff_seconds``), the count the cloud did reach."""
    failures += 1
    wait = backoff_seconds(failures)
    reached = plan.from_
    if exc.applied is not None and exc.applied != plan.from_:
        reached = exc.applied
    tracked = reached if tracks_count and reached != plan.from_ else None
    change = PoolChange(at=now, failures=failures, backoff_until=now + wait, tracked_count=tracked)
    reason = (f"{plan.reason} failed [{exc.shown_code}]: {redact_text(exc.message)}; "
              f"backing off {wait:.0f}s (failure {failures})")
    retry = max(wait, exc.retry_after or 0.0) if exc.retryable else None
    return Decision(spec.name, plan.action, Outcome.FAILED, plan.from_, reached,
                    reason, retry_after=retry, details=error_details(exc)), change


def error_details(exc: ProviderError) -> dict[str, object]:
    """An error in an event's ``details``: our code, whether a retry may help, the cloud's own code and message
    (redacted)."""
    out = exc.details()
    if "cloud_message" in out:
        out["cloud_message"] = redact_text(str(out["cloud_message"]))
    return out


def refused_for_capacity(spec: PoolSpec, plan: Decision, now: float,
                         exc: ProviderError) -> tuple[Decision, PoolChange]:
    """The cloud refused the size at once for capacity or quota (``NoCapacityError``): ``no_capacity``, nothing
    asked, the pool short for ``capacity.short_for``; no failure counted (its group passes it over instead)."""
    assert plan.from_ is not None and plan.to is not None
    code, message = exc.shown_code, redact_text(exc.cloud_message or exc.message)
    details: dict[str, object] = {**error_details(exc), "code": code, "message": message, "asked": plan.to,
                                  "delivered": plan.from_}
    change = PoolChange(short_until=now + spec.short_for, short_reason=f"{code}: {message}"[:500])
    reason = f"{plan.reason} refused for capacity or quota [{code}]: {redact_text(exc.message)}; {short_note(spec)}"
    return Decision(spec.name, plan.action, Outcome.NO_CAPACITY, plan.from_, plan.from_, reason,
                    details=details), change


def short_note(spec: PoolSpec) -> str:
    """What a shortfall's mark means for the pool, as its event says it: a pool in a fallback group is passed over by
    that group for ``capacity.short_for``; a pool with no group is simply short of capacity for that long (no group
    passes it over: an operator reading "passed over by its group" would look for a group that does not exist)."""
    left = _minutes(spec.short_for)
    return f"passed over by its group {spec.group} for {left}" if spec.group else f"short of capacity for {left}"


def _minutes(seconds: float) -> str:
    """A configured duration as a person reads it: "45s", "10 min", "2 h"."""
    s = int(seconds)
    if s % 3600 == 0 and s:
        return f"{s // 3600} h"
    return f"{s // 60} min" if s % 60 == 0 and s else f"{s}s"
