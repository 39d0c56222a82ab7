"""A gang in flight when the reconciler lease moves to another replica: two apps (each with its engine and
reconciler) on one PostgreSQL and one cloud, the real kubernetes client against the fake API server. The next holder
rolls the short pool back and asks the next; the replica whose tick overran its lease records nothing over the other's
change of the pool; never both pools left grown, each end recorded once."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from autoscaler.gang.carry import carry_on
from tests.support import pg
from tests.support.fakes.kube import FakeKube
from tests.support.gang_rig import PROVISION, Rig, pools
from tests.support import events


@pytest.fixture
def database() -> Iterator[str]:
    pg.require_postgres()
    with pg.temp_database() as name:
        yield name


def test_the_next_holder_carries_the_gang_and_the_old_one_records_nothing(tmp_path: Path, database: str) -> None:
    url = pg.url_for(database)
    with FakeKube() as kube:
        quiet = pools(spot_capacity=None)  # the cloud reports no shortfall: the gang waits for its deadline
        first = Rig(tmp_path / "a", kube, store_url=url, pools=quiet)
        second = Rig(tmp_path / "b", kube, clock=first.clock, providers=first.app.extensions["autoscaler"].providers,
                     store_url=url, pools=quiet)
        second.reconciler.owner += ":replica-b"  # another process (one test process runs both)
        try:
            assert first.atomic("h100", 4).get_json()["pool"] == "spot"
            first.arrive("spot", only=2)  # 2 of 4 register
            assert first.tick() == []  # the first replica holds the reconciler lease; the gang waits
            first.reconciler.stop()  # ... and goes away: the lease moves
            assert second.tick(PROVISION) == [("spot", "rolled_back"), ("ondemand", "scaled")]
            assert first.tick() == []  # back, it does not hold the lease
            assert (first.provider("spot").asked(), first.provider("ondemand").asked()) == (0, 4)
            second.arrive("ondemand")  # every on-demand node GPU-ready

            # the second replica changes the on-demand pool (its hold) while the first one's tick, past its lease,
            # reaches the gang: the first records nothing over it
            parts_b = second.app.extensions["autoscaler_reconciler"].parts
            held = parts_b.hold.take("ondemand", parts_b.hold.owner("replica-b-change"), parts_b.hold.deadline())
            assert held is not None
            with held:
                spec = first.app.extensions["autoscaler_reconciler"].settings.pools["ondemand"]
                parts_a = first.app.extensions["autoscaler_reconciler"].parts
                assert carry_on(parts_a, spec, first.clock()) == []
            assert second.tick() == [("ondemand", "provisioned")]
            assert carry_on(parts_a, spec, first.clock()) == []  # settled once
            said = [(e["pool"], e["outcome"]) for e in reversed(events(second.client))]
            assert said == [("spot", "scaled"), ("spot", "rolled_back"), ("ondemand", "scaled"),
                            ("ondemand", "provisioned")]
            assert (first.current("spot"), first.current("ondemand")) == (0, 4)
        finally:
            for rig in (first, second):
                rig.reconciler.stop()
                rig.app.extensions["autoscaler"].store.close()
