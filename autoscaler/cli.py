"""Operator commands against a running service: status, events, scale, pause, resume, nodes, repair."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable

import requests

from autoscaler.logjson import escape_controls, escape_lines

DEFAULT_URL = "http://127.0.0.1:8080"
COMMANDS = ("status", "events", "scale", "pause", "resume", "nodes", "repair")
REASON_WIDTH = 70  # reasons are cut here in tables unless --wide
ACTED = ("scaled", "dry_run", "repair_started")  # `scale` and `repair` exit 0 for these, 1 when it failed,
# 3 when it decided not to act
NOT_ACTED = 3


class CliError(Exception):
    """A failed call, said for a person (never echoing the token)."""


def _common(parser: argparse.ArgumentParser, top: bool = False) -> None:
    """The options every operator command takes. On ``python -m autoscaler`` itself too (``top``), so they work
    before the subcommand as well as after it; a subcommand's own copy only overrides what it was given."""
    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    parser.add_argument("--url", default=default(None),
                        help=f"service URL (env AUTOSCALER_URL, default {DEFAULT_URL})")
    parser.add_argument("--token", default=default(None), help="bearer token (env AUTOSCALER_TOKEN)")
    parser.add_argument("--json", action="store_true", default=default(False), help="print the API's JSON answer")
    parser.add_argument("--wide", action="store_true", default=default(False), help="print reasons whole (tables "
                        f"cut them at {REASON_WIDTH} characters)")
    parser.add_argument("--timeout", type=float, default=default(15.0), help="seconds to wait for an answer")


def common_options(parser: argparse.ArgumentParser) -> None:
    """The operator commands' options on the top-level parser (``python -m autoscaler --url URL events``)."""
    _common(parser, top=True)


def register(sub: Any) -> None:
    """Add the operator subcommands to ``python -m autoscaler``."""
    _common(sub.add_parser("status", help="every pool: size, limits, busy, paused, cooldowns, last decision"))
    events = sub.add_parser("events", help="the event log, newest first")
    _common(events)
    events.add_argument("--pool", default=None)
    events.add_argument("--limit", type=int, default=20)
    scale = sub.add_parser("scale", help="scale a pool by hand")
    _common(scale)
    scale.add_argument("pool")
    scale.add_argument("direction", choices=["out", "in"])
    scale.add_argument("--step", type=int, default=None)
    scale.add_argument("--reason", default="")
    scale.add_argument("--force", action="store_true", help="skip cooldown and backoff (never min/max or pause); "
                       "with --node: evict the node's GPU pods (PodDisruptionBudgets respected)")
    scale.add_argument("--node", action="append", default=None, help="scale in: remove this node (repeatable)")
    nodes = sub.add_parser("nodes", help="a pool's Kubernetes nodes: ready, removable or why not, GPU pods, "
                           "protected, cordoned")
    _common(nodes)
    nodes.add_argument("pool")
    repair = sub.add_parser("repair", help="start a node's repair by hand (cordon, replacement, drain, removal), "
                            "or end it with --cancel (docs/repair.md)")
    _common(repair)
    repair.add_argument("pool")
    repair.add_argument("node", nargs="+", help="the node(s) to repair")
    repair.add_argument("--reason", default="", help="why: kept in the event log")
    repair.add_argument("--cancel", action="store_true", help="end the repair: the node is uncordoned, and the "
                        "alert that asked for it starts nothing more until it resolves")
    for name in ("pause", "resume"):
        cmd = sub.add_parser(name, help=f"{name} a pool")
        _common(cmd)
        cmd.add_argument("pool")
        if name == "pause":
            cmd.add_argument("--reason", default="")


def _call(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None = None,
          params: dict[str, Any] | None = None) -> Any:
    base = (args.url or os.environ.get("AUTOSCALER_URL") or DEFAULT_URL).rstrip("/")
    token = args.token or os.environ.get("AUTOSCALER_TOKEN") or ""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    user = os.environ.get("USER")
    if user:
        headers["X-Autoscaler-User"] = user
    try:
        resp = requests.request(method, base + path, json=body, params=params, headers=headers, timeout=args.timeout)
    except requests.RequestException as exc:
        raise CliError(f"cannot reach {base}: {type(exc).__name__}") from None
    try:
        data = resp.json()
    except ValueError:
        raise CliError(f"{method} {path}: HTTP {resp.status_code}, not a JSON answer") from None
    if resp.status_code >= 400 and not (resp.status_code == 503 and "outcome" in data):
        raise CliError(f"{method} {path}: HTTP {resp.status_code}: {data.get('error', data)}")
    return data


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """Columns padded to their widest cell, each cell's control characters escaped (they come from senders)."""
    cells = [[("" if c is None else escape_controls(str(c))) for c in row] for row in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def _cut(text: str | None, wide: bool) -> str:
    """A reason for a table, its control characters escaped: whole with --wide, else cut to REASON_WIDTH with a mark
    that it was."""
    text = escape_controls(text or "")
    return text if wide or len(text) <= REASON_WIDTH else text[:REASON_WIDTH - 1] + "…"


def _pool_rows(pools: list[dict[str, Any]], wide: bool = False) -> str:
    rows = []
    for p in pools:
        last = p.get("last_event") or {}
        cool = p["cooldown"]
        rows.append([p["name"], p["provider"], "?" if p["current"] is None else p["current"], f"{p['min']}-{p['max']}",
                     "yes" if p["busy"] else "no", "yes" if p["paused"] else "no", _short(p), _gpus(p),
                     p.get("dra") or "-", f"{cool['scale_out_remaining_s']:.0f}s/{cool['scale_in_remaining_s']:.0f}s",
                     last.get("outcome", "-"), _cut(last.get("reason"), wide)])
    head = ["POOL", "PROVIDER", "CURRENT", "MIN-MAX", "BUSY", "PAUSED", "SHORT", "GPUS(alloc/req/pend)", "DRA",
            "COOLDOWN(out/in)", "LAST", "REASON"]
    if len({p.get("cluster") for p in pools} - {None}) > 1:  # a fleet: which cluster each pool's nodes join
        head.insert(2, "CLUSTER")
        for row, p in zip(rows, pools):
            row.insert(2, _cluster(p))
    return table(head, rows)


def _cluster(pool: dict[str, Any]) -> str:
    """The pool's cluster, and ``(unreachable since <time>)`` while its listings fail."""
    name = pool.get("cluster") or "-"
    since = pool.get("cluster_unreachable_since")
    return f"{name} (unreachable since {since})" if since else name


def _gpus(pool: dict[str, Any]) -> str:
    """The pool's GPUs from the stored node view, allocatable/requested/pending ("-": no node view; "?": pending
    not counted)."""
    gpus = pool.get("gpus")
    if not gpus:
        return "-"
    pending = "?" if gpus.get("pending") is None else gpus["pending"]
    return f"{gpus['allocatable']}/{gpus['requested']}/{pending}"


def _dra_said(pool: dict[str, Any]) -> str:
    """Whether the last listing read DRA, as a sentence for the `nodes` header."""
    dra = pool.get("dra")
    if dra == "read":
        return "DRA read"
    if dra == "not_read":
        return f"DRA NOT read ({pool.get('dra_reason') or 'no reason given'}): GPUs held through claims are not counted"
    return "DRA unused (device-plugin GPUs only)" if dra == "unused" else "DRA: not known"


def _short(pool: dict[str, Any]) -> str:
    """``until <time>`` while the pool's cloud could not deliver (``no_capacity``), else ``no``."""
    until = pool.get("short_until")
    return f"until {until}" if until else "no"


def _status(args: argparse.Namespace) -> tuple[Any, str]:
    data = _call(args, "GET", "/api/v1/pools")
    return data, _pool_rows(data["pools"], args.wide)


def _events(args: argparse.Namespace) -> tuple[Any, str]:
    params = {"limit": args.limit, **({"pool": args.pool} if args.pool else {})}
    data = _call(args, "GET", "/api/v1/events", params=params)
    rows = [[e["id"], e["time"], e["pool"], e["source"], e["action"], e["outcome"],
             "" if e["from"] is None else f"{e['from']}->{e['to']}", _cut(e["reason"], args.wide)]
            for e in data["events"]]
    return data, table(["ID", "TIME", "POOL", "SOURCE", "ACTION", "OUTCOME", "FROM->TO", "REASON"], rows)


def _scale(args: argparse.Namespace) -> tuple[Any, str]:
    body: dict[str, Any] = {"action": "scale_out" if args.direction == "out" else "scale_in"}
    if args.step is not None:
        body["step"] = args.step
    if args.reason:
        body["reason"] = args.reason
    if args.force:
        body["force"] = True
    if args.node:
        body["nodes"] = args.node
    d = _call(args, "POST", f"/api/v1/pools/{args.pool}/scale", body)
    sizes = f" {d['from']} -> {d['to']}" if d.get("from") is not None else ""
    return d, f"{d['pool']}: {d['outcome']}{sizes}: {d['reason']} (event {d['event_id']})"


def _pause(args: argparse.Namespace) -> tuple[Any, str]:
    body = {"reason": args.reason} if getattr(args, "reason", "") else {}  # state changes take JSON only
    data = _call(args, "POST", f"/api/v1/pools/{args.pool}/{args.command}", body)
    return data, _pool_rows([data], args.wide)


def _nodes(args: argparse.Namespace) -> tuple[Any, str]:
    data = _call(args, "GET", f"/api/v1/pools/{args.pool}")
    if data.get("nodes_error"):
        raise CliError(f"pool {args.pool}" + (f" (cluster {_cluster(data)})" if data.get("cluster") else "")
                       + f": {data['nodes_error']}")
    if data.get("nodes") is None:
        raise CliError(f"pool {args.pool}: no node view (needs the `kubernetes:` section and a node_selector)")
    rows = [[n["name"], "yes" if n["ready"] else "no", "yes" if n["removable"] else f"no: {n.get('why') or '-'}",
             ", ".join(f"{g['namespace']}/{g['name']} ({g['resource']} {g['count']})" for g in n["gpu_pods"]) or "-",
             n["protected"] or "-", ("yes (us)" if n["cordoned_by_us"] else "yes") if n["cordoned"] else "no"]
            for n in data["nodes"]]
    gpus = data.get("gpus")
    head = (f"pool {data['name']}: GPUs {gpus['allocatable']} allocatable, {gpus['requested']} requested, "
            f"{'?' if gpus.get('pending') is None else gpus['pending']} pending" if gpus else f"pool {data['name']}")
    if data.get("cluster") not in (None, "default"):
        head += f" (cluster {data['cluster']})"
    return data, f"{head}; {_dra_said(data)}\n" + table(["NODE", "READY", "REMOVABLE / WHY", "GPU PODS", "PROTECTED",
                                                          "CORDONED"], rows)


def _repair(args: argparse.Namespace) -> tuple[Any, str]:
    body: dict[str, Any] = {"nodes": args.node, **({"reason": args.reason} if args.reason else {})}
    if args.cancel:
        data = _call(args, "POST", f"/api/v1/pools/{args.pool}/repair", {**body, "cancel": True})
        left = ", ".join(r["node"] for r in data.get("repairs") or []) or "none"
        return data, f"{args.pool}: repair of {', '.join(args.node)} cancelled; still in repair: {left}"
    d = _call(args, "POST", f"/api/v1/pools/{args.pool}/repair", body)
    sizes = f" {d['from']} -> {d['to']}" if d.get("from") is not None else ""
    return d, f"{d['pool']}: {d['outcome']}{sizes}: {d['reason']} (event {d['event_id']})"


HANDLERS: dict[str, Callable[[argparse.Namespace], tuple[Any, str]]] = {
    "status": _status, "events": _events, "scale": _scale, "pause": _pause, "resume": _pause,
    "nodes": _nodes, "repair": _repair}


def run(args: argparse.Namespace) -> int:
    """Run one operator command; 0 on success, 1 when the service said no or could not be reached, and for
    ``scale`` and ``repair`` 1 when the change failed and 3 when the service decided not to act (skipped_*, …):
    scripts can tell."""
    try:
        data, text = HANDLERS[args.command](args)
    except CliError as exc:
        print(escape_lines(f"error: {exc}"), file=sys.stderr)
        return 1
    print(json.dumps(data, indent=2) if args.json else escape_lines(text))  # JSON: ensure_ascii escapes them
    if args.command in ("scale", "repair") and "outcome" in data and data.get("outcome") not in ACTED:
        return 1 if data.get("outcome") == "failed" else NOT_ACTED
    return 0
