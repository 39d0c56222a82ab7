"""The SQLite file under foot: deleted (or its directory), or turned read-only and back, while the service runs.

Readiness and ``gpu_autoscaler_store_up`` notice, webhooks answer 503 (never 200 into an unlinked file, never a
fresh empty database), and once the file is writable again broken pooled connections are replaced.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
from flask import Flask

from autoscaler.app import create_app
from autoscaler.config.load import build_settings
from autoscaler.store import SqlStore, StoreOptions
from tests.support import AUTH, FakeClock, am_alert, am_payload, config


def _send(client: Any, fp: str) -> Any:
    return client.post("/webhook/alertmanager", json=am_payload(am_alert(fingerprint=fp)), headers=AUTH)


def _app(db: Path, clock: FakeClock, probe_interval: float | None = None) -> Flask:
    settings = build_settings(config(f"sqlite:///{db}"), env={})
    store = None
    if probe_interval is not None:
        store = SqlStore(f"sqlite:///{db}", StoreOptions(probe_interval=probe_interval))
    return create_app(settings, clock=clock, store=store, startup_check=False)


def _store_up(client: Any) -> str:
    line = [x for x in client.get("/metrics").get_data(as_text=True).splitlines()
            if x.startswith("gpu_autoscaler_store_up")]
    return line[0].split()[-1]


@pytest.fixture
def immutable() -> Iterator[Any]:
    """Make a file unwritable even for root (``chattr +i``: root ignores chmod), and undo it at the end."""
    done: list[Path] = []

    def flip(path: Path, on: bool) -> None:
        if shutil.which("chattr") is None:
            pytest.skip("needs chattr")
        result = subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True, text=True)
        if result.returncode:
            pytest.skip(f"chattr: {result.stderr.strip()}")
        if on:
            done.append(path)

    yield flip
    for path in done:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)


@pytest.mark.parametrize("remove", ["file", "directory"])
def test_a_removed_store_is_503_not_a_fresh_database(tmp_path: Path, remove: str) -> None:
    db = tmp_path / "data" / "state.db"
    clock = FakeClock()
    client = _app(db, clock).test_client()
    assert _send(client, "fp-1").get_json()["decisions"][0]["outcome"] == "scaled"
    assert client.get("/readyz").status_code == 200 and _store_up(client) == "1.0"

    if remove == "file":
        db.unlink()
    else:
        shutil.rmtree(db.parent)
    clock.advance(400)
    resp = _send(client, "fp-2")
    assert resp.status_code == 503 and resp.headers["Retry-After"], resp.get_data(as_text=True)
    assert "store unavailable" in resp.get_json()["error"]
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.get_json()["status"] == "unavailable"
    assert _store_up(client) == "0.0"
    manual = client.post("/api/v1/pools/gpu/scale", json={"action": "scale_out"}, headers=AUTH)
    assert manual.status_code == 503
    assert not db.exists()  # nothing created a fresh, empty database in its place
    assert client.get("/healthz").status_code == 200


def test_a_replaced_store_file_is_503(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    client = _app(db, FakeClock()).test_client()
    assert _send(client, "fp-1").status_code == 200
    shutil.copy(db, tmp_path / "copy.db")
    os.replace(tmp_path / "copy.db", db)  # another file now at the path (a restore, another instance's file)
    assert _send(client, "fp-2").status_code == 503
    assert client.get("/readyz").status_code == 503


def test_read_only_then_writable_again(tmp_path: Path, immutable: Any) -> None:
    db = tmp_path / "state.db"
    clock = FakeClock()
    client = _app(db, clock, probe_interval=0).test_client()
    assert _send(client, "fp-1").status_code == 200
    immutable(db, True)
    clock.advance(400)
    assert client.get("/readyz").status_code == 503 and _store_up(client) == "0.0"
    resp = _send(client, "fp-2")
    assert resp.status_code == 503 and resp.headers["Retry-After"]
    immutable(db, False)
    assert client.get("/readyz").status_code == 200 and _store_up(client) == "1.0"
    resp = _send(client, "fp-2")  # its dedup key was never written: the retry acts
    assert resp.status_code == 200 and resp.get_json()["decisions"][0]["outcome"] == "scaled"


def test_connections_opened_read_only_are_replaced(tmp_path: Path, immutable: Any) -> None:
    """The readiness probe looks at most every few seconds: a connection opened inside that gap on a read-only file
    is read-only for good, and must be dropped, not handed out again once the file is writable."""
    db = tmp_path / "state.db"
    clock = FakeClock()
    app = _app(db, clock, probe_interval=3600)  # the probe will not look again during this test
    client = app.test_client()
    assert _send(client, "fp-1").status_code == 200
    store = app.extensions["autoscaler"].store
    immutable(db, True)
    store.engine.dispose()  # after: a connection a background thread opened just before is not handed out again
    clock.advance(400)
    for fp in ("fp-2", "fp-3"):
        assert _send(client, fp).status_code == 503
    immutable(db, False)
    for fp in ("fp-2", "fp-3"):
        resp = _send(client, fp)
        assert resp.status_code == 200, resp.get_data(as_text=True)
    assert [d["outcome"] for d in [resp.get_json()["decisions"][0]]] == ["skipped_cooldown"]
