"""A pool's chart (``autoscaler/api/chart.py``'s geometry) as SVG markup, written here rather than in the template:
a page of 800 pools renders 800 of them, and Jinja spent most of the page's time on their attributes. Every text
that is not a number the chart computed (a pool's name, a decision's reason) is escaped here."""
from __future__ import annotations

from typing import Any

from markupsafe import Markup, escape

from autoscaler.api.chart import ON_LINE

_MARKS = {
    "up": '<path class="mark up" d="M{x},{y_up} l-6,9 h12 z"><title>{title}</title></path>',
    "down": '<path class="mark down" d="M{x},{y_down} l-6,-9 h12 z"><title>{title}</title></path>',
    "dry": '<circle class="mark dry" cx="{x}" cy="{y}" r="5"><title>{title}</title></circle>',
    "failed": '<path class="mark failed" d="M{x_left},{top2} l10,10 m0,-10 l-10,10"><title>{title}</title></path>',
    "replace": '<path class="mark replace" d="M{x},{y_m7} l7,7 l-7,7 l-7,-7 z"><title>{title}</title></path>',
    "removed": '<rect class="mark removed" x="{x_m5}" y="{y_m5}" width="10" height="10"><title>{title}</title></rect>',
    "other": '<line class="mark other" x1="{x}" x2="{x}" y1="{tick}" y2="{bottom}"><title>{title}</title></line>',
}


_MINOR = {True: ' class="minor"', False: ""}  # a tick a phone leaves unlabelled (base.html's CSS)


def svg(name: str, c: dict[str, Any]) -> Markup:
    """The chart's SVG element."""
    left, right, top, bottom = c["left"], c["right"], c["plot_top"], c["plot_h"]
    out = [f'<svg class="chart" width="100%" viewBox="0 0 {c["svg_w"]} {c["h"]}" '
           f'role="img" aria-label="node count of {escape(name)} over time, now {c["last"]}">',
           f'<title>{escape(name)}: node count over time, UTC (now {c["last"]}, {c["changes"]} changes, '
           f'axis top {c["top"]})</title>']
    out += [f'<line class="grid" x1="{left}" x2="{right}" y1="{y}" y2="{y}"/>' for y in c["grid"]]
    for m in c["markers"]:
        if m["kind"] == "short":
            out.append(f'<rect class="short" x="{m["x"] - 3}" y="{top}" width="6" height="{bottom - top}">'
                       f'<title>{escape(m["title"])}</title></rect>')
            if m.get("label", True):
                out.append(f'<text class="short-label" x="{m["x"]}" y="{top - 6}" text-anchor="middle">no capacity'
                           '</text>')
    if c["flight"]:
        out.append(f'<polygon class="flight" points="{c["flight"]}"/>')
    out.append(f'<line class="min" x1="{left}" x2="{right}" y1="{c["min_y"]}" y2="{c["min_y"]}"/>')
    if c["max_y"] is not None:
        out.append(f'<line class="max" x1="{left}" x2="{right}" y1="{c["max_y"]}" y2="{c["max_y"]}"/>')
    out.append(f'<g class="axis count-axis"><line x1="{left}" x2="{left}" y1="{top}" y2="{bottom}"/>')
    out += [f'<text{_MINOR[t["minor"]]} x="{left - 5}" y="{t["y"] + 4}" text-anchor="end">{t["label"]}</text>'
            for t in c["y_ticks"]]
    out.append(f'</g><g class="axis time-axis"><line x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}"/>')
    for t in c["x_ticks"]:
        out.append(f'<g{_MINOR[t.get("minor", False)]}><text x="{t["x"]}" y="{bottom + 15}" '
                   f'text-anchor="{t["anchor"]}">{t["label"]} UTC</text><text class="sub" x="{t["x"]}" '
                   f'y="{bottom + 30}" text-anchor="{t["anchor"]}">{t["sub"]}</text></g>')
    out.append("</g>")
    value = c["value"]
    if value:
        out.append('<g class="value">')
        label = escape(value["label"])
        for v in value["points"]:
            most = f' (the highest of {v["n"]})' if v["n"] > 1 else ""
            out.append(f'<circle cx="{v["x"]}" cy="{v["y"]}" r="4"><title>{label} {v["v"]}{most}</title></circle>')
            if v.get("label", True):
                out.append(f'<text class="value-label" x="{v["x"] + 6}" y="{v["y"] - 5}">{v["v"]}</text>')
        out.append('<g class="axis value-axis">')
        out += [f'<text x="{c["svg_w"] - 4}" y="{t["y"] + 4}" text-anchor="end">{t["label"]}</text>'
                for t in value["ticks"]]  # the far right: never under "N now"
        out.append("</g></g>")
    if c["ready"]:
        out.append(f'<polyline class="ready" points="{c["ready"]}"/>')
    out.append(f'<polyline class="asked" points="{c["points"]}"/>'
               f'<text class="now" x="{right + 6}" y="{c["last_y"] + 4}">{c["last"]} now</text>')
    for m in c["markers"]:
        mark = _MARKS.get(m["kind"])
        if mark is None or (m["y"] is None and m["kind"] in ON_LINE):
            continue
        y = m["y"] or 0
        out.append(mark.format(x=m["x"], y=y, y_up=y - 13, y_down=y + 13, x_left=m["x"] - 5, top2=top + 2,
                               y_m7=y - 7, y_m5=y - 5, x_m5=m["x"] - 5,
                               tick=bottom - 10, bottom=bottom, title=escape(m["title"])))
    out.append("</svg>")
    return Markup("".join(out))
