"""Azure Monitor's secure webhook: a Microsoft Entra ID access token, checked with PyJWT against the tenant's
published signing keys (issuer, audience, expiry, signature, calling app, app role).

Facts this rests on (Microsoft identity platform docs): tokens are RS256 JWTs whose header names the signing key
(``kid``); v1.0 tokens are issued by ``https://sts.windows.net/<tenant>/``, v2.0 tokens by
``https://login.microsoftonline.com/<tenant>/v2.0``; the keys are published as a JWK set at
``https://login.microsoftonline.com/<tenant>/discovery/v2.0/keys`` and roll over, a new key appearing there before
tokens are signed with it. An action group's secure webhook gets its token as the "AzNS AAD Webhook" app
(``appid``/``azp``), holding the app role the receiving app granted it. The keys are fetched off the request path
(``autoscaler/auth/entra_keys.py``).
"""
from __future__ import annotations

from typing import Any, Callable

import jwt
from jwt.types import Options

from autoscaler.auth.entra_keys import KeysUnavailable, SigningKeys, TokenRejected
from autoscaler.config import EntraId

__all__ = ["EntraVerifier", "KeysUnavailable", "SigningKeys", "TokenRejected"]

_CLAIM_PROBLEMS: list[tuple[type[Exception], str]] = [
    (jwt.InvalidAudienceError, "token audience is not accepted (server.auth.entra_id.audience)"),
    (jwt.InvalidIssuerError, "token issuer is not accepted (server.auth.entra_id.token_version / issuer)"),
    (jwt.InvalidSignatureError, "token signature does not verify"),
]


class EntraVerifier:
    """Checks one bearer token against ``server.auth.entra_id``; returns its claims or raises TokenRejected."""

    def __init__(self, cfg: EntraId, wall: Callable[[], float], keys: SigningKeys | None = None) -> None:
        self.cfg = cfg
        self.wall = wall
        self.keys = keys or SigningKeys(cfg.keys_url(), cfg.keys_ttl, wall)

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims when every check passes."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise TokenRejected("invalid bearer token") from None
        if header.get("alg") != "RS256":
            raise TokenRejected(f"token algorithm {str(header.get('alg'))[:16]!r} is not accepted (RS256 only)")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise TokenRejected("token names no signing key (kid)")
        claims = self._decode(token, self.keys.key(kid).key)
        self._check_time(claims)
        self._check_caller(claims)
        return claims

    def _decode(self, token: str, key: Any) -> dict[str, Any]:
        options: Options = {"require": ["exp", "iss", "aud"], "verify_exp": False, "verify_nbf": False,
                            "verify_iat": False}  # the times are checked against the injected clock below
        try:
            claims: dict[str, Any] = jwt.decode(token, key, algorithms=["RS256"], audience=self.cfg.audience,
                                                issuer=self.cfg.expected_issuer(), options=options)
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRejected(f"token has no {exc.claim!r} claim") from None
        except jwt.PyJWTError as exc:
            problem = next((text for kind, text in _CLAIM_PROBLEMS if isinstance(exc, kind)), "invalid token")
            raise TokenRejected(problem) from None
        return claims

    def _check_time(self, claims: dict[str, Any]) -> None:
        """exp and nbf against the injected clock (PyJWT would read the wall clock)."""
        now, leeway = self.wall(), self.cfg.leeway
        exp, nbf = claims.get("exp"), claims.get("nbf")
        if not isinstance(exp, (int, float)) or isinstance(exp, bool):
            raise TokenRejected("token 'exp' claim is not a time")
        if now > exp + leeway:
            raise TokenRejected("token expired")
        if nbf is not None and (not isinstance(nbf, (int, float)) or now + leeway < nbf):
            raise TokenRejected("token not valid yet (nbf)")

    def _check_caller(self, claims: dict[str, Any]) -> None:
        app = claims.get("appid") or claims.get("azp")
        if self.cfg.app_ids and app not in self.cfg.app_ids:
            raise TokenRejected(f"token was issued to app {str(app)[:48]!r}, not one of "
                                "server.auth.entra_id.app_ids")
        roles = claims.get("roles")
        if self.cfg.role and (not isinstance(roles, list) or self.cfg.role not in roles):
            raise TokenRejected(f"token does not carry the app role {self.cfg.role!r}")
