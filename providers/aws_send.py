"""botocore's HTTP exchanges through a bounded session (:mod:`providers.bounded`).

botocore sends with urllib3 and its ``read_timeout`` bounds each socket read, so an answer that trickles is never cut,
and it reads every answer whole. botocore lets a ``before-send`` handler answer in its place: :func:`bounded_send`
sends the signed request itself over a bounded ``requests`` session (``timeout`` the exchange's total, the answer
read up to ``limit``) and hands botocore the answer, or the error botocore would have raised for a timeout or a lost
connection. An answer over ``limit`` is the cloud's error (``BadAnswer``), never retried.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import requests

from providers.bounded import AnswerTooLarge, bounded_session
from providers.errors import Code, PermanentError

AWS_ANSWER = 16 * 1024 * 1024  # bytes: the most of one AWS answer read (a page of Auto Scaling groups is ~100 KB)


class _Body:
    """The answer's body as botocore reads it (``raw.stream()``)."""

    def __init__(self, content: bytes) -> None:
        self.content = content

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[bytes]:
        yield self.content


def bounded_send(timeout: float, limit: int = AWS_ANSWER) -> Callable[..., Any]:
    """A ``before-send`` handler that sends each request over a bounded session (see the module)."""
    session = bounded_session(limit)

    def send(request: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse
        from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

        body = request.body.read() if hasattr(request.body, "read") else request.body
        try:
            answer = session.request(request.method, request.url, headers=dict(request.headers.items()), data=body,
                                     timeout=(min(timeout, 3.0), timeout), allow_redirects=False)
        except AnswerTooLarge as exc:
            raise PermanentError(f"{request.method} {request.url.split('?')[0]}: AWS {exc}", code=Code.BAD_ANSWER,
                                 cloud_code=str(exc.status)) from None
        except requests.Timeout:
            raise ReadTimeoutError(endpoint_url=request.url.split("?")[0]) from None
        except requests.ConnectionError:
            raise EndpointConnectionError(endpoint_url=request.url.split("?")[0]) from None
        return AWSResponse(request.url, answer.status_code, dict(answer.headers.items()), _Body(answer.content))

    return send
