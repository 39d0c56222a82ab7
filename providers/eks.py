"""Amazon EKS managed node groups through boto3: reads and sets ``scalingConfig.desiredSize``; removes named nodes.

boto3 is imported inside functions, so it loads only when a pool uses this provider. Its clients are built with
botocore's own retries off (``total_max_attempts=1``): :func:`providers.retry.call` is the one retry layer.
Credentials come from boto3's default chain (environment, web identity / IRSA, EKS Pod Identity, profile, instance
role), never from the config.
"""
from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from autoscaler.clock import SYSTEM, Clock
from autoscaler.config.durations import Duration
from autoscaler.models import CloudLimits, CloudStatus, ProviderRead, Shortfall
from providers import shortfalls
from providers.aws_send import bounded_send
from providers.base import Capabilities, NodeRef, ProviderFactory, RemovingProvider, Tracked, read_of
from providers.errors import Code, PermanentError
from providers.named import in_parts, left, machines
from providers.retry import Transient, call, clean, refusal

log = logging.getLogger(__name__)

T = TypeVar("T")
#: node group states a new size may be asked in: DEGRADED (health issues, e.g. no GPU capacity in the zone) is
#: settled, and a new desired size is often how it recovers
_SETTLED = frozenset({"ACTIVE", "DEGRADED"})
_WORKING = frozenset({"CREATING", "UPDATING"})  # busy: wait; anything else (DELETING, *_FAILED) is refused
_SETTLED_UPDATES = frozenset({"Successful", "Failed", "Cancelled"})
_THROTTLED = frozenset({"ThrottlingException", "Throttling", "TooManyRequestsException", "RequestLimitExceeded",
                        "SlowDown"})
_BUSY = frozenset({"ResourceInUseException", "ScalingActivityInProgress", "ResourceContention"})
#: DescribeUpdate calls one decision may spend on updates it has not seen settled. A fresh process meets the node
#: group's whole update history; it works through it this many per decision instead of in one burst.
MAX_DESCRIBES = 10
_INSTANCE = re.compile(r"^aws:///[^/]*/(i-[0-9a-f]+)$")
_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]*$")


class EksSettings(BaseModel):
    """Settings of an EKS managed node group; credentials come from boto3's default chain, never from here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d+$", description="AWS region of the cluster, e.g. us-east-1.")
    cluster: str = Field(min_length=1, max_length=100, description="EKS cluster name.")
    nodegroup: str = Field(min_length=1, max_length=63, description="Managed node group name.")
    endpoint_url: str | None = Field(default=None, description="EKS and Auto Scaling API address (VPC endpoints, "
                                                               "tests); the region's public one when unset.")
    timeout: Duration = Field(default=5, gt=0, description="Total time of one API attempt, answer included.")
    retry_budget: Duration = Field(default=8, ge=0, description="Total time one call may spend on retries.")

    @field_validator("cluster", "nodegroup")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("must be an EKS name: letters, digits, '-' and '_', starting with a letter or digit")
        return value

    @field_validator("endpoint_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/?#\s]+/?$", value):
            raise ValueError("must be an http(s) URL with a host only, such as https://eks.us-east-1.amazonaws.com")
        return value


@dataclass(frozen=True)
class EksRead(ProviderRead):
    """The node group as DescribeNodegroup answered it."""

    group: dict[str, Any]


class EksProvider(RemovingProvider):
    """One managed node group. EKS reports the desired size, so the core tracks nothing."""

    capabilities = Capabilities(removes_named_nodes=True)  # minSize/maxSize are read live
    needs_read = (True, True)  # the node group's state and limits; its Auto Scaling groups for a removal

    def __init__(self, pool: str, settings: EksSettings, *, clock: Clock = SYSTEM) -> None:
        self.pool = pool
        self.settings = settings
        self._clock = clock
        self._clients: dict[str, Any] = {}
        self._settled: set[str] = set()  # update ids seen Successful/Failed/Cancelled: never read again
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        return f"EKS node group {self.settings.nodegroup} of cluster {self.settings.cluster}"

    def check(self) -> None:
        """Read the node group once: it must exist and be readable. Changes nothing."""
        group = read_of(self._read(), EksRead).group
        log.info("eks pool=%s nodegroup=%s status=%s scaling=%s", self.pool, self.settings.nodegroup,
                 group.get("status"), group.get("scalingConfig"))

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        """desiredSize is the count; busy while the node group is CREATING/UPDATING or an update is InProgress."""
        read = self._read()
        if read.busy:
            return read
        group = read_of(read, EksRead).group
        scaling = group.get("scalingConfig") or {}
        running, unchecked = self._updates_in_progress()
        if running:
            return replace(read, busy=True, detail=f"{self.where} has update {running[0]} InProgress")
        later = f"; {unchecked} older update(s) not checked yet ({MAX_DESCRIBES} per decision)" if unchecked else ""
        issues = ", ".join(sorted({str(i.get("code")) for i in (group.get("health") or {}).get("issues") or []}))
        health = f" health issues: {issues}" if issues else ""
        return replace(read, detail=f"status={group.get('status')} minSize={scaling.get('minSize')} "
                                    f"maxSize={scaling.get('maxSize')}{health}{later}",
                       shortfall=self._shortfall(group, int(scaling.get("desiredSize") or 0)))

    def _shortfall(self, group: dict[str, Any], asked: int) -> Shortfall | None:
        """Fewer instances in the Auto Scaling group than desiredSize, and a capacity or quota reason: the node
        group's health issues, else the group's latest Failed/Cancelled scaling activity (DescribeScalingActivities)."""
        names = [g["name"] for g in (group.get("resources") or {}).get("autoScalingGroups") or [] if g.get("name")]
        if not names or not asked:
            return None
        reasons = [(str(i.get("code", "")), str(i.get("message", ""))) for i in
                   (group.get("health") or {}).get("issues") or []]
        delivered = len(self._group_instances(group))
        if delivered >= asked:
            return None
        if not any(shortfalls.classify("eks", code, message) for code, message in reasons):
            answer = self._call("DescribeScalingActivities", lambda: self._client("autoscaling")
                                .describe_scaling_activities(AutoScalingGroupName=names[0], MaxRecords=5))
            reasons = [("AsgInstanceLaunchFailures", str(a.get("StatusMessage", ""))) for a in
                       (answer.get("Activities") or [])[:1] if a.get("StatusCode") in ("Failed", "Cancelled")]
        found = [(code, message) for code, message in reasons if shortfalls.classify("eks", code, message)]
        return shortfalls.shortfall("eks", *found[0], asked=asked, delivered=delivered) if found else None

    def _read(self) -> CloudStatus:
        """DescribeNodegroup: desiredSize, busy while CREATING/UPDATING, minSize/maxSize; refuses a node group being
        deleted or that failed to be created or deleted."""
        answer = self._call("DescribeNodegroup", lambda: self._client("eks").describe_nodegroup(
            clusterName=self.settings.cluster, nodegroupName=self.settings.nodegroup))
        group: dict[str, Any] = answer.get("nodegroup") or {}
        scaling = group.get("scalingConfig") or {}
        state = str(group.get("status") or "UNKNOWN")
        limits = self._limits(scaling)
        if state in _WORKING:
            return CloudStatus(current=scaling.get("desiredSize"), busy=True, limits=limits, read=EksRead(group),
                               detail=f"{self.where} is {state}: an earlier change is still in progress")
        if state not in _SETTLED:
            raise PermanentError(f"{self.where} is {state}; it cannot be scaled", code=Code.POOL_UNUSABLE,
                                 cloud_code=state)
        return CloudStatus(current=scaling.get("desiredSize"), limits=limits, read=EksRead(group))

    def _resize(self, status: CloudStatus, current: int, target: int) -> int:
        """UpdateNodegroupConfig with only scalingConfig.desiredSize; returns once EKS accepted the update."""
        answer = self._call("UpdateNodegroupConfig", lambda: self._client("eks").update_nodegroup_config(
            clusterName=self.settings.cluster, nodegroupName=self.settings.nodegroup,
            scalingConfig={"desiredSize": target}))
        update = (answer.get("update") or {}).get("id")
        log.info("eks pool=%s nodegroup=%s requested desiredSize %d -> %d update=%s", self.pool,
                 self.settings.nodegroup, current, target, update)
        return target

    def _remove(self, status: CloudStatus, nodes: Sequence[NodeRef], current: int) -> int:
        """Terminate exactly these nodes' instances with TerminateInstanceInAutoScalingGroup, decrementing the desired
        capacity, which EKS shows as the node group's desiredSize.

        Each instance id comes from the node's ``spec.providerID`` (``aws:///us-east-1a/i-0abc…``) and must be an
        instance of the node group's own Auto Scaling group(s), else nothing is terminated. One call per node. EKS
        does not drain here; the engine has cordoned the nodes and checked their pods before.
        """
        group = read_of(status, EksRead).group
        in_group = self._group_instances(group)

        def find(node: NodeRef) -> str | None:
            match = _INSTANCE.match(node.provider_id)
            return match.group(1) if match and match.group(1) in in_group else None

        ids = machines(nodes, find, self.where, "instance", "terminated")
        client = self._client("autoscaling")
        done = in_parts(ids, lambda instance: self._call(
            "TerminateInstanceInAutoScalingGroup", lambda: client.terminate_instance_in_auto_scaling_group(
                InstanceId=instance, ShouldDecrementDesiredCapacity=True)),
            lambda instance: left(lambda: self._group_instances(group), [instance]), lambda _: 1, current,
            self.where)
        log.info("eks pool=%s nodegroup=%s terminated instances=%s desiredSize %d -> %d", self.pool,
                 self.settings.nodegroup, ",".join(ids), current, current - done)
        return current - done

    def _limits(self, scaling: dict[str, Any]) -> CloudLimits | None:
        low, high = scaling.get("minSize"), scaling.get("maxSize")
        if not isinstance(low, int) or not isinstance(high, int):
            return None
        s = self.settings
        return CloudLimits(low=low, high=high, owner=f"EKS node group {s.nodegroup}", low_name="minSize",
                           high_name="maxSize", fix=f"change it with aws eks update-nodegroup-config --cluster-name "
                           f"{s.cluster} --nodegroup-name {s.nodegroup} --scaling-config minSize=…,maxSize=…")

    def _updates_in_progress(self) -> tuple[list[str], int]:
        """Ids of the node group's updates that are InProgress, and how many were left unchecked.

        ListUpdates (every page; its order is undefined), then DescribeUpdate for at most ``MAX_DESCRIBES`` ids not
        already seen settled. A settled update never runs again, so each is described once per process; the
        node group's ``status`` (checked first) covers a running update while a fresh process catches up.
        """
        eks = self._client("eks")
        s = self.settings
        ids: list[str] = []
        token: str | None = None
        while True:
            page = self._call("ListUpdates", lambda: eks.list_updates(
                name=s.cluster, nodegroupName=s.nodegroup, maxResults=100, **({"nextToken": token} if token else {})))
            ids += [i for i in page.get("updateIds") or [] if i not in self._settled]
            token = page.get("nextToken")
            if not token:
                break
        running = []
        for update_id in ids[:MAX_DESCRIBES]:
            update = self._call("DescribeUpdate", lambda: eks.describe_update(
                name=s.cluster, nodegroupName=s.nodegroup, updateId=update_id)).get("update") or {}
            if update.get("status") in _SETTLED_UPDATES:
                self._settled.add(update_id)
            else:
                running.append(update_id)
        return running, max(0, len(ids) - MAX_DESCRIBES)

    def _group_instances(self, group: dict[str, Any]) -> set[str]:
        """Instance ids in the node group's Auto Scaling group(s) (DescribeAutoScalingGroups, one call)."""
        names = [g["name"] for g in (group.get("resources") or {}).get("autoScalingGroups") or [] if g.get("name")]
        if not names:
            raise PermanentError(f"{self.where} names no Auto Scaling group; cannot remove named nodes",
                                 code=Code.NO_INSTANCE_GROUP)
        answer = self._call("DescribeAutoScalingGroups", lambda: self._client("autoscaling")
                            .describe_auto_scaling_groups(AutoScalingGroupNames=names))
        return {str(i["InstanceId"]) for g in answer.get("AutoScalingGroups") or [] for i in g.get("Instances") or []
                if not str(i.get("LifecycleState", "")).startswith("Terminat")}

    def _call(self, action: str, fn: Callable[[], T]) -> T:
        """One AWS call through the retry layer (botocore's own is off)."""
        return call(f"{action} for {self.where}", lambda _: fn(), budget=self.settings.retry_budget,
                    timeout=self.settings.timeout, clock=self._clock, classify=_classify)

    def _client(self, service: str) -> Any:
        """The boto3 client of ``service`` (eks, autoscaling), built on first use."""
        with self._lock:
            if service not in self._clients:
                import boto3
                from botocore.config import Config

                s = self.settings
                config = Config(region_name=s.region, retries={"total_max_attempts": 1, "mode": "standard"},
                                connect_timeout=min(s.timeout, 3), read_timeout=s.timeout)
                client = boto3.session.Session().client(
                    service, config=config, **({"endpoint_url": s.endpoint_url} if s.endpoint_url else {}))
                client.meta.events.register("before-send", bounded_send(s.timeout))  # a total deadline per exchange
                self._clients[service] = client
            return self._clients[service]


def _classify(exc: Exception, what: str) -> Exception:
    """A boto3 error as Transient (retry now) or one of ours with AWS's code and message."""
    from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError, NoCredentialsError
    from botocore.exceptions import PartialCredentialsError
    from botocore.parsers import ResponseParserError

    if isinstance(exc, ClientError):
        error = exc.response.get("Error") or {}
        code = str(error.get("Code") or "Unknown")
        status = int((exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
        return refusal(what, status, code, str(error.get("Message") or ""), said="AWS answered",
                       throttled=code in _THROTTLED, busy=code in _BUSY, cloud="eks")
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return PermanentError(f"{what}: no usable AWS credentials ({type(exc).__name__}); set AWS_* variables, an "
                              "IRSA / Pod Identity role, or an instance role", code=Code.NO_CREDENTIALS,
                              cloud_code=type(exc).__name__)
    if isinstance(exc, (ConnectionError, HTTPClientError)):
        return Transient(f"no answer from AWS ({type(exc).__name__})")
    if isinstance(exc, ResponseParserError):  # a proxy's or a failing front end's HTML page instead of AWS's answer
        return Transient("an answer that is not AWS's (unparseable)")
    if isinstance(exc, BotoCoreError):
        return PermanentError(f"{what}: {type(exc).__name__}: {clean(str(exc))}", cloud_code=type(exc).__name__)
    return exc


FACTORY = ProviderFactory(
    name="eks",
    settings_model=EksSettings,
    build=lambda pool, settings, clock: EksProvider(pool, settings, clock=clock),
    capabilities=lambda settings: EksProvider.capabilities,
    description="Amazon EKS managed node group through boto3 (desiredSize; named nodes via Auto Scaling)",
    node_selector=lambda settings: f"eks.amazonaws.com/nodegroup={settings.nodegroup}",
)
