"""End-to-end scaffolding for node-aware scale-in: the fake ARM and the fake ACK OpenAPI with named nodes, the
config and environment that point the real service (under gunicorn, ``tests.support.cloud_app:app``) at them, and the
Kubernetes nodes each fake pool has, to seed a fake Kubernetes API with.

    with AksCloud(count=3) as aks, AckCloud(count=2) as ack:
        cfg = service_config(tmp_path, [aks.pool_config("gpu-aks"), ack.pool_config("gpu-ack")], rules=[...])
        with Service(cfg, tmp_path, workers=1, env={**aks.env, **ack.env}, app=CLOUD_APP) as svc:
            ...                                 # aks.nodes() / ack.nodes() -> the nodes to serve from Kubernetes
            assert aks.arm.machine_names("gpunp") == [...]
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from azure.core.credentials import AccessToken
from azure.core.pipeline.policies import SansIOHTTPPolicy

from tests.support import TOKEN
from tests.support.fakes.ack_api import FakeAckApi, Pool
from tests.support.fakes.arm import FakeArm

CLOUD_APP = "tests.support.cloud_app:app"
SUBSCRIPTION = "3f2c1d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
ACK_KEY_ID = "LTAI5tE2eAccessKeyId"
ACK_KEY_SECRET = "E2eAccessKeySecretThatMustNeverLeak"


class StaticCredential:
    """A TokenCredential handing out one fixed ARM token."""

    def __init__(self, token: str) -> None:
        self.token = token

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(self.token, int(time.time()) + 3600)


class AllowHttp(SansIOHTTPPolicy):  # type: ignore[type-arg]
    """Lets the SDK send the bearer token to the fake over plain http."""

    def on_request(self, request: Any) -> None:
        request.context["enforce_https"] = False


@dataclass(frozen=True)
class KubeNode:
    """A node as the Kubernetes API would list it for a pool: name, ``spec.providerID`` and labels."""

    name: str
    provider_id: str
    labels: dict[str, str]


class AksCloud:
    """A fake ARM with one agent pool (``gpunp``) of ``count`` VMSS machines; use as a context manager."""

    def __init__(self, count: int = 3, agent_pool: str = "gpunp", resource_group: str = "rg-gpu",
                 cluster: str = "prod-aks") -> None:
        self.agent_pool = agent_pool
        self.token = f"eyJe2e.{uuid.uuid4().hex}.sig"
        self.arm = FakeArm(SUBSCRIPTION, resource_group, cluster, self.token)
        self.arm.add_pool(agent_pool, count=count)

    def __enter__(self) -> "AksCloud":
        self.arm.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.arm.stop()

    @property
    def env(self) -> dict[str, str]:
        """What ``tests.support.cloud_app`` needs to reach this ARM."""
        return {"E2E_ARM_TOKEN": self.token}

    def pool_config(self, name: str, *, min_size: int = 0, max_size: int = 8, **extra: Any) -> dict[str, Any]:
        """A ``pools[]`` entry for this agent pool (``extra``: ``scale_in``, ``node_selector``, …)."""
        return {"name": name, "provider": "aks", "min": min_size, "max": max_size,
                "aks": {"subscription_id": SUBSCRIPTION, "resource_group": self.arm.resource_group,
                        "cluster": self.arm.cluster, "agent_pool": self.agent_pool, "arm_endpoint": self.arm.url,
                        "budget": "5s"}, **extra}

    def nodes(self) -> list[KubeNode]:
        """The pool's nodes now, as AKS registers them (name = machine name, providerID lower-cased)."""
        pool = self.agent_pool
        return [KubeNode(self.arm.machine_name(pool, i), "azure://" + self.arm.machine_resource_id(pool, i).lower(),
                         {"kubernetes.azure.com/agentpool": pool, "agentpool": pool})
                for i in self.arm.machines.get(pool, [])]


class AckCloud:
    """A fake ACK OpenAPI with one node pool of ``count`` nodes; use as a context manager."""

    cluster = "c82e6987e2961451182edacd74fafe2e0"
    nodepool = "np31da1b38983f4511b490fc62108ae2e"

    def __init__(self, count: int = 2) -> None:
        self.api = FakeAckApi(pools={(self.cluster, self.nodepool): Pool(desired_size=count, total_nodes=count)})

    def __enter__(self) -> "AckCloud":
        self.api.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.api.stop()

    @property
    def pool(self) -> Pool:
        return self.api.pools[(self.cluster, self.nodepool)]

    @property
    def env(self) -> dict[str, str]:
        """The AccessKey the default credentials chain reads (and no ECS metadata lookups)."""
        return {"ALIBABA_CLOUD_ACCESS_KEY_ID": ACK_KEY_ID, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": ACK_KEY_SECRET,
                "ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true"}

    def pool_config(self, name: str, *, min_size: int = 0, max_size: int = 8, **extra: Any) -> dict[str, Any]:
        return {"name": name, "provider": "ack", "min": min_size, "max": max_size,
                "ack": {"cluster_id": self.cluster, "nodepool_id": self.nodepool, "region_id": "cn-hangzhou",
                        "endpoint": self.api.endpoint, "protocol": "http", "timeout": "2s", "retry_budget": "3s"},
                **extra}

    def nodes(self) -> list[KubeNode]:
        """The pool's nodes now, as ACK registers them (``cn-hangzhou.<ip>``, providerID ``cn-hangzhou.i-…``)."""
        return [KubeNode(name, self.pool.provider_id(name), {"alibabacloud.com/nodepool-id": self.nodepool})
                for name, _ in self.pool.nodes]


def service_config(tmp_path: Path, pools: list[dict[str, Any]], rules: list[dict[str, Any]],
                   **sections: Any) -> dict[str, Any]:
    """A whole config: bearer ``tests.conftest.TOKEN``, SQLite in ``tmp_path``, no cooldowns or dedup window;
    ``sections`` adds or replaces top-level keys (``kubernetes``, ``routing``, …)."""
    return {"server": {"auth": {"bearer_tokens": [TOKEN]}},
            "store": {"url": f"sqlite:///{tmp_path}/state.db"},
            "defaults": {"scale_out": {"step": 1, "cooldown": 0},
                         "scale_in": {"step": 1, "cooldown": 0, "delay_after_scale_out": 0},
                         "dedup_window": 0},
            "rules": rules, "pools": pools, **sections}
