"""Load generator (its own process): POST notifications at a fixed rate, or in bursts; print results as JSON.

Latency is measured from each request's *scheduled* send time, so a slow server cannot hide its queueing
(no coordinated omission). Run: ``python bench/loadgen.py URL --rate 200 --duration 10``, or
``python bench/loadgen.py URL1,URL2 --burst 5000 --senders 64`` for an alert storm of identical notifications.
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


async def burst(urls: list[str], total: int, senders: int, burst_size: int, gap: float) -> dict[str, Any]:
    """``total`` identical notifications from ``senders`` concurrent senders, ``burst_size`` at a time with a
    ``gap`` between bursts, round-robin over ``urls``."""
    body = json.dumps(notification(0, same=True)).encode()
    statuses: dict[str, int] = {}
    latencies: list[float] = []
    sem = asyncio.Semaphore(senders)
    conn = aiohttp.TCPConnector(limit=senders)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=60)) as session:
        async def send(i: int) -> None:
            async with sem:
                began = time.perf_counter()
                try:
                    async with session.post(urls[i % len(urls)], data=body,
                                            headers={**AUTH, "Content-Type": "application/json"}) as resp:
                        await resp.read()
                        status = resp.status
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    status = 0
                latencies.append(time.perf_counter() - began)
                statuses[str(status)] = statuses.get(str(status), 0) + 1

        start = time.perf_counter()
        for first in range(0, total, burst_size):
            await asyncio.gather(*(send(i) for i in range(first, min(total, first + burst_size))))
            if first + burst_size < total:
                await asyncio.sleep(gap)
        drained = time.perf_counter() - start
    ms = sorted(x * 1000 for x in latencies)
    return {"sent": total, "senders": senders, "burst_size": burst_size, "gap_s": gap, "drain_s": drained,
            "statuses": statuses, "latencies_ms": ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--seq", type=int, default=1, help="first sequence number (unique fingerprints)")
    parser.add_argument("--same", action="store_true", help="send identical notifications (dedup path)")
    parser.add_argument("--burst", type=int, default=0, help="storm mode: send this many identical notifications")
    parser.add_argument("--senders", type=int, default=64)
    parser.add_argument("--burst-size", type=int, default=500)
    parser.add_argument("--gap", type=float, default=0.25)
    args = parser.parse_args()
    if args.burst:
        result = asyncio.run(burst(args.url.split(","), args.burst, args.senders, args.burst_size, args.gap))
    else:
        result = asyncio.run(run(args.url, args.rate, args.duration, args.seq, args.same))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
