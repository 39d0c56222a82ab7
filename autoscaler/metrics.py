"""Prometheus metrics, correct across gunicorn workers (prometheus_client multiprocess mode)."""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from providers import shortfalls
from providers.errors import Code

PREFIX = "gpu_autoscaler"
UNKNOWN_POOL = "_unknown"  # every pool name an alert asked for that the config does not have
MAX_LABEL = 64  # longest label value kept (pool names are at most 63 characters)
_CODES = frozenset(code.value for code in Code)


def _label(value: str) -> str:
    return value if len(value) <= MAX_LABEL else value[:MAX_LABEL - 1] + "~"


def multiprocess_dir() -> str | None:
    """The directory gunicorn workers share their metric files in, when set."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir") or None


class Metrics:
    """The service's own counters; pool state gauges are read from the store at scrape time."""

    def __init__(self, registry: CollectorRegistry | None = None, pools: Iterable[str] | None = None) -> None:
        # Label values come only from the config: a pool name read from an alert label that is not configured
        # counts under UNKNOWN_POOL, so senders cannot grow /metrics without bound.
        self.pools = frozenset(pools) if pools is not None else None
        self.multiprocess = multiprocess_dir() is not None
        self.registry = registry or CollectorRegistry(auto_describe=True)
        reg = None if self.multiprocess else self.registry
        self.decisions = Counter(f"{PREFIX}_decisions_total", "Decisions by pool, action and outcome.",
                                 ["pool", "action", "outcome"], registry=reg)
        self.provider_seconds = Histogram(f"{PREFIX}_provider_call_seconds", "Provider scale call latency.",
                                          ["provider", "pool", "result"], registry=reg,
                                          buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30))
        self.provider_errors = Counter(f"{PREFIX}_provider_errors_total", "Failed provider calls by our error code "
                                       "(providers.errors.Code; the cloud's own code is in the event).",
                                       ["provider", "code"], registry=reg)
        self.no_capacity_total = Counter(f"{PREFIX}_no_capacity_total", "Times a pool's cloud accepted a size and "
                                         "could not deliver it, by pool and the cloud's code when the service knows "
                                         "it (else NoCapacity).", ["pool", "code"], registry=reg)
        self.sink_dropped = Counter(f"{PREFIX}_event_sink_dropped_total", "Events an event sink dropped.",
                                    ["sink"], registry=reg)
        self.extra: list[Collector] = []

    def pool_label(self, pool: str | None) -> str:
        """A configured pool's name; ``_unknown`` for any other (an empty name stays empty: no pool at all)."""
        if not pool:
            return ""
        if self.pools is not None and pool not in self.pools:
            return UNKNOWN_POOL
        return _label(pool)

    def decision(self, pool: str | None, action: str | None, outcome: str) -> None:
        self.decisions.labels(self.pool_label(pool), _label(action or ""), _label(outcome)).inc()

    def provider_call(self, provider: str, pool: str, result: str, seconds: float) -> None:
        """One provider call; ``result`` is ``ok`` or one of our codes (``Code``): never the cloud's own, which a
        cloud may vary without end (twenty refusals with twenty codes were twenty series)."""
        if result != "ok" and result not in _CODES:
            result = Code.INTERNAL.value  # a caller's slip stays one series
        self.provider_seconds.labels(_label(provider), self.pool_label(pool),
                                     "ok" if result == "ok" else "error").observe(seconds)
        if result != "ok":
            self.provider_errors.labels(_label(provider), _label(result)).inc()

    def no_capacity(self, pool: str, code: str) -> None:
        """A shortfall, labelled with the cloud's code when ``providers.shortfalls`` lists it (a bounded set), else
        ``NoCapacity``: codes matched by a pattern (``QuotaExceed.*``, GKE's ``*QUOTA*``) are unbounded."""
        label = code if shortfalls.known(code) else Code.NO_CAPACITY.value
        self.no_capacity_total.labels(self.pool_label(pool), label).inc()

    def add_collector(self, collector: Collector) -> None:
        """A collector evaluated at scrape time (reads shared state, so it is right in every worker)."""
        self.extra.append(collector)
        if not self.multiprocess:
            self.registry.register(collector)

    def render(self) -> bytes:
        """The text exposition for /metrics."""
        if not self.multiprocess:
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        for collector in self.extra:
            registry.register(collector)
        return generate_latest(registry)


class PoolStateCollector(Collector):
    """Gauges from the store: paused, tracked count, cooldown left, backoff, time since last scale."""

    def __init__(self, read: Callable[[], Iterable[dict[str, Any]]], wall: Callable[[], float] = time.time,
                 ping: Callable[[], None] | None = None) -> None:
        self.read = read
        self.wall = wall
        self.ping = ping  # the readiness probe's question (the store takes a write), asked at each scrape

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        paused = GaugeMetricFamily(f"{PREFIX}_pool_paused", "1 while the pool is paused.", labels=["pool"])
        size = GaugeMetricFamily(f"{PREFIX}_pool_size", "Current node count (as read or tracked).", labels=["pool"])
        cooldown = GaugeMetricFamily(f"{PREFIX}_pool_cooldown_remaining_seconds", "Cooldown left.",
                                     labels=["pool", "direction"])
        backoff = GaugeMetricFamily(f"{PREFIX}_pool_backoff_remaining_seconds", "Backoff left after failures.",
                                    labels=["pool"])
        last = GaugeMetricFamily(f"{PREFIX}_pool_last_scale_timestamp_seconds",
                                 "Unix time of the last successful scale.", labels=["pool"])
        in_flight = GaugeMetricFamily(f"{PREFIX}_pool_in_flight", "Nodes asked for within provision_time, not "
                                      "ready yet (as of the stored cloud view).", labels=["pool"])
        floor = GaugeMetricFamily(f"{PREFIX}_pool_effective_min", "The floor now: a schedule's min or the pool's.",
                                  labels=["pool"])
        limits = {end: GaugeMetricFamily(f"{PREFIX}_pool_{end}", f"The pool's configured {end}imum node count.",
                                         labels=["pool"]) for end in ("min", "max")}
        age = GaugeMetricFamily(f"{PREFIX}_pool_view_age_seconds", "Age of the stored cloud view (the reconciler "
                                "refreshes it; scrapes never call the cloud).", labels=["pool"])
        paused_total = GaugeMetricFamily(f"{PREFIX}_pools_paused", "How many pools are paused.")
        short = GaugeMetricFamily(f"{PREFIX}_pool_short", "1 while the pool is passed over because its cloud could "
                                  "not deliver (capacity.short_for).", labels=["pool"])
        window = GaugeMetricFamily(f"{PREFIX}_pool_short_window_seconds", "capacity.short_for: how long one "
                                   "shortfall marks the pool short.", labels=["pool"])
        short_total = GaugeMetricFamily(f"{PREFIX}_pools_short", "How many pools are short of capacity.")
        gpus = GaugeMetricFamily(f"{PREFIX}_pool_gpus", "The pool's GPUs as the last listing counted them (device "
                                 "plugin or DRA): allocatable, requested (or allocated), pending (unscheduled "
                                 "pods' requests and unallocated claims).", labels=["pool", "state"])
        repairs = GaugeMetricFamily(f"{PREFIX}_nodes_in_repair", "Nodes of the pool in repair now (cordoned, "
                                    "waiting, draining or being removed; pools with `repair:`).", labels=["pool"])
        reachable = GaugeMetricFamily(f"{PREFIX}_cluster_reachable", "1 when the reconciler's last listings of the "
                                      "cluster's pools reached its API server, else 0 (configured clusters with "
                                      "node-aware pools).", labels=["cluster"])
        up = GaugeMetricFamily(f"{PREFIX}_store_up", "1 when the store answered this scrape (its schema whole, "
                               "a write taken).")
        try:
            rows = list(self.read())
        except Exception:
            rows = None
        try:
            if self.ping is not None and rows is not None:
                self.ping()
            up.add_metric([], 1 if rows is not None else 0)
        except Exception:
            up.add_metric([], 0)
        rows = rows or []
        for row in rows:
            name = row["name"]
            paused.add_metric([name], 1 if row["paused"] else 0)
            short.add_metric([name], 1 if row.get("short_until") else 0)
            if row.get("short_for_s") is not None:
                window.add_metric([name], row["short_for_s"])
            if row.get("current") is not None:
                size.add_metric([name], row["current"])
            for direction in ("scale_out", "scale_in"):
                cooldown.add_metric([name, direction], row["cooldown"][f"{direction}_remaining_s"])
            backoff.add_metric([name], row.get("backoff_remaining_s", 0))
            if row.get("last_scale_at") is not None:
                last.add_metric([name], row["last_scale_at"])
            if row.get("in_flight") is not None:
                in_flight.add_metric([name], row["in_flight"])
            if row.get("effective_min") is not None:
                floor.add_metric([name], row["effective_min"])
            for end, family in limits.items():
                family.add_metric([name], row[end])
            if row.get("view_age_s") is not None:
                age.add_metric([name], row["view_age_s"])
            for state, value in (row.get("gpus") or {}).items():
                if value is not None:
                    gpus.add_metric([name, state], value)
            if row.get("repairs") is not None:
                repairs.add_metric([name], len(row["repairs"]))
        seen: dict[str, bool] = {}
        for row in rows:
            if row.get("cluster_reachable") is not None:
                seen[row["cluster"]] = seen.get(row["cluster"], True) and row["cluster_reachable"]
        for cluster, ok in sorted(seen.items()):
            reachable.add_metric([_label(cluster)], 1 if ok else 0)
        if rows:
            paused_total.add_metric([], sum(1 for row in rows if row["paused"]))
            short_total.add_metric([], sum(1 for row in rows if row.get("short_until")))
        yield from (paused, paused_total, short, short_total, window, size, cooldown, backoff, last, in_flight, floor,
                    *limits.values(), age, gpus, repairs, reachable, up)
