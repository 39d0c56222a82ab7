"""Leases and dedup claims on one clock: PostgreSQL's for every replica, whatever each replica's own clock says; and
a clock stepped back (NTP) never stretches a lease or a dedup window past its configured length."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from autoscaler.store import DedupConfirm, PoolChange, Store
from autoscaler.store.base import EventRecord
from tests.support import pg
from tests.support import record_settled

T = 1_800_000_000.0
TTL = 30.0
WINDOW = 600.0
SKEW = 60.0  # the slow replica's clock is this far behind
STEP = 600.0  # how far the clock steps back


def _event(t: float) -> EventRecord:
    return EventRecord(time=t, pool="gpu", source="manual", action="scale_out", outcome="scaled", from_=1, to=2,
                       reason="test")


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def clocked(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Callable[[float], None]]]:
    """A store and what sets its clock: PostgreSQL's own; elsewhere the caller's ``now`` is the clock."""
    with pg.each_clocked_store(request.param, tmp_path) as (made, at):
        made.ensure_pools(["gpu"])
        yield made, at


@pytest.fixture
def pg_store(tmp_path: Path) -> Iterator[Store]:
    with pg.each_store("postgresql", tmp_path) as made:
        made.ensure_pools(["gpu"])
        yield made


# -- one clock for every replica (PostgreSQL's) -------------------------------------------------------------------
def test_a_lease_the_slow_replica_holds_is_not_expired_for_the_other(pg_store: Store) -> None:
    assert pg_store.acquire("gpu", "slow", T - SKEW, TTL) is not None  # until T - 30 by the slow replica's clock
    assert pg_store.acquire("gpu", "fast", T, TTL) is None
    assert pg_store.hold_lease("reconciler", "slow", T - SKEW, TTL)
    assert not pg_store.hold_lease("reconciler", "fast", T, TTL)


def test_a_lease_the_fast_replica_holds_does_not_outlive_its_ttl_for_the_slow_one(pg_store: Store) -> None:
    # Renewed "in the future" by a clock 60 s ahead: on the database's clock it still lapses after its TTL.
    assert pg_store.acquire("gpu", "fast", T + SKEW, 0.0) is not None
    assert pg_store.acquire("gpu", "slow", T, TTL) is not None


def test_a_dedup_claim_of_the_slow_replica_is_not_expired_for_the_other(pg_store: Store) -> None:
    assert pg_store.claim_dedup("gpu", ("k1",), T - SKEW, 40.0, "slow")  # until T - 20 by its clock
    assert not pg_store.claim_dedup("gpu", ("k1",), T, 40.0, "fast")
    _, duplicate = record_settled(pg_store, "gpu", ("k1",), "fast", T, T + WINDOW, _event(T), _event(T))
    assert duplicate
    assert pg_store.prune(None, T + 10 * WINDOW) == 0  # a replica's clock far ahead prunes no live claim
    assert not pg_store.claim_dedup("gpu", ("k1",), T, 40.0, "fast")


def test_a_confirmed_window_runs_on_the_database_clock(pg_store: Store) -> None:
    assert pg_store.claim_dedup("gpu", ("k1",), T - SKEW, 1.0, "slow")
    assert pg_store.acquire("gpu", "slow", T - SKEW, TTL) is not None
    pg_store.finish("gpu", "slow", _event(T - SKEW), PoolChange(), DedupConfirm(("k1",), "slow", T - SKEW + WINDOW,
                                                                                 T - SKEW))
    assert not pg_store.claim_dedup("gpu", ("k1",), T + WINDOW - 1, 40.0, "fast")


# -- the store's clock stepped back (PostgreSQL's; the caller's on SQLite, one host, and in memory) ------------
def test_a_dead_lease_lapses_within_its_ttl_after_the_clock_steps_back(
        clocked: tuple[Store, Callable[[float], None]]) -> None:
    store, at = clocked
    at(T)
    assert store.acquire("gpu", "dead", T, TTL) is not None
    assert store.hold_lease("reconciler", "dead", T, TTL)
    back = T - STEP
    at(back)
    assert store.acquire("gpu", "next", back, TTL) is None  # within the TTL: its holder may be alive
    assert not store.hold_lease("reconciler", "next", back, TTL)
    at(back + TTL + 1)
    assert store.acquire("gpu", "next", back + TTL + 1, TTL) is not None
    assert store.hold_lease("reconciler", "next", back + TTL + 1, TTL)


def test_a_dedup_window_lasts_at_most_its_length_after_the_clock_steps_back(
        clocked: tuple[Store, Callable[[float], None]]) -> None:
    store, at = clocked
    at(T)
    assert store.claim_dedup("gpu", ("k1",), T, WINDOW, "first", WINDOW)  # ``longest``: as the engine claims
    back = T - STEP
    at(back)
    assert not store.claim_dedup("gpu", ("k1",), back, WINDOW, "again", WINDOW)  # a duplicate within the window
    _, duplicate = record_settled(store, "gpu", ("k1",), "again", back, back + WINDOW, _event(back), _event(back))
    assert duplicate
    at(back + WINDOW + 1)
    assert store.claim_dedup("gpu", ("k1",), back + WINDOW + 1, WINDOW, "later", WINDOW)


def test_a_second_delivery_never_cuts_a_confirmed_window_short(
        clocked: tuple[Store, Callable[[float], None]]) -> None:
    """A recorded decision holds its keys for the pool's whole window (600 s); a resend claims with the short pending
    window (40 s) first. Before: the step-back bound used the resend's own window, cut the key to 40 s, and a third
    delivery 100 s later acted again (a second scale-out for one alert)."""
    store, at = clocked
    at(T)
    assert store.claim_dedup("gpu", ("k1",), T, WINDOW, "first", WINDOW)  # as confirmed with the decision's record
    at(T + 10)
    assert not store.claim_dedup("gpu", ("k1",), T + 10, 40.0, "resend", WINDOW)
    at(T + 100)
    assert not store.claim_dedup("gpu", ("k1",), T + 100, 40.0, "third", WINDOW)
    at(T + WINDOW + 1)
    assert store.claim_dedup("gpu", ("k1",), T + WINDOW + 1, 40.0, "later", WINDOW)  # the window is over
