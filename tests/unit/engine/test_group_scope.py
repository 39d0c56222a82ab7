"""A group does not widen a scoped credential (issue 34, item 1): a token limited to ``pools: [a]`` that sent an alert
for group ``g = [b, a]`` (routing label, ``?pool=g`` or a rule) scaled ``b``, while the same alert naming ``b`` was
403. The scope is checked on the pool that would act: a group chooses only among the pools the credential may act
on (403 when it may act on none), also for what a refused pool passes on to the next."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from providers.aks import AksProvider
from tests.support.fakes.arm import FakeArm
from tests.support.fakes.clients import AKS_CLUSTER, RG, SUB, AllowHttp, StaticCredential
from tests.support import AUTH, FakeClock, am_alert, am_payload, events, make_app

ADMIN = AUTH
TEAM_A = {"Authorization": "Bearer team-a-token-123"}  # pools: [a]
TEAM_B = {"Authorization": "Bearer team-b-token-123"}  # pools: [b]
TEAM_C = {"Authorization": "Bearer team-c-token-123"}  # pools: [c], none of the group
TOKENS = [ADMIN["Authorization"][7:],
          {"token": "team-a-token-123", "name": "team-a", "pools": ["a"]},
          {"token": "team-b-token-123", "name": "team-b", "pools": ["b"]},
          {"token": "team-c-token-123", "name": "team-c", "pools": ["c"]}]


def _app(tmp_path: Path, rules: list[dict[str, Any]] | None = None) -> Flask:
    pools = [{"name": name, "provider": "simulated", "min": 0, "max": 4, "simulated": {"initial_count": 1}}
             for name in ("a", "b", "c")]
    return make_app(f"sqlite:///{tmp_path}/s.db", FakeClock(), pools=pools, rules=rules or [],
                    groups=[{"name": "g", "pools": ["b", "a"]}], server={"auth": {"bearer_tokens": TOKENS}})


def _counts(client: FlaskClient) -> dict[str, int]:
    return {p["name"]: p["current"] for p in client.get("/api/v1/pools", headers=ADMIN).get_json()["pools"]}


def _send(client: FlaskClient, who: dict[str, str], action: str = "scale_out", query: str = "",
          **labels: str) -> Any:
    alert = am_alert("GPUBusy" if action == "scale_out" else "GPUIdle", fingerprint=f"{action}-{sorted(labels)}",
                     **labels)
    return client.post(f"/webhook/alertmanager{query}", json=am_payload(alert), headers=who)


ROUTES = [
    pytest.param({"labels": {"autoscaler_pool": "g", "autoscaler_action": "scale_out"}}, id="routing-label"),
    pytest.param({"query": "?pool=g&action=scale_out"}, id="query"),
    pytest.param({"rules": [{"match": {"alertname": "GPUBusy"}, "pool": "g", "action": "scale_out"}]}, id="rule"),
]


@pytest.mark.parametrize("route", ROUTES)
def test_a_scoped_scale_out_through_the_group_goes_to_its_own_pool(tmp_path: Path, route: dict[str, Any]) -> None:
    client = _app(tmp_path, route.get("rules")).test_client()
    resp = _send(client, TEAM_A, query=route.get("query", ""), **route.get("labels", {}))
    assert resp.status_code == 200, resp.get_data(as_text=True)
    [decision] = resp.get_json()["decisions"]
    assert (decision["pool"], decision["outcome"]) == ("a", "scaled")
    assert _counts(client) == {"a": 2, "b": 1, "c": 1}  # b, the group's first choice, is not team-a's to scale
    assert events(client, pool="a")[0]["actor"] == "team-a"


@pytest.mark.parametrize("route", ROUTES)
def test_a_credential_with_no_pool_of_the_group_is_403(tmp_path: Path, route: dict[str, Any]) -> None:
    client = _app(tmp_path, route.get("rules")).test_client()
    resp = _send(client, TEAM_C, query=route.get("query", ""), **route.get("labels", {}))
    assert resp.status_code == 403 and "group 'g'" in resp.get_json()["error"], resp.get_data(as_text=True)
    assert _counts(client) == {"a": 1, "b": 1, "c": 1}
    assert events(client) == []


def test_an_unscoped_credential_still_gets_the_groups_first_choice(tmp_path: Path) -> None:
    client = _app(tmp_path).test_client()
    resp = _send(client, ADMIN, autoscaler_pool="g", autoscaler_action="scale_out")
    assert [d["pool"] for d in resp.get_json()["decisions"]] == ["b"]


def test_a_scoped_scale_in_takes_from_its_own_pool(tmp_path: Path) -> None:
    """Scale-in takes from the least preferred pool first (``a``); team-b may only give back ``b``."""
    client = _app(tmp_path).test_client()
    resp = _send(client, TEAM_B, "scale_in", autoscaler_pool="g", autoscaler_action="scale_in")
    assert [(d["pool"], d["outcome"]) for d in resp.get_json()["decisions"]] == [("b", "scaled")]
    assert _counts(client) == {"a": 1, "b": 0, "c": 1}


def test_when_its_own_pool_cannot_take_it_nothing_else_does(tmp_path: Path) -> None:
    client = _app(tmp_path).test_client()
    assert client.post("/api/v1/pools/a/pause", json={}, headers=ADMIN).status_code == 200
    resp = _send(client, TEAM_A, autoscaler_pool="g", autoscaler_action="scale_out")
    [decision] = resp.get_json()["decisions"]
    assert decision["outcome"] == "skipped_paused", decision
    assert "b: outside the credential's pools" in decision["reason"] and "a: paused" in decision["reason"]
    assert _counts(client) == {"a": 1, "b": 1, "c": 1}


def test_what_a_refused_pool_passes_on_stays_in_scope(tmp_path: Path) -> None:
    """``gpu`` is refused at once for a cores quota; its group would pass the nodes to ``gpu-ondemand``, which the
    credential may not scale: nothing is passed on."""
    with FakeArm(SUB, RG, AKS_CLUSTER, "eyJarm.scope.sig") as arm:
        arm.add_pool("gpunp", count=2)
        arm.fail_next(400, code="OperationNotAllowed", method="PUT",
                      message="Operation could not be completed as it results in exceeding approved "
                              "standardNCADSH100v5Family Cores quota. Current Limit: 80, Current Usage: 80.")
        section = {"subscription_id": SUB, "resource_group": RG, "cluster": AKS_CLUSTER, "arm_endpoint": arm.url,
                   "agent_pool": "gpunp"}
        pools = [{"name": "gpu", "provider": "aks", "min": 0, "max": 8, "aks": section},
                 {"name": "gpu-ondemand", "provider": "simulated", "min": 0, "max": 8}]
        tokens = [ADMIN["Authorization"][7:], {"token": "team-gpu-token-1", "name": "team-gpu", "pools": ["gpu"]}]
        settings = build_settings({"server": {"auth": {"bearer_tokens": tokens}},
                                   "store": {"url": f"sqlite:///{tmp_path}/s.db"}, "pools": pools,
                                   "groups": [{"name": "a100", "pools": ["gpu", "gpu-ondemand"]}]}, env={})
        fake = FakeClock()
        aks = AksProvider("gpu", settings.pools["gpu"].provider_settings, credential=StaticCredential(arm.token),
                          clock=fake,  per_call_policies=[AllowHttp()])
        client = create_app(settings, clock=FakeClock(), providers={"gpu": aks}, startup_check=False).test_client()
        alert = am_alert("GPUBusy", autoscaler_pool="a100", autoscaler_action="scale_out", autoscaler_step="2")
        resp = client.post("/webhook/alertmanager", json=am_payload(alert),
                           headers={"Authorization": "Bearer team-gpu-token-1"})
        assert resp.status_code == 200, resp.get_data(as_text=True)
        [decision] = resp.get_json()["decisions"]
        assert (decision["pool"], decision["outcome"]) == ("gpu", "no_capacity")
        ondemand = client.get("/api/v1/pools/gpu-ondemand", headers=ADMIN).get_json()
        assert ondemand["current"] == 0 and client.get("/api/v1/events?pool=gpu-ondemand", headers=ADMIN).get_json()[
            "events"] == []
        rest = client.get("/api/v1/events?pool=gpu", headers=ADMIN).get_json()["events"][0]
        assert rest["outcome"] == "skipped_limit" and "gpu-ondemand: outside the credential's pools" in rest["reason"]
