"""A repair acts only on pools the sender's credential may act on (issue 45, item 2). Before: a token for pools [a]
sent a repair alert naming group g = [b, a] and a node of b: the node was cordoned and b grew 3 -> 4, while the same
alert sent to b was 403; and a repair of a's node with a at max passed its replacement to g, and b grew."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from flask.testing import FlaskClient

from autoscaler.app import create_app
from tests.support import AUTH, FakeClock, am_alert, am_payload, config, events
from tests.support.fakes.kube import FakeKube
from tests.support.fakes.webhook_receiver import WebhookReceiver

TEAM_A = {"Authorization": "Bearer team-a-token-123"}  # pools: [a]
TOKENS = [AUTH["Authorization"][7:], {"token": "team-a-token-123", "name": "team-a", "pools": ["a"]}]


@pytest.fixture()
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        for pool in ("a", "b"):
            for i in range(3):
                fake.add_node(f"{pool}-{i}", {"agentpool": pool})
        yield fake


def _client(tmp_path: Path, kube: FakeKube, receiver: WebhookReceiver, a_max: int = 6) -> FlaskClient:
    pools = [{"name": name, "provider": "webhook", "min": 1, "max": a_max if name == "a" else 6,
              "node_selector": f"agentpool={name}", "webhook": {"url": f"{receiver.url}/{name}", "initial_count": 3},
              "repair": {"max_unhealthy": 2}} for name in ("a", "b")]
    cfg = config(f"sqlite:///{tmp_path}/s.db", pools=pools, groups=[{"name": "g", "pools": ["b", "a"]}], rules=[],
                 kubernetes={"host": kube.url, "token": kube.token}, server={"auth": {"bearer_tokens": TOKENS}})
    return create_app(cfg, clock=FakeClock(), startup_check=False).test_client()


def _repair(client: FlaskClient, who: dict[str, str], pool: str, node: str) -> Any:
    alert = am_alert("GPUNodeUnhealthy", fingerprint=f"fp-{node}", autoscaler_pool=pool, autoscaler_action="repair",
                     node=node)
    return client.post("/webhook/alertmanager", json=am_payload(alert), headers=who)


def _asked(receiver: WebhookReceiver) -> list[tuple[str, Any]]:
    return [(r.path.rsplit("/", 1)[-1], r.body.get("to")) for r in receiver.received]


def test_a_scoped_repair_through_the_group_of_another_pools_node_is_403(
        tmp_path: Path, kube: FakeKube, receiver: WebhookReceiver) -> None:
    client = _client(tmp_path, kube, receiver)
    resp = _repair(client, TEAM_A, "g", "b-1")
    assert resp.status_code == 403 and "node of pool 'b'" in resp.get_json()["error"], resp.get_data(as_text=True)
    assert not kube.nodes["b-1"]["spec"].get("unschedulable") and _asked(receiver) == []
    assert events(client) == []
    assert _repair(client, TEAM_A, "b", "b-1").status_code == 403  # as the same alert sent to b


def test_a_scoped_repair_through_the_group_of_its_own_node_acts_on_its_own_pool(
        tmp_path: Path, kube: FakeKube, receiver: WebhookReceiver) -> None:
    client = _client(tmp_path, kube, receiver)
    resp = _repair(client, TEAM_A, "g", "a-1")
    assert resp.status_code == 200, resp.get_data(as_text=True)
    [decision] = resp.get_json()["decisions"]
    assert (decision["pool"], decision["outcome"]) == ("a", "repair_started")
    assert kube.nodes["a-1"]["spec"].get("unschedulable") and _asked(receiver) == [("a", 4)]


def test_a_scoped_repairs_replacement_never_goes_to_another_pool_of_the_group(
        tmp_path: Path, kube: FakeKube, receiver: WebhookReceiver) -> None:
    client = _client(tmp_path, kube, receiver, a_max=3)  # a at max: its replacement is passed to the group
    resp = _repair(client, TEAM_A, "a", "a-1")
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert resp.get_json()["decisions"][0]["outcome"] == "repair_started"
    assert [p for p, _ in _asked(receiver)] == []  # b, the group's other pool, is not team-a's to grow
    assert {e["pool"] for e in events(client)} == {"a"}
