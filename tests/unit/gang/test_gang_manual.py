"""By hand, all or nothing: ``"atomic": true`` asks every node of one pool at once, through the app, the real
kubernetes client against the fake API server and a simulated spot pool that delivers fewer nodes than asked; the
nodes that came are removed by name and the size restored at the deadline, and a group's next pool is asked."""
from __future__ import annotations

from pathlib import Path

from autoscaler.models import Action, Outcome, Signal, Source
from tests.support.fakes.kube import FakeKube
from tests.support.gang_rig import H100, PROVISION, Rig, pools
from tests.support import events


def test_a_pool_whose_cloud_reports_a_shortfall_is_rolled_back_at_once(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube)
        answer = rig.atomic("spot", 4)
        assert answer.status_code == 200
        got = answer.get_json()
        assert (got["outcome"], got["from"], got["to"]) == ("scaled", 0, 4)
        came = rig.arrive("spot")
        assert came == ["spot-node-0001", "spot-node-0002"]  # the spot cloud delivered 2 of 4
        # the cloud says it cannot deliver the rest: rolled back now, not billed until provision_time
        assert rig.tick() == [("spot", "rolled_back")]
        rolled = events(rig.client, pool="spot")[0]
        assert rolled["outcome"] == "rolled_back" and rolled["source"] == "reconcile"
        assert (rolled["from"], rolled["to"]) == (4, 0)
        assert rolled["details"]["nodes"] == came and rolled["details"]["ready"] == 2
        assert rolled["details"]["code"] == "SimulatedStockout" and "SimulatedStockout" in rolled["reason"]
        assert rig.provider("spot").node_names() == () and rig.provider("spot").asked() == 0
        assert rig.current("spot") == 0
        assert [e["outcome"] for e in events(rig.client)] == ["rolled_back", "scaled"]  # no no_capacity, no retry
        state = rig.app.extensions["autoscaler"].store.pool("spot")
        assert state.short_until is not None and "SimulatedStockout" in state.short_reason  # passed over a while
        assert rig.tick(PROVISION) == []  # settled once


def test_nodes_never_ready_are_rolled_back_by_name_at_the_deadline(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube)
        assert rig.atomic("ondemand", 3).get_json()["outcome"] == "scaled"
        came = rig.arrive("ondemand", ready=False)  # the cloud delivered all 3: no shortfall, but never Ready
        assert rig.tick() == []  # within provision_time: it waits
        assert rig.tick(PROVISION) == [("ondemand", "rolled_back")]
        rolled = events(rig.client, pool="ondemand")[0]
        assert (rolled["from"], rolled["to"], rolled["details"]["nodes"]) == (3, 0, came)
        assert "within 600s (provision_time)" in rolled["reason"]
        assert rig.provider("ondemand").node_names() == () and rig.current("ondemand") == 0


def test_all_ready_is_provisioned_and_kept(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube)
        assert rig.atomic("ondemand", 3).get_json()["outcome"] == "scaled"
        rig.arrive("ondemand", ready=False)
        assert rig.tick() == []  # registered but not Ready: not yet
        for name in rig.provider("ondemand").node_names():
            kube.nodes[name]["status"]["conditions"][0]["status"] = "True"
        assert rig.tick() == [("ondemand", "provisioned")]
        done = events(rig.client, pool="ondemand")[0]
        assert (done["from"], done["to"], done["details"]["nodes"]) == (0, 3, list(rig.provider("ondemand")
                                                                                    .node_names()))
        assert rig.tick(PROVISION) == [] and rig.current("ondemand") == 3


def test_a_group_rolls_the_spot_pool_back_before_asking_the_next(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube)
        got = rig.atomic("h100", 4).get_json()
        assert (got["pool"], got["outcome"], got["to"]) == ("spot", "scaled", 4)
        assert events(rig.client, pool="spot")[0]["details"]["group"] == "h100"
        rig.arrive("spot")
        assert rig.tick() == [("spot", "rolled_back"), ("ondemand", "scaled")]  # the cloud's shortfall: at once
        assert rig.provider("spot").asked() == 0 and rig.provider("ondemand").asked() == 4
        first, then = events(rig.client, pool="spot")[0], events(rig.client, pool="ondemand")[0]
        assert first["id"] < then["id"], "never both pools grown: the spot pool is back before on-demand is asked"
        rig.arrive("ondemand", only=3)
        assert rig.tick() == []
        rig.arrive("ondemand")
        assert rig.tick() == [("ondemand", "provisioned")]
        assert (rig.current("spot"), rig.current("ondemand")) == (0, 4)


def test_over_max_asks_nothing(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube)
        got = rig.atomic("spot", 9).get_json()
        assert (got["outcome"], got["from"], got["to"]) == ("skipped_limit", 0, 0)
        assert "past its max (8)" in got["reason"]
        group = rig.atomic("h100", 9).get_json()
        assert group["outcome"] == "skipped_limit" and "no pool of group h100" in group["reason"]
        assert rig.provider("spot").asked() == 0 and rig.provider("ondemand").asked() == 0


def test_bad_atomic_requests(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube)
        for body in ({"action": "scale_in", "step": 1, "atomic": True}, {"target": 3, "atomic": True},
                     {"action": "scale_out", "atomic": True}):
            from tests.support import post

            answer = post(rig.client, "/api/v1/pools/spot/scale", body)
            assert answer.status_code == 422, body
        assert post(rig.client, "/api/v1/pools/h100/scale", {"action": "scale_out", "step": 1}).status_code == 422
        assert post(rig.client, "/api/v1/pools/nope/scale", {"action": "scale_out", "step": 1,
                                                             "atomic": True}).status_code == 404
        assert post(rig.client, "/api/v1/pools/spot/scale", {"action": "scale_out", "step": 1,
                                                             "atomic": "yes"}).status_code == 422


def test_a_restarted_worker_rolls_back_what_another_asked(tmp_path: Path) -> None:
    with FakeKube() as kube:
        first = Rig(tmp_path, kube)
        assert first.atomic("spot", 4).get_json()["outcome"] == "scaled"
        first.arrive("spot")
        again = Rig(tmp_path, kube, clock=first.clock)  # a new process on the same store: the gang is stored
        assert again.tick(PROVISION) == [("spot", "rolled_back")]
        assert events(again.client, pool="spot")[0]["details"]["nodes"] == ["spot-node-0001", "spot-node-0002"]
        assert again.current("spot") == 0


def test_a_group_asks_only_pools_the_credential_may_act_on(tmp_path: Path) -> None:
    from tests.support import TOKEN, post

    server = {"auth": {"bearer_tokens": [TOKEN, {"token": "ondemand-only-7", "name": "ml-team",
                                                 "pools": ["ondemand"]}]}}
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, server=server)
        got = post(rig.client, "/api/v1/pools/h100/scale", {"action": "scale_out", "step": 2, "atomic": True},
                   headers={"Authorization": "Bearer ondemand-only-7"}).get_json()
        assert (got["pool"], got["outcome"]) == ("ondemand", "scaled")
        assert rig.provider("spot").asked() == 0
        refused = post(rig.client, "/api/v1/pools/spot/scale", {"action": "scale_out", "step": 2, "atomic": True},
                       headers={"Authorization": "Bearer ondemand-only-7"})
        assert refused.status_code == 403


def test_a_removal_by_name_refused_for_good_lowers_the_size_instead(tmp_path: Path) -> None:
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, pools=pools(spot_capacity=None))
        assert rig.atomic("spot", 4).get_json()["outcome"] == "scaled"
        rig.arrive("spot", only=2)
        kube.add_node("spot-stray", {"pool": "spot", **H100}, ready=True)  # in the cluster, not in the cloud's pool
        assert rig.tick(PROVISION) == [("spot", "rolled_back")]  # not retried each tick: NodeNotInPool is for good
        rolled = events(rig.client, pool="spot")[0]
        assert rolled["details"]["error"]["code"] == "NodeNotInPool"
        assert (rolled["from"], rolled["to"]) == (4, 0) and rolled["details"]["nodes"] == []
        assert "size lowered" in rolled["reason"]
        assert rig.provider("spot").node_names() == () and rig.current("spot") == 0
        assert rig.tick(PROVISION) == []


def test_a_roll_back_refused_each_tick_is_said_now_and_then_and_settled_failed(tmp_path: Path) -> None:
    busy = pools(spot_capacity=None)
    busy[0]["simulated"]["busy_seconds"] = 10 * PROVISION  # the cloud says busy at every read: every change refused
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, pools=busy)
        assert rig.atomic("h100", 4).get_json()["pool"] == "spot"
        rig.arrive("spot", only=2)
        assert rig.tick() == []
        assert rig.tick(PROVISION) == [("spot", "failed")]  # the first refusal: an event the operator sees
        said = events(rig.client, pool="spot")[0]
        assert "roll-back" in said["reason"] and said["details"]["gang"] and said["details"]["error"]
        assert rig.tick() == []  # refused again, said at most once every 5 min
        assert rig.tick(300) == [("spot", "failed")]
        # provision_time past the deadline: the gang settled failed, the group's next pool asked
        # (the 2 spot nodes that never registered are its no_capacity, not asked of the group again)
        assert rig.tick(300) == [("spot", "failed"), ("ondemand", "scaled"), ("spot", "no_capacity")]
        gave_up = events(rig.client, pool="spot")[1]
        assert "settled failed" in gave_up["reason"] and "still" in gave_up["reason"]
        assert rig.tick() == []  # settled: no more attempts
        assert [e["outcome"] for e in events(rig.client, pool="spot")] == ["no_capacity", "failed", "failed", "failed",
                                                                          "scaled"]
        assert rig.provider("ondemand").asked() == 4


def test_a_plain_scale_out_waits_while_a_gang_waits_on_its_pool(tmp_path: Path) -> None:
    from tests.support import post

    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, pools=pools(spot_capacity=None))
        assert rig.atomic("spot", 3).get_json()["outcome"] == "scaled"
        plain = post(rig.client, "/api/v1/pools/spot/scale", {"action": "scale_out", "step": 2, "force": True})
        got = plain.get_json()
        assert got["outcome"] == "skipped_busy" and "atomic scale-out" in got["reason"], got
        # nothing asked: the gang's 3 stay its own
        assert events(rig.client, pool="spot")[0]["details"]["gang"] and rig.provider("spot").asked() == 3
        # an alert routed to the group passes the pool over for the next
        alert = Signal(pool="h100", action=Action.SCALE_OUT, source=Source.ALERTMANAGER, step=2, reason="alert")
        routed = rig.app.extensions["autoscaler"].engine.handle(alert)
        assert (routed.pool, routed.outcome) == ("ondemand", Outcome.SCALED), routed
        assert "an atomic scale-out waits on it" in routed.reason
        rig.arrive("ondemand")
        came = rig.arrive("spot", only=2)
        assert rig.tick(PROVISION) == [("spot", "rolled_back")]
        assert events(rig.client, pool="spot")[0]["details"]["nodes"] == came  # only the gang's, never another's
        assert rig.provider("spot").asked() == 0
        after = post(rig.client, "/api/v1/pools/spot/scale", {"action": "scale_out", "step": 2, "force": True})
        assert after.get_json()["outcome"] == "scaled"  # settled: plain scale-outs go again


def test_a_roll_back_after_older_nodes_left_the_pool_asks_no_machine_back(tmp_path: Path) -> None:
    """A job's nodes removed by name while another gang waits on the pool: the roll-back's size goes back to what
    the pool held before less what left meanwhile, never above it (no machine asked that nobody wants)."""
    with FakeKube() as kube:
        rig = Rig(tmp_path, kube, pools=pools(spot_capacity=None))
        assert rig.atomic("spot", 2).get_json()["outcome"] == "scaled"
        older = rig.arrive("spot")
        assert rig.tick() == [("spot", "provisioned")]
        assert rig.atomic("spot", 4, force=True).get_json()["to"] == 6  # before: 2
        rig.arrive("spot", only=4)  # 2 of the 4 new ones register
        done = rig.app.extensions["autoscaler"].engine.handle(Signal(
            pool="spot", action=Action.SCALE_IN, source=Source.MANUAL, nodes=tuple(older), step=2, force=True,
            reason="the first job is done"))
        assert done.outcome is Outcome.SCALED and rig.current("spot") == 4
        for name in older:
            kube.nodes.pop(name)
        assert rig.tick(PROVISION) == [("spot", "rolled_back")]
        rolled = events(rig.client, pool="spot")[0]
        assert (rolled["from"], rolled["to"]) == (4, 0), rolled["reason"]
        assert rig.provider("spot").node_names() == () and rig.current("spot") == 0
