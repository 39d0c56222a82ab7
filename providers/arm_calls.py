"""One retry layer for Azure Resource Manager calls: tenacity inside a time budget, ARM errors made readable.

The SDK client is built with ``retry_total=0``, so this is the only place a call is repeated. Transient
answers (408/429/5xx, dropped connections) are retried with exponential backoff and jitter, or after the
``Retry-After`` ARM sent, as long as the next attempt still starts inside the budget; everything else
becomes a :class:`ProviderError` at once, carrying ARM's error code and message and never a credential.
"""
from __future__ import annotations

import email.utils
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import tenacity

from autoscaler.redact import redact_text
from providers.base import ProviderError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: HTTP statuses worth another attempt inside the same call.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: 409 codes that mean "the pool is busy with another operation": retry later, not now.
BUSY_CODES = frozenset({"OperationNotAllowed", "AnotherOperationInProgress", "OperationPreempted"})
_MAX_MESSAGE = 400


@dataclass(frozen=True)
class Budget:
    """How long one call may take in total, and how it waits between attempts."""

    total: float = 8.0
    initial_backoff: float = 0.5
    max_backoff: float = 4.0
    jitter: float = 0.5
    max_attempts: int = 8


class _Transient(Exception):
    """A failed attempt that another attempt could fix."""

    def __init__(self, message: str, code: str | None, retry_after: float | None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retry_after = retry_after


def parse_retry_after(headers: Any) -> float | None:
    """Seconds from ``Retry-After`` (seconds or HTTP date) or ``retry-after-ms``; None when absent."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("x-ms-retry-after-ms", 0.001)):
        value = headers.get(name)
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                pass
    value = headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def arm_error(exc: Any) -> tuple[str | None, str]:
    """ARM's error code and message from an SDK HttpResponseError (body ``{"error": {"code", "message"}}``)."""
    code: str | None = None
    message = ""
    error = getattr(exc, "error", None)
    if error is not None:
        code = getattr(error, "code", None)
        message = getattr(error, "message", "") or ""
    response = getattr(exc, "response", None)
    if (not code or not message) and response is not None:
        try:
            body = json.loads(response.text())
            inner = body.get("error", body) if isinstance(body, dict) else {}
            code = code or inner.get("code")
            message = message or inner.get("message", "")
        except (ValueError, AttributeError, TypeError):
            pass
    if not message:
        message = getattr(exc, "reason", None) or "no error message"
    return code, _clean(str(message))


def _clean(text: str) -> str:
    """One line, URLs redacted, bounded length."""
    text = redact_text(" ".join(text.split()))
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def classify(exc: Exception, what: str) -> Exception:
    """Turn an SDK exception into ``_Transient`` (retry here) or ``ProviderError`` (stop here)."""
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ServiceRequestError
    from azure.core.exceptions import ServiceResponseError

    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return _Transient(f"{what}: no answer from ARM ({type(exc).__name__})", None, None)
    if isinstance(exc, ClientAuthenticationError) and getattr(exc, "response", None) is None:
        return ProviderError(
            f"{what}: no Azure credential could get a token ({_clean(str(exc.message))})",
            retryable=False,
            code="CredentialUnavailable",
        )
    if not isinstance(exc, HttpResponseError):
        return exc
    status = exc.status_code or 0
    code, message = arm_error(exc)
    text = f"{what}: ARM answered {status} {code or ''}".rstrip() + f": {message}"
    retry_after = parse_retry_after(getattr(exc.response, "headers", None))
    if status in TRANSIENT_STATUSES:
        return _Transient(text, code, retry_after)
    if status == 409 and code in BUSY_CODES:
        return ProviderError(text + " (the pool is busy; try again later)", retryable=True, code=code,
                             retry_after=retry_after)
    if status == 412:
        return ProviderError(text + " (the pool changed since it was read)", retryable=True, code=code)
    return ProviderError(text, retryable=False, code=code)


def call_with_budget(
    what: str,
    fn: Callable[[float], T],
    *,
    budget: Budget,
    deadline: float | None = None,
    attempt_timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``fn(timeout)`` until it succeeds, fails for good, or the next attempt would end past the deadline.

    ``fn`` gets the read timeout for its attempt (never longer than what is left of the budget). The first
    attempt always runs; a retry runs only when it can start and finish inside the deadline.
    """
    end = deadline if deadline is not None else clock() + budget.total
    backoff = tenacity.wait_exponential_jitter(
        initial=budget.initial_backoff, max=budget.max_backoff, jitter=budget.jitter
    )

    def wait(state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _Transient) and exc.retry_after is not None:
            return exc.retry_after
        return float(backoff(state))

    def stop(state: tenacity.RetryCallState) -> bool:
        if state.attempt_number >= budget.max_attempts:
            return True
        # another attempt needs its wait plus at least a short exchange with ARM
        return clock() + state.upcoming_sleep + 0.5 > end

    def attempt() -> T:
        timeout = max(0.5, min(attempt_timeout, end - clock()))
        try:
            return fn(timeout)
        except Exception as exc:  # noqa: BLE001 - classified right here
            raise classify(exc, what) from None

    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning("ARM call failed (attempt %d), retrying in %.2fs: %s", state.attempt_number,
                    state.upcoming_sleep, exc)

    retrying = tenacity.Retrying(
        sleep=sleep,
        stop=stop,
        wait=wait,
        retry=tenacity.retry_if_exception_type(_Transient),
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        return retrying(attempt)
    except _Transient as exc:
        raise ProviderError(
            f"{exc.message} (gave up after {retrying.statistics.get('attempt_number', 1)} attempt(s) "
            f"within the {budget.total:g}s budget)",
            retryable=True,
            code=exc.code,
            retry_after=exc.retry_after,
        ) from None
