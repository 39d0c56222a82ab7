"""The Entra tenant's signing keys, fetched off the request path with a total deadline.

A request never fetches: when it needs the set (an unknown key ID, the set past its ``ttl``, no set yet) it asks a
background thread to fetch it, at most once per ``min_refetch``, and waits for that fetch at most ``wait`` seconds
from the fetch's start, on a condition that holds no lock while it waits. A fetch ends at ``deadline`` seconds in
total, however slowly the endpoint trickles its answer (its sockets are shut at the deadline, which a per-read
timeout alone never does), and reads at most ``MAX_BYTES``. So tokens with made-up key IDs cost one fetch a minute
and a second or two each, and ``/healthz`` and static tokens never wait on the endpoint.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any, Callable

import jwt

from autoscaler.redact import redact_text
from providers.bounded import bounded_session

log = logging.getLogger(__name__)

MIN_REFETCH = 60.0  # an unknown key ID refetches the key set at most this often
FETCH_DEADLINE = 5.0  # one fetch, in total: connect, headers and body (Entra's set is a few KB)
WAIT = 1.5  # the longest a request waits for a fetch, counted from the fetch's start
MAX_BYTES = 1 << 20


class TokenRejected(Exception):
    """The token is not one we accept; the message says why without echoing it (answered 401)."""


class KeysUnavailable(Exception):
    """No signing keys could be fetched yet, so no token can be checked (answered 503: a retry may pass)."""


class SigningKeys:
    """The tenant's signing keys by key ID, fetched from the JWK set URL and used for ``ttl`` seconds (``wall``
    time); a key ID not in the set refetches it, at most once per ``min_refetch``; a failed fetch keeps the keys
    fetched before. ``deadline`` (and ``WAIT``) are real (monotonic) seconds."""

    def __init__(self, url: str, ttl: float, wall: Callable[[], float], min_refetch: float = MIN_REFETCH,
                 deadline: float = FETCH_DEADLINE) -> None:
        self.url, self.ttl, self.wall, self.min_refetch = url, ttl, wall, min_refetch
        self.deadline, self.wait = deadline, WAIT
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._tried_at: float | None = None
        self._error = ""
        self._cond = threading.Condition()
        self._inflight: tuple[int, float] | None = None  # (pid, monotonic start) of the fetch under way
        self.fetches = 0  # attempts, for tests and logs

    def key(self, kid: str) -> jwt.PyJWK:
        """The key with this ID; TokenRejected when the set has none, KeysUnavailable when there is no set."""
        with self._cond:
            now = self.wall()
            stale = self._fetched_at is None or now - self._fetched_at >= self.ttl or kid not in self._keys
            if stale and self._running() is None and (self._tried_at is None
                                                      or now - self._tried_at >= self.min_refetch):
                self._start(now)
            started = self._running()
            if stale and started is not None:  # wait() releases the condition's lock: nobody waits on us
                self._cond.wait_for(lambda: self._running() is None, max(0.0, started + self.wait - time.monotonic()))
            if not self._keys:
                raise KeysUnavailable("the tenant's signing keys could not be fetched: "
                                      f"{self._error or 'the fetch is still under way'}")
            found = self._keys.get(kid)
        if found is None:
            raise TokenRejected(f"token signed by an unknown key (kid {kid[:48]!r})")
        return found

    def _running(self) -> float | None:
        """When the fetch under way in this process started (None: none is; one inherited through a fork is not)."""
        if self._inflight is None or self._inflight[0] != os.getpid():
            return None
        return self._inflight[1]

    def _start(self, now: float) -> None:
        self._tried_at = now
        self.fetches += 1
        self._inflight = (os.getpid(), time.monotonic())
        threading.Thread(target=self._fetch, name="entra-keys", daemon=True).start()

    def _fetch(self) -> None:
        keys, error = None, ""
        try:
            data = fetch_json(self.url, self.deadline)
            if not isinstance(data, dict):
                raise ValueError("the answer is not a JWK set (a JSON object)")
            keys = {k.key_id: k for k in jwt.PyJWKSet.from_dict(data).keys
                    if k.key_id and k.public_key_use in ("sig", None)}
        except (OSError, ValueError, jwt.PyJWTError) as exc:  # ValueError: not JSON
            error = redact_text(f"{self.url}: {exc}")[:300]
        with self._cond:
            if keys is not None:
                self._keys, self._fetched_at, self._error = keys, self.wall(), ""
                log.info("entra_id: %d signing keys fetched", len(keys))
            else:
                self._error = error
                log.warning("entra_id: signing keys not fetched (%s); %s", error,
                            "keeping the keys fetched before" if self._keys else "no token can be checked yet")
            self._inflight = None
            self._cond.notify_all()


def fetch_json(url: str, deadline: float) -> Any:
    """GET ``url`` (proxies from the environment, as requests reads them) and parse its JSON, all within ``deadline``
    seconds and ``MAX_BYTES``: the same bounded exchange every cloud call gets (``providers/bounded.py``). OSError
    (requests' errors are OSErrors) or ValueError otherwise."""
    with bounded_session(MAX_BYTES) as session:
        resp = session.get(url, timeout=deadline,
                           headers={"Accept": "application/json", "User-Agent": "gpu-pool-autoscaler"})
        resp.raise_for_status()
    return json.loads(resp.content)
