"""Command line: ``python -m autoscaler check-config FILE``."""
from __future__ import annotations

import argparse
import os
import sys

from autoscaler import __version__, cli
from autoscaler.config.load import ConfigError, load_config, warnings
from autoscaler.logjson import escape_lines


def check_config(path: str) -> int:
    """Exit 0 with a one-line summary when valid, 1 with every problem (one per line) when not; control characters
    (a key or value may hold them) escaped."""
    try:
        settings = load_config(path)
    except ConfigError as exc:
        for problem in exc.problems:
            print(escape_lines(problem), file=sys.stderr)
        return 1
    for warning in warnings(settings):  # valid, so exit 0, but said
        print(escape_lines(f"warning: {warning}"), file=sys.stderr)
    pools = settings.pools.values()
    parts = ", ".join(f"{p.name} ({p.provider} {p.min}..{p.max}{', dry-run' if p.dry_run else ''})" for p in pools)
    store = settings.config.store.url.split("://", 1)[0]
    print(escape_lines(f"{path}: OK: {len(settings.pools)} pool(s): {parts}; {len(settings.config.rules)} rule(s); "
                       f"store {store}"))
    return 0


def schema_downgrade(revision: str, url: str | None) -> int:
    """Bring the store's schema back to ``revision`` before rolling back to an older release (docs/upgrading.md);
    a misuse (a mistyped path, an unknown revision, a store that cannot be reached) is one line and exit 1, and
    makes no file: SQLite would create an empty database at a mistyped path."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from autoscaler.store.connections import StoreOptions, make_engine
    from autoscaler.store.migrate import DowngradeError, downgrade

    if not url:
        print("schema-downgrade: give --url or set DATABASE_URL", file=sys.stderr)
        return 2
    try:
        parsed = make_url(url)
    except ArgumentError:
        return _refused("--url is not a database URL (sqlite:///PATH or postgresql://USER@HOST/DB)")
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite" and not os.path.isfile(parsed.database or ""):
        return _refused(f"no SQLite database at {parsed.database or ':memory:'} (check --url)")
    try:
        engine = make_engine(url, StoreOptions())
    except (ValueError, ImportError) as exc:
        return _refused(f"--url: {exc}")
    try:
        before = downgrade(engine, revision)
    except DowngradeError as exc:
        return _refused(str(exc))
    except SQLAlchemyError as exc:
        said = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
        return _refused(f"the store at {shown} failed: {type(exc).__name__}: {said}")
    finally:
        engine.dispose()
    print(f"schema: {before or 'empty'} -> {revision}")
    return 0


def _refused(message: str) -> int:
    print(escape_lines(f"schema-downgrade: {message}"), file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autoscaler", description="gpu-pool-autoscaler tools")
    parser.add_argument("--version", action="version", version=f"gpu-pool-autoscaler {__version__}")
    cli.common_options(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check-config", help="validate a config file")
    check.add_argument("file")
    rep = sub.add_parser("replay", help="replay a demand trace through the real decision code (what-if)")
    rep.add_argument("--config", required=True, help="config file with a `replay:` section")
    rep.add_argument("--trace", required=True, help="CSV with the header timestamp,demand, one row a minute")
    rep.add_argument("--out", required=True, help="directory for timeline.csv, summary.json, replay.png "
                     "(with --tune: tuned.yaml, frontier.csv, frontier.png, prometheus-rules.yml, tuning.json)")
    rep.add_argument("--overprovision", type=int, default=1, help="nodes of pause pods in the peer "
                     "cluster_autoscaler_overprovisioned (default 1; docs/replay.md)")
    rep.add_argument("--gang", action="store_true", help="the trace is all-or-nothing requests "
                     "(time,nodes,duration[,gpus_per_node]), replayed atomic and as plain scale-outs: summary.json, "
                     "requests.csv (docs/gang.md)")
    tuning = rep.add_argument_group("tuning on history (--tune)")
    tuning.add_argument("--tune", action="store_true", help="search the pool's scaling settings and the replay "
                        "rules on the trace and write the best config")
    tuning.add_argument("--max-saturated", default="1%", help="budget of saturated minutes, a %% of the minutes "
                        "(default 1%%)")
    tuning.add_argument("--candidates", type=int, default=243, help="settings sampled at first (default 243)")
    tuning.add_argument("--workers", type=int, default=None, help="processes (default 2, fewer on one core)")
    tuning.add_argument("--seed", type=int, default=0, help="seed of the sampling (default 0)")
    tuning.add_argument("--restarts", type=int, default=1, help="whole searches (seeds --seed, --seed + 1000, ...), "
                        "keeping the choice that holds its limits and costs least on the span searched: about that "
                        "many times the CPU, a choice that depends less on the seed (default 1; docs/tuning.md)")
    tuning.add_argument("--holdout", type=float, default=2 / 7, help="share of the trace, at its end, kept from "
                        "the search to confirm the choice on (default 2/7: days 6-7 of a week; 0: none)")
    tuning.add_argument("--pending-expr", default=None, help="PromQL of GPUs requested by pending pods, for "
                        "`pending_above` rules in prometheus-rules.yml (default: kube-state-metrics)")
    tuning.add_argument("--margin", type=float, default=0.25, help="the choice keeps saturated minutes within "
                        "(1 - margin) x the budget on the tuning span, room for days that differ (default 0.25)")
    tuning.add_argument("--robust", action=argparse.BooleanOptionalAction, default=False, help="choose by the "
                        "worst day: saturated minutes within (1 - margin) x the budget on every whole day of the "
                        "tuning span; default (--no-robust): within that on the span's total and the budget on "
                        "each day (measured: docs/tuning.md)")
    tuning.add_argument("--max-direction-changes", type=float, default=None, help="direction changes (a scale-in "
                        "after a scale-out or back) a day the choice may make (default: twice the base config's "
                        "changes a day on the tuning span, at least 2, at least 6 where the history has busy hours)")
    tuning.add_argument("--stress", action=argparse.BooleanOptionalAction, default=True, help="choose among the "
                        "cheapest on the worst of the history's days and of stressed copies of its burstiest days, "
                        "preferring the steadiest of near-equal settings (default); --no-stress: the cheapest "
                        "within the budget (docs/tuning.md)")
    tuning.add_argument("--pooled", action=argparse.BooleanOptionalAction, default=False, help="the search's "
                        "first rungs screen candidates on days pooled from every searched day, not on the history's "
                        "first days (default: off; docs/tuning.md)")
    tuning.add_argument("--outlook", action=argparse.BooleanOptionalAction, default=True, help="judge the "
                        "candidates on the history as the weeks after it will look: moved along its own trend, a "
                        "one-off peak capped (default); --no-outlook: on the history as it was (docs/tuning.md)")
    tuning.add_argument("--utilization-expr", default=None, help="PromQL of a pool's average GPU utilisation for "
                        "prometheus-rules.yml ({pool} and {pool_label} filled in; default the shipped recording rule "
                        "autoscaler_pool:gpu_utilization:avg, docs/rules.md)")
    hist = sub.add_parser("trace", help="write a history trace (timestamp,demand) from Prometheus")
    hist.add_argument("--prometheus", required=True, help="Prometheus base URL, e.g. http://prometheus:9090")
    hist.add_argument("--used", required=True, help="PromQL: GPUs in use in the pool (one series)")
    hist.add_argument("--pending", default=None, help="PromQL: GPUs requested by pods still pending (one series)")
    hist.add_argument("--gpus-per-node", required=True, type=float, help="GPUs of one node of the pool")
    hist.add_argument("--since", default="7d", help="how far back (default 7d)")
    hist.add_argument("--until", default=None, help="end, RFC 3339 UTC (default now)")
    hist.add_argument("--chunk", default="1d", help="time per range query (default 1d; at most 11,000 minutes)")
    hist.add_argument("--bearer-token-file", default=None, help="file holding a bearer token for Prometheus "
                      "(default: env PROMETHEUS_BEARER_TOKEN; basic auth: https://user:password@host in the URL)")
    hist.add_argument("--out", required=True, help="the trace CSV to write")
    down = sub.add_parser("schema-downgrade", help="the store's schema of an older release, before a rollback")
    down.add_argument("revision", help="the older release's newest migration, e.g. 0004 (docs/upgrading.md)")
    down.add_argument("--url", default=os.environ.get("DATABASE_URL"), help="store.url (default: env DATABASE_URL)")
    cli.register(sub)
    args = parser.parse_args(argv)
    if args.command == "check-config":
        return check_config(args.file)
    if args.command == "schema-downgrade":
        return schema_downgrade(args.revision, args.url)
    if args.command == "trace":
        from autoscaler.replay import history

        return history.run(args)
    if args.command == "replay" and args.gang:
        if args.tune:
            print("--gang and --tune do not go together", file=sys.stderr)
            return 1
        from autoscaler.replay.gang import gang_replay

        return gang_replay(args.config, args.trace, args.out)
    if args.command == "replay" and args.tune:
        from autoscaler.replay import tune_cli, tune_files
        from autoscaler.replay.tune import default_workers

        args.workers = args.workers or default_workers()
        args.utilization_expr = args.utilization_expr or tune_files.UTILIZATION_EXPR
        args.pending_expr = args.pending_expr or tune_files.PENDING_EXPR
        return tune_cli.run(args)
    if args.command == "replay":
        from autoscaler.replay import replay

        if args.overprovision < 0:
            print("--overprovision must be 0 or more", file=sys.stderr)
            return 1
        return replay(args.config, args.trace, args.out, args.overprovision)
    if args.command in cli.COMMANDS:
        return cli.run(args)
    parser.error(f"unknown command {args.command}")
    return 2


def run(argv: list[str] | None = None) -> int:
    """:func:`main`, ending quietly when whoever reads the output stops (``python -m autoscaler events | head``)."""
    try:
        code = main(argv)
        sys.stdout.flush()  # inside the try: a closed pipe shows here, not as a traceback at exit
        return code
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit must not fail again
        return 0


if __name__ == "__main__":
    sys.exit(run())
