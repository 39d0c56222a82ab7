"""GET /openapi.json: generated from the validating models, and the real answers match it."""
from __future__ import annotations

from pathlib import Path

import schemathesis

from autoscaler.answers import DecisionBody, EventList, PoolBody, PoolList, WebhookAnswer
from tests.support import AUTH, FakeClock, am_payload, make_app


def test_document_is_served_without_auth_and_loads(tmp_path: Path) -> None:
    app = make_app(f"sqlite:///{tmp_path}/s.db", FakeClock())
    resp = app.test_client().get("/openapi.json")
    assert resp.status_code == 200
    doc = resp.get_json()
    assert doc["openapi"].startswith("3.1")
    assert set(doc["components"]["securitySchemes"]) == {"bearerAuth", "basicAuth"}
    schemas = doc["components"]["schemas"]
    step = schemas["ScaleRequest"]["properties"]["step"]["anyOf"][0]
    assert (step["minimum"], step["maximum"]) == (1, 1000)  # from the pydantic Field
    assert "from" in schemas["DecisionBody"]["properties"]
    schema = schemathesis.openapi.from_dict(doc)  # raises on an invalid document
    paths = {op.ok().path for op in schema.get_all_operations()}
    assert "/api/v1/pools/{pool}/scale" in paths and "/webhook/grafana" in paths


def test_hmac_scheme_appears_when_configured(tmp_path: Path) -> None:
    auth = {"bearer_tokens": ["t"], "grafana_hmac": {"secret": "s", "header": "X-Sig"}}
    app = make_app(f"sqlite:///{tmp_path}/s.db", FakeClock(), server={"auth": auth})
    doc = app.test_client().get("/openapi.json").get_json()
    assert doc["components"]["securitySchemes"]["grafanaHmac"]["name"] == "X-Sig"
    assert "s" not in [v for v in doc["components"]["securitySchemes"]["grafanaHmac"].values()]


def test_real_answers_validate_against_the_response_models(tmp_path: Path) -> None:
    client = make_app(f"sqlite:///{tmp_path}/s.db", FakeClock()).test_client()
    hook = client.post("/webhook/alertmanager", json=am_payload(), headers=AUTH)
    WebhookAnswer.model_validate(hook.get_json())
    scaled = client.post("/api/v1/pools/spare/scale", json={"action": "scale_out"}, headers=AUTH)
    assert DecisionBody.model_validate(scaled.get_json()).outcome.value == "scaled"
    pools = PoolList.model_validate(client.get("/api/v1/pools", headers=AUTH).get_json())
    assert {p.name for p in pools.pools} == {"gpu", "spare"}
    assert PoolBody.model_validate(client.get("/api/v1/pools/gpu", headers=AUTH).get_json()).last_event is not None
    events = EventList.model_validate(client.get("/api/v1/events", headers=AUTH).get_json())
    assert len(events.events) == 2
