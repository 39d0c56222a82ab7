"""Who may call /webhook/* and /api/*: bearer tokens, basic auth, Grafana's HMAC signature."""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Callable

from autoscaler.config_schema import AuthConfig

MAX_HEADER = 8192
NonceCache = Callable[[str, float], bool]  # (key, window seconds) -> True when the key is new


class Authenticator:
    """Checks a request's credentials against every configured method (constant-time comparisons)."""

    def __init__(self, cfg: AuthConfig, clock: Callable[[], float], nonce_cache: NonceCache | None = None) -> None:
        self.cfg = cfg
        self.clock = clock
        self.nonce_cache = nonce_cache
        self.tokens = [t.get_secret_value().encode() for t in cfg.bearer_tokens]
        self.users = [(u.username.encode(), u.password.get_secret_value().encode()) for u in cfg.basic]

    def check(self, headers: dict[str, str], body: bytes) -> str | None:
        """None when the request may pass, else what is wrong (never echoing a credential)."""
        if self.cfg.disabled:
            return None
        authz = headers.get("Authorization", "")
        if len(authz) > MAX_HEADER:
            return "Authorization header too long"
        scheme, _, value = authz.partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and self.tokens:
            if value and any(hmac.compare_digest(value.encode(), t) for t in self.tokens):
                return None
            return "invalid bearer token"
        if scheme.lower() == "basic" and self.users:
            if self._basic_ok(value):
                return None
            return "invalid username or password"
        hm = self.cfg.grafana_hmac
        if hm is not None and headers.get(hm.header):
            return self._hmac_problem(headers, body)
        if authz:
            return f"unsupported authorization scheme {scheme[:20]!r}"
        return "missing credentials"

    def _basic_ok(self, value: str) -> bool:
        try:
            user, _, password = base64.b64decode(value, validate=True).partition(b":")
        except (binascii.Error, ValueError):
            return False
        ok = False
        for name, secret in self.users:
            ok |= hmac.compare_digest(user, name) & hmac.compare_digest(password, secret)
        return ok

    def _hmac_problem(self, headers: dict[str, str], body: bytes) -> str | None:
        hm = self.cfg.grafana_hmac
        assert hm is not None
        signature = headers.get(hm.header, "").strip().lower()
        message = body
        if hm.timestamp_header:
            stamp = headers.get(hm.timestamp_header, "").strip()
            if not stamp:
                return f"missing {hm.timestamp_header} header"
            try:
                sent = float(stamp)
            except ValueError:
                return f"{hm.timestamp_header} is not a Unix timestamp"
            if sent > 1e11:  # milliseconds
                sent /= 1000.0
            if abs(self.clock() - sent) > hm.max_skew:
                return f"signature timestamp outside the allowed {hm.max_skew:.0f}s window (replay?)"
            message = stamp.encode() + b":" + body
        expected = hmac.new(hm.secret.get_secret_value().encode(), message, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(signature.encode(), expected.encode()):
            return "invalid HMAC signature"
        # A timestamped signature is good for one delivery: a copy inside the skew window is a replay.
        # (Without a timestamp header, Grafana's own retries carry the same signature, so none is refused.)
        if hm.timestamp_header and self.nonce_cache is not None:
            if not self.nonce_cache(f"hmac|{expected}", 2 * hm.max_skew + 1):
                return "signature already used (replay?)"
        return None
