"""``server:`` (HTTP, who may call it) and ``store:`` (where state lives), and the ``influxdb:`` event sink."""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from autoscaler.config.durations import Duration
from autoscaler.config.common import Frozen

_UNSENDABLE = re.compile(r"[\s\x00-\x1f\x7f]")  # what no ``Authorization: Bearer`` value can hold
Scope = Literal["webhook", "read", "operate"]
SCOPES: tuple[Scope, ...] = ("webhook", "read", "operate")


class _Scoped(Frozen):
    """What one credential may do: ``webhook`` (send alerts), ``read`` (GET the API and the status page),
    ``operate`` (scale, pause, resume, correct counts); ``pools`` limits read and operate to those pools."""

    name: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[\x21-\x7e]+$",
                             description="Who acts, in events and logs (default: the username, or bearer_tokens[i]).")
    scopes: list[Scope] = Field(default_factory=lambda: list(SCOPES), min_length=1)
    pools: list[str] | None = Field(default=None, description="Pools it may read and operate (default: all).")


class BearerToken(_Scoped):
    """One token accepted as ``Authorization: Bearer <token>``."""

    token: SecretStr


class BasicUser(_Scoped):
    """One username/password pair accepted with HTTP basic auth."""

    username: str = Field(min_length=1)
    password: SecretStr


class GrafanaHmac(Frozen):
    """Grafana's webhook HMAC-SHA256 signature check."""

    secret: SecretStr
    header: str = "X-Grafana-Alerting-Signature"
    timestamp_header: str | None = None
    max_skew: Duration = 300.0

    @field_validator("secret")
    @classmethod
    def _non_empty(cls, v: SecretStr) -> SecretStr:
        if not v.get_secret_value():
            raise ValueError("must not be empty")
        return v


AZURE_ACTION_GROUPS_APP = "461e8683-5575-4561-ac7f-899cc907d62a"  # "AzNS AAD Webhook", Azure Monitor's sender
_GUID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


class EntraId(Frozen):
    """An Azure Monitor action group's secure webhook: a Microsoft Entra ID access token (a JWT) as
    ``Authorization: Bearer``, checked for issuer, audience, expiry, signature (the tenant's published keys), the
    calling app and its app role. Scope ``webhook`` only."""

    tenant_id: str = Field(pattern=_GUID, description="The directory (tenant) ID the tokens come from.")
    audience: list[str] = Field(min_length=1, description="Accepted `aud`: the app's Application ID URI and/or "
                                "client ID (v2 tokens carry the client ID).")
    token_version: Literal[1, 2] = Field(default=2, description="The app's accessTokenAcceptedVersion: picks the "
                                         "issuer (1: https://sts.windows.net/<tenant>/, 2: "
                                         "https://login.microsoftonline.com/<tenant>/v2.0).")
    issuer: str | None = Field(default=None, description="Overrides the issuer (sovereign clouds).")
    jwks_url: str | None = Field(default=None, description="Signing keys (default: "
                                 "https://login.microsoftonline.com/<tenant>/discovery/v2.0/keys).")
    app_ids: list[str] = Field(default_factory=lambda: [AZURE_ACTION_GROUPS_APP], description="Accepted calling "
                               "apps (`appid` / `azp`); [] accepts any app of the tenant.")
    role: str | None = Field(default="ActionGroupsSecureWebhook", description="App role the token must carry "
                             "(`roles`); null skips the check.")
    name: str = Field(default="azure_monitor", min_length=1, max_length=64, pattern=r"^[\x21-\x7e]+$")
    leeway: Duration = Field(default=60.0, le=600, description="Clock skew allowed on exp/nbf.")
    keys_ttl: Duration = Field(default=3600.0, ge=60, description="How long fetched signing keys are used before "
                               "they are fetched again (an unknown key ID refetches at most once a minute).")

    @field_validator("audience", mode="before")
    @classmethod
    def _one_audience(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("issuer", "jwks_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^\s]+$", v):
            raise ValueError("must be an http(s) URL")
        return v

    def expected_issuer(self) -> str:
        """The issuer a token must name."""
        if self.issuer:
            return self.issuer
        if self.token_version == 1:
            return f"https://sts.windows.net/{self.tenant_id}/"
        return f"https://login.microsoftonline.com/{self.tenant_id}/v2.0"

    def keys_url(self) -> str:
        """Where the tenant's signing keys are published."""
        return self.jwks_url or f"https://login.microsoftonline.com/{self.tenant_id}/discovery/v2.0/keys"


class QueryToken(Frozen):
    """Opt-in: a token in the webhook URL's query (``?token=…``), for senders that can carry a secret nowhere else
    (a plain Azure action group webhook). Scope ``webhook`` only; redacted by value like every secret."""

    token: SecretStr
    param: str = Field(default="token", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
    name: str = Field(default="query_token", min_length=1, max_length=64, pattern=r"^[\x21-\x7e]+$")

    @field_validator("token")
    @classmethod
    def _strong(cls, v: SecretStr) -> SecretStr:
        # URL-safe characters only: a token that needs percent-encoding would appear encoded in access logs,
        # where redaction by value could not find it.
        if not re.fullmatch(r"[A-Za-z0-9._~-]{24,256}", v.get_secret_value()):
            raise ValueError("must be 24 to 256 characters of A-Z a-z 0-9 . _ ~ - (it travels in a URL)")
        return v

    @model_validator(mode="after")
    def _not_routing(self) -> "QueryToken":
        if self.param in ("pool", "action", "step"):
            raise ValueError(f"param {self.param!r} is a routing parameter")
        return self


class AuthConfig(Frozen):
    """Who may call ``/webhook/*`` and ``/api/*``; any one configured method suffices."""

    disabled: bool = False
    bearer_tokens: list[BearerToken] = Field(default_factory=list)
    basic: list[BasicUser] = Field(default_factory=list)
    grafana_hmac: GrafanaHmac | None = None
    entra_id: EntraId | None = None
    query_token: QueryToken | None = None

    @field_validator("bearer_tokens", mode="before")
    @classmethod
    def _plain_tokens(cls, v: Any) -> Any:
        """A plain string is a token with every scope, on every pool."""
        if isinstance(v, list):
            return [{"token": t} if isinstance(t, (str, SecretStr)) else t for t in v]
        return v

    @field_validator("bearer_tokens")
    @classmethod
    def _tokens(cls, v: list[BearerToken]) -> list[BearerToken]:
        for i, entry in enumerate(v):
            if not entry.token.get_secret_value().strip():
                raise ValueError(f"token [{i}] is empty (is its environment variable set?)")
        return v

    def credentials(self) -> list[tuple[str, str, _Scoped]]:
        """Every named credential as (its path in the file, its name, its entry)."""
        out: list[tuple[str, str, _Scoped]] = []
        for i, token in enumerate(self.bearer_tokens):
            out.append((f"server.auth.bearer_tokens[{i}]", token.name or f"bearer_tokens[{i}]", token))
        for i, user in enumerate(self.basic):
            out.append((f"server.auth.basic[{i}]", user.name or user.username, user))
        return out

    @model_validator(mode="after")
    def _something(self) -> "AuthConfig":
        methods = (self.bearer_tokens, self.basic, self.grafana_hmac, self.entra_id, self.query_token)
        if not self.disabled and not any(methods):
            raise ValueError("no authentication configured: add bearer_tokens, basic, grafana_hmac, entra_id or "
                             "query_token, or write `disabled: true` to run without auth")
        return self


class ServerConfig(Frozen):
    """HTTP server settings."""

    auth: AuthConfig
    max_body_bytes: int = Field(default=1048576, ge=1024)
    read_timeout: Duration = Field(default=10.0, gt=0, description="Longest a client may take to send a request "
                                   "body; slower ones get 408 (a gthread worker's thread is not held longer).")
    max_unauthenticated_reads: int = Field(default=2, ge=1, le=1000, description="Request bodies read at once, per "
                                           "worker, before their sender is known (a Grafana HMAC signature needs "
                                           "the body); more are answered 503, so forged ones cannot hold every "
                                           "thread for read_timeout.")
    lock_wait: Duration = Field(default=5.0, description="How long a decision waits for another on the same pool.")
    lease_ttl: Duration = Field(default=30.0, gt=0, description="How long a pool's lease outlives a dead worker "
                                "(a running decision renews it every third of it).")
    allowed_origins: list[str] = Field(default_factory=list, description="Browser origins besides the service's "
                                       "own that may send state-changing requests (scheme://host[:port]).")
    reconcile_interval: Duration = Field(default=30.0, ge=0, description="How often the reconciler applies "
                                         "schedule floors and refreshes each pool's cloud view (0: never).")

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, v: list[str]) -> list[str]:
        for i, origin in enumerate(v):
            if not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+", origin):
                raise ValueError(f"[{i}] {origin[:80]!r} is not an origin (scheme://host[:port], no path)")
        return [o.lower() for o in v]


class StoreConfig(Frozen):
    """Where state lives."""

    url: str = "sqlite:///data/autoscaler.db"
    retain_events: Duration | None = Field(default=None, gt=0, description="Delete events older than this.")
    statement_timeout: Duration = Field(default=10.0, gt=0, description="PostgreSQL: longest one statement may run.")
    connect_timeout: Duration = Field(default=5.0, gt=0, description="PostgreSQL: longest a new connection may take.")
    pool_size: int = Field(default=2, ge=1, le=100, description="PostgreSQL: connections kept per worker process.")
    max_overflow: int = Field(default=3, ge=0, le=100, description="PostgreSQL: extra connections under a burst.")

    @field_validator("url")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if not re.match(r"^(sqlite|postgresql)(\+\w+)?://", v):
            raise ValueError("must start with sqlite:/// or postgresql://")
        return v


class InfluxConfig(Frozen):
    """InfluxDB v2 event sink."""

    url: str
    token: SecretStr
    org: str
    bucket: str
    batch_size: int = Field(default=100, ge=1)
    flush_interval: Duration = 1.0


def credential_problems(auth: AuthConfig, names: set[str]) -> list[str]:
    """Duplicate credential names or secrets, and credentials limited to pools that do not exist."""
    problems: list[str] = []
    seen: dict[str, str] = {}
    secrets: dict[str, str] = {}
    for path, name, entry in auth.credentials():
        if name in seen:
            problems.append(f"{path}.name: duplicate credential name {name!r} (also {seen[name]})")
        seen.setdefault(name, path)
        what, secret = (("token", entry.token.get_secret_value()) if isinstance(entry, BearerToken)
                        else ("username", f"basic:{getattr(entry, 'username', '')}"))
        if isinstance(entry, BearerToken) and _UNSENDABLE.search(secret):
            problems.append(f"{path}.token: contains whitespace or a control character (a newline at the end of "
                            "a Secret made from a file?); no Authorization header can carry it, so it would never "
                            "match: remove it")
        if secret in secrets:  # which entry's scopes would apply is then a guess
            problems.append(f"{path}: the same {what} as {secrets[secret]}")
        secrets.setdefault(secret, path)
        problems += [f"{path}.pools: no pool named {pool!r}" for pool in entry.pools or [] if pool not in names]
    for path, other in (("server.auth.entra_id", auth.entra_id), ("server.auth.query_token", auth.query_token)):
        if other is not None and other.name in seen:
            problems.append(f"{path}.name: duplicate credential name {other.name!r} (also {seen[other.name]})")
        if other is not None:
            seen.setdefault(other.name, path)
    return problems
