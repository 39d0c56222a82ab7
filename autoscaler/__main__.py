"""Command line: ``python -m autoscaler check-config FILE``."""
from __future__ import annotations

import argparse
import sys

from autoscaler import cli
from autoscaler.config import ConfigError, load_config, warnings


def check_config(path: str) -> int:
    """Exit 0 with a one-line summary when valid, 1 with every problem (one per line) when not."""
    try:
        settings = load_config(path)
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    for warning in warnings(settings):  # valid, so exit 0, but said
        print(f"warning: {warning}", file=sys.stderr)
    pools = settings.pools.values()
    parts = ", ".join(f"{p.name} ({p.provider} {p.min}..{p.max}{', dry-run' if p.dry_run else ''})" for p in pools)
    store = settings.config.store.url.split("://", 1)[0]
    print(f"{path}: OK: {len(settings.pools)} pool(s): {parts}; {len(settings.config.rules)} rule(s); store {store}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autoscaler", description="gpu-pool-autoscaler tools")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check-config", help="validate a config file")
    check.add_argument("file")
    rep = sub.add_parser("replay", help="replay a demand trace through the real decision code (what-if)")
    rep.add_argument("--config", required=True, help="config file with a `replay:` section")
    rep.add_argument("--trace", required=True, help="CSV with the header timestamp,demand, one row a minute")
    rep.add_argument("--out", required=True, help="directory for timeline.csv, summary.json, replay.png")
    cli.register(sub)
    args = parser.parse_args(argv)
    if args.command == "check-config":
        return check_config(args.file)
    if args.command == "replay":
        from autoscaler.replay import replay

        return replay(args.config, args.trace, args.out)
    if args.command in cli.COMMANDS:
        return cli.run(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
