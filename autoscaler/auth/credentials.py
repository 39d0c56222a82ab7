"""Who may call /webhook/* and /api/*: bearer tokens, basic auth, Grafana's HMAC signature, an Entra ID token
(Azure Monitor's secure webhook), a token in the query; and what each may do."""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
import math
from typing import Callable, Mapping, Union

from autoscaler.auth.entra import EntraVerifier, KeysUnavailable, TokenRejected
from autoscaler.config import SCOPES, AuthConfig, BasicUser, BearerToken

MAX_HEADER = 8192
NonceCache = Callable[[str, float], bool]  # (key, window seconds) -> True when the key is new
Body = Union[bytes, Callable[[], bytes]]  # the body, or how to read it (only an HMAC signature needs it)
_HEX64 = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Principal:
    """The credential a request came with: its name (the actor in events), its scopes and its pools."""

    name: str
    scopes: frozenset[str]
    pools: frozenset[str] | None = None  # None: every pool

    def may(self, scope: str) -> bool:
        return scope in self.scopes

    def sees(self, pool: str) -> bool:
        return self.pools is None or pool in self.pools


ANONYMOUS = Principal("anonymous", frozenset(SCOPES))  # auth disabled
GRAFANA_HMAC = Principal("grafana_hmac", frozenset({"webhook"}))  # a shared signing secret only sends alerts


class AuthError(Exception):
    """Missing or wrong credentials; the message never echoes a credential."""


class AuthUnavailable(Exception):
    """The credential cannot be checked now (an Entra ID token while the tenant's keys cannot be fetched)."""


class Authenticator:
    """Checks a request's credentials against every configured method (constant-time comparisons)."""

    def __init__(self, cfg: AuthConfig, wall: Callable[[], float], nonce_cache: NonceCache | None = None) -> None:
        self.cfg = cfg
        self.wall = wall
        self.nonce_cache = nonce_cache
        self.tokens: list[tuple[bytes, Principal]] = []
        self.users: list[tuple[bytes, bytes, Principal]] = []
        for _, name, entry in cfg.credentials():
            who = Principal(name, frozenset(entry.scopes), frozenset(entry.pools) if entry.pools is not None else None)
            if isinstance(entry, BearerToken):
                self.tokens.append((entry.token.get_secret_value().encode(), who))
            elif isinstance(entry, BasicUser):
                self.users.append((entry.username.encode(), entry.password.get_secret_value().encode(), who))
        self.entra = EntraVerifier(cfg.entra_id, wall) if cfg.entra_id else None
        webhook_only = frozenset({"webhook"})  # like an HMAC secret, these only ever send alerts
        self.entra_principal = Principal(cfg.entra_id.name, webhook_only) if cfg.entra_id else None
        self.query = cfg.query_token
        self.query_principal = Principal(cfg.query_token.name, webhook_only) if cfg.query_token else None

    def check(self, headers: dict[str, str], body: Body) -> str | None:
        """None when the request carries valid credentials, else what is wrong (never echoing a credential)."""
        try:
            self.authenticate(headers, body)
        except AuthError as exc:
            return str(exc)
        return None

    def authenticate(self, headers: dict[str, str], body: Body, query: Mapping[str, str] | None = None) -> Principal:
        """The credential the request carries; AuthError when it carries none that is valid, AuthUnavailable when
        it cannot be checked now. ``body`` may be a function that reads it: it is called only for an HMAC signature
        whose other checks passed, so a client without credentials never makes the service wait for its body.
        ``query`` (the URL's parameters) is read only for ``query_token``."""
        if self.cfg.disabled:
            return ANONYMOUS
        authz = headers.get("Authorization", "")
        if len(authz) > MAX_HEADER:
            raise AuthError("Authorization header too long")
        scheme, _, value = authz.partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and (self.tokens or self.entra):
            return self._bearer(value)
        if scheme.lower() == "basic" and self.users:
            user = self._basic(value)
            if user is None:
                raise AuthError("invalid username or password")
            return user
        hm = self.cfg.grafana_hmac
        if hm is not None and headers.get(hm.header):
            problem = self._hmac_problem(headers, body)
            if problem:
                raise AuthError(problem)
            return GRAFANA_HMAC
        if authz:
            raise AuthError(f"unsupported authorization scheme {scheme[:20]!r}")
        if self.query is not None and query is not None and self.query.param in query:
            return self._query_token(query[self.query.param])
        raise AuthError("missing credentials")

    def _bearer(self, value: str) -> Principal:
        found = None
        for secret, who in self.tokens:  # every token compared, so the time says nothing of which matched
            if hmac.compare_digest(value.encode(), secret) and value:
                found = found or who
        if found is not None:
            return found
        if self.entra is None or value.count(".") != 2:  # not a JWT: no need to ask Entra's keys
            raise AuthError("invalid bearer token")
        try:
            self.entra.verify(value)
        except TokenRejected as exc:
            raise AuthError(str(exc)) from None
        except KeysUnavailable as exc:
            raise AuthUnavailable(str(exc)) from None
        assert self.entra_principal is not None
        return self.entra_principal

    def _query_token(self, value: str) -> Principal:
        assert self.query is not None and self.query_principal is not None
        if not hmac.compare_digest(value.encode(), self.query.token.get_secret_value().encode()):
            raise AuthError(f"invalid {self.query.param!r} query parameter")
        return self.query_principal

    def _basic(self, value: str) -> Principal | None:
        try:
            user, _, password = base64.b64decode(value, validate=True).partition(b":")
        except (binascii.Error, ValueError):
            return None
        found = None
        for name, secret, who in self.users:
            if hmac.compare_digest(user, name) & hmac.compare_digest(password, secret):
                found = found or who
        return found

    def _hmac_problem(self, headers: dict[str, str], body: Body) -> str | None:
        hm = self.cfg.grafana_hmac
        assert hm is not None
        signature = headers.get(hm.header, "").strip().lower()
        if len(signature) != 64 or not set(signature) <= _HEX64:
            return "invalid HMAC signature"  # not even the shape of one: no need to read the body
        stamp = ""
        if hm.timestamp_header:
            stamp = headers.get(hm.timestamp_header, "").strip()
            if not stamp:
                return f"missing {hm.timestamp_header} header"
            try:
                sent = float(stamp)
            except ValueError:
                return f"{hm.timestamp_header} is not a Unix timestamp"
            if not math.isfinite(sent):  # nan compares false with everything: it would pass the window check
                return f"{hm.timestamp_header} is not a Unix timestamp"
            if sent > 1e11:  # milliseconds
                sent /= 1000.0
            if abs(self.wall() - sent) > hm.max_skew:
                return f"signature timestamp outside the allowed {hm.max_skew:.0f}s window (replay?)"
        raw = body() if callable(body) else body
        message = stamp.encode() + b":" + raw if hm.timestamp_header else raw
        expected = hmac.new(hm.secret.get_secret_value().encode(), message, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(signature.encode(), expected.encode()):
            return "invalid HMAC signature"
        # A timestamped signature is good for one delivery: a copy inside the skew window is a replay.
        # (Without a timestamp header, Grafana's own retries carry the same signature, so none is refused.)
        if hm.timestamp_header and self.nonce_cache is not None:
            if not self.nonce_cache(f"hmac|{expected}", 2 * hm.max_skew + 1):
                return "signature already used (replay?)"
        return None
