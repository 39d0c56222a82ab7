"""EKS provider: the real boto3 against moto's server (a process), with its settings' check-config messages."""
from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from autoscaler.config.load import ConfigError, build_settings
from autoscaler.models import Action, Outcome, PoolState, Signal, Source
from autoscaler.decide.policy import decide
from providers import ProviderError, RemovesNamedNodes, Tracked, factory
from providers.base import NodeRef
from providers.eks import EksProvider, EksSettings
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.lossy_forwarder import LossyForwarder
from tests.support.fakes.moto_eks import AWS_ENV, MotoServer, asg_instances, create_node_group
from tests.support import FakeClock, BASE_CONFIG, am_alert, am_payload, make_app, post

NOW = 1_700_000_000.0
NO_TRACK = Tracked(None, None)


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in AWS_ENV.items():
        monkeypatch.setenv(key, value)


def node_group(moto: MotoServer, *, desired: int = 2, min_size: int = 0, max_size: int = 8,
               status: str | None = None) -> tuple[EksProvider, str]:
    """A fresh cluster + node group (+ ASG with ``desired`` instances) on the shared moto, and its provider."""
    name = f"ng-{uuid.uuid4().hex[:8]}"
    asg = create_node_group(moto.url, "prod", name, desired=desired, min_size=min_size, max_size=max_size,
                            status=status)
    settings = EksSettings(region="us-east-1", cluster="prod", nodegroup=name, endpoint_url=moto.url, retry_budget=1)
    return EksProvider("gpu-eks", settings, clock=FakeClock()), asg


def desired_size(moto: MotoServer, nodegroup: str) -> int:
    eks = boto3.client("eks", endpoint_url=moto.url, region_name="us-east-1")
    return int(eks.describe_nodegroup(clusterName="prod", nodegroupName=nodegroup)["nodegroup"]["scalingConfig"]
               ["desiredSize"])


def test_status_reads_desired_size_and_limits(moto: MotoServer) -> None:
    provider, _ = node_group(moto, desired=3, min_size=1, max_size=5)
    status = provider.status(NO_TRACK, NOW)
    assert (status.current, status.busy) == (3, False)
    assert status.limits is not None and (status.limits.low, status.limits.high) == (1, 5)
    assert "minSize=1 maxSize=5" in status.detail


def test_scale_sets_desired_size_and_the_asg_follows(moto: MotoServer) -> None:
    provider, asg = node_group(moto, desired=2)
    provider.status(NO_TRACK, NOW)
    assert provider.scale(2, 4, NOW) == 4
    assert desired_size(moto, provider.settings.nodegroup) == 4
    assert len(asg_instances(moto.url, asg)) == 4


def test_an_update_in_progress_makes_the_group_busy(tmp_path: Path) -> None:
    with MotoServer(tmp_path, update_seconds=300) as slow:
        provider, _ = node_group(slow, desired=1)
        assert provider.status(NO_TRACK, NOW).busy is False
        provider.scale(1, 2, NOW)
        status = provider.status(NO_TRACK, NOW)
        assert status.busy and "InProgress" in status.detail and status.current == 2
        plan = decide(Signal(pool="gpu-eks", action=Action.SCALE_OUT, source=Source.ALERTMANAGER),
                      _spec(), PoolState(name="gpu-eks"), status, NOW)
        assert plan.outcome is Outcome.SKIPPED_BUSY


def test_settled_updates_are_described_once(moto: MotoServer) -> None:
    provider, _ = node_group(moto, desired=1)
    provider.scale(1, 2, NOW)
    provider.scale(2, 3, NOW)
    seen: list[str] = []
    eks = provider._client("eks")
    eks.meta.events.register("before-call.eks.DescribeUpdate", lambda **kw: seen.append("describe"))
    provider.status(NO_TRACK, NOW)
    provider.status(NO_TRACK, NOW)
    assert seen == ["describe", "describe"]  # two updates, each described once, not again on the next decision


def test_target_outside_node_group_limits_is_refused_never_widened(moto: MotoServer) -> None:
    provider, _ = node_group(moto, desired=4, min_size=1, max_size=4)
    status = provider.status(NO_TRACK, NOW)
    plan = decide(Signal(pool="gpu-eks", action=Action.SCALE_OUT, source=Source.ALERTMANAGER), _spec(),
                  PoolState(name="gpu-eks"), status, NOW)
    assert plan.outcome is Outcome.SKIPPED_LIMIT
    assert f"EKS node group {provider.settings.nodegroup}'s maxSize (4)" in plan.reason
    with pytest.raises(ProviderError) as info:
        provider.scale(4, 5, NOW)
    assert info.value.code == "OutsideCloudLimits" and not info.value.retryable
    assert desired_size(moto, provider.settings.nodegroup) == 4


def test_remove_nodes_terminates_exactly_the_named_instances(moto: MotoServer) -> None:
    provider, asg = node_group(moto, desired=3)
    assert isinstance(provider, RemovesNamedNodes)
    before = asg_instances(moto.url, asg)
    (victim, zone), kept = before[1], {i for i, _ in before} - {before[1][0]}
    provider.status(NO_TRACK, NOW)
    assert provider.remove_nodes([NodeRef("ip-10-0-1-7.ec2.internal", f"aws:///{zone}/{victim}")], 3, NOW) == 2
    assert {i for i, _ in asg_instances(moto.url, asg)} == kept
    assert desired_size(moto, provider.settings.nodegroup) == 2


@pytest.mark.parametrize("provider_id", [
    pytest.param("aws:///us-east-1a/i-0123456789abcdef0", id="instance-of-another-group"),
    pytest.param("", id="no-provider-id"),
    pytest.param("gce://p/us-central1-a/vm-1", id="not-an-aws-id"),
])
def test_remove_nodes_refuses_a_node_not_in_the_group(moto: MotoServer, provider_id: str) -> None:
    provider, asg = node_group(moto, desired=2)
    (mine, zone) = asg_instances(moto.url, asg)[0]
    with pytest.raises(ProviderError) as info:
        provider.remove_nodes([NodeRef("ok", f"aws:///{zone}/{mine}"), NodeRef("stranger", provider_id)], 2, NOW)
    assert info.value.code == "NodeNotInPool" and "stranger" in info.value.message
    assert len(asg_instances(moto.url, asg)) == 2  # nothing terminated, not even the node of the group


def test_remove_nodes_below_min_size_is_refused(moto: MotoServer) -> None:
    provider, asg = node_group(moto, desired=1, min_size=1)
    instance, zone = asg_instances(moto.url, asg)[0]
    with pytest.raises(ProviderError) as info:
        provider.remove_nodes([NodeRef("n", f"aws:///{zone}/{instance}")], 1, NOW)
    assert info.value.code == "OutsideCloudLimits" and "minSize (1)" in info.value.message


def test_unknown_node_group_names_aws_code_and_message(moto: MotoServer) -> None:
    settings = EksSettings(region="us-east-1", cluster="prod", nodegroup="nope", endpoint_url=moto.url)
    with pytest.raises(ProviderError) as info:
        EksProvider("gpu-eks", settings).status(NO_TRACK, NOW)
    assert info.value.cloud_code == "ResourceNotFoundException" and not info.value.retryable
    assert "AWS answered 404 ResourceNotFoundException" in info.value.message and "nope" in info.value.message


def test_no_credentials_is_a_clear_error(moto: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    settings = EksSettings(region="us-east-1", cluster="prod", nodegroup="x", endpoint_url=moto.url)
    with pytest.raises(ProviderError) as info:
        EksProvider("gpu-eks", settings).status(NO_TRACK, NOW)
    assert info.value.code == "NoCredentials" and not info.value.retryable


def test_unreachable_endpoint_is_retried_inside_the_budget_then_retryable() -> None:
    naps: list[float] = []
    settings = EksSettings(region="us-east-1", cluster="prod", nodegroup="x", endpoint_url="http://127.0.0.1:9",
                           timeout=1, retry_budget=5)
    with pytest.raises(ProviderError) as info:
        EksProvider("gpu-eks", settings, clock=FakeClock(sleeps=naps)).status(NO_TRACK, NOW)
    assert info.value.retryable and "attempt(s)" in info.value.message
    assert naps, "a dropped connection is retried"
    assert AWS_ENV["AWS_SECRET_ACCESS_KEY"] not in info.value.message


def test_registry_entry_and_node_selector() -> None:
    eks = factory("eks")
    settings = eks.settings_model.model_validate({"region": "us-east-1", "cluster": "prod", "nodegroup": "gpu-a10"})
    assert eks.node_selector is not None and eks.node_selector(settings) == "eks.amazonaws.com/nodegroup=gpu-a10"


def _spec() -> Any:
    raw = copy.deepcopy(BASE_CONFIG)
    raw["pools"] = [{"name": "gpu-eks", "provider": "eks", "min": 0, "max": 8,
                     "eks": {"region": "us-east-1", "cluster": "prod", "nodegroup": "gpu"}}]
    raw["rules"] = []
    return build_settings(raw, {}).pools["gpu-eks"]


@pytest.mark.parametrize("section,expected", [
    pytest.param({"cluster": "prod", "nodegroup": "g"}, "pools[0].eks.region: Field required", id="region-missing"),
    pytest.param({"region": "mars", "cluster": "prod", "nodegroup": "g"}, "pools[0].eks.region: String should match",
                 id="region-malformed"),
    pytest.param({"region": "us-east-1", "nodegroup": "g"}, "pools[0].eks.cluster: Field required",
                 id="cluster-missing"),
    pytest.param({"region": "us-east-1", "cluster": "prod", "nodegroup": "gpu/../x"},
                 "pools[0].eks.nodegroup: must be an EKS name", id="nodegroup-bad-name"),
    pytest.param({"region": "us-east-1", "cluster": "prod", "nodegroup": "g", "endpoint_url": "ftp://x"},
                 "pools[0].eks.endpoint_url: must be an http(s) URL", id="endpoint-not-http"),
    pytest.param({"region": "us-east-1", "cluster": "prod", "nodegroup": "g", "timeout": "soon"},
                 "pools[0].eks.timeout:", id="timeout-not-a-duration"),
    pytest.param({"region": "us-east-1", "cluster": "prod", "nodegroup": "g", "retry_budget": -1},
                 "pools[0].eks.retry_budget:", id="budget-negative"),
    pytest.param({"region": "us-east-1", "cluster": "prod", "nodegroup": "g", "access_key": "AKIA"},
                 "pools[0].eks.access_key: Extra inputs are not permitted", id="no-credentials-in-config"),
])
def test_check_config_messages(section: dict[str, Any], expected: str) -> None:
    raw = copy.deepcopy(BASE_CONFIG)
    raw["pools"] = [{"name": "gpu-eks", "provider": "eks", "min": 0, "max": 8, "eks": section}]
    raw["rules"] = []
    with pytest.raises(ConfigError) as info:
        build_settings(raw, {})
    assert any(p.startswith(expected) for p in info.value.problems), info.value.problems


def test_a_terminate_whose_answer_was_lost_counts_as_done(moto: MotoServer) -> None:
    provider, asg = node_group(moto, desired=2)
    (victim, zone), (kept, _) = asg_instances(moto.url, asg)
    with LossyForwarder(moto.url) as lossy:
        lossy.lose_next("Action=TerminateInstanceInAutoScalingGroup")
        settings = provider.settings.model_copy(update={"endpoint_url": lossy.url})
        flaky = EksProvider("gpu-eks", settings, clock=FakeClock())
        assert flaky.remove_nodes([NodeRef("n", f"aws:///{zone}/{victim}")], 2, NOW) == 1
        assert lossy.lost  # the answer was lost, the retry refused (already terminating), the removal stands
    assert [i for i, _ in asg_instances(moto.url, asg)] == [kept]


def test_a_fresh_process_works_through_a_long_update_history_in_bounded_steps(moto: MotoServer) -> None:
    first, _ = node_group(moto, desired=1, max_size=20)
    for size in range(2, 14):  # 12 updates in the node group's history
        first.scale(size - 1, size, NOW)
    fresh = EksProvider("gpu-eks", first.settings, clock=FakeClock())  # a restarted worker knows none of them
    described: list[str] = []
    fresh._client("eks").meta.events.register("before-call.eks.DescribeUpdate", lambda **kw: described.append("d"))
    details = []
    for _ in range(3):
        described.clear()
        detail = fresh.status(NO_TRACK, NOW).detail
        details.append((len(described), detail))
    assert [n for n, _ in details] == [10, 2, 0]
    assert "2 older update(s) not checked yet (10 per decision)" in details[0][1]
    assert "not checked" not in details[1][1]


def test_node_aware_scale_in_terminates_the_idle_node_through_the_app(moto: MotoServer, tmp_path: Path) -> None:
    provider, asg = node_group(moto, desired=3)
    group = provider.settings.nodegroup
    instances = asg_instances(moto.url, asg)
    with FakeKube() as kube:
        for i, (instance, zone) in enumerate(instances):  # oldest .. newest
            kube.add_node(f"ip-10-0-0-{i}.ec2.internal", {"eks.amazonaws.com/nodegroup": group},
                          created=f"2026-11-0{i + 1}T00:00:00Z", provider_id=f"aws:///{zone}/{instance}")
        kube.add_node("ip-10-9-9-9.ec2.internal", {"eks.amazonaws.com/nodegroup": "cpu"})
        kube.add_pod("train-7", "ip-10-0-0-2.ec2.internal", gpus=8)  # the newest node is busy
        pool = {"name": "gpu", "provider": "eks", "min": 0, "max": 6,  # default node_selector: the nodegroup label
                "eks": {"region": "us-east-1", "cluster": "prod", "nodegroup": group, "endpoint_url": moto.url}}
        app = make_app(f"sqlite:///{tmp_path}/s.db", pools=[pool], kubernetes={"host": kube.url, "token": kube.token})
        answer = post(app.test_client(), "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationLow")))
    decision = answer.get_json()["decisions"][0]
    assert (decision["outcome"], decision["from"], decision["to"]) == ("scaled", 3, 2), decision
    assert {i for i, _ in asg_instances(moto.url, asg)} == {instances[0][0], instances[2][0]}  # exactly the idle one
    assert desired_size(moto, group) == 2


@pytest.mark.parametrize("state,busy,code", [
    pytest.param("UPDATING", True, None, id="updating-is-busy"),
    pytest.param("CREATING", True, None, id="creating-is-busy"),
    pytest.param("DEGRADED", False, None, id="degraded-may-be-resized"),
    pytest.param("DELETING", None, "PoolUnusable", id="deleting-is-refused"),
    pytest.param("CREATE_FAILED", None, "PoolUnusable", id="create-failed-is-refused"),
])
def test_node_group_states(moto: MotoServer, state: str, busy: bool | None, code: str | None) -> None:
    provider, _ = node_group(moto, desired=2, status=state)
    if code is not None:
        with pytest.raises(ProviderError) as info:
            provider.status(NO_TRACK, NOW)
        assert info.value.code == code and info.value.cloud_code == state and not info.value.retryable
        assert state in info.value.message
        return
    status = provider.status(NO_TRACK, NOW)
    assert status.busy is busy and status.current == 2
    if not busy:
        assert provider.scale(2, 3, NOW) == 3 and desired_size(moto, provider.settings.nodegroup) == 3
