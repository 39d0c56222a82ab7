"""The repairs table, method by method, on SQLite, PostgreSQL and the memory store: one repair per node (a second
start, another replica's, stores nothing), state changes, and the end of a repair with its event in one step."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import pytest

from autoscaler.store import EventRecord, PoolChange, RepairAlert, RepairRecord, Store
from tests.support import pg


@pytest.fixture(params=["sqlite", "postgresql", "memory"])
def store(request: Any, tmp_path: Path) -> Iterator[Store]:
    with pg.each_store(request.param, tmp_path) as made:
        made.ensure_pools(["gpu", "other"])
        yield made


def test_one_repair_per_node_state_and_end(store: Store) -> None:
    first = RepairRecord("gpu", "node-a", 100.0, "cordoned", "alert GPUNodeUnhealthy", None, "", 100.0)
    assert store.add_repair(first) is True
    assert store.add_repair(RepairRecord("gpu", "node-a", 101.0, "cordoned", "again", None, "", 101.0)) is False
    assert store.add_repair(RepairRecord("gpu", "node-b", 99.0, "cordoned", "", None, "", 99.0)) is True
    assert store.add_repair(RepairRecord("other", "node-c", 50.0, "cordoned", "", None, "", 50.0)) is True
    assert [r.node for r in store.repairs("gpu")] == ["node-b", "node-a"]  # oldest first
    assert len(store.repairs()) == 3
    assert store.update_repair("gpu", "node-a", 110.0, state="waiting", replacement=5) is True
    assert store.update_repair("gpu", "node-a", 120.0, error="removal: busy") is True
    assert store.update_repair("gpu", "nope", 120.0, state="draining") is False
    got = next(r for r in store.repairs("gpu") if r.node == "node-a")
    assert (got.state, got.replacement, got.error, got.reason, got.updated_at) == (
        "waiting", 5, "removal: busy", "alert GPUNodeUnhealthy", 120.0)
    event = EventRecord(130.0, "gpu", "reconcile", "repair", "repaired", 5, 4, "node node-a removed",
                        details={"node": "node-a"})
    event_id = store.end_repair("gpu", "node-a", event, PoolChange(at=130.0, tracked_count=4))
    assert event_id is not None and store.pool("gpu").last_event_id == event_id
    assert store.pool("gpu").tracked_count == 4
    assert [r.node for r in store.repairs("gpu")] == ["node-b"]
    assert store.end_repair("gpu", "node-b", None) is None and store.repairs("gpu") == []
    assert [r.node for r in store.repairs()] == ["node-c"]


def test_the_firings_of_a_repair_are_remembered_cancelled_and_forgotten_when_resolved(store: Store) -> None:
    first = RepairAlert("gpu", "node-a", "fp1", "2026-11-21T10:00:00Z", 100.0)
    store.note_repair_alerts([first, RepairAlert("gpu", "node-a", "fp2", "2026-11-21T10:05:00Z", 101.0),
                              RepairAlert("gpu", "node-b", "fp3", "2026-11-21T10:00:00Z", 102.0),
                              RepairAlert("other", "node-c", "fp1", "2026-11-21T09:00:00Z", 103.0)])
    store.note_repair_alerts([replace(first, seen_at=200.0)])  # a repeat: the firing is known already
    assert [(a.node, a.fingerprint, a.seen_at) for a in store.repair_alerts("gpu")] == [
        ("node-a", "fp1", 100.0), ("node-a", "fp2", 101.0), ("node-b", "fp3", 102.0)]
    assert store.cancel_repair_alerts("gpu", "node-a", 150.0) == 2
    assert store.cancel_repair_alerts("gpu", "node-a", 160.0) == 0  # cancelled once: the first time stays
    assert {a.fingerprint: a.cancelled_at for a in store.repair_alerts("gpu")} == {"fp1": 150.0, "fp2": 150.0,
                                                                                  "fp3": None}
    store.note_repair_alerts([replace(first, seen_at=300.0)])  # a repeat after the cancel keeps it cancelled
    assert store.repair_alerts("gpu")[0].cancelled_at == 150.0
    assert store.forget_repair_alerts(["fp1", "fp1"]) == 2  # resolved: every pool's firings of that alert
    assert [a.fingerprint for a in store.repair_alerts("gpu")] == ["fp2", "fp3"] and store.repair_alerts("other") == []
    assert store.forget_repair_alerts([]) == 0
