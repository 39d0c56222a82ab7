"""Alibaba ACK node pools through the Container Service OpenAPI (cs 2015-12-15): reads and sets the real size."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from autoscaler.durations import Duration
from autoscaler.models import CloudStatus
from autoscaler.redact import redact_text
from providers._http import Sleep, Transient, retry_policy
from providers.base import ProviderError, ProviderFactory, Tracked

log = logging.getLogger(__name__)

T = TypeVar("T")
_VERSION = "2015-12-15"
_RETRYABLE_CLIENT_STATUS = (408, 409, 423, 429)


class AckSettings(BaseModel):
    """Settings of an ACK node pool; credentials come from the Alibaba Cloud credentials chain, never from here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster_id: str = Field(min_length=1, description="ACK cluster ID, e.g. c82e6987e2961451182edacd74faf****.")
    nodepool_id: str = Field(min_length=1, description="Node pool ID, e.g. np31da1b38983f4511b490fc62108a****.")
    region_id: str = Field(min_length=1, description="Region of the cluster, e.g. cn-hangzhou.")
    endpoint: str | None = Field(default=None, description="API host, e.g. cs.cn-hangzhou.aliyuncs.com; default "
                                                           "from the region.")
    protocol: Literal["https", "http"] = Field(default="https", description="http only for local test servers.")
    timeout: Duration = Field(default=5, gt=0, description="Time one API attempt may take.")
    retry_budget: Duration = Field(default=8, ge=0, description="Total time one operation may spend on retries.")


class AckProvider:
    """Reads ``scaling_group.desired_size`` and ``status`` of the pool and sets ``desired_size`` both ways."""

    tracks_count = False

    def __init__(self, pool: str, settings: AckSettings, *, credential: Any = None, config: Any = None,
                 sleep: Sleep = time.sleep) -> None:
        self.pool = pool
        self.settings = settings
        self._credential = credential
        self._config = config
        self._sleep = sleep
        self._client: Any = None

    def check(self) -> None:
        """Refuse a pool that ACK's own autoscaler manages; read-only."""
        self._describe()

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        body = self._describe()
        state = (body.get("status") or {}).get("state") or "unknown"
        total = (body.get("status") or {}).get("total_nodes")
        desired = (body.get("scaling_group") or {}).get("desired_size")
        current = desired if desired is not None else total
        detail = f"state {state}, {total} node(s) in the pool, desired size {desired}"
        return CloudStatus(current=current, busy=state != "active", detail=detail)

    def scale(self, current: int, target: int, now: float) -> int:
        body = {"scaling_group": {"desired_size": target}}  # only this field: nothing else of the pool changes
        self._call("ModifyClusterNodePool", "PUT", body)
        log.info("provider=ack pool=%s nodepool=%s from=%d to=%d", self.pool, self.settings.nodepool_id, current,
                 target)
        return target

    def _describe(self) -> dict[str, Any]:
        body = self._call("DescribeClusterNodePoolDetail", "GET", None)
        if (body.get("auto_scaling") or {}).get("enable"):
            raise ProviderError(
                f"ACK node pool {self.settings.nodepool_id} has ACK's own auto scaling enabled "
                "(auto_scaling.enable); turn it off in the console or manage this pool with one autoscaler only",
                retryable=False, code="AutoScalingEnabled")
        return body

    def _call(self, action: str, method: str, body: dict[str, Any] | None) -> dict[str, Any]:
        """One OpenAPI call through the SDK with our retry layer (the SDK's own retry stays off)."""
        what = f"{action} {self.settings.cluster_id}/{self.settings.nodepool_id}"
        retrying = retry_policy(self.settings.retry_budget, self._sleep, what)
        try:
            answer = retrying(self._attempt, action, method, body)
        except Transient as exc:
            attempts = retrying.statistics.get("attempt_number", 1)
            raise ProviderError(f"{what} failed after {attempts} attempt(s): {exc.what}", retryable=True,
                                code=str(exc.status) if exc.status else None) from None
        result = answer.get("body")
        return result if isinstance(result, dict) else {}

    def _attempt(self, action: str, method: str, body: dict[str, Any] | None) -> dict[str, Any]:
        from alibabacloud_tea_openapi import utils_models
        from darabonba.runtime import RuntimeOptions

        params = utils_models.Params(
            action=action, version=_VERSION, protocol="HTTPS", method=method, auth_type="AK", style="ROA",
            pathname=f"/clusters/{_quote(self.settings.cluster_id)}/nodepools/{_quote(self.settings.nodepool_id)}",
            req_body_type="json", body_type="json")
        request = utils_models.OpenApiRequest(headers={}, body=body)
        return _translated(lambda: self._sdk().call_api(params, request, RuntimeOptions()), action)

    def _sdk(self) -> Any:
        """The SDK client, built on first use so start-up does not import the SDK."""
        if self._client is None:
            from alibabacloud_cs20151215.client import Client
            from alibabacloud_tea_openapi import utils_models

            config = self._config or utils_models.Config()
            config.region_id = config.region_id or self.settings.region_id
            config.endpoint = config.endpoint or self.settings.endpoint
            config.protocol = config.protocol or self.settings.protocol
            config.read_timeout = config.read_timeout or int(self.settings.timeout * 1000)
            config.connect_timeout = config.connect_timeout or int(min(self.settings.timeout, 3) * 1000)
            config.retry_options = None  # one retry layer: ours
            if config.credential is None:
                config.credential = self._credential or _default_credential()
            self._client = Client(config)
        return self._client


def _default_credential() -> Any:
    """The Alibaba Cloud default credentials chain: environment AccessKey, OIDC/RAM role, ECS instance role, ..."""
    from alibabacloud_credentials.client import Client as CredentialClient

    return CredentialClient()


def _quote(value: str) -> str:
    from darabonba.url import Url

    return str(Url.percent_encode(value))


def _translated(call: Callable[[], T], action: str) -> T:
    """Run an SDK call; SDK exceptions become Transient (worth a retry now) or ProviderError, without secrets."""
    from alibabacloud_tea_openapi.exceptions import ClientException, ServerException, ThrottlingException

    try:
        return call()
    except ThrottlingException as exc:
        raise ProviderError(f"{action} throttled: {_text(exc)}", retryable=True, code=str(exc.code),
                            retry_after=float(exc.retry_after) if exc.retry_after else None) from None
    except ServerException as exc:
        raise Transient(f"HTTP {exc.status_code} {_text(exc)}", exc.status_code) from None
    except ClientException as exc:
        retryable = exc.status_code in _RETRYABLE_CLIENT_STATUS
        raise ProviderError(f"{action} refused (HTTP {exc.status_code}): {_text(exc)}", retryable=retryable,
                            code=str(exc.code)) from None
    except ProviderError:
        raise
    except Exception as exc:  # connection errors arrive as UnretryableException; never quote them raw
        name = type(getattr(exc, "inner_exception", None) or exc).__name__
        if "credential" in str(exc).lower() or "accesskey" in str(exc).lower():
            raise ProviderError(f"{action}: no usable Alibaba Cloud credentials ({type(exc).__name__}); set "
                                "ALIBABA_CLOUD_ACCESS_KEY_ID/SECRET or a RAM role", retryable=False) from None
        raise Transient(f"{name} talking to the ACK API") from None


def _text(exc: Any) -> str:
    """The service's code and message, short and redacted."""
    message = str(getattr(exc, "message", "") or "")
    return redact_text(f"{getattr(exc, 'code', '')}: {message}")[:300]


FACTORY = ProviderFactory(
    name="ack",
    settings_model=AckSettings,
    build=lambda pool, settings: AckProvider(pool, settings),
    description="Alibaba ACK node pool through the cs 2015-12-15 OpenAPI; reads the real size",
)
