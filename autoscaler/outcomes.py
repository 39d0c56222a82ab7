"""A plan (a ``Decision`` not acted on yet) and what its act did, as the ``Decision`` recorded and the ``PoolChange``
stored with it (pure)."""
from __future__ import annotations

from dataclasses import replace

from autoscaler.models import Decision, Outcome, PoolSpec, Signal
from autoscaler.policy import backoff_seconds
from autoscaler.redact import redact_text
from autoscaler.store import PoolChange
from providers import ProviderError


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
    reason = (f"{plan.reason} refused for capacity or quota [{code}]: {redact_text(exc.message)}; passed over by "
              f"its group for {spec.short_for:.0f}s")
    return Decision(spec.name, plan.action, Outcome.NO_CAPACITY, plan.from_, plan.from_, reason,
                    details=details), change
