"""HTTP calls for the hook providers over the one retry layer: redacted errors, no secret in any log line."""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import requests
from pydantic import SecretStr

from autoscaler.clock import SYSTEM, Clock
from autoscaler.redact import redact_url
from providers.bounded import AnswerTooLarge, bound
from providers.errors import Code, PermanentError
from providers.retry import Transient, call, parse_retry_after, refusal

log = logging.getLogger(__name__)


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


@dataclass
class HttpCaller:
    """Sends one logical call through the one retry layer (:func:`providers.retry.call`) inside a time budget.

    Each attempt is one bounded exchange (:mod:`providers.bounded`): ``timeout`` is its total time, not the time
    of each socket read, and an answer over :data:`~providers.bounded.MAX_ANSWER` is refused, never read whole."""

    timeout: float
    budget: float
    clock: Clock = SYSTEM
    session: requests.Session | None = None

    def __post_init__(self) -> None:
        self.session = bound(self.session or requests.Session())

    def send(self, method: str, url: str, *, deadline: float | None = None, **kwargs: Any) -> requests.Response:
        """The response of the first attempt that is not transient (5xx, timeout, no connection); ``deadline``
        (monotonic): when the change this call is part of must end (default: this call's own budget)."""
        return call(f"{method} {redact_url(url)}", lambda timeout: self._attempt(method, url, timeout, **kwargs),
                    budget=self.budget, timeout=self.timeout, clock=self.clock, deadline=deadline)

    def change_deadline(self) -> float:
        """The deadline of a change made of several calls: all of them together get one budget and one timeout."""
        return self.clock.monotonic() + self.budget + self.timeout

    def _attempt(self, method: str, url: str, timeout: float, **kwargs: Any) -> requests.Response:
        assert self.session is not None
        try:
            response = self.session.request(method, url, timeout=timeout, allow_redirects=False, **kwargs)
        except AnswerTooLarge as exc:  # the endpoint may have acted: no retry, the cloud's error
            raise PermanentError(f"{method} {redact_url(url)} {exc}", code=Code.BAD_ANSWER,
                                 cloud_code=str(exc.status)) from None
        except requests.Timeout:
            raise Transient(f"no answer within {timeout:.2g}s") from None
        except requests.ConnectionError:
            raise Transient("connection failed") from None
        except requests.RequestException as exc:  # invalid URL and the like: a retry cannot help
            raise PermanentError(f"{method} {redact_url(url)} could not be sent ({type(exc).__name__})",
                                 code=Code.NOT_SENT) from None
        if response.status_code >= 500:
            raise Transient(f"HTTP {response.status_code}", response.status_code,
                            parse_retry_after(response.headers))
        return response


def http_failure(safe: str, response: requests.Response, detail: str = "", code: str | None = None) -> Exception:
    """The error of a non-2xx answer that is not worth an immediate retry (4xx, 3xx); ``code``: the endpoint's own
    code, when its body had one (default: the HTTP status)."""
    status = response.status_code
    return refusal(safe, status, code or str(status), detail, said="the endpoint answered HTTP",
                   retry_after=parse_retry_after(response.headers))
