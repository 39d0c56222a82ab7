"""The pools' table of the status page (the pools it does not chart) as HTML, written here rather than in the
template: a page of 800 pools has 780 rows, and Jinja's attribute lookups and escaping were most of the page's own
time (as for the charts, ``chart_svg.py``). Every text is escaped here."""
from __future__ import annotations

from html import escape
from typing import Any

from markupsafe import Markup

from autoscaler.api.chart import ago
from autoscaler.store import EventRecord


def row(pool: dict[str, Any], troubles: list[str], last: EventRecord | None, now: float) -> str:
    """A pool as a row: its name (linked to the page that charts it), count, min, max and nodes in flight, its
    state in words, and its last decision with how long ago."""
    name = escape(pool["name"])
    marks = [*troubles, *(["paused"] if pool["paused"] else []), *(["busy"] if pool["busy"] else []),
             *(["DRY-RUN"] if pool["dry_run"] else [])]
    cluster = f' <span class="muted">{escape(pool["cluster"])}</span>' if pool.get("cluster") else ""
    current = "?" if pool["current"] is None else pool["current"]
    flight = f', {pool["in_flight"]} in flight' if pool["in_flight"] else ""
    state = f'<td class="outcome-failed">{escape(", ".join(marks))}</td>' if troubles else \
        f'<td>{escape(", ".join(marks)) if marks else "ok"}</td>'
    decided = f'<span class="outcome-{escape(last.outcome)}">{escape(last.outcome)}</span> ' \
              f'<span class="muted">{ago(now - last.time)}</span>' if last is not None else \
        '<span class="muted">none yet</span>'
    return (f'<tr class="pool-row" data-pool="{name}"><td><a href="?pool={name}#pool-{name}">{name}</a>{cluster}</td>'
            f'<td class="count">{current} <span class="muted">({pool["min"]}, {pool["max"]}){flight}</span></td>'
            f'{state}<td>{decided}</td></tr>\n')


def table(rows: list[str]) -> Markup:
    """The pools' table of the rows (none: nothing)."""
    if not rows:
        return Markup("")
    return Markup('<div class="scroll"><table id="pools-table">\n<thead><tr><th>Pool</th><th>Nodes (min, max)</th>'
                  '<th>State</th><th>Last decision</th></tr></thead>\n<tbody>\n' + "".join(rows)
                  + "</tbody>\n</table></div>")
