"""What the status page says is true and readable: a short pool with no group is short, not "passed over"; times
relative with the time on hover; repairs, GPUs, DRA and the version on the page (HTML parsed, in process over the
fake Kubernetes API); the chart's ticks, range, repair marks and labels computed; ``--version``."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from autoscaler import __version__
from autoscaler.api.chart import chart
from autoscaler.api.chart_axes import count_ticks
from autoscaler.models import Action, Decision, Outcome
from autoscaler.pool.door import refused_for_capacity
from providers import NoCapacityError
from tests.support.fakes.kube import FakeKube
from tests.support.servers import ROOT
from tests.support.status_scenario import seed_cluster, write_cluster_night
from tests.support import AUTH, FakeClock, am_alert, am_payload, events, make_app, post

NOW = 1_800_000_000.0


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def _section(html: str, pool: str) -> str:
    found = re.search(rf'<section class="pool" data-pool="{pool}">.*?</section>', html, re.S)
    assert found is not None, pool
    return found.group(0)


def _short_app(tmp_path: Path, clock: FakeClock, group: bool) -> Any:
    pools = [{"name": "l4", "provider": "simulated", "min": 0, "max": 6, "capacity": {"short_for": "30m"},
              "simulated": {"initial_count": 0, "capacity": 1}},
             {"name": "l4-b", "provider": "simulated", "min": 0, "max": 6, "simulated": {"initial_count": 0}}]
    groups = [{"name": "l4s", "pools": ["l4", "l4-b"]}] if group else []
    return make_app(f"sqlite:///{tmp_path}/s.db", clock, pools=pools, groups=groups, rules=[])


def _stockout(tmp_path: Path, group: bool) -> tuple[dict[str, Any], str]:
    """l4 asked for 3, delivered 1: its no_capacity event and the page 10 minutes later."""
    clock = FakeClock(NOW)
    app = _short_app(tmp_path, clock, group)
    client = app.test_client()
    alert = am_alert("GPUBusy", fingerprint="s", autoscaler_pool="l4", autoscaler_action="scale_out",
                     autoscaler_step="3")
    post(client, "/webhook/alertmanager", am_payload(alert))
    clock.advance(30)
    app.extensions["autoscaler_reconciler"].tick(clock())
    clock.advance(600)
    short = next(e for e in events(client, pool="l4") if e["outcome"] == "no_capacity")
    return short, client.get("/", headers=AUTH).get_data(as_text=True)


def test_a_pool_with_no_group_is_short_of_capacity_not_passed_over(tmp_path: Path) -> None:
    short, html = _stockout(tmp_path, group=False)
    assert short["reason"].endswith("asked size given back: 3 -> 1; short of capacity for 30 min"), short["reason"]
    assert "passed over" not in short["reason"]
    section = _text(_section(html, "l4"))
    assert "short of capacity for another 20 min : SimulatedStockout" in section and "passed over" not in section
    assert '<span title="2027-01-15T08:30:30.000Z">20 min</span>' in html  # relative; the time on hover
    assert "2027-01-15T08:30:30.000Z:" not in html  # never the raw timestamp as the text


def test_a_pool_in_a_group_is_passed_over_by_that_group(tmp_path: Path) -> None:
    short, html = _stockout(tmp_path, group=True)
    assert short["reason"].endswith("passed over by its group l4s for 30 min"), short["reason"]
    assert "passed over by group l4s until then" in _text(_section(html, "l4"))


def test_a_refusal_for_capacity_says_short_or_passed_over_by_the_pools_group(tmp_path: Path) -> None:
    app = _short_app(tmp_path, FakeClock(NOW), group=False)
    spec = app.extensions["autoscaler"].settings.pools["l4"]
    plan = Decision("l4", Action.SCALE_OUT, Outcome.SCALED, 1, 3, "alert GPUBusy: scale out 1 -> 3")
    error = NoCapacityError("no L4 in westeurope", cloud_code="SkuNotAvailable")
    alone, change = refused_for_capacity(spec, plan, NOW, error)
    assert alone.outcome is Outcome.NO_CAPACITY and alone.reason.endswith("; short of capacity for 30 min")
    assert "passed over" not in alone.reason and change.short_until == NOW + 1800
    (tmp_path / "grouped").mkdir()
    grouped = _short_app(tmp_path / "grouped", FakeClock(NOW), group=True)
    in_group = refused_for_capacity(grouped.extensions["autoscaler"].settings.pools["l4"], plan, NOW, error)[0]
    assert in_group.reason.endswith("; passed over by its group l4s for 30 min")


def test_the_page_lists_repairs_gpus_dra_and_the_version(tmp_path: Path) -> None:
    with FakeKube() as kube:
        seed_cluster(kube)
        app = write_cluster_night(f"sqlite:///{tmp_path}/s.db", NOW, kube)
        client = app.test_client()
        html = client.get("/", headers=AUTH).get_data(as_text=True)
        kube.dra.status = 403
        app.extensions["autoscaler_reconciler"].tick(NOW + 30)
        refused = _text(_section(client.get("/", headers=AUTH).get_data(as_text=True), "h100"))
    assert f'<span class="muted version">{__version__}</span>' in html and f"gpu-pool-autoscaler {__version__}." in html
    row = re.search(r'<tr class="repair" data-node="h100-0">(.*?)</tr>', html, re.S)
    assert row is not None
    cells = [_text(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)]
    assert cells[:6] == ["h100-0", "waiting", "11 min ago", "79", "pool size 5", "in 48 min"], cells
    assert 'title="2027-01-15T07:48:30.000Z">11 min ago' in row.group(1)  # since, on hover
    assert 'title="2027-01-15T08:48:30.000Z">in 48 min' in row.group(1)  # grace ends (repair.grace 1h)
    h100 = _text(_section(html, "h100"))
    assert "GPUs: 32 allocatable, 9 requested, 2 pending" in h100 and "DRA read (resource.k8s.io/v1)" in h100
    assert re.search(r'cloud read <span title="\d{4}-[^"]+Z">(just now|[^<]+ ago)</span>',
                     html)  # relative, time on hover
    assert "DRA not read : 403: the service account may not list deviceclasses" in refused, refused
    assert "claims' GPUs are not counted" in refused
    # the chart: the repair's replacement 4 -> 5 marked on the count line, said in the legend
    assert 'class="mark replace"' in _section(html, "h100") and "◆ repair: replacement" in h100


def _ev(outcome: str, t: float, from_: int | None, to: int | None, action: str = "scale_out") -> dict[str, Any]:
    return {"outcome": outcome, "_t": t, "from": from_, "to": to, "action": action, "reason": outcome}


def test_a_small_pool_has_a_tick_per_node_and_a_large_one_round_steps() -> None:
    assert count_ticks(6, 0, 160) == [0, 1, 2, 3, 4, 5, 6]  # was 0 and 6 only
    assert count_ticks(40, 1, 160) == [0, 5, 10, 15, 20, 25, 30, 35, 40]  # 4 px a node: every 5th, 20 px apart
    assert count_ticks(37, 3, 160) == [0, 5, 10, 15, 20, 25, 30, 37]  # the top said; 35 too close below it gives way
    drawn = chart([_ev("scaled", NOW - 600, 2, 3)], low=1, high=5, now=NOW)
    assert drawn is not None
    ys = [t["y"] for t in drawn["y_ticks"]]
    assert [t["label"] for t in drawn["y_ticks"]] == ["0", "1", "2", "3", "4", "5"]  # up to the max, 5
    assert all(a - b >= 14 for a, b in zip(ys, ys[1:]))  # labels never closer than their height


def test_the_time_range_fits_the_pools_activity() -> None:
    """A "no change" five hours ago no longer squeezes the last hour's changes into the right fifth."""
    evs = [_ev("skipped_cooldown", NOW - 5 * 3600, 2, 2), _ev("scaled", NOW - 3600, 2, 3),
           _ev("scaled", NOW - 1800, 3, 4), _ev("skipped_cooldown", NOW - 1700, 4, 4)]
    drawn = chart(evs, low=0, high=6, now=NOW)
    assert drawn is not None
    first = next(m for m in drawn["markers"] if m["kind"] == "up")
    assert first["x"] - drawn["left"] < 0.05 * (drawn["right"] - drawn["left"])  # the first change at the left
    assert len(drawn["markers"]) == 3  # the old "no change" is left out, not drawn on the axis
    assert [t["label"] for t in drawn["x_ticks"]] == ["06:57", "07:10", "07:20", "07:30", "07:40", "08:00"]
    xs = [t["x"] for t in drawn["x_ticks"]]
    assert all(b - a >= 90 for a, b in zip(xs, xs[1:]))
    alone = chart([_ev("skipped_cooldown", NOW - 3 * 3600, 2, 2)], low=0, high=6, now=NOW, current=2)
    assert alone is not None and alone["x_ticks"][0]["sub"] == "3 h 7 min ago"  # nothing else: it sets the range


def test_a_repairs_replacement_and_removal_are_marked() -> None:
    evs = [_ev("repair_started", NOW - 1200, 4, 5, action="repair"), _ev("repaired", NOW - 300, 5, 4, "repair")]
    drawn = chart(evs, low=1, high=8, now=NOW)
    assert drawn is not None and drawn["repairs"] == 2 and drawn["changes"] == 2
    kinds = [(m["kind"], m["y"]) for m in drawn["markers"]]
    y_of = {t["label"]: t["y"] for t in drawn["y_ticks"]}
    assert kinds == [("replace", y_of["5"]), ("removed", y_of["4"])]  # on the count line, not "no change"
    assert "repair_started 4 -> 5" in drawn["markers"][0]["title"]


def test_labels_that_would_collide_are_left_out() -> None:
    """Two "no capacity" bands a minute apart and equal values a minute apart: the newest keeps its label, an older
    one only where it covers nothing kept."""
    evs = [_ev("no_capacity", NOW - 3600, 4, 2), _ev("no_capacity", NOW - 3540, 4, 2)]
    evs += [{**_ev("skipped_limit", NOW - 3000 + i * 60, 2, 2), "details": {"value": 10}} for i in range(3)]
    drawn = chart(evs, low=0, high=6, now=NOW)
    assert drawn is not None
    shorts = [m["label"] for m in drawn["markers"] if m["kind"] == "short"]
    assert shorts == [False, True]
    assert [v["label"] for v in drawn["value"]["points"]] == [True, False, True]  # the middle one covers both


def test_python_m_autoscaler_version() -> None:
    out = subprocess.run([sys.executable, "-m", "autoscaler", "--version"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60, check=False)
    assert out.returncode == 0 and out.stdout.strip() == f"gpu-pool-autoscaler {__version__}"
    heading = re.search(r"^## \[?(\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert heading is not None and heading.group(1) == __version__
