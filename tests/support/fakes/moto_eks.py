"""moto's server, run as a process, with the two things its EKS emulation lacks for a node group's scaling.

moto 5.2 answers ``UpdateNodegroupConfig`` with an update that is ``Successful`` at once and keeps no record of it,
does not implement ``ListUpdates``/``DescribeUpdate``, and its node group names an Auto Scaling group
(``resources.autoScalingGroups``) that does not exist. Real EKS keeps each update (``InProgress`` for minutes) and
ties the node group to its ASG both ways: a new desired size goes to the ASG, and the ASG's desired capacity (lowered
by ``TerminateInstanceInAutoScalingGroup(ShouldDecrementDesiredCapacity=True)``) shows as the node group's
``desiredSize``. This module adds those, on moto's own backends, before it starts moto's server:

    python -m tests.support.fakes.moto_eks -p PORT  # env MOTO_EKS_UPDATE_SECONDS: how long an update stays InProgress

The ASG itself (launch template, instances) is built by :func:`create_node_group` through moto's public EC2 and
Auto Scaling APIs, as an operator's cloud would have it. Usage from tests: :class:`MotoServer`.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

AWS_ENV = {"AWS_ACCESS_KEY_ID": "AKIAMOTOFAKEKEY00000", "AWS_SECRET_ACCESS_KEY": "moto-secret-that-must-never-leak",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
ROOT = Path(__file__).resolve().parents[3]
STATUS_TAG = "fake/status"  # a node group tag the fake reads as the node group's status (ACTIVE, DEGRADED, ...)
#: Auto Scaling group tags the fake reads as a stockout: the most instances the group can launch, and the EC2 error
CAPACITY_TAG, ERROR_TAG = "fake/capacity", "fake/launch-error"
QUIET_TAG = "fake/no-health-issues"  # a node group tag: its launch failures show in the ASG's activities only
ICE = ("InsufficientInstanceCapacity - We currently do not have sufficient g5.xlarge capacity in the Availability "
       "Zone you requested (us-east-1a). Our system will be working on provisioning additional capacity. You can "
       "currently get g5.xlarge capacity by not specifying an Availability Zone in your request or choosing "
       "us-east-1b, us-east-1c.")

_UPDATES: dict[tuple[str, str], list[dict[str, Any]]] = {}
_ACTIVITIES: dict[str, list[dict[str, Any]]] = {}  # an ASG's scaling activities, newest first


def _patch() -> None:
    """Add ListUpdates/DescribeUpdate and the node group <-> ASG link to moto's EKS backend."""
    from moto.autoscaling.models import autoscaling_backends
    from moto.core.responses import ActionResult
    from moto.core.utils import utcnow
    from moto.eks import models, responses, urls
    from moto.eks.exceptions import ResourceNotFoundException

    hold = float(os.environ.get("MOTO_EKS_UPDATE_SECONDS", "0"))

    def asg_of(backend: Any, nodegroup: Any) -> Any:
        groups = autoscaling_backends[backend.account_id][backend.region_name].autoscaling_groups
        names = [g["name"] for g in nodegroup.resources.get("autoScalingGroups", [])]
        return next((groups[n] for n in names if n in groups), None)

    def status(update: dict[str, Any]) -> dict[str, Any]:
        done = time.monotonic() - update["_started"] >= hold
        return {k: v for k, v in update.items() if not k.startswith("_")} | {
            "status": "Successful" if done else "InProgress"}

    original_update = models.EKSBackend.update_nodegroup_config
    original_describe = models.EKSBackend.describe_nodegroup

    def update_nodegroup_config(self: Any, cluster_name: str, nodegroup_name: str, **kwargs: Any) -> dict[str, Any]:
        update = original_update(self, cluster_name, nodegroup_name, **kwargs)
        nodegroup = self.clusters[cluster_name].nodegroups[nodegroup_name]
        scaling = kwargs.get("scaling_config") or {}
        asg = asg_of(self, nodegroup)
        if asg is not None and "desiredSize" in scaling:
            asg.max_size = max(asg.max_size, scaling["desiredSize"])
            asg.set_desired_capacity(scaling["desiredSize"])
        record = dict(update, _started=time.monotonic(), createdAt=utcnow())
        _UPDATES.setdefault((cluster_name, nodegroup_name), []).append(record)
        return status(record)

    def describe_nodegroup(self: Any, cluster_name: str, nodegroup_name: str) -> Any:
        nodegroup = original_describe(self, cluster_name, nodegroup_name)
        nodegroup.status = nodegroup.tags.get(STATUS_TAG, nodegroup.status)  # a test's way to set the state
        asg = asg_of(self, nodegroup)
        if asg is not None:
            nodegroup.scaling_config["desiredSize"] = asg.desired_capacity
            failed = [a for a in _ACTIVITIES.get(asg.name, [])[:1] if a["StatusCode"] == "Failed"]
            quiet = QUIET_TAG in nodegroup.tags  # EKS raises its health issue later than the ASG's activity
            if failed and not quiet and len(asg.active_instances()) < (asg.desired_capacity or 0):
                nodegroup.status = "DEGRADED"
                nodegroup.health = {"issues": [{"code": "AsgInstanceLaunchFailures", "message": failed[0][
                    "StatusMessage"], "resourceIds": [asg.name]}]}
        return nodegroup

    def list_updates(self: Any) -> ActionResult:
        key = (self._get_param("name"), self._get_param("nodegroupName"))
        return ActionResult({"updateIds": [u["id"] for u in reversed(_UPDATES.get(key, []))]})

    def describe_update(self: Any) -> ActionResult:
        key = (self._get_param("name"), self._get_param("nodegroupName"))
        wanted = self._get_param("updateId")
        for update in _UPDATES.get(key, []):
            if update["id"] == wanted:
                return ActionResult({"update": status(update)})
        raise ResourceNotFoundException(clusterName=key[0], nodegroupName=key[1], fargateProfileName=None,
                                        addonName=None, message=f"No update found for ID: {wanted}.")

    _patch_stockouts()
    models.EKSBackend.update_nodegroup_config = update_nodegroup_config  # type: ignore[method-assign]
    models.EKSBackend.describe_nodegroup = describe_nodegroup  # type: ignore[method-assign]
    responses.EKSResponse.list_updates = list_updates  # type: ignore[attr-defined]
    responses.EKSResponse.describe_update = describe_update  # type: ignore[attr-defined]
    urls.url_paths["{0}/clusters/(?P<name>[^/]+)/updates$"] = urls.response.dispatch
    urls.url_paths["{0}/clusters/(?P<name>[^/]+)/updates/(?P<updateId>[^/]+)$"] = urls.response.dispatch


def _patch_stockouts() -> None:
    """An Auto Scaling group tagged ``fake/capacity`` launches at most that many instances; a larger desired
    capacity stays asked for, and a Failed scaling activity names the EC2 error (DescribeScalingActivities)."""
    from moto.autoscaling import models, responses
    from moto.core.responses import ActionResult
    from moto.core.utils import utcnow

    original = models.FakeAutoScalingGroup.set_desired_capacity

    def set_desired_capacity(self: Any, new_capacity: int | None) -> None:
        tags = {t.get("Key"): t.get("Value") for t in self.tags}
        room = tags.get(CAPACITY_TAG)
        if room is None or new_capacity is None or new_capacity <= int(room):
            return original(self, new_capacity)
        original(self, max(int(room), len(self.active_instances())))
        self.desired_capacity = new_capacity
        missing = new_capacity - len(self.active_instances())
        _ACTIVITIES.setdefault(self.name, []).insert(0, {
            "ActivityId": str(uuid.uuid4()), "AutoScalingGroupName": self.name,
            "Description": "Launching a new EC2 instance.  Status Reason: " + (tags.get(ERROR_TAG) or ICE),
            "Cause": f"At {utcnow().isoformat()} an instance was started in response to a difference between desired "
                     f"and actual capacity, increasing the capacity by {missing}.",
            "StartTime": utcnow(), "EndTime": utcnow(), "StatusCode": "Failed", "Progress": 100,
            "StatusMessage": "Could not launch On-Demand Instances. " + (tags.get(ERROR_TAG) or ICE)
                             + " Launching EC2 instance failed."})
        return None

    def describe_scaling_activities(self: Any) -> ActionResult:
        name = self._get_param("AutoScalingGroupName")
        limit = self._get_int_param("MaxRecords") or 100
        return ActionResult({"Activities": _ACTIVITIES.get(name, [])[:limit]})

    models.FakeAutoScalingGroup.set_desired_capacity = set_desired_capacity  # type: ignore[method-assign]
    responses.AutoScalingResponse.describe_scaling_activities = describe_scaling_activities  # type: ignore[method-assign]


def create_node_group(endpoint: str, cluster: str, nodegroup: str, *, desired: int, min_size: int = 0,
                      max_size: int = 8, region: str = "us-east-1", status: str | None = None,
                      health_issues: bool = True) -> str:
    """An EKS cluster and node group on moto, with its Auto Scaling group and ``desired`` instances; returns the
    ASG's name. moto's node group names an ASG it never creates, so this builds it through the EC2/ASG APIs."""
    eks, ec2, autoscaling = (client(name, endpoint, region) for name in ("eks", "ec2", "autoscaling"))
    if cluster not in eks.list_clusters()["clusters"]:
        eks.create_cluster(name=cluster, roleArn="arn:aws:iam::123456789012:role/eks",
                           resourcesVpcConfig={"subnetIds": []})
    made = eks.create_nodegroup(clusterName=cluster, nodegroupName=nodegroup,
                                nodeRole="arn:aws:iam::123456789012:role/node",
                                subnets=["subnet-1"], instanceTypes=["g5.xlarge"],
                                tags={**({STATUS_TAG: status} if status else {}),
                                      **({} if health_issues else {QUIET_TAG: "1"})},
                                scalingConfig={"minSize": min_size, "maxSize": max_size, "desiredSize": desired})
    asg = made["nodegroup"]["resources"]["autoScalingGroups"][0]["name"]
    template = f"lt-{uuid.uuid4().hex[:8]}"
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2.create_launch_template(LaunchTemplateName=template,
                               LaunchTemplateData={"ImageId": image, "InstanceType": "g5.xlarge"})
    autoscaling.create_auto_scaling_group(AutoScalingGroupName=asg, MinSize=min_size, MaxSize=max_size,
                                          DesiredCapacity=desired, AvailabilityZones=[f"{region}a"],
                                          LaunchTemplate={"LaunchTemplateName": template, "Version": "$Latest"})
    return str(asg)


def stock_out(endpoint: str, asg: str, capacity: int, error: str | None = None, region: str = "us-east-1") -> None:
    """From now on the Auto Scaling group launches at most ``capacity`` instances (``error``: the EC2 error its
    failed activities name; default InsufficientInstanceCapacity)."""
    tags = [{"ResourceId": asg, "ResourceType": "auto-scaling-group", "Key": CAPACITY_TAG, "Value": str(capacity),
             "PropagateAtLaunch": False}]
    if error:
        tags.append({"ResourceId": asg, "ResourceType": "auto-scaling-group", "Key": ERROR_TAG, "Value": error,
                     "PropagateAtLaunch": False})
    client("autoscaling", endpoint, region).create_or_update_tags(Tags=tags)


def client(service: str, endpoint: str, region: str = "us-east-1") -> Any:
    """A boto3 client of moto with the fake keys (whatever the test's environment holds)."""
    import boto3

    return boto3.client(service, endpoint_url=endpoint, region_name=region,
                        aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"])


def asg_instances(endpoint: str, asg: str, region: str = "us-east-1") -> list[tuple[str, str]]:
    """(instance id, availability zone) of the ASG's instances that are not terminating."""
    answer = client("autoscaling", endpoint, region).describe_auto_scaling_groups(AutoScalingGroupNames=[asg])
    group = answer["AutoScalingGroups"][0]
    return [(i["InstanceId"], i["AvailabilityZone"]) for i in group["Instances"]
            if not i["LifecycleState"].startswith("Terminat")]


class MotoServer:
    """``python -m tests.support.fakes.moto_eks`` on a free port; a context manager. ``update_seconds``: how long each
    node group update stays InProgress."""

    def __init__(self, workdir: Path, update_seconds: float = 0.0) -> None:
        from tests.support.servers import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"moto-{self.port}.log"
        self.update_seconds = update_seconds
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> "MotoServer":
        from tests.support.servers import wait_http

        env = {**os.environ, **AWS_ENV, "MOTO_EKS_UPDATE_SECONDS": str(self.update_seconds),
               "PYTHONPATH": str(ROOT)}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.fakes.moto_eks", "-p", str(self.port)],
                                         cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        try:
            wait_http(f"{self.url}/moto-api/", 30, proc=self.proc)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
            self.proc = None


if __name__ == "__main__":
    _patch()
    from moto.server import main

    main(sys.argv[1:])
