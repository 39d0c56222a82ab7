"""Run the benchmarks, write bench/results/*.json and print a table: ``python -m bench.run [--smoke] [names…]``."""
from __future__ import annotations

import argparse
import importlib
import sys
import time
from typing import Any

from bench.common import loadavg, machine, write_result

BENCHMARKS = ("intake", "storm", "reaction", "footprint", "tune")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*", default=list(BENCHMARKS), help=f"any of {', '.join(BENCHMARKS)}")
    parser.add_argument("--smoke", action="store_true", help="a few seconds each, to check the harness works")
    parser.add_argument("--runs", type=int, default=5, help="repetitions for medians (default 5)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    info = machine()
    print(f"machine: {info['cpu']}, {info['cores']} cores, Python {info['python']}, "
          f"load {info['loadavg_at_start']:.2f}")
    failed = 0
    for name in args.names:
        module: Any = importlib.import_module(f"bench.{name}")
        began = time.monotonic()
        print(f"\n== {name}{' (smoke)' if args.smoke else ''} ==", flush=True)
        try:
            result = module.run(smoke=args.smoke, runs=args.runs)
        except Exception as exc:  # noqa: BLE001 - report and go on with the next benchmark
            failed += 1
            print(f"{name} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
            write_result(name, {"smoke": args.smoke, "error": f"{type(exc).__name__}: {exc}", "machine": info})
            continue
        elapsed = time.monotonic() - began
        path = write_result(name, {"smoke": args.smoke, "elapsed_s": elapsed, "loadavg_after": loadavg(),
                                   "machine": info, **result})
        for row in module.table(result):
            print(row)
        print(f"({elapsed:.1f}s, {path})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
