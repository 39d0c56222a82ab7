"""Open-loop load generator (its own process): POST notifications at a fixed rate, print latencies as JSON.

Latency is measured from each request's *scheduled* send time, so a slow server cannot hide its queueing
(no coordinated omission). Run: ``python bench/loadgen.py URL --rate 200 --duration 10``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import AUTH, notification  # noqa: E402


async def _one(session: aiohttp.ClientSession, url: str, body: bytes, due: float,
               out: list[tuple[float, int]]) -> None:
    delay = due - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
    try:
        async with session.post(url, data=body, headers={**AUTH, "Content-Type": "application/json"}) as resp:
            await resp.read()
            status = resp.status
    except (aiohttp.ClientError, asyncio.TimeoutError):
        status = 0
    out.append((time.perf_counter() - due, status))


async def run(url: str, rate: float, duration: float, seq0: int, same: bool) -> dict[str, Any]:
    """Send ``rate * duration`` notifications on schedule; latencies in ms and status counts."""
    count = int(rate * duration)
    bodies = [json.dumps(notification(seq0 + i, same=same)).encode() for i in range(count)]
    results: list[tuple[float, int]] = []
    conn = aiohttp.TCPConnector(limit=256)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        start = time.perf_counter() + 0.2
        tasks = [asyncio.create_task(_one(session, url, bodies[i], start + i / rate, results)) for i in range(count)]
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    statuses: dict[str, int] = {}
    for _, status in results:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    return {"rate": rate, "duration": duration, "sent": count, "elapsed_s": elapsed, "statuses": statuses,
            "latencies_ms": sorted(lat * 1000 for lat, _ in results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--seq", type=int, default=1, help="first sequence number (unique fingerprints)")
    parser.add_argument("--same", action="store_true", help="send identical notifications (dedup path)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.url, args.rate, args.duration, args.seq, args.same))))


if __name__ == "__main__":
    main()
