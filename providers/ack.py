"""Alibaba ACK node pools through the Container Service OpenAPI (cs 2015-12-15): reads and sets the real size."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Literal, Sequence, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from autoscaler.durations import Duration
from autoscaler.models import CloudStatus
from autoscaler.redact import redact_text
from providers._http import Sleep, Transient, call_with_retries
from providers.base import NodeRef, ProviderError, ProviderFactory, Tracked

log = logging.getLogger(__name__)

T = TypeVar("T")
_VERSION = "2015-12-15"
_RETRYABLE_CLIENT_STATUS = (408, 409, 423, 429)
_NODES_PAGE = 100  # DescribeClusterNodes page size (the API's maximum)


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
    """Reads ``scaling_group.desired_size`` and ``status`` of the pool and sets ``desired_size`` both ways;
    removes named nodes with RemoveNodePoolNodes."""

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

    def remove_nodes(self, nodes: Sequence[NodeRef], current: int, now: float) -> int:
        """Remove exactly these nodes' ECS instances (RemoveNodePoolNodes, drain and release on); ACK lowers the
        pool's desired size by as many.

        The pool must be ``active`` (not already scaling or removing). Each node's instance id comes from the
        pool's own node list (DescribeClusterNodes, by node name) and is checked against ``spec.providerID``
        (``<region>.<instance id>``); a node that is not in this pool refuses the whole call. Returns once ACK
        accepted the task; the instances go later. Subscription (prepaid) instances are removed but not released.
        """
        if not nodes:
            return current
        before = self._describe()
        state = (before.get("status") or {}).get("state") or "unknown"
        if state != "active":
            raise ProviderError(f"ACK node pool {self.settings.nodepool_id} is {state}: an earlier change is still "
                                "in progress", retryable=True, code="PoolBusy")
        ids = instance_ids(nodes, self._pool_nodes(), f"ACK node pool {self.settings.nodepool_id}")
        try:
            answer = self._request("RemoveNodePoolNodes", lambda: self._remove(ids))
        except ProviderError as exc:
            if not self._removal_under_way(_desired(before), len(ids)):
                raise
            log.warning("provider=ack pool=%s: RemoveNodePoolNodes failed (%s), but the pool is removing with its "
                        "desired size lowered by %d: an earlier attempt was accepted and its answer lost", self.pool,
                        exc.message, len(ids))
            answer = None
        task = getattr(getattr(answer, "body", None), "task_id", None)
        target = current - len(ids)
        log.info("provider=ack pool=%s nodepool=%s removing instances=%s task=%s from=%d to=%d", self.pool,
                 self.settings.nodepool_id, ",".join(ids), task, current, target)
        return target

    def _removal_under_way(self, before: int | None, removed: int) -> bool:
        """After a failed removal: does ACK show it accepted (desired size lowered by exactly ``removed``, busy)?

        A removal whose answer was lost (a dropped connection) and then retried is refused (the pool is already
        removing), although the first attempt went through; the nodes must not be handed back as kept then.
        """
        try:
            body = self._describe()
        except ProviderError:
            return False
        busy = ((body.get("status") or {}).get("state") or "unknown") != "active"
        return before is not None and busy and _desired(body) == before - removed

    def _pool_nodes(self) -> dict[str, str]:
        """Node name -> ECS instance id of every node in the pool (DescribeClusterNodes, page by page)."""
        found: dict[str, str] = {}
        seen = 0
        for page in range(1, 1000):
            body = self._request("DescribeClusterNodes", lambda: self._nodes_page(page)).body
            items = body.nodes or []
            for item in items:
                if item.node_name and item.instance_id and item.nodepool_id in (None, self.settings.nodepool_id):
                    found[str(item.node_name)] = str(item.instance_id)
            seen += len(items)
            if not items or seen >= int(getattr(body.page, "total_count", 0) or 0):
                break
        return found

    def _nodes_page(self, page: int) -> Any:
        from alibabacloud_cs20151215 import models
        from darabonba.runtime import RuntimeOptions

        request = models.DescribeClusterNodesRequest(nodepool_id=self.settings.nodepool_id,
                                                     page_size=str(_NODES_PAGE), page_number=str(page))
        return self._sdk().describe_cluster_nodes_with_options(self.settings.cluster_id, request, {},
                                                               RuntimeOptions())

    def _remove(self, ids: list[str]) -> Any:
        from alibabacloud_cs20151215 import models
        from darabonba.runtime import RuntimeOptions

        request = models.RemoveNodePoolNodesRequest(instance_ids=ids, drain_node=True, release_node=True)
        return self._sdk().remove_node_pool_nodes_with_options(self.settings.cluster_id, self.settings.nodepool_id,
                                                               request, {}, RuntimeOptions())

    def _call(self, action: str, method: str, body: dict[str, Any] | None) -> dict[str, Any]:
        """One node-pool OpenAPI call (GET/PUT of the pool) with our retry layer."""
        answer = self._request(action, lambda: self._attempt(action, method, body))
        result = answer.get("body")
        return result if isinstance(result, dict) else {}

    def _request(self, action: str, call: Callable[[], T]) -> T:
        """One OpenAPI call through the SDK with our retry layer (the SDK's own retry stays off)."""
        what = f"{action} {self.settings.cluster_id}/{self.settings.nodepool_id}"
        return call_with_retries(self.settings.retry_budget, self._sleep, what, _translated, call, action)

    def _attempt(self, action: str, method: str, body: dict[str, Any] | None) -> dict[str, Any]:
        from alibabacloud_tea_openapi import utils_models
        from darabonba.runtime import RuntimeOptions

        params = utils_models.Params(
            action=action, version=_VERSION, protocol="HTTPS", method=method, auth_type="AK", style="ROA",
            pathname=f"/clusters/{_quote(self.settings.cluster_id)}/nodepools/{_quote(self.settings.nodepool_id)}",
            req_body_type="json", body_type="json")
        request = utils_models.OpenApiRequest(headers={}, body=body)
        result: dict[str, Any] = self._sdk().call_api(params, request, RuntimeOptions())
        return result

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


def _desired(body: dict[str, Any]) -> int | None:
    """``scaling_group.desired_size`` of a DescribeClusterNodePoolDetail answer."""
    value = (body.get("scaling_group") or {}).get("desired_size")
    return value if isinstance(value, int) else None


def instance_ids(nodes: Sequence[NodeRef], pool_nodes: dict[str, str], where: str) -> list[str]:
    """The ECS instance id of each node, from the pool's node list; ``spec.providerID`` (``cn-hangzhou.i-xxx``)
    finds a node under another name and must agree. A node not in the pool refuses the whole call."""
    in_pool = set(pool_nodes.values())
    found: list[str] = []
    unknown: list[str] = []
    for node in nodes:
        named = pool_nodes.get(node.name)
        claimed = node.provider_id.rsplit(".", 1)[-1] if ".i-" in node.provider_id else None
        if named and claimed and named != claimed:
            raise ProviderError(f"{where}: node {node.name} is instance {named} but its providerID says {claimed}; "
                                "refusing to remove either", retryable=False, code="NodeInstanceMismatch")
        instance = named or (claimed if claimed in in_pool else None)
        if instance is None:
            unknown.append(node.name)
        elif instance not in found:
            found.append(instance)
    if unknown:
        raise ProviderError(f"{where} has no node(s) {', '.join(unknown)} (not in this node pool, or already "
                            "gone); nothing was removed", retryable=False, code="NodeNotInPool")
    return found


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
    node_selector=lambda settings: f"alibabacloud.com/nodepool-id={settings.nodepool_id}",
)
