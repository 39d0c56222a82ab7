"""Per-file test durations for tests/durations.json, from pytest's ``--durations=0`` report on stdin:
``python -m pytest -n 2 --dist loadfile --durations=0 -q | python scripts/test_durations.py > tests/durations.json``.
conftest.py orders the collection longest file first, so the two workers finish together (``--dist loadfile`` hands
out files in collection order)."""
from __future__ import annotations

import json
import re
import sys
from collections import defaultdict

LINE = re.compile(r"^\s*([0-9.]+)s (?:call|setup|teardown)\s+(\S+?)::")


def main() -> None:
    totals: dict[str, float] = defaultdict(float)
    for line in sys.stdin:
        found = LINE.match(line)
        if found:
            totals[found.group(2)] += float(found.group(1))
    kept = {path: round(seconds, 1) for path, seconds in sorted(totals.items(), key=lambda kv: -kv[1])
            if seconds >= 2.0}
    json.dump(kept, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
