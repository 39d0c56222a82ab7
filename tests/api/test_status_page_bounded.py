"""Issue 45, item 11: what the status page draws is bounded whatever the store holds. It drew a chart for every pool
with every decision of its window as a marker (800 pools, 100,000 events in 6 h: 100,000 markers, 32 MB, 3.6 s). Now
it draws at most ``CHARTS`` charts, for the pools that matter (in trouble first, then changed or deciding), each with
at most ``MARKS`` markers (more are summed up per stretch of time), and lists every pool's state in the table; a pool
in trouble is always charted. Counted, not timed: the statements the store sends (SQLAlchemy's cursor hook on the
real engine) and the elements the page draws."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient
from sqlalchemy import insert

from autoscaler.api.chart import MARKS
from autoscaler.api.status import CHARTS
from autoscaler.store import EventRecord, PoolChange, tables
from autoscaler.store.rows import event_row
from tests.support import FakeClock, make_app
from tests.support.statements import sent_by

# what a busy pool's log holds: mostly cooldown skips, some changes, a few shortfalls and failures
_MIX = [("scale_out", "skipped_cooldown", 2, 2)] * 6 + [
    ("scale_out", "scaled", 2, 3), ("scale_in", "scaled", 3, 2), ("scale_out", "no_capacity", 3, 2),
    ("scale_out", "failed", 2, 2)]


def _app(tmp_path: Path, pools: int, events: int) -> tuple[FlaskClient, Any]:
    """``pools`` simulated pools and ``events`` decisions of theirs, in turn, evenly over the last 5 hours."""
    specs = [{"name": f"p{i:04d}", "provider": "simulated", "min": 0, "max": 6, "simulated": {"initial_count": 1}}
             for i in range(pools)]
    clock = FakeClock()
    app = make_app(f"sqlite:///{tmp_path}/s-{pools}-{events}.db", clock, pools=specs, rules=[])
    engine = app.extensions["autoscaler"].store.engine
    now = clock()
    rows = [event_row(EventRecord(time=now - 5 * 3600 * (events - i) / events, pool=specs[i % pools]["name"],
                                  source="alertmanager", action=action, outcome=outcome, from_=a, to=b,
                                  reason=f"alert GPUBusy: {outcome}", details={"value": float(i % 97)}))
            for i, (action, outcome, a, b) in ((i, _MIX[i % len(_MIX)]) for i in range(events))]
    with engine.begin() as conn:
        conn.execute(insert(tables.events), rows)
    return app.test_client(), engine


def _page(client: FlaskClient, engine: Any, path: str = "/") -> tuple[str, int]:
    """The page and the number of SQL statements it sent (after a warm-up request: connections opened)."""
    html, sent = sent_by(client, engine, path)
    return html, len(sent)


def _charts(html: str) -> dict[str, str]:
    """Each charted pool's SVG, by pool."""
    sections = re.findall(r'<section class="pool" data-pool="([^"]+)">(.*?)</section>', html, re.S)
    return {pool: svg.group(0) for pool, section in sections if (svg := re.search(r"<svg.*?</svg>", section, re.S))}


def _marks(svg: str) -> int:
    return len(re.findall(r'class="(?:mark [a-z]+|short)"', svg))


def test_the_page_draws_at_most_its_charts_and_marks_and_lists_every_pool(tmp_path: Path) -> None:
    small, small_engine = _app(tmp_path, 10, 1_000)  # 100 decisions a pool
    large, large_engine = _app(tmp_path, 3 * CHARTS, 3 * CHARTS * 250)  # 250 a pool, 200 of them read for a chart
    (few, few_sent), (many, many_sent) = _page(small, small_engine), _page(large, large_engine)
    assert few_sent == many_sent  # the same statements for 10 pools and 1,000 events as for 60 and 15,000
    assert len(_charts(few)) == 10  # a page of few pools charts each, as before
    charts = _charts(many)
    assert len(charts) == CHARTS, len(charts)  # before: one a pool, 60
    drawn = [_marks(svg) for svg in [*_charts(few).values(), *charts.values()]]
    assert all(0 < n <= MARKS for n in drawn), drawn  # before: 100 a chart, and 200
    assert max(drawn) > MARKS // 2  # a busy chart uses its budget: the rest summed up, not dropped
    summed = re.search(r"<title>(\d+) decisions? [^<]*</title>", next(iter(charts.values())))
    assert summed is not None and int(summed.group(1)) > 1  # a marker standing for several says how many
    rows = dict(re.findall(r'<tr class="pool-row" data-pool="([^"]+)">(.*?)</tr>', many, re.S))
    assert set(rows) | set(charts) == {f"p{i:04d}" for i in range(3 * CHARTS)} and not set(rows) & set(charts)
    quiet = next(iter(rows))
    assert f'href="?pool={quiet}#pool-{quiet}"' in rows[quiet]  # each row links to its pool's own chart
    own, own_sent = _page(large, large_engine, f"/?pool={quiet}")
    assert quiet in _charts(own) and own_sent == many_sent  # ... which the page draws when asked for that pool


def test_a_pool_in_trouble_is_charted_whatever_its_place(tmp_path: Path) -> None:
    """Three pools in trouble at the end of the list (a failing one, one short of capacity, one whose cloud could not
    deliver two hours ago) among 60 that all decided within the charts' window: each is charted, before any pool that
    only decided; the table says every other pool's count and state."""
    client, engine = _app(tmp_path, 3 * CHARTS, 3 * CHARTS * 20)
    store = client.application.extensions["autoscaler"].store
    now = client.application.extensions["autoscaler"].wall()
    failing, short, was_short = (f"p{3 * CHARTS - i:04d}" for i in (1, 2, 3))

    def record(pool: str, outcome: str, change: PoolChange, ago: float = 60) -> None:
        store.update_pool(pool, EventRecord(time=now - ago, pool=pool, source="alertmanager", action="scale_out",
                                            outcome=outcome, from_=1, to=1, reason=f"cloud said {outcome}"), change)

    record(failing, "failed", PoolChange(failures=3, backoff_until=now + 240))
    record(short, "no_capacity", PoolChange(short_until=now + 600, short_reason="SkuNotAvailable"))
    record(was_short, "no_capacity", PoolChange(short_until=now - 6600, short_reason="SkuNotAvailable"), ago=7200)
    html, _ = _page(client, engine)
    charts = _charts(html)
    assert {failing, short, was_short} <= set(charts), sorted(charts)
    assert len(charts) == CHARTS
    rows = dict(re.findall(r'<tr class="pool-row" data-pool="([^"]+)">(.*?)</tr>', html, re.S))
    assert len(rows) == 2 * CHARTS and all(re.search(r"<td class=\"count\">1 ", r) for r in rows.values()), rows
    trouble = re.search(r'<p class="trouble">(.*?)</p>', html, re.S)
    assert trouble is not None and all(p in trouble.group(1) for p in (failing, short, was_short)), html[:3000]
