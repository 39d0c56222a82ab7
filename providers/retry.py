"""The one retry layer of every provider, and the one reading of a cloud's refusal.

Every SDK's and HTTP client's own retries are off; :func:`call` repeats an attempt that raised :class:`Transient`
(5xx, a dropped connection, a timeout; for ARM also 408/429) with exponential backoff and jitter, or after the
``Retry-After`` the cloud sent, as long as the next attempt still starts inside the call's time budget. Anything
else an attempt raises stops the call at once. :func:`refusal` turns a cloud's non-2xx answer into the right error
of :mod:`providers.errors`, the cloud's code and message kept beside ours.
"""
from __future__ import annotations

import email.utils
import logging
import time
from typing import Any, Callable, TypeVar

import tenacity

from autoscaler.clock import SYSTEM, Clock
from autoscaler.config.durations import bounded_wait
from autoscaler.redact import redact_text
from providers import shortfalls
from providers.errors import BusyError, Code, NoCapacityError, PermanentError, ProviderError, TemporaryError

log = logging.getLogger(__name__)

T = TypeVar("T")
Classify = Callable[[Exception, str], Exception]  # an SDK's exception -> Transient, one of ours, or itself

#: 4xx answers worth a later try (not now): timeout, conflict, locked, too many requests
RETRY_LATER = frozenset({408, 409, 423, 429})
MAX_MESSAGE = 300
_MIN_EXCHANGE = 0.5  # seconds: the least time an attempt is given when the budget is nearly spent


class Transient(Exception):
    """A failed attempt that another attempt, now, could fix. ``reason`` never names the call (the caller does)."""

    def __init__(self, reason: str, status: int | None = None, retry_after: float | None = None,
                 cloud_code: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.retry_after = bounded_wait(retry_after)
        self.cloud_code = cloud_code


def clean(text: str) -> str:
    """One line, URLs and secrets redacted, bounded length."""
    text = redact_text(" ".join(str(text).split()))
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def parse_retry_after(headers: Any) -> float | None:
    """Seconds from ``Retry-After`` (seconds or HTTP date) or ``retry-after-ms``, within a day
    (``inf``, ``1e400`` ms and a date in year 9999 are a day: ``durations.MAX_RETRY_AFTER``); None when absent,
    unreadable or NaN."""
    if headers is None:
        return None
    for name in ("retry-after-ms", "x-ms-retry-after-ms"):
        value = headers.get(name)
        if value:
            try:
                return bounded_wait(float(value) / 1000)
            except ValueError:
                pass
    value = headers.get("Retry-After")
    if not value:
        return None
    try:
        return bounded_wait(float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return bounded_wait(when.timestamp() - time.time())


def refusal(what: str, status: int, cloud_code: str | None, message: str, *, said: str = "answered",
            busy: bool = False, throttled: bool = False, retry_now: bool = False,
            retry_after: float | None = None, text: str | None = None, cloud: str | None = None) -> Exception:
    """The error for a cloud's refusal (``said``: who answered, e.g. ``ARM answered``; ``status`` 0: none known;
    ``text``: the whole message, when the cloud's own wording reads better): :class:`Transient` when ``retry_now``
    or a 5xx, else throttled, busy, changed (412), worth a later try (:data:`RETRY_LATER`) or permanent; the
    cloud's code and message are kept beside ours."""
    message = clean(message)
    shown = cloud_code if cloud_code != str(status) else ""
    reason = " ".join(part for part in (said, str(status) if status else "", shown or "") if part)
    reason += f": {message}" if message else ""
    if retry_now or status >= 500:
        return Transient(reason, status, retry_after, cloud_code)
    text = clean(text) if text else f"{what}: {reason}"
    beside: dict[str, Any] = {"cloud_code": cloud_code or (str(status) if status else None),
                              "cloud_message": message or None}
    if cloud and cloud_code and shortfalls.classify(cloud, cloud_code, message):  # ``cloud``: whose codes these are
        return NoCapacityError(text + " (no capacity or quota for it now)", retry_after=retry_after, **beside)
    if throttled or status == 429:
        return TemporaryError(text + " (throttled)", code=Code.THROTTLED, retry_after=retry_after, **beside)
    if busy:
        return BusyError(text + " (the pool is busy; try again later)", retry_after=retry_after, **beside)
    if status == 412:
        return TemporaryError(text + " (the pool changed since it was read)", code=Code.CHANGED, **beside)
    if status in RETRY_LATER:
        return TemporaryError(text, code=Code.REFUSED, retry_after=retry_after, **beside)
    return PermanentError(text, **beside)


def call(what: str, attempt: Callable[[float], T], *, budget: float, timeout: float, clock: Clock = SYSTEM,
         deadline: float | None = None, attempts: int = 5, classify: Classify | None = None) -> T:
    """``attempt(timeout)`` until it returns, raises anything but :class:`Transient`, or another attempt would not
    start and finish inside the budget (ends at ``deadline`` when given: a read and the change it leads to share
    one). Each attempt gets ``timeout``, never more than what is left. ``classify(exc, what)`` turns what an SDK
    raises into a Transient or one of our errors (anything else it returns is raised as it is). The last
    Transient becomes a :class:`TemporaryError` that says how many attempts were made. ``clock``: the service's
    time source (its monotonic clock measures the budget, its sleep waits between attempts)."""
    end = deadline if deadline is not None else clock.monotonic() + budget
    backoff = tenacity.wait_exponential_jitter(initial=0.5, max=4.0, jitter=0.5)

    def wait(state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, Transient) and exc.retry_after is not None:
            return exc.retry_after
        return float(backoff(state))

    def stop(state: tenacity.RetryCallState) -> bool:
        return state.attempt_number >= attempts or clock.monotonic() + state.upcoming_sleep >= end

    def one() -> T:
        try:
            return attempt(min(timeout, max(end - clock.monotonic(), _MIN_EXCHANGE)))
        except (Transient, ProviderError):
            raise
        except Exception as exc:
            if classify is None:
                raise
            raise classify(exc, what) from None

    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning("call=%r attempt=%d failed=%r retry_in=%.2fs", what, state.attempt_number,
                    getattr(exc, "reason", type(exc).__name__), state.upcoming_sleep)

    retrying = tenacity.Retrying(sleep=clock.sleep, stop=stop, wait=wait,
                                 retry=tenacity.retry_if_exception_type(Transient),
                                 before_sleep=before_sleep, reraise=True)
    try:
        return retrying(one)
    except Transient as exc:
        made = retrying.statistics.get("attempt_number", 1)
        code = Code.THROTTLED if exc.status == 429 else Code.UNAVAILABLE
        raise TemporaryError(f"{what} failed: {exc.reason} (gave up after {made} attempt(s) within the "
                             f"{budget:g}s budget)", code=code, retry_after=exc.retry_after,
                             cloud_code=exc.cloud_code or (str(exc.status) if exc.status else None)) from None
