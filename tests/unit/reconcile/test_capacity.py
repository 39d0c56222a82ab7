"""Capacity and fallback groups, wired: the settings, the routing of a group's name, the store's short mark and
the API's answers (``GET /api/v1/groups``, a pool's ``short_until`` / ``short_reason``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoscaler.config.load import ConfigError, build_settings
from autoscaler.models import Alert, AlertStatus, Notification, Signal, Source
from autoscaler.routing import Router
from autoscaler.config import RoutingConfig, RuleConfig
from autoscaler.store import PoolChange, SqlStore
from autoscaler.store.memory import MemoryStore
from tests.support import AUTH, FakeClock, config, make_app

POOLS = [{"name": "a100-spot", "provider": "simulated", "min": 0, "max": 4, "capacity": {"short_for": "5m"}},
         {"name": "a100-ondemand", "provider": "simulated", "min": 0, "max": 4}]
GROUPS = [{"name": "a100", "pools": ["a100-spot", "a100-ondemand"]}]


def cfg(**changes: Any) -> dict[str, Any]:
    """The base config with the two pools of group a100 and no rules (the base's rules name pool gpu)."""
    return config("sqlite://", **{"pools": POOLS, "groups": GROUPS, "rules": [], **changes})


def test_settings_carry_groups_and_short_for() -> None:
    settings = build_settings(cfg(), env={})
    assert settings.groups == {"a100": ("a100-spot", "a100-ondemand")}
    assert settings.pools["a100-spot"].short_for == 300.0
    assert settings.pools["a100-ondemand"].short_for == 600.0  # the default
    assert settings.pools["a100-spot"].group == "a100"


@pytest.mark.parametrize("changes, problem", [
    pytest.param({"groups": [{"name": "a100", "pools": ["a100-spot", "h100"]}]},
                 "groups[0].pools[1]: no pool named 'h100'", id="unknown-pool"),
    pytest.param({"groups": GROUPS + [{"name": "b", "pools": ["a100-ondemand"]}]},
                 "groups[1].pools[0]: pool 'a100-ondemand' is already in group 'a100' (a pool is in at most one group)",
                 id="pool-in-two-groups"),
    pytest.param({"groups": [{"name": "x", "pools": ["y"]}, {"name": "y", "pools": ["x"]}]},
                 "groups[0].pools[0]: 'y' is a group (a cycle); a group holds pools, not groups", id="cycle"),
    pytest.param({"groups": GROUPS, "rules": [{"match": {"a": "b"}, "pool": "h100", "action": "scale_out"}]},
                 "rules[0].pool: no pool named 'h100'", id="rule-naming-nothing"),
    pytest.param({"groups": GROUPS, "pools": [{**POOLS[0], "max": "x"}, POOLS[1]],
                  "rules": [{"match": {"a": "b"}, "pool": "a100", "action": "scale_out"}]},
                 "pools[0].max: Input should be a valid integer, unable to parse string as an integer",
                 id="field-error-beside-a-good-group"),
])
def test_bad_groups_are_config_errors_with_paths(changes: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_settings(cfg(**changes), env={})
    assert problem in err.value.problems
    if "rules" in changes and changes["rules"][0]["pool"] == "a100":
        assert not any("rules[0]" in p for p in err.value.problems)  # a rule may name a group


def test_group_problems_reported_beside_field_errors() -> None:
    bad = {"pools": [{**POOLS[0], "min": -1}, POOLS[1]], "groups": [{"name": "g", "pools": ["nope"]}]}
    with pytest.raises(ConfigError) as err:
        build_settings(cfg(**bad), env={})
    assert "groups[0].pools[0]: no pool named 'nope'" in err.value.problems
    assert any(p.startswith("pools[0].min") for p in err.value.problems)


def test_a_group_name_routes_like_a_pool_by_label_rule_and_query() -> None:
    settings = build_settings(cfg(), env={})
    rule = RuleConfig.model_validate({"match": {"alertname": "Hot"}, "pool": "a100", "action": "scale_out"})
    router = Router(RoutingConfig(), [rule], settings.groups)

    def routed(labels: dict[str, str], query: dict[str, str]) -> Any:
        alert = Alert("Hot" if "rule" in labels else "Other", "fp", AlertStatus.FIRING, labels, dedup_key="k")
        [item] = router.signals(Notification(Source.ALERTMANAGER, (alert,), query), settings.pools)
        return item

    by_label = routed({"autoscaler_pool": "a100", "autoscaler_action": "scale_out"}, {})
    by_rule = routed({"rule": "1", "alertname": "Hot"}, {})
    by_query = routed({}, {"pool": "a100", "action": "scale_out"})
    for item in (by_label, by_query):
        assert isinstance(item, Signal) and item.pool == "a100"
    assert isinstance(by_rule, Signal) and by_rule.pool == "a100"
    unknown = routed({}, {"pool": "h100", "action": "scale_out"})
    assert not isinstance(unknown, Signal) and unknown.decision.outcome.value == "unknown_pool"


def test_a_group_signal_is_deduplicated_by_the_group_not_the_member() -> None:
    alert = Alert("Hot", "fp", AlertStatus.FIRING, dedup_key="k")
    one = Signal(pool="a100-spot", action=None, source=Source.ALERTMANAGER, alerts=(alert,), group="a100")
    two = Signal(pool="a100-ondemand", action=None, source=Source.ALERTMANAGER, alerts=(alert,), group="a100")
    assert one.dedup_keys == two.dedup_keys == ("a100|-|k",)


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_the_short_mark_is_stored(tmp_path: Path, kind: str) -> None:
    store = SqlStore(f"sqlite:///{tmp_path}/s.db") if kind == "sqlite" else MemoryStore()
    store.ensure_pools(["gpu"])
    assert (store.pool("gpu").short_until, store.pool("gpu").short_reason) == (None, "")
    store.update_pool("gpu", None, PoolChange(short_until=1000.0, short_reason="ZonalAllocationFailed: no A100"))
    assert (store.pool("gpu").short_until, store.pool("gpu").short_reason) == (1000.0, "ZonalAllocationFailed: no A100")
    store.update_pool("gpu", None, PoolChange(failures=0))  # another change leaves the mark alone
    assert store.pool("gpu").short_until == 1000.0


def test_groups_and_pools_answer_the_short_mark(tmp_path: Path) -> None:
    clock = FakeClock(1_800_000_000.0)
    app = make_app(f"sqlite:///{tmp_path}/s.db", clock, pools=POOLS, groups=GROUPS, rules=[])
    client = app.test_client()
    pool = client.get("/api/v1/pools/a100-spot", headers=AUTH).get_json()
    assert (pool["short_until"], pool["short_reason"], pool["group"]) == (None, None, "a100")
    store = app.extensions["autoscaler"].store
    store.update_pool("a100-spot", None, PoolChange(short_until=clock() + 300, short_reason="SimulatedCapacity"))
    groups = client.get("/api/v1/groups", headers=AUTH).get_json()
    assert [g["name"] for g in groups["groups"]] == ["a100"]
    spot, ondemand = groups["groups"][0]["pools"]
    assert (spot["name"], spot["short_until"], spot["short_reason"]) == ("a100-spot", "2027-01-15T08:05:00.000Z",
                                                                         "SimulatedCapacity")
    assert (ondemand["name"], ondemand["short_until"]) == ("a100-ondemand", None)
    clock.advance(301)  # the mark ended: shown as not short
    assert client.get("/api/v1/pools/a100-spot", headers=AUTH).get_json()["short_until"] is None
    assert client.get("/api/v1/groups").status_code == 401


def test_the_simulated_cloud_delivers_at_most_its_capacity() -> None:
    from providers.base import Tracked
    from providers.simulated import SimulatedProvider, SimulatedSettings

    window = {"start": "2027-01-15T08:00:00Z", "end": "2027-01-15T11:00:00Z", "nodes": 1}
    settings = SimulatedSettings.model_validate({"initial_count": 2, "capacity": [window]})
    pool = SimulatedProvider("sim", settings)
    before, inside, after = 1_800_000_000.0 - 60, 1_800_000_000.0 + 60, 1_800_000_000.0 + 3 * 3600
    assert pool.status(Tracked(2, None), before).shortfall is None
    assert pool.scale(2, 4, inside) == 4  # accepted: any size
    short = pool.status(Tracked(4, inside), inside).shortfall
    assert short is not None and (short.asked, short.delivered, short.undelivered) == (4, 2, 2)  # the 2 it had stay
    assert pool.status(Tracked(4, inside), after).shortfall is None  # capacity returned: the asked size delivered
    assert len(pool.node_names()) == 4


@pytest.mark.parametrize("capacity, problem", [
    pytest.param(-1, "must be 0 or more", id="negative"),
    pytest.param([{"start": "2027-01-15T09:00:00Z", "end": "2027-01-15T08:00:00Z", "nodes": 1}],
                 "end must be after start", id="end-before-start"),
    pytest.param([{"start": "2027-01-15T08:00:00", "end": "2027-01-15T09:00:00Z", "nodes": 1}],
                 "timezone", id="no-zone"),
])
def test_bad_simulated_capacity_is_a_config_error(capacity: Any, problem: str) -> None:
    pools = [{**POOLS[0], "simulated": {"capacity": capacity}}, POOLS[1]]
    with pytest.raises(ConfigError) as err:
        build_settings(cfg(pools=pools), env={})
    assert any(p.startswith("pools[0].simulated.capacity") and problem in p for p in err.value.problems), \
        err.value.problems
