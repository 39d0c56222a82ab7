"""Alibaba ACK scaling trigger URLs: fire-and-forget hooks that add or remove nodes but cannot report a count."""
from __future__ import annotations

import logging
from typing import Any, Literal

import requests
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from autoscaler.clock import SYSTEM, Clock
from autoscaler.config.durations import Duration
from autoscaler.models import CloudStatus
from autoscaler.redact import redact_text, redact_url
from providers._http import HttpCaller, check_http_url, http_failure, with_query
from providers.base import Capabilities, Provider, ProviderFactory, Tracked
from providers.errors import Code, PermanentError, TemporaryError
from providers.named import in_parts

log = logging.getLogger(__name__)

MAX_HOOK_STEP = 100  # the hook accepts step=1..100


class AckHookSettings(BaseModel):
    """Settings of a pool scaled through ACK trigger URLs."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    scale_out_url: SecretStr = Field(description="Trigger URL of the scale-out rule; carries secret=, never logged.")
    scale_in_url: SecretStr = Field(description="Trigger URL of the scale-in rule; carries secret=, never logged.")
    initial_count: int = Field(default=0, ge=0, description="Nodes the pool has when the service first sees it.")
    method: Literal["POST", "GET"] = Field(default="POST", description="HTTP method the hook is called with.")
    timeout: Duration = Field(default=5, gt=0, description="Total time of one HTTP attempt, answer included.")
    retry_budget: Duration = Field(default=8, ge=0, description="Total time one call may spend on retries.")

    @field_validator("scale_out_url", "scale_in_url")
    @classmethod
    def _http_urls(cls, value: SecretStr) -> SecretStr:
        return check_http_url(value)


class AckHookProvider(Provider):
    """Turns an absolute target into hook calls: one scale-out call per 100 nodes, one scale-in call per node."""

    capabilities = Capabilities(reports_count=False)  # the hook neither reports a size nor names a node

    def __init__(self, pool: str, settings: AckHookSettings, *, clock: Clock = SYSTEM,
                 session: requests.Session | None = None) -> None:
        self.pool = pool
        self.settings = settings
        self.http = HttpCaller(timeout=settings.timeout, budget=settings.retry_budget, clock=clock, session=session)

    @property
    def where(self) -> str:
        return f"ACK hook of pool {self.pool}"

    def check(self) -> None:
        """Nothing to check without calling the hook, and calling it would scale the pool."""

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        return CloudStatus(current=tracked.count_or(self.settings.initial_count),
                           detail="count tracked by the service: the ACK hook cannot report it")

    def _resize(self, status: CloudStatus, current: int, target: int) -> int:
        if target > current:
            steps = _chunks(target - current, MAX_HOOK_STEP)
            url, kind, sign = self.settings.scale_out_url, "scale_out", 1
        elif target < current:
            steps = [1] * (current - target)
            url, kind, sign = self.settings.scale_in_url, "scale_in", -1
        else:
            return target
        deadline = self.http.change_deadline()  # every call of this change together: one budget, one timeout
        in_parts(steps, lambda step: self._call(url.get_secret_value(), kind, step, deadline), lambda _: False,
                 lambda s: s, current, f"{self.where} {kind}", sign=sign)
        log.info("provider=ack_hook pool=%s action=%s from=%d to=%d calls=%d", self.pool, kind, current, target,
                 len(steps))
        return target

    def _call(self, base_url: str, kind: str, step: int, deadline: float) -> None:
        """One hook call with ``type`` and ``step`` set, unless the change's ``deadline`` passed; an error unless
        the hook says code 200."""
        url = with_query(base_url, type=kind, step=str(step))
        safe = f"ACK hook {kind} for pool {self.pool}: {self.settings.method} {redact_url(url)}"
        if self.http.clock.monotonic() >= deadline:
            raise TemporaryError(f"{safe}: not sent: the change's time ({self.settings.retry_budget:g}s budget + "
                                 f"{self.settings.timeout:g}s timeout) ran out", code=Code.UNAVAILABLE)
        response = self.http.send(self.settings.method, url, deadline=deadline)
        body = _json(response)
        if not 200 <= response.status_code < 300:
            raise http_failure(safe, response, _describe(body))
        code = body.get("code") if isinstance(body, dict) else None
        if code is not None and str(code) != "200":
            later = str(code).startswith("5") or str(code) in ("429", "Throttling")
            kind_of = TemporaryError if later else PermanentError
            raise kind_of(f"{safe} answered code {code}: {_describe(body)}", cloud_code=str(code),
                          code=Code.UNAVAILABLE if later else Code.REFUSED, cloud_message=_describe(body) or None)


def _chunks(total: int, size: int) -> list[int]:
    """``total`` split into parts of at most ``size``."""
    return [min(size, total - start) for start in range(0, total, size)]


def _json(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _describe(body: Any) -> str:
    """The hook's message and request id, redacted and short, for an error text."""
    if not isinstance(body, dict):
        return ""
    parts = [f"{key}={body[key]}" for key in ("message", "requestId") if body.get(key)]
    return redact_text(", ".join(parts))[:300]


FACTORY = ProviderFactory(
    name="ack_hook",
    settings_model=AckHookSettings,
    build=lambda pool, settings, clock: AckHookProvider(pool, settings, clock=clock),
    capabilities=lambda settings: AckHookProvider.capabilities,
    description="Alibaba ACK scaling trigger URLs; the service tracks the node count",
)
