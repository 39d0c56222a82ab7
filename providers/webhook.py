"""Any HTTP endpoint: a CI job, a Terraform Cloud run, an in-house scheduler is told the change to make."""
from __future__ import annotations

import json
import logging
import re
from typing import Any, Literal, Sequence
from urllib.parse import quote

import requests
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from autoscaler.clock import SYSTEM, Clock
from autoscaler.config.durations import Duration
from autoscaler.models import CloudStatus
from autoscaler.redact import redact_url
from providers._http import HttpCaller, check_http_url, http_failure
from providers.base import Capabilities, NodeRef, ProviderFactory, RemovingProvider, Tracked
from providers.errors import Code, PermanentError, TemporaryError

log = logging.getLogger(__name__)

PLACEHOLDERS = ("pool", "action", "from", "to", "step", "nodes")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_]+)\}")
DEFAULT_BODY = '{"pool": "{pool}", "action": "{action}", "from": {from}, "to": {to}, "step": {step}}'
_SAMPLE = {"pool": "gpu", "action": "scale_out", "from": 1, "to": 2, "step": 1, "nodes": ["gpu-node-1"]}


def render(template: str, values: dict[str, Any], *, escape: str = "json") -> str:
    """Replace ``{pool}``-style placeholders and leave every other brace alone (JSON bodies are full of them).

    ``escape`` is ``json`` (string values escaped for a JSON string), ``url`` (percent-encoded) or ``none``.
    A list (``{nodes}``) becomes a JSON array in ``json`` mode, else its items joined by commas.
    """
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            return match.group(0)
        value = values[name]
        if isinstance(value, list):
            if escape == "json":
                return json.dumps([str(item) for item in value])
            value = ",".join(str(item) for item in value)
        text = str(value)
        if escape == "json":
            return json.dumps(text)[1:-1]
        return quote(text, safe="") if escape == "url" else text

    return _PLACEHOLDER.sub(one, template)


class WebhookSettings(BaseModel):
    """Settings of a pool scaled by calling an HTTP endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    url: SecretStr = Field(description="Endpoint to call; may hold {pool} {action} {from} {to} {step}; never logged.")
    method: Literal["POST", "PUT", "GET"] = Field(default="POST", description="GET sends no body.")
    headers: dict[str, SecretStr] = Field(default_factory=dict,
                                          description="Sent with every call; values never logged.")
    body_template: str = Field(default=DEFAULT_BODY, description="Body with {pool} {action} {from} {to} {step}.")
    content_type: str = Field(default="application/json", description="JSON bodies are checked at start-up.")
    timeout: Duration = Field(default=5, gt=0, description="Total time of one HTTP attempt, answer included.")
    retry_budget: Duration = Field(default=8, ge=0, description="Total time one call may spend on retries.")
    tracks_count: bool = Field(default=True, description="Keep the count in the service (the endpoint can't say).")
    initial_count: int = Field(default=0, ge=0, description="Nodes the pool has when the service first sees it.")
    count_url: SecretStr | None = Field(default=None, description="With tracks_count false: GET it for the size.")
    count_field: str = Field(default="count", description="Key of the size in count_url's JSON answer.")
    busy_field: str = Field(default="busy", description="Optional boolean key: the endpoint is still changing.")

    @field_validator("url", "count_url")
    @classmethod
    def _http_urls(cls, value: SecretStr | None) -> SecretStr | None:
        return None if value is None else check_http_url(value)

    @field_validator("body_template", "url", mode="after")
    @classmethod
    def _known_placeholders(cls, value: Any) -> Any:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        unknown = sorted({m for m in _PLACEHOLDER.findall(text) if m not in PLACEHOLDERS})
        if unknown:
            raise ValueError(f"unknown placeholder(s) {', '.join(unknown)}; known: {', '.join(PLACEHOLDERS)}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "WebhookSettings":
        if self.method != "GET" and "json" in self.content_type:
            try:
                json.loads(render(self.body_template, _SAMPLE))
            except ValueError as exc:
                raise ValueError(f"body_template: not valid JSON once rendered ({exc})") from None
        if not self.tracks_count and self.count_url is None:
            raise ValueError("tracks_count: false needs count_url, the address that reports the pool's size")
        return self


def names_nodes(settings: WebhookSettings) -> bool:
    """Whether a call can carry node names: ``{nodes}`` in the url or body, or a JSON body (``"nodes"`` is added)."""
    if "{nodes}" in settings.url.get_secret_value():
        return True
    if settings.method == "GET":
        return False
    return "{nodes}" in settings.body_template or ("json" in settings.content_type and _json_object(
        render(settings.body_template, _SAMPLE)))


def capabilities(settings: WebhookSettings) -> Capabilities:
    """The endpoint removes named nodes only when its call can name them; it reports a count only with count_url."""
    return Capabilities(removes_named_nodes=names_nodes(settings), reports_count=not settings.tracks_count)


class WebhookProvider(RemovingProvider):
    """Calls the endpoint once per change with the absolute target and the step; 2xx is success."""

    def __init__(self, pool: str, settings: WebhookSettings, *, clock: Clock = SYSTEM,
                 session: requests.Session | None = None) -> None:
        self.pool = pool
        self.settings = settings
        self.capabilities = capabilities(settings)
        self.http = HttpCaller(timeout=settings.timeout, budget=settings.retry_budget, clock=clock, session=session)

    @property
    def where(self) -> str:
        return f"webhook of pool {self.pool}"

    def check(self) -> None:
        """Nothing to check without calling the endpoint, and calling it would change the pool."""

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        if self.settings.count_url is None:
            return CloudStatus(current=tracked.count_or(self.settings.initial_count),
                               detail="count tracked by the service: the webhook cannot report it")
        return self._read_count(self.settings.count_url.get_secret_value())

    def _resize(self, status: CloudStatus, current: int, target: int) -> int:
        if target == current:
            return target
        action = "scale_out" if target > current else "scale_in"
        self._send({"pool": self.pool, "action": action, "from": current, "to": target,
                    "step": abs(target - current), "nodes": []}, add_nodes=False)
        return target

    def _remove(self, status: CloudStatus, nodes: Sequence[NodeRef], current: int) -> int:
        """Tell the endpoint to remove exactly these nodes: the usual scale-in call, ``to`` lowered by as many,
        plus the node names, as ``"nodes": [...]`` added to a JSON object body or wherever ``{nodes}`` stands."""
        names = list(dict.fromkeys(node.name for node in nodes))
        target = current - len(names)
        self._send({"pool": self.pool, "action": "scale_in", "from": current, "to": target, "step": len(names),
                    "nodes": names}, add_nodes=True)
        return target

    def _send(self, values: dict[str, Any], *, add_nodes: bool) -> None:
        """One call of the endpoint with ``values`` rendered into the URL and body; 2xx or an error."""
        url = render(self.settings.url.get_secret_value(), values, escape="url")
        method = self.settings.method
        kwargs: dict[str, Any] = {"headers": self._headers()}
        if method != "GET":
            json_body = "json" in self.settings.content_type
            body = render(self.settings.body_template, values, escape="json" if json_body else "none")
            named = "{nodes}" in self.settings.url.get_secret_value() or "{nodes}" in self.settings.body_template
            if add_nodes and not named and json_body:
                body = _with_nodes(body, values["nodes"])
            kwargs["data"] = body.encode()
            kwargs["headers"]["Content-Type"] = self.settings.content_type
        response = self.http.send(method, url, **kwargs)
        if not 200 <= response.status_code < 300:
            raise http_failure(f"{method} {redact_url(url)}", response)
        log.info("provider=webhook pool=%s action=%s from=%d to=%d nodes=%s status=%d", self.pool, values["action"],
                 values["from"], values["to"], ",".join(values["nodes"]) or "-", response.status_code)

    def _headers(self) -> dict[str, str]:
        return {name: value.get_secret_value() for name, value in self.settings.headers.items()}

    def _read_count(self, url: str) -> CloudStatus:
        safe = f"GET {redact_url(url)}"
        response = self.http.send("GET", url, headers=self._headers())
        if not 200 <= response.status_code < 300:
            raise http_failure(safe, response)
        try:
            body = response.json()
            count = body[self.settings.count_field]
            busy = bool(body.get(self.settings.busy_field, False))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise TemporaryError(f"{safe} did not answer JSON with an integer {self.settings.count_field!r}",
                                 code=Code.BAD_ANSWER) from None
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise PermanentError(f"{safe} answered {self.settings.count_field}={count!r}, not a size",
                                 code=Code.BAD_ANSWER)
        return CloudStatus(current=count, busy=busy)


def _json_object(body: str) -> bool:
    try:
        return isinstance(json.loads(body), dict)
    except ValueError:
        return False


def _with_nodes(body: str, names: list[str]) -> str:
    """A rendered JSON object body with ``"nodes"`` added (the declaration checked it is one)."""
    parsed = json.loads(body)
    parsed["nodes"] = names
    return json.dumps(parsed)


FACTORY = ProviderFactory(
    name="webhook",
    settings_model=WebhookSettings,
    build=lambda pool, settings, clock: WebhookProvider(pool, settings, clock=clock),
    capabilities=capabilities,
    description="any HTTP endpoint, told the pool, action, sizes and step of each change",
)
