"""HTTP calls for the hook providers: one retry policy, redacted errors, no secret in any log line."""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import requests
from pydantic import SecretStr
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, stop_before_delay
from tenacity import wait_exponential_jitter

from autoscaler.redact import redact_url
from providers.base import ProviderError

log = logging.getLogger(__name__)
T = TypeVar("T")

Sleep = Callable[[float], None]


class _QueryScrubber(logging.Filter):
    """urllib3 logs each request line with its query string at DEBUG; hide the query (it carries secrets)."""

    _QUERY = re.compile(r"\?[^\s\"']*")

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self._QUERY.sub("?REDACTED", record.getMessage())
        record.args = ()
        return True


_scrubber = _QueryScrubber()
for _name in ("urllib3.connectionpool", "urllib3.util.retry"):
    if _scrubber not in logging.getLogger(_name).filters:
        logging.getLogger(_name).addFilter(_scrubber)


def check_http_url(value: SecretStr) -> SecretStr:
    """Pydantic validator: an absolute http(s) URL with a host; the message never quotes the URL."""
    try:
        parts = urlsplit(value.get_secret_value())
    except ValueError:
        raise ValueError("must be an http(s) URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http(s) URL such as https://cs.console.aliyun.com/hook/trigger?...")
    return value


def with_query(url: str, **params: str) -> str:
    """``url`` with ``params`` set in its query string, replacing any value already there."""
    parts = urlsplit(url)
    kept = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in params]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept + list(params.items())), ""))


class Transient(Exception):
    """A failure worth another attempt inside the time budget: 5xx, connection error, timeout."""

    def __init__(self, what: str, status: int | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.status = status


def retry_policy(budget: float, sleep: Sleep, what: str, *, max_attempts: int = 5, initial: float = 0.5,
                 maximum: float = 4.0) -> Retrying:
    """Retry :class:`Transient` failures: exponential backoff with jitter, bounded by attempts and a time budget."""
    return Retrying(
        retry=retry_if_exception_type(Transient),
        stop=stop_after_attempt(max_attempts) | stop_before_delay(budget),
        wait=wait_exponential_jitter(initial=initial, max=maximum, jitter=initial),
        sleep=sleep,
        before_sleep=lambda state: _log_retry(what, state),
        reraise=True,
    )


def call_with_retries(budget: float, sleep: Sleep, what: str, attempt: Callable[..., T], *args: Any) -> T:
    """``attempt(*args)`` under :func:`retry_policy`; the last :class:`Transient` becomes a retryable
    ProviderError that says how many attempts were made. The single retry layer of the SDK-based providers."""
    retrying = retry_policy(budget, sleep, what)
    try:
        return retrying(attempt, *args)
    except Transient as exc:
        attempts = retrying.statistics.get("attempt_number", 1)
        raise ProviderError(f"{what} failed after {attempts} attempt(s): {exc.what}", retryable=True,
                            code=str(exc.status) if exc.status else None) from None


def _log_retry(what: str, state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    wait = state.next_action.sleep if state.next_action else 0.0
    log.warning("call=%r attempt=%d failed=%r retry_in=%.2fs", what, state.attempt_number,
                getattr(exc, "what", type(exc).__name__), wait)


@dataclass
class HttpCaller:
    """Sends one logical call with retries: exponential backoff with jitter inside a total time budget."""

    timeout: float
    budget: float
    sleep: Sleep = time.sleep
    max_attempts: int = 5
    initial_backoff: float = 0.5
    max_backoff: float = 4.0
    session: requests.Session | None = None

    def __post_init__(self) -> None:
        if self.session is None:
            self.session = requests.Session()

    def send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        """The response of the first attempt that is not transient; ProviderError when none is."""
        safe = f"{method} {redact_url(url)}"
        retrying = retry_policy(self.budget, self.sleep, safe, max_attempts=self.max_attempts,
                                initial=self.initial_backoff, maximum=self.max_backoff)
        deadline = time.monotonic() + self.budget
        try:
            return retrying(self._attempt, method, url, deadline, **kwargs)
        except Transient as exc:
            attempts = retrying.statistics.get("attempt_number", 1)
            raise ProviderError(f"{safe} failed after {attempts} attempt(s): {exc.what}", retryable=True,
                                code=str(exc.status) if exc.status else None) from None

    def _attempt(self, method: str, url: str, deadline: float, **kwargs: Any) -> requests.Response:
        assert self.session is not None
        timeout = min(self.timeout, max(deadline - time.monotonic(), 0.5))  # the budget bounds the last attempt too
        try:
            response = self.session.request(method, url, timeout=timeout, allow_redirects=False, **kwargs)
        except requests.Timeout:
            raise Transient(f"no answer within {timeout:g}s") from None
        except requests.ConnectionError:
            raise Transient("connection failed") from None
        except requests.RequestException as exc:  # invalid URL and the like: a retry cannot help
            raise ProviderError(f"{method} {redact_url(url)} could not be sent ({type(exc).__name__})",
                                retryable=False) from None
        if response.status_code >= 500:
            raise Transient(f"HTTP {response.status_code}", response.status_code)
        return response



def http_failure(safe: str, response: requests.Response, detail: str = "") -> ProviderError:
    """A ProviderError for a non-2xx answer that is not worth an immediate retry (4xx, 3xx)."""
    retry_after = _retry_after(response)
    retryable = response.status_code in (408, 409, 423, 429)
    text = f"{safe} answered HTTP {response.status_code}"
    return ProviderError(f"{text}: {detail}" if detail else text, retryable=retryable,
                         code=str(response.status_code), retry_after=retry_after)


def _retry_after(response: requests.Response) -> float | None:
    value = response.headers.get("Retry-After", "")
    try:
        return float(value) if value else None
    except ValueError:
        return None
