"""WSGI target for end-to-end tests against the fake clouds: the real app, with each ``aks`` pool's provider built
with a static ARM token (``E2E_ARM_TOKEN``) and plain http allowed, since gunicorn's workers cannot get a token from
Entra ID. Every other pool (``ack`` reads its AccessKey from the environment) is built from the config as usual."""
from __future__ import annotations

import os

from autoscaler.app import create_app
from autoscaler.config.load import load_config
from providers.aks import AksProvider
from providers.base import NodePoolProvider
from tests.support.cloud_stack import AllowHttp, StaticCredential

settings = load_config(os.environ["AUTOSCALER_CONFIG"])
_token = StaticCredential(os.environ.get("E2E_ARM_TOKEN", ""))
_built: dict[str, NodePoolProvider] = {
    spec.name: AksProvider(spec.name, spec.provider_settings, credential=_token, per_call_policies=[AllowHttp()])
    for spec in settings.pools.values() if spec.provider == "aks"
}
app = create_app(settings, providers=_built)
