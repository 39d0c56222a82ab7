"""How tests point the real SDKs at the fakes: credentials, the http policy, ids, a clock that sleeping moves, and
builders of the providers under test (shared by each provider's test modules)."""
from __future__ import annotations

import time
from typing import Any

from azure.core.credentials import AccessToken
from azure.core.pipeline.policies import SansIOHTTPPolicy

from providers.ack import AckProvider, AckSettings
from providers.webhook import WebhookProvider, WebhookSettings
from tests.support.fakes.ack_api import FakeAckApi
from tests.support.fakes.ack_hook import FakeHookServer
from tests.support import FakeClock

# -- Azure (the fake ARM) ------------------------------------------------------------------------------------
SUB = "3f2c1d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
RG = "rg-gpu"
AKS_CLUSTER = "prod-aks"


class StaticCredential:
    """A TokenCredential that hands out one fixed token and records the scopes asked for."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes.append(scopes)
        return AccessToken(self.token, int(time.time()) + 3600)


class AllowHttp(SansIOHTTPPolicy):  # type: ignore[type-arg]
    """Lets the SDK send the bearer token to the fake over plain http."""

    def on_request(self, request: Any) -> None:
        request.context["enforce_https"] = False


# -- Alibaba Cloud ACK (the fake OpenAPI) -----------------------------------------------------------------------
AK_ID = "LTAI5tTestAccessKeyId"
AK_SECRET = "TestAccessKeySecretThatMustNeverLeak"
ACK_CLUSTER, NODEPOOL = "c82e6987e2961451182edacd74faf0000", "np31da1b38983f4511b490fc62108a0000"


def static_credential(key_id: str = AK_ID) -> Any:
    """An AccessKey credential built by the real credentials library (the chain itself reads env at import)."""
    from alibabacloud_credentials.client import Client
    from alibabacloud_credentials.models import Config

    return Client(Config(type="access_key", access_key_id=key_id, access_key_secret=AK_SECRET))


def make_ack(api: FakeAckApi, sleeps: list[float], **overrides: Any) -> AckProvider:
    settings = {"cluster_id": ACK_CLUSTER, "nodepool_id": NODEPOOL, "region_id": "cn-hangzhou",
                "endpoint": api.endpoint, "protocol": "http", "timeout": 2, "retry_budget": 5, **overrides}
    return AckProvider("ack-gpu", AckSettings.model_validate(settings), credential=static_credential(),
                       clock=FakeClock(sleeps=sleeps))


# -- a generic webhook ------------------------------------------------------------------------------------------
WEBHOOK_TOKEN = "tfc-team-token-0123456789abcdef"


def make_webhook(endpoint: FakeHookServer, sleeps: list[float], **overrides: Any) -> WebhookProvider:
    settings: dict[str, Any] = {"url": endpoint.hook_url("/runs", "token=" + WEBHOOK_TOKEN), "initial_count": 3,
                                "headers": {"Authorization": f"Bearer {WEBHOOK_TOKEN}", "X-Team": "gpu"}}
    settings.update(overrides)
    return WebhookProvider("gpu-a100", WebhookSettings.model_validate(settings), clock=FakeClock(sleeps=sleeps))
