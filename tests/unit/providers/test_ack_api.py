"""The `ack` provider through the real Alibaba Cloud SDK, over HTTP, against a local fake of the cs OpenAPI."""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import providers
from providers.base import ProviderError, Tracked
from providers.errors import Code, PermanentError, TemporaryError
from tests.support.fakes.ack_api import FakeAckApi, Pool
from tests.support.fakes.clients import ACK_CLUSTER as CLUSTER
from tests.support.fakes.clients import AK_ID, AK_SECRET, NODEPOOL
from tests.support.fakes.clients import make_ack as make
from tests.support.fakes.misbehaving import Misbehaving
from tests.support import FakeClock

PATH = f"/clusters/{CLUSTER}/nodepools/{NODEPOOL}"
NONE = Tracked(None, None)
MiB = 1024 * 1024


@pytest.fixture
def api() -> Iterator[FakeAckApi]:
    fake = FakeAckApi(pools={(CLUSTER, NODEPOOL): Pool(desired_size=2, total_nodes=2)}).start()
    yield fake
    fake.stop()


@pytest.fixture
def sleeps() -> list[float]:
    return []


def test_status_reads_desired_size_and_state(api: FakeAckApi, sleeps: list[float]) -> None:
    status = make(api, sleeps).status(NONE, now=0.0)
    assert (status.current, status.busy) == (2, False)
    request = api.requests[0]
    assert (request.method, request.path) == ("GET", PATH)
    assert request.headers["x-acs-action"] == "DescribeClusterNodePoolDetail"
    assert request.headers["x-acs-version"] == "2015-12-15"
    assert request.headers["authorization"].startswith(f"ACS3-HMAC-SHA256 Credential={AK_ID},")


def test_scale_sets_desired_size_and_only_that(api: FakeAckApi, sleeps: list[float]) -> None:
    provider = make(api, sleeps)
    assert provider.scale(2, 5, now=0.0) == 5
    request = api.requests[-1]
    assert (request.method, request.path, request.headers["x-acs-action"]) == ("PUT", PATH, "ModifyClusterNodePool")
    assert request.body == {"scaling_group": {"desired_size": 5}}, "no empty tags/data_disks lists that would wipe"
    status = provider.status(NONE, now=1.0)
    assert (status.current, status.busy) == (5, True), "the pool reports scaling until ACK is done"
    assert "state scaling" in status.detail and "2 node(s)" in status.detail
    api.settle()
    settled = provider.status(NONE, now=2.0)
    assert (settled.current, settled.busy, "state active, 5 node(s)" in settled.detail) == (5, False, True)


def test_scale_in_uses_the_same_call(api: FakeAckApi, sleeps: list[float]) -> None:
    assert make(api, sleeps).scale(2, 1, now=0.0) == 1
    assert api.pools[(CLUSTER, NODEPOOL)].desired_size == 1


def test_pool_with_ack_auto_scaling_is_refused(api: FakeAckApi, sleeps: list[float]) -> None:
    api.pools[(CLUSTER, NODEPOOL)].auto_scaling = True
    provider = make(api, sleeps)
    with pytest.raises(ProviderError, match="auto scaling enabled") as caught:
        provider.check()
    assert caught.value.retryable is False
    with pytest.raises(ProviderError, match="auto_scaling.enable"):
        provider.status(NONE, now=0.0)


def test_server_error_is_retried_then_succeeds(api: FakeAckApi, sleeps: list[float]) -> None:
    api.fail_next(503, "ServiceUnavailable", "try later")
    assert make(api, sleeps).status(NONE, now=0.0).current == 2
    assert len(api.requests) == 2 and len(sleeps) == 1


def test_server_errors_until_the_budget_is_spent(api: FakeAckApi, sleeps: list[float]) -> None:
    for _ in range(6):
        api.fail_next(500, "InternalError", "boom")
    with pytest.raises(ProviderError) as caught:  # a budget the 4 waits (up to 0.5+1+2+4 s + jitter) fit in
        make(api, sleeps, retry_budget=30).scale(2, 3, now=0.0)
    assert caught.value.retryable is True and caught.value.cloud_code == "500"
    assert len(api.requests) == 5 and "InternalError" in caught.value.message


def test_client_error_is_not_retried(api: FakeAckApi, sleeps: list[float]) -> None:
    api.fail_next(400, "ErrorNodePoolStatusNotAllowed", "node pool is updating")
    with pytest.raises(ProviderError) as caught:
        make(api, sleeps).scale(2, 3, now=0.0)
    assert caught.value.retryable is False and caught.value.cloud_code == "ErrorNodePoolStatusNotAllowed"
    assert len(api.requests) == 1 and sleeps == []


def test_unknown_pool_is_a_clear_error(api: FakeAckApi, sleeps: list[float]) -> None:
    with pytest.raises(ProviderError, match="ErrorNodePoolNotFound"):
        make(api, sleeps, nodepool_id="np-missing").status(NONE, now=0.0)


def test_connection_refused_is_retryable(api: FakeAckApi, sleeps: list[float]) -> None:
    endpoint = api.endpoint
    api.stop()
    with pytest.raises(ProviderError) as caught:
        make(api, sleeps, endpoint=endpoint, retry_budget=1).status(NONE, now=0.0)
    assert caught.value.retryable is True and "talking to the ACK API" in caught.value.message


def test_a_trickled_answer_is_cut_at_the_attempts_timeout(api: FakeAckApi, sleeps: list[float]) -> None:
    """The node pool's answer (~360 bytes) sent a byte every 10 ms: no read waits near the SDK's 1 s read timeout,
    yet the whole answer takes ~3.6 s. One attempt ends at its 1 s timeout as a retryable CloudUnavailable; the
    connection is dropped, not left trickling; the next call reads the pool as ever."""
    provider = make(api, sleeps, timeout=1, retry_budget=0)
    assert provider.status(NONE, now=0.0).current == 2  # the SDK's client is built before the clock starts
    api.trickle_next("DescribeClusterNodePoolDetail", every=0.01)
    started = time.monotonic()
    with pytest.raises(TemporaryError) as caught:
        provider.status(NONE, now=1.0)
    took = time.monotonic() - started
    print(f"ACK trickle: gave up after {took:.2f}s: {caught.value.message}")
    assert took < 1.8, f"the 1s timeout held the call {took:.1f}s"
    assert caught.value.code == Code.UNAVAILABLE and caught.value.retryable
    assert "no complete answer within 1s" in caught.value.message and "ACK API" in caught.value.message
    assert AK_SECRET not in caught.value.message
    deadline = time.monotonic() + 2
    while not api.hung_up and time.monotonic() < deadline:
        time.sleep(0.02)
    assert api.hung_up, "the client hung up at its deadline"
    assert provider.status(NONE, now=2.0).current == 2


def test_a_session_the_sdk_made_itself_is_bounded_after_its_first_call_and_said_once(
        api: FakeAckApi, sleeps: list[float], caplog: pytest.LogCaptureFixture) -> None:
    """Should darabonba look its session up under another key than ack_send's (a changed SDK), the session it makes
    itself is bounded after the call that made it, with one warning; the next trickled answer is cut at the
    attempt's timeout. Simulated by taking the bounded session out of the SDK's cache: the SDK then makes its own,
    as it would under a key of its own."""
    from darabonba.core import DaraCore

    provider = make(api, sleeps, timeout=1, retry_budget=0)
    assert provider.status(NONE, now=0.0).current == 2
    host = api.endpoint.rstrip("/")
    mine = [key for key in DaraCore._sessions if f"://{host}:" in key]
    assert mine, "the SDK's session for the fake is in its cache"
    for key in mine:
        DaraCore._sessions.pop(key)
    caplog.set_level(logging.WARNING)
    assert provider.status(NONE, now=1.0).current == 2  # the SDK makes its own session: this call is unbounded
    assert provider.status(NONE, now=2.0).current == 2
    said = [r.getMessage() for r in caplog.records if "session of its own" in r.getMessage()]
    assert len(said) == 1 and host in said[0] and AK_SECRET not in said[0]
    api.trickle_next("DescribeClusterNodePoolDetail", every=0.01)
    started = time.monotonic()
    with pytest.raises(TemporaryError):
        provider.status(NONE, now=3.0)
    assert time.monotonic() - started < 1.8


def test_a_huge_answer_is_refused_not_retried(api: FakeAckApi, sleeps: list[float]) -> None:
    with Misbehaving("large", size=24 * MiB) as huge:
        provider = make(api, sleeps, endpoint=huge.url.removeprefix("http://"), retry_budget=30)
        with pytest.raises(PermanentError) as caught:
            provider.scale(2, 3, now=0.0)
    assert len(huge.served) == 1 and huge.served[0].sent < 24 * MiB, "an answer that may have acted: not again"
    assert caught.value.code == Code.BAD_ANSWER and caught.value.cloud_code == "200"
    assert "more than 16 MiB" in caught.value.message and sleeps == []


def test_no_secret_in_errors_or_logs(api: FakeAckApi, sleeps: list[float], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    provider = make(api, sleeps)
    api.fail_next(503, "ServiceUnavailable", "x")
    api.fail_next(403, "Forbidden.RAM", "not authorized")
    with pytest.raises(ProviderError) as caught:
        provider.scale(2, 3, now=0.0)
    assert "Forbidden.RAM" in str(caught.value) and caplog.text
    assert AK_SECRET not in str(caught.value) and AK_SECRET not in caplog.text
    assert AK_SECRET not in repr(provider.settings)


CHAIN_SCRIPT = """
import sys
from autoscaler.clock import SYSTEM
from providers.ack import FACTORY as f
from providers.base import ProviderError, Tracked
from providers.errors import Code, PermanentError, TemporaryError
s = f.settings_model.model_validate({"cluster_id": sys.argv[1], "nodepool_id": sys.argv[2],
    "region_id": "cn-hangzhou", "endpoint": sys.argv[3], "protocol": "http", "retry_budget": 0})
try:
    print("current", f.build("p", s, SYSTEM).status(Tracked(None, None), 0.0).current)
except ProviderError as e:
    print("error", e.retryable, e.message)
"""


def _run_chain(api: FakeAckApi, env: dict[str, str], tmp_path: Any) -> str:
    """Run the provider in a fresh interpreter: the credentials chain reads its environment at import."""
    import os
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if not k.startswith("ALIBABA_CLOUD_") and "proxy" not in k.lower()}
    root = str(Path(__file__).resolve().parents[3])
    clean.update(HOME=str(tmp_path), ALIBABA_CLOUD_ECS_METADATA_DISABLED="true", PYTHONPATH=root, **env)
    done = subprocess.run([sys.executable, "-c", CHAIN_SCRIPT, CLUSTER, NODEPOOL, api.endpoint], env=clean,
                          cwd=root, capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


def test_default_chain_takes_the_access_key_from_the_environment(api: FakeAckApi, tmp_path: Any) -> None:
    out = _run_chain(api, {"ALIBABA_CLOUD_ACCESS_KEY_ID": AK_ID, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": AK_SECRET},
                     tmp_path)
    assert out == "current 2"
    assert f"Credential={AK_ID}," in api.requests[0].headers["authorization"]


def test_missing_credentials_say_what_to_set(api: FakeAckApi, tmp_path: Any) -> None:
    out = _run_chain(api, {}, tmp_path)
    assert out.startswith("error False") and "ALIBABA_CLOUD_ACCESS_KEY_ID" in out
    assert api.requests == []


def test_settings_and_registry() -> None:
    factory = providers.factory("ack")
    settings = factory.settings_model.model_validate(
        {"cluster_id": CLUSTER, "nodepool_id": NODEPOOL, "region_id": "cn-hangzhou"})
    provider = factory.build("p", settings, FakeClock())
    assert provider.capabilities.reports_count is True
    with pytest.raises(ValueError, match="access_key"):
        factory.settings_model.model_validate({"cluster_id": "c", "nodepool_id": "n", "region_id": "r",
                                               "access_key": "x"})
