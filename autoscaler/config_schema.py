"""The config file's shape as pydantic models (validation only; the core uses ``models.PoolSpec``)."""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from autoscaler import validation
from autoscaler.durations import Duration
from autoscaler.models import Action

POOL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"


MAX_PATTERN = 512
#: Longest label value a ``match_re`` pattern is tried on; a longer one never matches (label values that route
#: alerts are short; a long one is what makes a backtracking regex slow).
MAX_MATCHED_LABEL = 128
MAX_OPEN_REPEATS = 3  # unbounded repeats (``.*``, ``x+``) in one pattern: each multiplies the worst case by n


def regex_risk(pattern: str) -> str:
    """Why ``pattern`` could backtrack for exponential time (a repeated group holding another repeat or an
    alternation, such as ``(a+)+`` or ``(a|ab)*``), or "" when it cannot. Python's ``re`` backtracks; refusing
    these shapes at load, and capping the label length, keeps one match fast."""
    import importlib

    c: Any = importlib.import_module("re._constants")  # the stdlib's own parse of the pattern
    parser: Any = importlib.import_module("re._parser")

    if len(pattern) > MAX_PATTERN:
        return f"pattern longer than {MAX_PATTERN} characters"
    repeats = (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", c.MAX_REPEAT))

    def items(node: Any) -> Any:
        for part in node if isinstance(node, (list, tuple, parser.SubPattern)) else ():
            if isinstance(part, tuple) and len(part) == 2 and isinstance(part[0], type(c.LITERAL)):
                yield part
            elif isinstance(part, (list, tuple, parser.SubPattern)):
                yield from items(part)

    def risky(node: Any, inside_repeat: bool) -> bool:
        for op, av in items(node):
            if op in repeats:
                low, high, sub = av
                if inside_repeat and low != high:
                    return True
                if risky(sub, inside_repeat or high > 1):
                    return True
            elif op is c.BRANCH:
                if inside_repeat:
                    return True
                if any(risky(b, inside_repeat) for b in av[1]):
                    return True
            elif isinstance(av, (list, tuple, parser.SubPattern)) and risky(av, inside_repeat):
                return True
        return False

    parsed = parser.parse(pattern)
    if risky(parsed, False):
        return ("a repeated group holds another repeat or an alternation (like (a+)+ or (a|ab)*), which can take "
                "exponential time; use a character class or an unrepeated group")

    def open_repeats(node: Any) -> int:
        total = 0
        for op, av in items(node):
            if op in repeats:
                total += (av[1] == c.MAXREPEAT) + open_repeats(av[2])
            elif isinstance(av, (list, tuple, parser.SubPattern)):
                total += open_repeats(av)
        return total

    if open_repeats(parsed) > MAX_OPEN_REPEATS:
        return f"more than {MAX_OPEN_REPEATS} unbounded repeats (.*, +): split the rule or anchor the pattern"
    return ""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Scope = Literal["webhook", "read", "operate"]
SCOPES: tuple[Scope, ...] = ("webhook", "read", "operate")


class _Scoped(_Frozen):
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


class GrafanaHmac(_Frozen):
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


class AuthConfig(_Frozen):
    """Who may call ``/webhook/*`` and ``/api/*``; any one configured method suffices."""

    disabled: bool = False
    bearer_tokens: list[BearerToken] = Field(default_factory=list)
    basic: list[BasicUser] = Field(default_factory=list)
    grafana_hmac: GrafanaHmac | None = None

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
        if not self.disabled and not (self.bearer_tokens or self.basic or self.grafana_hmac):
            raise ValueError("no authentication configured: add bearer_tokens, basic or grafana_hmac, "
                             "or write `disabled: true` to run without auth")
        return self


class ServerConfig(_Frozen):
    """HTTP server settings."""

    auth: AuthConfig
    max_body_bytes: int = Field(default=1048576, ge=1024)
    read_timeout: Duration = Field(default=10.0, gt=0, description="Longest a client may take to send a request "
                                   "body; slower ones get 408 (a gthread worker's thread is not held longer).")
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


class StoreConfig(_Frozen):
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


class DirectionConfig(_Frozen):
    """Settings of one direction; unset keys come from ``defaults``."""

    step: int | None = Field(default=None, ge=1, le=1000)
    cooldown: Duration | None = None
    delay_after_scale_out: Duration | None = None
    mode: Literal["step", "proportional", "demand"] | None = None
    target_utilization: float | None = Field(default=None, gt=0, le=100)
    max_step: int | None = Field(default=None, ge=1, le=1000)
    tolerance: float | None = Field(default=None, ge=0, lt=1)
    stabilization_window: Duration | None = None
    value_ref: str | None = None


Victims = Literal["cloud", "alerted", "idle"]


class ScaleInConfig(DirectionConfig):
    """Scale-in settings: a direction's, plus which nodes go (node-aware scale-in)."""

    victims: Victims | None = Field(default=None, description="cloud | alerted | idle (default: idle with "
                                    "`kubernetes` and a provider that removes named nodes, else cloud).")
    drain_timeout: Duration | None = Field(default=None, gt=0, description="How long a forced removal retries "
                                           "evictions a PodDisruptionBudget refuses (default 10m).")


class DefaultsConfig(_Frozen):
    """Settings every pool inherits."""

    scale_out: DirectionConfig = DirectionConfig(step=1, cooldown=300)
    scale_in: ScaleInConfig = ScaleInConfig(step=1, cooldown=900, delay_after_scale_out=600)
    dedup_window: Duration = 600.0

    @model_validator(mode="after")
    def _demand_scales_out(self) -> "DefaultsConfig":
        if self.scale_in.mode == "demand":
            raise ValueError("scale_in.mode: `demand` sizes scale-outs only (use step or proportional)")
        return self


class ScheduleConfig(_Frozen):
    """A window that raises the pool's floor: opens at each ``cron`` time in ``timezone``, lasts ``duration``."""

    cron: str = Field(description="Five-field cron expression of the window's starts, in `timezone`.")
    duration: Duration = Field(description="How long each window lasts (elapsed time).")
    min: int = Field(ge=0, le=1000, description="The pool's floor inside the window.")
    timezone: str = Field(default="UTC", description="IANA time zone of the cron expression (Europe/Warsaw).")

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        from autoscaler.schedules import valid_cron

        if not valid_cron(v):
            raise ValueError(f"{v[:80]!r} is not a five-field cron expression (minute hour day month weekday)")
        return v

    @field_validator("duration")
    @classmethod
    def _duration(cls, v: float) -> float:
        if not 0 < v <= 7 * 86400:
            raise ValueError("must be more than 0 and at most 7d")
        return v

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{v[:80]!r} is not an IANA time zone (e.g. Europe/Warsaw, UTC)") from None
        return v


class RoutingConfig(_Frozen):
    """Label names read from alerts (for Grafana legacy notifications: rule tags)."""

    pool_label: str = "autoscaler_pool"
    action_label: str = "autoscaler_action"
    step_label: str = "autoscaler_step"
    node_label: str = Field(default="node", description="Label that names a node in scale-in alerts "
                            "(dcgm-exporter: Hostname).")


class KubernetesConfig(_Frozen):
    """How the service sees the cluster's nodes and pods (node-aware scale-in): ``in_cluster`` and/or
    ``kubeconfig``, or ``host``. With both ``in_cluster: true`` and ``kubeconfig``, the service account is used when
    the process runs in a pod (``KUBERNETES_SERVICE_HOST`` set) and the kubeconfig otherwise, so one file serves
    both. ``host`` (+ ``token``) is for out-of-cluster use without a kubeconfig and tests."""

    in_cluster: bool = False
    kubeconfig: str | None = Field(default=None, min_length=1)
    context: str | None = None
    host: str | None = Field(default=None, pattern=r"^https?://[^\s/?#]+/?$")
    token: SecretStr | None = None
    verify_ssl: bool = True
    ca_cert: str | None = None
    gpu_resources: list[str] = Field(default_factory=lambda: ["nvidia.com/gpu", "nvidia.com/mig-*"], min_length=1)
    timeout: Duration = Field(default=5.0, gt=0, description="Read timeout of one API call.")

    @model_validator(mode="after")
    def _one_source(self) -> "KubernetesConfig":
        given = [k for k, on in (("in_cluster", self.in_cluster), ("kubeconfig", self.kubeconfig is not None),
                                 ("host", self.host is not None)) if on]
        if not given or (self.host is not None and len(given) > 1):  # in_cluster + kubeconfig: pod or not
            raise ValueError("give `in_cluster: true` and/or `kubeconfig:`, or `host:` alone"
                             + (f" (got {', '.join(given)})" if given else ""))
        if self.context is not None and self.kubeconfig is None:
            raise ValueError("`context` needs `kubeconfig`")
        if (self.token is not None or self.ca_cert is not None) and self.host is None:
            raise ValueError("`token` and `ca_cert` go with `host`")
        return self


class RuleConfig(_Frozen):
    """Routes alerts that carry no routing labels; the first match wins."""

    match: dict[str, str] = Field(default_factory=dict)
    match_re: dict[str, str] = Field(default_factory=dict)
    pool: str
    action: Action
    step: int | None = Field(default=None, ge=1, le=1000)

    @field_validator("match_re")
    @classmethod
    def _compiles(cls, v: dict[str, str]) -> dict[str, str]:
        for label, pattern in v.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{label}: not a valid regular expression: {exc}") from None
            problem = regex_risk(pattern)
            if problem:
                raise ValueError(f"{label}: {problem}")
        return v

    @model_validator(mode="after")
    def _has_matcher(self) -> "RuleConfig":
        if not self.match and not self.match_re:
            raise ValueError("needs `match` or `match_re`")
        return self


class PoolConfig(BaseModel):
    """One node pool; the provider's own settings sit under a key named after the provider."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(pattern=POOL_NAME)
    provider: str
    min: int = Field(ge=0, le=1000)
    max: int = Field(ge=0, le=1000)
    dry_run: bool = False
    scale_out: DirectionConfig = DirectionConfig()
    scale_in: ScaleInConfig = ScaleInConfig()
    dedup_window: Duration | None = None
    node_selector: str | None = Field(default=None, min_length=1, description="Label selector of the pool's "
                                      "nodes, e.g. kubernetes.azure.com/agentpool=gpunp (default per provider).")
    gpus_per_node: int | None = Field(default=None, ge=1, le=64, description="GPUs one node adds (demand mode "
                                      "divides by it and needs it; the replay assumes 8 without it).")
    provision_time: Duration | None = Field(default=None, description="Request to GPUs allocatable; nodes asked "
                                            "for within it and not ready yet are in flight (default 10m; a "
                                            "simulated pool: its provision_seconds).")
    schedules: list[ScheduleConfig] = Field(default_factory=list)

    @field_validator("node_selector", mode="before")
    @classmethod
    def _selector_string(cls, v: Any) -> Any:
        if isinstance(v, dict):  # a Kubernetes nodeSelector mapping: say the string it means
            text = ",".join(f"{k}={val}" for k, val in v.items())
            raise ValueError(f'a mapping; write the selector as one string: node_selector: "{text}"')
        return v

    @field_validator("provision_time")
    @classmethod
    def _provision_time(cls, v: float | None) -> float | None:
        if v is not None and not 0 <= v <= 86400:
            raise ValueError("must be from 0 to 24h")
        return v

    @model_validator(mode="after")
    def _demand_and_floors(self) -> "PoolConfig":
        if self.scale_in.mode == "demand":
            raise ValueError("scale_in.mode: `demand` sizes scale-outs only (use step or proportional)")
        for i, window in enumerate(self.schedules):
            if window.min > self.max:
                raise ValueError(f"schedules[{i}].min: must be <= max ({self.max})")
        return self

    @field_validator("max")
    @classmethod
    def _max_ge_min(cls, v: int, info: Any) -> int:
        low = info.data.get("min")
        if low is not None and v < low:
            raise ValueError(f"must be >= min ({low})")
        return v

    @field_validator("provider")
    @classmethod
    def _known(cls, v: str) -> str:
        import providers

        if v not in providers.available():
            raise ValueError(f"unknown provider {v!r} (known: {', '.join(providers.available())})")
        return v

    def provider_settings(self, index: int) -> tuple[Any, list[str]]:
        """Validate the section named after the provider; return (settings, problems with their paths)."""
        import providers

        where = f"pools[{index}]"
        extra = dict(self.model_extra or {})
        problems = [f"{where}.{key}: unknown key (is the provider {key!r}?)" for key in extra
                    if key != self.provider]
        model = providers.factory(self.provider).settings_model
        try:
            return model.model_validate(extra.get(self.provider) or {}), problems
        except ValidationError as exc:
            return None, problems + validation.problems(exc, prefix=f"{where}.{self.provider}")


class InfluxConfig(_Frozen):
    """InfluxDB v2 event sink."""

    url: str
    token: SecretStr
    org: str
    bucket: str
    batch_size: int = Field(default=100, ge=1)
    flush_interval: Duration = 1.0


class ReplayRule(_Frozen):
    """One emulated alerting rule on the pool's average utilisation (0-100) of ready nodes (``above``/``below``), or
    on its unmet demand in GPUs (``pending_above``: (demand - ready, clipped at 0) x gpus_per_node)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    alert: str = Field(min_length=1)
    above: float | None = Field(default=None, ge=0, le=100)
    below: float | None = Field(default=None, ge=0, le=100)
    pending_above: float | None = Field(default=None, ge=0)
    for_: Duration = Field(default=0.0, alias="for")
    pool: str
    action: Action
    step: int | None = Field(default=None, ge=1, le=1000)
    labels: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_threshold(self) -> "ReplayRule":
        if sum(x is not None for x in (self.above, self.below, self.pending_above)) != 1:
            raise ValueError("give exactly one of `above`, `below` or `pending_above`")
        return self


class ReplayConfig(_Frozen):
    """Read only by ``python -m autoscaler replay``: how Prometheus and Alertmanager are emulated."""

    evaluation_interval: Duration = 30.0
    group_wait: Duration = 30.0
    group_interval: Duration = 300.0
    repeat_interval: Duration = 300.0
    rules: list[ReplayRule] = Field(min_length=1)
    placement: Literal["spread", "pack"] = Field(
        default="spread", description="How the work lands on nodes: spread (kube-scheduler's default, "
                                      "LeastAllocated) or pack (MostAllocated: the fullest node that fits).")

    @field_validator("evaluation_interval", "group_interval", "repeat_interval")
    @classmethod
    def _positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("must be more than 0")
        return v


class Config(_Frozen):
    """The whole config file."""

    server: ServerConfig
    store: StoreConfig = StoreConfig()
    defaults: DefaultsConfig = DefaultsConfig()
    routing: RoutingConfig = RoutingConfig()
    rules: list[RuleConfig] = Field(default_factory=list)
    pools: list[PoolConfig] = Field(min_length=1)
    influxdb: InfluxConfig | None = None
    replay: ReplayConfig | None = None
    kubernetes: KubernetesConfig | None = None

    @model_validator(mode="after")
    def _references(self) -> "Config":
        problems = reference_problems([p.name for p in self.pools], [r.pool for r in self.rules],
                                      [r.pool for r in self.replay.rules] if self.replay else [])
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @model_validator(mode="after")
    def _credentials(self) -> "Config":
        """Credential names are unique (they are the actor in the event log) and name configured pools."""
        problems = credential_problems(self.server.auth, {p.name for p in self.pools})
        if problems:
            raise ValueError("\n".join(problems))
        return self


def reference_problems(pools: list[Any], rule_pools: list[Any], replay_pools: list[Any]) -> list[str]:
    """Every duplicate pool name and every rule naming no configured pool (cross-field: checked on the raw file
    too, so that check-config reports them beside the field errors)."""
    names = [n for n in pools if isinstance(n, str)]
    problems = []
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"pools: duplicate pool names: {', '.join(dupes)}")
    for where, refs in (("rules", rule_pools), ("replay.rules", replay_pools)):
        problems += [f"{where}[{i}].pool: no pool named {pool!r}" for i, pool in enumerate(refs)
                     if isinstance(pool, str) and pool not in names]
    return problems


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
        if secret in secrets:  # which entry's scopes would apply is then a guess
            problems.append(f"{path}: the same {what} as {secrets[secret]}")
        secrets.setdefault(secret, path)
        problems += [f"{path}.pools: no pool named {pool!r}" for pool in entry.pools or [] if pool not in names]
    return problems
