"""The Alibaba Cloud SDK's HTTP exchanges through a bounded session (:mod:`providers.bounded`).

The SDK (alibabacloud-tea-openapi over darabonba-core) sends every synchronous call with ``requests``, through a
``requests.Session`` of its own that it makes on first use for each endpoint and keeps in ``DaraCore._sessions``,
and hands it ``timeout=(connect, read)`` from the client's ``connect_timeout``/``read_timeout``. The read part
bounds each socket read, so an answer trickled a byte at a time was never cut. No option of the SDK takes a session
or a transport: :func:`bound_client` puts a bounded session in that cache, under the key the SDK looks it up by,
before the client's first call; every exchange of the client then ends within its read timeout, the answer read up
to :data:`ACK_ANSWER` (TLS as ``requests`` does it, with certifi's CAs as the SDK's own adapter; the SDK still hands
each send its ``verify``, ``cert`` and proxies). The SDK re-raises the adapter's error as its own ``RetryError``
(inside the ``except``, so the original is its ``__context__``); :func:`bounded_failure` finds it again.
darabonba-core is pinned in requirements.txt for this; the ACK trickle test fails should an upgrade move the cache,
and at run time :func:`keep_bounded` bounds, after the call that made it, any session the SDK made itself (said once).
"""
from __future__ import annotations

import logging
from typing import Any

import requests

from providers.bounded import AnswerTooLarge, AnswerTooSlow, bound, is_bounded

log = logging.getLogger(__name__)

ACK_ANSWER = 16 * 1024 * 1024  # bytes: the most of one ACK answer read (a page of 100 nodes is ~100 KB)


def bound_client(client: Any) -> Any:
    """``client`` (an alibabacloud-tea-openapi client) with every exchange bounded (see the module)."""
    from darabonba.core import DaraCore
    from darabonba.request import DaraRequest

    # as DaraCore.do_action names it: protocol, the endpoint (the host header), the request's port, the pool size
    protocol, host = str(client._protocol or "https").lower(), _host(client)
    pool = DaraCore._resolve_pool_maxsize({"maxIdleConns": DaraCore.to_number(client._max_idle_conns)})
    key = f"{protocol}://{host}:{DaraRequest().port}:pool={pool}"
    bound(DaraCore._sessions.setdefault(key, requests.Session()), ACK_ANSWER)
    return client


def keep_bounded(client: Any) -> None:
    """After a call of ``client``: every session the SDK keeps for its endpoint is a bounded one. One that is not
    (the SDK looked its session up under another key than :func:`bound_client`'s: a changed darabonba-core) is
    bounded from now on and said once by a warning: only the call that made it went with the SDK's per-read timeout.
    """
    from darabonba.core import DaraCore

    host = _host(client)
    for key, session in list(DaraCore._sessions.items()):
        if f"://{host}:" in key and not is_bounded(session):
            bound(session, ACK_ANSWER)
            log.warning("the ACK SDK made an HTTP session of its own for %s (darabonba-core changed its session "
                        "key?): bounded from now on; the call that made it had only the SDK's per-read timeout",
                        host)


def _host(client: Any) -> str:
    """The client's endpoint as the SDK's session keys hold it (the request's host header, no trailing slash)."""
    return str(client._endpoint).rstrip("/")


def bounded_failure(exc: Exception) -> AnswerTooSlow | AnswerTooLarge | None:
    """The bounded adapter's error under the SDK's exception (``UnretryableException`` -> ``RetryError``), if any."""
    inner = getattr(exc, "inner_exception", None) or exc
    cause = inner.__context__
    return cause if isinstance(cause, (AnswerTooSlow, AnswerTooLarge)) else None
