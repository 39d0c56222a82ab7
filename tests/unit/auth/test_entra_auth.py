"""Azure Monitor's secure webhook: Entra ID tokens checked against a key set served by a local HTTP server, with
keys generated here (wrong audience, expired, another key, unknown key, key rotation and its rate limit)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from flask import Flask
from pytest_httpserver import HTTPServer

from autoscaler.config.load import ConfigError, build_settings
from autoscaler.config import AZURE_ACTION_GROUPS_APP
from tests.support import AUTH, BASE_CONFIG, FakeClock

TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
AUDIENCE = "api://gpu-autoscaler"
HOOK = "/webhook/azure-monitor"
BODY = json.loads((Path(__file__).resolve().parents[3] / "tests" / "support" / "payloads" / "azure_monitor" /
                   "prometheus_fired.json").read_text())


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    public: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return {**public, "kid": kid, "use": "sig"}


class Tenant:
    """A stand-in Entra tenant: its published key set (served over HTTP) and tokens signed like its own."""

    def __init__(self, server: HTTPServer, clock: FakeClock) -> None:
        self.server, self.clock = server, clock
        self.keys = {"k1": new_key()}
        self.publish()

    def publish(self, *kids: str) -> None:
        self.server.clear()
        keys = {"keys": [jwk(self.keys[k], k) for k in (kids or self.keys)]}
        self.server.expect_request("/keys").respond_with_json(keys)

    def fetches(self) -> int:
        return sum(1 for request, _ in self.server.log if request.path == "/keys")

    def token(self, kid: str = "k1", key: rsa.RSAPrivateKey | None = None, **claims: Any) -> str:
        now = int(self.clock())
        body = {"aud": AUDIENCE, "iss": f"https://login.microsoftonline.com/{TENANT}/v2.0", "iat": now,
                "nbf": now, "exp": now + 3600, "azp": AZURE_ACTION_GROUPS_APP, "roles": ["ActionGroupsSecureWebhook"],
                "tid": TENANT, **claims}
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, key or self.keys[kid], algorithm="RS256", headers={"kid": kid})


@pytest.fixture
def tenant(httpserver: HTTPServer, clock: FakeClock) -> Tenant:
    return Tenant(httpserver, clock)


@pytest.fixture
def entra_app(make_app: Callable[..., Flask], tenant: Tenant) -> Callable[..., Flask]:
    def build(**entra: Any) -> Flask:
        cfg = {"tenant_id": TENANT, "audience": [AUDIENCE, "11111111-2222-3333-4444-555555555555"],
               "jwks_url": tenant.server.url_for("/keys"), **entra}
        return make_app(server={"auth": {"bearer_tokens": [AUTH["Authorization"].split()[1]], "entra_id": cfg}})

    return build


def send(app: Flask, token: str, body: dict[str, Any] | None = None) -> Any:
    return app.test_client().post(HOOK, json=body or BODY, headers={"Authorization": f"Bearer {token}"})


def test_a_valid_token_sends_alerts_and_names_its_actor(entra_app: Callable[..., Flask], tenant: Tenant) -> None:
    app = entra_app()
    resp = send(app, tenant.token())
    assert resp.status_code == 200 and resp.get_json()["decisions"][0]["outcome"] == "scaled"
    [event] = app.test_client().get("/api/v1/events", headers=AUTH).get_json()["events"]
    assert event["actor"] == "azure_monitor" and event["source"] == "azure_monitor"
    assert send(app, tenant.token()).status_code == 200  # the keys are cached: one fetch for both
    assert tenant.fetches() == 1


@pytest.mark.parametrize("claims, words", [
    pytest.param({"aud": "api://someone-else"}, "audience", id="wrong-audience"),
    pytest.param({"iss": f"https://sts.windows.net/{TENANT}/"}, "issuer", id="v1-issuer-when-v2-configured"),
    pytest.param({"iss": "https://login.microsoftonline.com/00000000-0000-0000-0000-000000000000/v2.0"}, "issuer",
                 id="another-tenant"),
    pytest.param({"exp": 1_800_000_000 - 61}, "expired", id="expired-beyond-leeway"),
    pytest.param({"nbf": 1_800_000_000 + 3600}, "not valid yet", id="not-before-in-the-future"),
    pytest.param({"exp": None}, "'exp'", id="no-expiry"),
    pytest.param({"azp": "99999999-0000-0000-0000-000000000000"}, "app", id="another-calling-app"),
    pytest.param({"roles": ["Reader"]}, "app role", id="without-the-role"),
])
def test_tokens_that_fail_a_check_are_401(entra_app: Callable[..., Flask], tenant: Tenant, claims: dict[str, Any],
                                          words: str) -> None:
    resp = send(entra_app(), tenant.token(**claims))
    assert resp.status_code == 401 and words in resp.get_json()["error"], resp.get_json()


def test_expired_within_the_leeway_passes(entra_app: Callable[..., Flask], tenant: Tenant) -> None:
    assert send(entra_app(), tenant.token(exp=1_800_000_000 - 30)).status_code == 200


def test_v1_tokens_when_configured(entra_app: Callable[..., Flask], tenant: Tenant) -> None:
    app = entra_app(token_version=1)
    v1 = tenant.token(iss=f"https://sts.windows.net/{TENANT}/", azp=None, appid=AZURE_ACTION_GROUPS_APP)
    assert send(app, v1).status_code == 200
    assert send(app, tenant.token()).status_code == 401  # the v2 issuer is not the one configured


def test_a_token_signed_by_another_key_under_a_known_kid(entra_app: Callable[..., Flask], tenant: Tenant) -> None:
    resp = send(entra_app(), tenant.token(key=new_key()))
    assert resp.status_code == 401 and "signature" in resp.get_json()["error"]


def test_other_algorithms_are_refused(entra_app: Callable[..., Flask], tenant: Tenant) -> None:
    public_pem = jwk(tenant.keys["k1"], "k1")["n"]  # HS256 "signed" with public material: the classic confusion
    forged = jwt.encode({"aud": AUDIENCE}, public_pem, algorithm="HS256", headers={"kid": "k1"})
    unsigned = jwt.encode({"aud": AUDIENCE}, None, algorithm="none", headers={"kid": "k1"})
    for token in (forged, unsigned):
        resp = send(entra_app(), token)
        assert resp.status_code == 401 and "RS256 only" in resp.get_json()["error"]


def test_key_rotation_refetches_once_per_minute_at_most(entra_app: Callable[..., Flask], tenant: Tenant,
                                                        clock: FakeClock) -> None:
    app = entra_app()
    assert send(app, tenant.token()).status_code == 200 and tenant.fetches() == 1
    tenant.keys["k2"] = new_key()
    tenant.publish()  # the tenant rolls a new key in
    assert send(app, tenant.token("k2")).status_code == 401  # within a minute of the last fetch: not refetched
    assert tenant.fetches() == 0  # (publish() cleared the server's log)
    clock.advance(61)
    assert send(app, tenant.token("k2")).status_code == 200 and tenant.fetches() == 1
    for i in range(5):  # made-up key IDs cannot make the service hammer the key URL
        assert send(app, tenant.token(f"bogus{i}", key=new_key())).status_code == 401
    assert tenant.fetches() == 1
    clock.advance(61)
    assert send(app, tenant.token("bogus9", key=new_key())).status_code == 401 and tenant.fetches() == 2


def test_keys_are_fetched_again_after_their_ttl_and_kept_when_the_url_fails(entra_app: Callable[..., Flask],
                                                                           tenant: Tenant, clock: FakeClock) -> None:
    app = entra_app(keys_ttl="10m")
    assert send(app, tenant.token()).status_code == 200
    tenant.server.clear()
    tenant.server.expect_request("/keys").respond_with_data("down", status=500)
    clock.advance(601)
    assert send(app, tenant.token()).status_code == 200  # the fetch failed; the keys fetched before still serve
    assert tenant.fetches() == 1


def test_no_keys_at_all_is_503_so_azure_retries(entra_app: Callable[..., Flask], tenant: Tenant) -> None:
    tenant.server.clear()
    tenant.server.expect_request("/keys").respond_with_data("<html>not json</html>", status=200)
    resp = send(entra_app(), tenant.token())
    assert resp.status_code == 503 and resp.headers["Retry-After"] == "30"
    assert "keys" in resp.get_json()["error"]


def test_an_entra_token_may_only_send_webhooks(entra_app: Callable[..., Flask], tenant: Tenant) -> None:
    app = entra_app()
    resp = app.test_client().get("/api/v1/pools", headers={"Authorization": f"Bearer {tenant.token()}"})
    assert resp.status_code == 403 and "'read'" in resp.get_json()["error"]


def test_configured_tokens_still_work_and_garbage_is_401(entra_app: Callable[..., Flask]) -> None:
    app = entra_app()
    assert app.test_client().post(HOOK, json=BODY, headers=AUTH).status_code == 200
    for garbage in ("not-a-jwt", "a.b.c", "x" * 5000):
        assert send(app, garbage).status_code == 401


def test_entra_alone_is_enough_auth_config(make_app: Callable[..., Flask], tenant: Tenant) -> None:
    app = make_app(server={"auth": {"entra_id": {"tenant_id": TENANT, "audience": AUDIENCE,
                                                 "jwks_url": tenant.server.url_for("/keys")}}})
    assert send(app, tenant.token()).status_code == 200


@pytest.mark.parametrize("auth, words", [
    pytest.param({"entra_id": {"tenant_id": "contoso", "audience": AUDIENCE}}, "server.auth.entra_id.tenant_id",
                 id="tenant-not-a-guid"),
    pytest.param({"entra_id": {"tenant_id": TENANT, "audience": []}}, "server.auth.entra_id.audience",
                 id="no-audience"),
    pytest.param({"entra_id": {"tenant_id": TENANT, "audience": AUDIENCE, "jwks_url": "file:///etc/keys"}},
                 "http(s) URL", id="keys-not-over-http"),
    pytest.param({"bearer_tokens": [{"token": "a-long-enough-token", "name": "azure_monitor"}],
                  "entra_id": {"tenant_id": TENANT, "audience": AUDIENCE}}, "duplicate credential name",
                 id="name-clash"),
])
def test_entra_config_problems_name_their_key(auth: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_settings({**BASE_CONFIG, "server": {"auth": auth}}, env={})
    assert words in str(err.value), str(err.value)


def test_a_key_set_past_the_size_bound_is_refused(entra_app: Callable[..., Flask], tenant: Tenant) -> None:
    """The fetch reads at most 1 MiB: a larger answer is no key set (503, nothing parsed), however valid its JSON."""
    padded = json.dumps({"keys": [jwk(tenant.keys["k1"], "k1")], "pad": "x" * (1 << 20)})
    tenant.server.clear()
    tenant.server.expect_request("/keys").respond_with_data(padded, content_type="application/json")
    resp = send(entra_app(), tenant.token())
    assert resp.status_code == 503 and "keys" in resp.get_json()["error"]
