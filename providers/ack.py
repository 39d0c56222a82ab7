"""Alibaba ACK node pools through the Container Service OpenAPI (cs 2015-12-15): reads and sets the real size."""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Callable, Literal, Sequence, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from autoscaler.clock import SYSTEM, Clock
from autoscaler.config.durations import Duration
from autoscaler.models import CloudStatus, ProviderRead, Shortfall
from providers import shortfalls
from providers.ack_send import bound_client, bounded_failure, keep_bounded
from providers.base import Capabilities, NodeRef, ProviderFactory, RemovingProvider, Tracked, read_of
from providers.bounded import AnswerTooLarge
from providers.errors import Code, PermanentError, cloud_autoscaler
from providers.named import agreed, in_parts, lowered, machines
from providers.retry import Transient, call, clean, refusal

log = logging.getLogger(__name__)

T = TypeVar("T")
_VERSION = "2015-12-15"
_NODES_PAGE = 100  # DescribeClusterNodes page size (the API's maximum)
_TASKS = 10  # the cluster's newest tasks read for a scale-out's failure


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


@dataclass(frozen=True)
class AckRead(ProviderRead):
    """The node pool as DescribeClusterNodePoolDetail answered it."""

    body: dict[str, Any]


class AckProvider(RemovingProvider):
    """Reads ``scaling_group.desired_size`` and ``status`` of the pool and sets ``desired_size`` both ways;
    removes named nodes with RemoveNodePoolNodes."""

    capabilities = Capabilities(removes_named_nodes=True)
    needs_read = (False, True)  # a resize sets desired_size alone; a removal needs the pool's size before

    def __init__(self, pool: str, settings: AckSettings, *, credential: Any = None, config: Any = None,
                 clock: Clock = SYSTEM) -> None:
        self.pool = pool
        self.settings = settings
        self._credential = credential
        self._config = config
        self._clock = clock
        self._client: Any = None

    @property
    def where(self) -> str:
        return f"ACK node pool {self.settings.nodepool_id}"

    def check(self) -> None:
        """Refuse a pool that ACK's own autoscaler manages; read-only."""
        self._read()

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        """The desired size; once settled with fewer nodes than it, whether the cluster's latest failed task says
        capacity or quota (a shortfall)."""
        read = self._read()
        return read if read.busy else replace(read, shortfall=self._shortfall(read_of(read, AckRead).body))

    def _shortfall(self, body: dict[str, Any]) -> Shortfall | None:
        """Fewer nodes than the desired size, and a failed task of the cluster (DescribeClusterTasks, the newest
        few) with a capacity or quota code."""
        asked, total = _desired(body), (body.get("status") or {}).get("total_nodes")
        if asked is None or not isinstance(total, int) or total >= asked:
            return None
        answer = self._request("DescribeClusterTasks", self._tasks_page).body
        for task in (answer.tasks or [])[:_TASKS]:
            code, message = str(getattr(task.error, "code", "") or ""), str(getattr(task.error, "message", "") or "")
            if str(task.state) in ("fail", "failed") and shortfalls.classify("ack", code, message):
                return shortfalls.shortfall("ack", code, message, asked=asked, delivered=total)
        return None

    def _tasks_page(self) -> Any:
        from alibabacloud_cs20151215 import models
        from darabonba.runtime import RuntimeOptions

        request = models.DescribeClusterTasksRequest(page_size=_TASKS, page_number=1)
        return self._sdk().describe_cluster_tasks_with_options(self.settings.cluster_id, request, {},
                                                               RuntimeOptions())

    def _read(self) -> CloudStatus:
        """DescribeClusterNodePoolDetail: the desired size, busy unless ``active``; refuses ACK's own auto scaling."""
        body = self._call("DescribeClusterNodePoolDetail", "GET", None)
        if (body.get("auto_scaling") or {}).get("enable"):
            raise cloud_autoscaler(self.where, "ACK's own auto scaling", "turn auto_scaling.enable off in the console")
        state = (body.get("status") or {}).get("state") or "unknown"
        total = (body.get("status") or {}).get("total_nodes")
        desired = _desired(body)
        detail = f"state {state}, {total} node(s) in the pool, desired size {desired}"
        busy = state != "active"
        return CloudStatus(current=desired if desired is not None else total, busy=busy, read=AckRead(body),
                           detail=f"{self.where} is still changing: {detail}" if busy else detail)

    def _resize(self, status: CloudStatus, current: int, target: int) -> int:
        body = {"scaling_group": {"desired_size": target}}  # only this field: nothing else of the pool changes
        self._call("ModifyClusterNodePool", "PUT", body)
        log.info("provider=ack pool=%s nodepool=%s from=%d to=%d", self.pool, self.settings.nodepool_id, current,
                 target)
        return target

    def _remove(self, status: CloudStatus, nodes: Sequence[NodeRef], current: int) -> int:
        """Remove exactly these nodes' ECS instances (RemoveNodePoolNodes, drain and release on); ACK lowers the
        pool's desired size by as many.

        Each node's instance id comes from the pool's own node list (DescribeClusterNodes, by node name) and is
        checked against ``spec.providerID`` (``<region>.<instance id>``). Returns once ACK accepted the task; the
        instances go later. Subscription (prepaid) instances are removed but not released.
        """
        pool_nodes = self._pool_nodes()
        in_pool = set(pool_nodes.values())

        def find(node: NodeRef) -> str | None:
            claimed = node.provider_id.rsplit(".", 1)[-1] if ".i-" in node.provider_id else None
            instance = agreed(node, pool_nodes.get(node.name), claimed, self.where)
            return instance if instance in in_pool else None

        ids = machines(nodes, find, self.where, "node")
        in_parts([ids], lambda part: self._request("RemoveNodePoolNodes", lambda: self._remove_call(part)),
                 lowered(self._read, _desired(read_of(status, AckRead).body), len(ids)), len, current, self.where)
        log.info("provider=ack pool=%s nodepool=%s removing instances=%s from=%d to=%d", self.pool,
                 self.settings.nodepool_id, ",".join(ids), current, current - len(ids))
        return current - len(ids)

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

    def _remove_call(self, ids: list[str]) -> Any:
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

    def _request(self, action: str, fn: Callable[[], T]) -> T:
        """One OpenAPI call through the SDK and the retry layer (the SDK's own retry stays off)."""
        return call(f"{action} {self.settings.cluster_id}/{self.settings.nodepool_id}", lambda _: fn(),
                    budget=self.settings.retry_budget, timeout=self.settings.timeout, clock=self._clock,
                    classify=_classify)

    def _attempt(self, action: str, method: str, body: dict[str, Any] | None) -> dict[str, Any]:
        from alibabacloud_tea_openapi import utils_models
        from darabonba.runtime import RuntimeOptions

        params = utils_models.Params(
            action=action, version=_VERSION, protocol="HTTPS", method=method, auth_type="AK", style="ROA",
            pathname=f"/clusters/{_quote(self.settings.cluster_id)}/nodepools/{_quote(self.settings.nodepool_id)}",
            req_body_type="json", body_type="json")
        request = utils_models.OpenApiRequest(headers={}, body=body)
        client = self._sdk()
        try:
            result: dict[str, Any] = client.call_api(params, request, RuntimeOptions())
        finally:
            keep_bounded(client)  # a session the SDK made itself is bounded too (ack_send.py)
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
            self._client = bound_client(Client(config))  # read_timeout: each exchange's total (ack_send.py)
        return self._client


def _desired(body: dict[str, Any]) -> int | None:
    """``scaling_group.desired_size`` of a DescribeClusterNodePoolDetail answer."""
    value = (body.get("scaling_group") or {}).get("desired_size")
    return value if isinstance(value, int) else None


def _default_credential() -> Any:
    """The Alibaba Cloud default credentials chain: environment AccessKey, OIDC/RAM role, ECS instance role, ..."""
    from alibabacloud_credentials.client import Client as CredentialClient

    return CredentialClient()


def _quote(value: str) -> str:
    from darabonba.url import Url

    return str(Url.percent_encode(value))


def _classify(exc: Exception, what: str) -> Exception:
    """An SDK exception as Transient (worth a retry now) or one of ours with ACK's code, without secrets."""
    from alibabacloud_tea_openapi.exceptions import ClientException, ServerException, ThrottlingException

    if isinstance(exc, ThrottlingException):
        return refusal(what, 0, str(exc.code), _said(exc), said="ACK", throttled=True,
                       retry_after=float(exc.retry_after) if exc.retry_after else None)
    if isinstance(exc, ServerException):
        return Transient(f"HTTP {exc.status_code} {exc.code}: {_said(exc)}", exc.status_code)
    if isinstance(exc, ClientException):
        status = int(exc.status_code or 0)
        return refusal(what, status, str(exc.code), _said(exc), text=f"{what.split()[0]} refused (HTTP {status}): "
                       f"{exc.code}: {_said(exc)}", cloud="ack")
    failure = bounded_failure(exc)
    if isinstance(failure, AnswerTooLarge):  # ACK may have acted: not again
        return PermanentError(f"{what}: ACK {failure}", code=Code.BAD_ANSWER, cloud_code=str(failure.status))
    if failure is not None:  # no whole answer within the attempt's timeout
        return Transient(f"{failure} talking to the ACK API")
    name = type(getattr(exc, "inner_exception", None) or exc).__name__  # connection errors: UnretryableException
    if "credential" in str(exc).lower() or "accesskey" in str(exc).lower():
        return PermanentError(f"{what}: no usable Alibaba Cloud credentials ({type(exc).__name__}); set "
                              "ALIBABA_CLOUD_ACCESS_KEY_ID/SECRET or a RAM role", code=Code.NO_CREDENTIALS,
                              cloud_code=type(exc).__name__)
    return Transient(f"{name} talking to the ACK API")


def _said(exc: Any) -> str:
    """The service's message, short and redacted (never quoted raw)."""
    return clean(str(getattr(exc, "message", "") or ""))


FACTORY = ProviderFactory(
    name="ack",
    settings_model=AckSettings,
    build=lambda pool, settings, clock: AckProvider(pool, settings, clock=clock),
    description="Alibaba ACK node pool through the cs 2015-12-15 OpenAPI; reads the real size",
    capabilities=lambda settings: AckProvider.capabilities,
    node_selector=lambda settings: f"alibabacloud.com/nodepool-id={settings.nodepool_id}",
)
