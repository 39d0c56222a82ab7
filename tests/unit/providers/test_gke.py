"""GKE provider: the real google-cloud-container client (REST) and google-auth's AuthorizedSession against a local
fake of the GKE and Compute APIs; its settings' check-config messages."""
from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from google.oauth2.credentials import Credentials

from autoscaler.config.load import ConfigError, build_settings
from autoscaler.models import Action, Outcome, PoolState, Signal, Source
from autoscaler.decide.policy import decide
from providers import ProviderError, RemovesNamedNodes, Tracked, factory
from providers.base import NodeRef
from providers.gke import GkeProvider, GkeSettings
from tests.support.fakes.gke_api import FakeGke
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.httpbase import Reply
from tests.support import FakeClock, BASE_CONFIG, am_alert, am_payload, make_app, post

TOKEN = "ya29.fake-gke-token-that-must-never-leak"
NOW = 1_700_000_000.0
NO_TRACK = Tracked(None, None)
OUT = Signal(pool="gpu-gke", action=Action.SCALE_OUT, source=Source.ALERTMANAGER)


@pytest.fixture
def gke() -> Iterator[FakeGke]:
    with FakeGke(TOKEN, per_zone=1) as fake:
        yield fake


def provider(fake: FakeGke, token: str = TOKEN, **changes: Any) -> GkeProvider:
    fields: dict[str, Any] = {"project": fake.project, "location": fake.location, "cluster": fake.cluster,
                              "node_pool": fake.node_pool, "api_endpoint": fake.url, "retry_budget": 1}
    settings = GkeSettings.model_validate({**fields, **changes})
    return GkeProvider("gpu-gke", settings, credentials=Credentials(token=token), clock=FakeClock())


def spec(max_size: int = 8) -> Any:
    raw = copy.deepcopy(BASE_CONFIG)
    raw["pools"] = [{"name": "gpu-gke", "provider": "gke", "min": 0, "max": max_size,
                     "gke": {"project": "p", "location": "us-central1", "cluster": "prod", "node_pool": "gpu"}}]
    raw["rules"] = []
    return build_settings(raw, {}).pools["gpu-gke"]


def test_status_sums_the_instance_groups_target_sizes(gke: FakeGke) -> None:
    gke.migs["us-central1-b"].instances.append("extra")  # zones may differ (a named removal in one of them)
    status = provider(gke).status(NO_TRACK, NOW)
    assert (status.current, status.busy) == (3, False)
    assert "per-zone targetSize=[1, 2]" in status.detail
    assert status.limits is not None and status.limits.multiple_of == 2


def test_scale_sets_the_per_zone_count_and_returns_at_once(gke: FakeGke) -> None:
    p = provider(gke)
    p.status(NO_TRACK, NOW)
    assert p.scale(2, 6, NOW) == 6
    assert [m.target_size for m in gke.migs.values()] == [3, 3]
    status = p.status(NO_TRACK, NOW)
    assert status.busy and "SET_NODE_POOL_SIZE" in status.detail and status.current == 6
    gke.settle()
    assert p.status(NO_TRACK, NOW).busy is False


def test_one_read_of_the_pool_per_decision(gke: FakeGke) -> None:
    p = provider(gke)
    p.scale(2, 4, NOW, status=p.status(NO_TRACK, NOW))
    kinds = [path.rsplit("/", 1)[-1] for _, path in gke.requests]
    # GetNodePool, 2 x instanceGroupManagers.get, ListOperations, setSize: nothing read twice
    assert kinds == ["gpu-l4", "gke-prod-gpu-l4-00000000-grp", "gke-prod-gpu-l4-00000001-grp", "operations",
                     "gpu-l4:setSize"]


def test_a_step_is_rounded_to_the_zones_or_refused(gke: FakeGke) -> None:
    status = provider(gke).status(NO_TRACK, NOW)
    plan = decide(OUT, spec(), PoolState(name="gpu-gke"), status, NOW)  # 2 + step 1 -> 4 (2 zones)
    assert (plan.outcome, plan.to) == (Outcome.SCALED, 4)
    assert "rounded from 3 to 4, a multiple of 2: GKE sets the node count per zone" in plan.reason
    plan = decide(OUT, spec(max_size=3), PoolState(name="gpu-gke"), status, NOW)  # 4 is past max, 2 is no scale-out
    assert plan.outcome is Outcome.SKIPPED_LIMIT
    assert "not a multiple of 2 (GKE sets the node count per zone and the pool spans 2 zone(s))" in plan.reason
    with pytest.raises(ProviderError) as info:
        provider(gke).scale(2, 3, NOW)
    assert info.value.code == "OutsideCloudLimits" and gke.size == 2


@pytest.mark.parametrize("target", [
    pytest.param("pool", id="upgrade-of-the-pool"),
    pytest.param("cluster", id="operation-on-the-cluster"),
])
def test_someone_elses_operation_makes_the_pool_busy(gke: FakeGke, target: str) -> None:
    link = f"https://container.googleapis.com/v1/projects/{gke.project}/locations/{gke.location}/clusters/prod"
    gke.add_operation(link + ("/nodePools/gpu-l4" if target == "pool" else ""))
    gke.add_operation(link + "/nodePools/other-pool")
    status = provider(gke).status(NO_TRACK, NOW)
    assert status.busy and "UPGRADE_NODES" in status.detail
    assert decide(OUT, spec(), PoolState(name="gpu-gke"), status, NOW).outcome is Outcome.SKIPPED_BUSY


def test_an_operation_on_another_pool_does_not_block(gke: FakeGke) -> None:
    gke.add_operation(f"https://container.googleapis.com/v1/projects/{gke.project}/locations/{gke.location}"
                      "/clusters/prod/nodePools/other-pool")
    assert provider(gke).status(NO_TRACK, NOW).busy is False


def test_pool_not_running_is_busy(gke: FakeGke) -> None:
    gke.status = "RECONCILING"
    status = provider(gke).status(NO_TRACK, NOW)
    assert status.busy and "RECONCILING" in status.detail


def test_gke_autoscaling_is_refused_at_check_and_decision(gke: FakeGke) -> None:
    gke.autoscaling = True
    for call in (lambda p: p.check(), lambda p: p.status(NO_TRACK, NOW)):
        with pytest.raises(ProviderError) as info:
            call(provider(gke))
        assert info.value.code == "ClusterAutoscalerEnabled" and not info.value.retryable
        assert "--no-enable-autoscaling" in info.value.message


def test_remove_nodes_deletes_exactly_the_named_instances(gke: FakeGke) -> None:
    p = provider(gke)
    assert isinstance(p, RemovesNamedNodes)
    victim = gke.migs["us-central1-b"].instances[0]
    kept = gke.migs["us-central1-a"].instances[0]
    assert p.remove_nodes([NodeRef(victim, gke.provider_id("us-central1-b", victim))], 2, NOW) == 1
    assert gke.migs["us-central1-b"].instances == [] and gke.migs["us-central1-a"].instances == [kept]


@pytest.mark.parametrize("provider_id", [
    pytest.param("gce://gpu-proj/us-central1-a/gke-prod-other-pool-1234", id="not-in-the-group"),
    pytest.param("gce://other-proj/us-central1-a/x", id="another-project"),
    pytest.param("gce://gpu-proj/europe-west4-a/x", id="zone-of-no-instance-group"),
    pytest.param("", id="no-provider-id"),
])
def test_remove_nodes_refuses_a_stranger_and_deletes_nothing(gke: FakeGke, provider_id: str) -> None:
    mine = gke.migs["us-central1-a"].instances[0]
    with pytest.raises(ProviderError) as info:
        provider(gke).remove_nodes([NodeRef(mine, gke.provider_id("us-central1-a", mine)),
                                    NodeRef("stranger", provider_id)], 2, NOW)
    assert info.value.code == "NodeNotInPool" and gke.size == 2
    assert not any(path.endswith("/deleteInstances") for _, path in gke.requests)


def test_errors_name_googles_status_and_message(gke: FakeGke) -> None:
    with pytest.raises(ProviderError) as info:
        provider(gke, node_pool="nope").status(NO_TRACK, NOW)
    assert info.value.cloud_code == "NOT_FOUND" and not info.value.retryable
    assert "Google answered 404 NOT_FOUND: Not found: projects/gpu-proj" in info.value.message


def test_a_refused_resize_while_busy_is_retryable(gke: FakeGke) -> None:
    p = provider(gke)
    p.scale(2, 4, NOW)
    with pytest.raises(ProviderError) as info:
        p.scale(4, 6, NOW)
    assert info.value.cloud_code == "FAILED_PRECONDITION" and info.value.retryable


def test_5xx_is_retried_and_429_is_not_hammered(gke: FakeGke) -> None:
    gke.fail_next(Reply(503, {"error": {"code": 503, "message": "backend unavailable", "status": "UNAVAILABLE"}}))
    assert provider(gke).status(NO_TRACK, NOW).current == 2  # retried once inside the budget
    gke.fail_next(Reply(429, {"error": {"code": 429, "message": "Quota exceeded for quota metric 'Read requests'",
                                        "status": "RESOURCE_EXHAUSTED"}}))
    with pytest.raises(ProviderError) as info:
        provider(gke).status(NO_TRACK, NOW)
    assert (info.value.retryable and info.value.cloud_code == "RESOURCE_EXHAUSTED"
            and "Quota exceeded" in info.value.message)


def test_a_wrong_token_is_refused_and_never_shown(gke: FakeGke) -> None:
    with pytest.raises(ProviderError) as info:
        provider(gke, token="ya29.wrong-token-secret").status(NO_TRACK, NOW)
    # the API answers 401; google-auth then tries to refresh the token, which a static token cannot
    assert info.value.cloud_code == "RefreshError" and not info.value.retryable
    assert "wrong-token-secret" not in info.value.message


def test_no_default_credentials_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    settings = GkeSettings(project="p", location="us-central1", cluster="c", node_pool="n",
                           api_endpoint="http://127.0.0.1:9")
    with pytest.raises(ProviderError) as info:
        GkeProvider("gpu-gke", settings).status(NO_TRACK, NOW)
    assert info.value.code == "NoCredentials" and not info.value.retryable


def test_registry_entry_and_node_selector() -> None:
    gke = factory("gke")
    settings = gke.settings_model.model_validate({"project": "p", "location": "us-central1-a", "cluster": "prod",
                                                  "node_pool": "gpu-l4"})
    assert gke.node_selector is not None and gke.node_selector(settings) == "cloud.google.com/gke-nodepool=gpu-l4"


@pytest.mark.parametrize("section,expected", [
    pytest.param({"location": "us-central1", "cluster": "c", "node_pool": "n"}, "pools[0].gke.project: Field required",
                 id="project-missing"),
    pytest.param({"project": "My_Project", "location": "us-central1", "cluster": "c", "node_pool": "n"},
                 "pools[0].gke.project: must be lower-case letters", id="project-bad"),
    pytest.param({"project": "p", "location": "central", "cluster": "c", "node_pool": "n"},
                 "pools[0].gke.location: String should match", id="location-bad"),
    pytest.param({"project": "p", "location": "us-central1", "node_pool": "n"}, "pools[0].gke.cluster: Field required",
                 id="cluster-missing"),
    pytest.param({"project": "p", "location": "us-central1", "cluster": "c", "node_pool": "GPU/x"},
                 "pools[0].gke.node_pool: must be lower-case letters", id="node-pool-bad"),
    pytest.param({"project": "p", "location": "us-central1", "cluster": "c", "node_pool": "n",
                  "api_endpoint": "https://x/v1?q"}, "pools[0].gke.api_endpoint: must be a host", id="endpoint-bad"),
    pytest.param({"project": "p", "location": "us-central1", "cluster": "c", "node_pool": "n", "timeout": 0},
                 "pools[0].gke.timeout:", id="timeout-zero"),
    pytest.param({"project": "p", "location": "us-central1", "cluster": "c", "node_pool": "n", "retry_budget": "x"},
                 "pools[0].gke.retry_budget:", id="budget-bad"),
    pytest.param({"project": "p", "location": "us-central1", "cluster": "c", "node_pool": "n",
                  "credentials_file": "/k.json"}, "pools[0].gke.credentials_file: Extra inputs are not permitted",
                 id="no-credentials-in-config"),
])
def test_check_config_messages(section: dict[str, Any], expected: str) -> None:
    raw = copy.deepcopy(BASE_CONFIG)
    raw["pools"] = [{"name": "gpu-gke", "provider": "gke", "min": 0, "max": 8, "gke": section}]
    raw["rules"] = []
    with pytest.raises(ConfigError) as info:
        build_settings(raw, {})
    assert any(p.startswith(expected) for p in info.value.problems), info.value.problems


def test_a_delete_whose_answer_was_lost_counts_as_done(gke: FakeGke) -> None:
    victim = gke.migs["us-central1-a"].instances[0]
    gke.lose_answer_to = "/deleteInstances"  # deleted, then the connection drops; the retry is refused (not a member)
    assert provider(gke).remove_nodes([NodeRef(victim, gke.provider_id("us-central1-a", victim))], 2, NOW) == 1
    assert gke.size == 1 and sum(path.endswith("/deleteInstances") for _, path in gke.requests) == 2


def test_node_aware_scale_in_deletes_the_idle_node_through_the_app(tmp_path: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeGke(TOKEN, per_zone=2) as gke, FakeKube() as kube:
        nodes = [(zone, name) for zone, mig in gke.migs.items() for name in mig.instances]
        for i, (zone, name) in enumerate(nodes):  # oldest .. newest
            kube.add_node(name, {"cloud.google.com/gke-nodepool": gke.node_pool}, created=f"2026-11-0{i + 1}T00:00:00Z",
                          provider_id=gke.provider_id(zone, name))
        kube.add_pod("train-7", nodes[-1][1], gpus=8)  # the newest node is busy
        monkeypatch.setattr("google.auth.default", lambda scopes=None: (Credentials(token=TOKEN), gke.project))
        pool = {"name": "gpu", "provider": "gke", "min": 0, "max": 6,  # default node_selector: the node pool label
                "gke": {"project": gke.project, "location": gke.location, "cluster": gke.cluster,
                        "node_pool": gke.node_pool, "api_endpoint": gke.url}}
        app = make_app(f"sqlite:///{tmp_path}/s.db", pools=[pool], kubernetes={"host": kube.url, "token": kube.token})
        answer = post(app.test_client(), "/webhook/alertmanager", am_payload(am_alert("GPUUtilizationLow")))
        decision = answer.get_json()["decisions"][0]
        assert (decision["outcome"], decision["from"], decision["to"]) == ("scaled", 4, 3), decision  # not rounded to 2
        left = [name for mig in gke.migs.values() for name in mig.instances]
        assert left == [n for _, n in nodes if n != nodes[2][1]]  # exactly the newest idle node went
