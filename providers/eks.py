"""Amazon EKS managed node groups through boto3: reads and sets ``scalingConfig.desiredSize``; removes named nodes.

boto3 is imported inside functions, so it loads only when a pool uses this provider. Its clients are built with
botocore's own retries off (``total_max_attempts=1``): :func:`providers._http.call_with_retries` is the one retry layer.
Credentials come from boto3's default chain (environment, web identity / IRSA, EKS Pod Identity, profile, instance
role), never from the config.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any, Callable, Sequence, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from autoscaler.durations import Duration
from autoscaler.models import CloudLimits, CloudStatus
from autoscaler.redact import redact_text
from providers._http import Sleep, Transient, call_with_retries
from providers.base import NodeRef, ProviderError, ProviderFactory, Tracked

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
    timeout: Duration = Field(default=5, gt=0, description="Time one API attempt may take.")
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


class EksProvider:
    """One managed node group. EKS reports the desired size, so the core tracks nothing."""

    tracks_count = False

    def __init__(self, pool: str, settings: EksSettings, *, sleep: Sleep = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pool = pool
        self.settings = settings
        self._sleep = sleep
        self._clock = clock
        self._clients: dict[str, Any] = {}
        self._settled: set[str] = set()  # update ids seen Successful/Failed/Cancelled: never read again
        self._last: tuple[float, dict[str, Any]] | None = None  # (clock, node group) read by status()
        self._lock = threading.Lock()

    @property
    def _where(self) -> str:
        return f"EKS node group {self.settings.nodegroup} of cluster {self.settings.cluster}"

    def check(self) -> None:
        """Read the node group once: it must exist and be readable. Changes nothing."""
        group = self._describe()
        log.info("eks pool=%s nodegroup=%s status=%s scaling=%s", self.pool, self.settings.nodegroup,
                 group.get("status"), group.get("scalingConfig"))

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        """desiredSize is the count; busy while the node group is CREATING/UPDATING or an update is InProgress."""
        group = self._describe()
        scaling = group.get("scalingConfig") or {}
        state = str(group.get("status") or "UNKNOWN")
        current = scaling.get("desiredSize")
        limits = self._limits(scaling)
        if state in _WORKING:
            return CloudStatus(current=current, busy=True, limits=limits,
                               detail=f"{self._where} is {state}: an earlier change is still in progress")
        self._refuse_state(state)
        running, unchecked = self._updates_in_progress()
        if running:
            return CloudStatus(current=current, busy=True, limits=limits,
                               detail=f"{self._where} has update {running[0]} InProgress")
        later = f"; {unchecked} older update(s) not checked yet ({MAX_DESCRIBES} per decision)" if unchecked else ""
        issues = ", ".join(sorted({str(i.get("code")) for i in (group.get("health") or {}).get("issues") or []}))
        health = f" health issues: {issues}" if issues else ""
        return CloudStatus(current=current, limits=limits, detail=f"status={state} minSize={scaling.get('minSize')} "
                                                                  f"maxSize={scaling.get('maxSize')}{health}{later}")

    def _refuse_state(self, state: str) -> None:
        """A node group being deleted or that failed to be created or deleted cannot be scaled."""
        if state not in _SETTLED and state not in _WORKING:
            raise ProviderError(f"{self._where} is {state}; it cannot be scaled", retryable=False,
                                code=f"NodeGroup{state.title().replace('_', '')}")

    def scale(self, current: int, target: int, now: float) -> int:
        """UpdateNodegroupConfig with only scalingConfig.desiredSize; returns once EKS accepted the update."""
        self._within_limits(self._recent(), target)
        answer = self._call("UpdateNodegroupConfig", lambda: self._client("eks").update_nodegroup_config(
            clusterName=self.settings.cluster, nodegroupName=self.settings.nodegroup,
            scalingConfig={"desiredSize": target}))
        update = (answer.get("update") or {}).get("id")
        log.info("eks pool=%s nodegroup=%s requested desiredSize %d -> %d update=%s", self.pool,
                 self.settings.nodegroup, current, target, update)
        return target

    def remove_nodes(self, nodes: Sequence[NodeRef], current: int, now: float) -> int:
        """Terminate exactly these nodes' instances with TerminateInstanceInAutoScalingGroup, decrementing the desired
        capacity, which EKS shows as the node group's desiredSize.

        Each instance id comes from the node's ``spec.providerID`` (``aws:///us-east-1a/i-0abc…``) and must be an
        instance of the node group's own Auto Scaling group(s), else nothing is terminated. One call per node: when
        one fails after others went, ``applied`` says the size reached. EKS does not drain here; the engine has
        cordoned the nodes and checked their pods before.
        """
        if not nodes:
            return current
        group = self._recent()
        ids = instance_ids(nodes, self._group_instances(group), self._where)
        target = current - len(ids)
        self._within_limits(group, target)
        client = self._client("autoscaling")
        done = 0
        for instance in ids:
            try:
                self._call("TerminateInstanceInAutoScalingGroup",
                           lambda: client.terminate_instance_in_auto_scaling_group(
                               InstanceId=instance, ShouldDecrementDesiredCapacity=True))
            except ProviderError as exc:
                if self._terminating(group, instance):
                    log.warning("eks pool=%s: terminating %s failed (%s), but the instance is leaving its Auto "
                                "Scaling group: an earlier attempt was accepted and its answer lost", self.pool,
                                instance, exc.message)
                    done += 1
                    continue
                gone = f"{done} of {len(ids)} instance(s) were terminated" if done else "nothing was terminated"
                raise ProviderError(f"{exc.message}; {gone}", retryable=exc.retryable, code=exc.code,
                                    retry_after=exc.retry_after, applied=current - done if done else None) from None
            done += 1
        log.info("eks pool=%s nodegroup=%s terminated instances=%s desiredSize %d -> %d", self.pool,
                 self.settings.nodegroup, ",".join(ids), current, target)
        return target

    def _limits(self, scaling: dict[str, Any]) -> CloudLimits | None:
        low, high = scaling.get("minSize"), scaling.get("maxSize")
        if not isinstance(low, int) or not isinstance(high, int):
            return None
        s = self.settings
        return CloudLimits(low=low, high=high, owner=f"EKS node group {s.nodegroup}", low_name="minSize",
                           high_name="maxSize", fix=f"change it with aws eks update-nodegroup-config --cluster-name "
                           f"{s.cluster} --nodegroup-name {s.nodegroup} --scaling-config minSize=…,maxSize=…")

    def _within_limits(self, group: dict[str, Any], target: int) -> None:
        """Refuse a target outside minSize/maxSize (EKS itself refuses it; the service never widens them)."""
        limits = self._limits(group.get("scalingConfig") or {})
        why = limits.refuses(target) if limits else ""
        if why:
            raise ProviderError(f"{self._where}: {why}", retryable=False, code="OutsideNodeGroupLimits", limit=True)
        state = str(group.get("status") or "UNKNOWN")
        if state in _WORKING:
            raise ProviderError(f"{self._where} is {state}: an earlier change is still in progress",
                                retryable=True, code="NodeGroupBusy")
        self._refuse_state(state)

    def _describe(self) -> dict[str, Any]:
        started = self._clock()
        answer = self._call("DescribeNodegroup", lambda: self._client("eks").describe_nodegroup(
            clusterName=self.settings.cluster, nodegroupName=self.settings.nodegroup))
        group: dict[str, Any] = answer.get("nodegroup") or {}
        with self._lock:
            self._last = (started, group)
        return group

    def _recent(self) -> dict[str, Any]:
        """The node group status() read moments ago (one DescribeNodegroup per decision), or a new read."""
        with self._lock:
            last, self._last = self._last, None
        if last is not None and self._clock() - last[0] < self.settings.retry_budget + self.settings.timeout:
            return last[1]
        return self._describe()

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

    def _terminating(self, group: dict[str, Any], instance: str) -> bool:
        """After a failed terminate: is the instance already leaving the group (a retry after a lost answer)?"""
        try:
            return instance not in self._group_instances(group)
        except ProviderError:
            return False

    def _group_instances(self, group: dict[str, Any]) -> set[str]:
        """Instance ids in the node group's Auto Scaling group(s) (DescribeAutoScalingGroups, one call)."""
        names = [g["name"] for g in (group.get("resources") or {}).get("autoScalingGroups") or [] if g.get("name")]
        if not names:
            raise ProviderError(f"{self._where} names no Auto Scaling group; cannot remove named nodes",
                                retryable=False, code="NoAutoScalingGroup")
        answer = self._call("DescribeAutoScalingGroups", lambda: self._client("autoscaling")
                            .describe_auto_scaling_groups(AutoScalingGroupNames=names))
        return {str(i["InstanceId"]) for g in answer.get("AutoScalingGroups") or [] for i in g.get("Instances") or []
                if not str(i.get("LifecycleState", "")).startswith("Terminat")}

    def _call(self, action: str, call: Callable[[], T]) -> T:
        """One AWS call with our retry layer (botocore's own is off)."""
        what = f"{action} for {self._where}"
        return call_with_retries(self.settings.retry_budget, self._sleep, what, _translated, call, what)

    def _client(self, service: str) -> Any:
        """The boto3 client of ``service`` (eks, autoscaling), built on first use."""
        with self._lock:
            if service not in self._clients:
                import boto3
                from botocore.config import Config

                s = self.settings
                config = Config(region_name=s.region, retries={"total_max_attempts": 1, "mode": "standard"},
                                connect_timeout=min(s.timeout, 3), read_timeout=s.timeout)
                self._clients[service] = boto3.session.Session().client(
                    service, config=config, **({"endpoint_url": s.endpoint_url} if s.endpoint_url else {}))
            return self._clients[service]


def instance_ids(nodes: Sequence[NodeRef], in_group: set[str], where: str) -> list[str]:
    """The EC2 instance id of each node, from ``spec.providerID``; refuses the whole call when a node has none, or
    when its instance is not in the node group's Auto Scaling group."""
    found: list[str] = []
    unknown: list[str] = []
    for node in nodes:
        match = _INSTANCE.match(node.provider_id)
        instance = match.group(1) if match else None
        if instance is None or instance not in in_group:
            unknown.append(f"{node.name} ({node.provider_id or 'no providerID'})")
        elif instance not in found:
            found.append(instance)
    if unknown:
        raise ProviderError(f"{where} has no instance for node(s) {', '.join(unknown)} (not in its Auto Scaling "
                            "group, or already gone); nothing was terminated", retryable=False, code="NodeNotInPool")
    return found


def _translated(call: Callable[[], T], what: str) -> T:
    """Run a boto3 call; its errors become Transient (retry now) or ProviderError with AWS's code and message."""
    from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError, NoCredentialsError
    from botocore.exceptions import PartialCredentialsError
    from botocore.parsers import ResponseParserError

    try:
        return call()
    except ClientError as exc:
        error = exc.response.get("Error") or {}
        code = str(error.get("Code") or "Unknown")
        message = redact_text(" ".join(str(error.get("Message") or "").split()))[:300]
        status = int((exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
        text = f"{what}: AWS answered {status} {code}: {message}"
        if code in _THROTTLED:
            raise ProviderError(text + " (throttled)", retryable=True, code=code) from None
        if status >= 500:
            raise Transient(text, status) from None
        if code in _BUSY:
            raise ProviderError(text + " (busy; try again later)", retryable=True, code=code) from None
        raise ProviderError(text, retryable=False, code=code) from None
    except (NoCredentialsError, PartialCredentialsError) as exc:
        raise ProviderError(f"{what}: no usable AWS credentials ({type(exc).__name__}); set AWS_* variables, an "
                            "IRSA / Pod Identity role, or an instance role", retryable=False,
                            code="NoCredentials") from None
    except (ConnectionError, HTTPClientError) as exc:
        raise Transient(f"no answer from AWS ({type(exc).__name__})") from None
    except ResponseParserError:  # a proxy's or a failing front end's HTML page instead of AWS's answer
        raise Transient("an answer that is not AWS's (unparseable)") from None
    except BotoCoreError as exc:
        raise ProviderError(f"{what}: {type(exc).__name__}: {redact_text(str(exc))[:300]}", retryable=False) from None


FACTORY = ProviderFactory(
    name="eks",
    settings_model=EksSettings,
    build=lambda pool, settings: EksProvider(pool, settings),
    description="Amazon EKS managed node group through boto3 (desiredSize; named nodes via Auto Scaling)",
    node_selector=lambda settings: f"eks.amazonaws.com/nodegroup={settings.nodegroup}",
)
