"""Alibaba ACK scaling trigger URLs: fire-and-forget hooks that add or remove nodes but cannot report a count."""
from __future__ import annotations

import logging
import time
from typing import Any, Literal

import requests
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from autoscaler.durations import Duration
from autoscaler.models import CloudStatus
from autoscaler.redact import redact_text, redact_url
from providers._http import HttpCaller, Sleep, check_http_url, http_failure, with_query
from providers.base import ProviderError, ProviderFactory, Tracked

log = logging.getLogger(__name__)

MAX_HOOK_STEP = 100  # the hook accepts step=1..100


class AckHookSettings(BaseModel):
    """Settings of a pool scaled through ACK trigger URLs."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    scale_out_url: SecretStr = Field(description="Trigger URL of the scale-out rule; carries secret=, never logged.")
    scale_in_url: SecretStr = Field(description="Trigger URL of the scale-in rule; carries secret=, never logged.")
    initial_count: int = Field(default=0, ge=0, description="Nodes the pool has when the service first sees it.")
    method: Literal["POST", "GET"] = Field(default="POST", description="HTTP method the hook is called with.")
    timeout: Duration = Field(default=5, gt=0, description="Time one HTTP attempt may take.")
    retry_budget: Duration = Field(default=8, ge=0, description="Total time one call may spend on retries.")

    @field_validator("scale_out_url", "scale_in_url")
    @classmethod
    def _http_urls(cls, value: SecretStr) -> SecretStr:
        return check_http_url(value)


class AckHookProvider:
    """Turns an absolute target into hook calls: one scale-out call per 100 nodes, one scale-in call per node."""

    tracks_count = True

    def __init__(self, pool: str, settings: AckHookSettings, *, sleep: Sleep = time.sleep,
                 session: requests.Session | None = None) -> None:
        self.pool = pool
        self.settings = settings
        self.http = HttpCaller(timeout=settings.timeout, budget=settings.retry_budget, sleep=sleep, session=session)

    def check(self) -> None:
        """Nothing to check without calling the hook, and calling it would scale the pool."""

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        count = self.settings.initial_count if tracked.count is None else tracked.count
        return CloudStatus(current=count, detail="count tracked by the service: the ACK hook cannot report it")

    def scale(self, current: int, target: int, now: float) -> int:
        if target > current:
            steps = _chunks(target - current, MAX_HOOK_STEP)
            url, kind, sign = self.settings.scale_out_url, "scale_out", 1
        elif target < current:
            steps = [1] * (current - target)
            url, kind, sign = self.settings.scale_in_url, "scale_in", -1
        else:
            return target
        reached = current
        for index, step in enumerate(steps):
            try:
                self._call(url.get_secret_value(), kind, step)
            except ProviderError as exc:
                done = f"{index} of {len(steps)} call(s) went through, the pool is at {reached}"
                raise ProviderError(f"ACK hook {kind} for pool {self.pool} stopped: {exc.message}; {done}",
                                    retryable=exc.retryable, code=exc.code, retry_after=exc.retry_after,
                                    applied=reached if index else None) from None
            reached += sign * step
        log.info("provider=ack_hook pool=%s action=%s from=%d to=%d calls=%d", self.pool, kind, current, target,
                 len(steps))
        return target

    def _call(self, base_url: str, kind: str, step: int) -> None:
        """One hook call with ``type`` and ``step`` set; ProviderError unless the hook says code 200."""
        url = with_query(base_url, type=kind, step=str(step))
        safe = f"{self.settings.method} {redact_url(url)}"
        response = self.http.send(self.settings.method, url)
        body = _json(response)
        if not 200 <= response.status_code < 300:
            raise http_failure(safe, response, _describe(body))
        code = body.get("code") if isinstance(body, dict) else None
        if code is not None and str(code) != "200":
            retryable = str(code).startswith("5") or str(code) in ("429", "Throttling")
            raise ProviderError(f"{safe} answered code {code}: {_describe(body)}", retryable=retryable, code=str(code))


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
    build=lambda pool, settings: AckHookProvider(pool, settings),
    description="Alibaba ACK scaling trigger URLs; the service tracks the node count",
)
