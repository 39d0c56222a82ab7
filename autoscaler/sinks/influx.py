"""InfluxDB v2 event sink: a bounded queue drained by one background thread that writes batches."""
from __future__ import annotations

import logging
import queue
import threading
import time
import weakref
from datetime import datetime
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter

from autoscaler.redact import redact_text, redact_url
from autoscaler.config import InfluxConfig

log = logging.getLogger(__name__)

MEASUREMENT = "autoscaler_event"
TAGS = ("pool", "action", "outcome", "source")
SINK_NAME = "influxdb"

_counters: "weakref.WeakKeyDictionary[CollectorRegistry, Counter]" = weakref.WeakKeyDictionary()
_counters_lock = threading.Lock()


def dropped_counter(registry: CollectorRegistry = REGISTRY) -> Counter:
    """The ``gpu_autoscaler_event_sink_dropped_total{sink}`` counter, created once per registry."""
    with _counters_lock:
        counter = _counters.get(registry)
        if counter is None:
            counter = Counter("gpu_autoscaler_event_sink_dropped", "Events a sink could not deliver.",
                              ["sink"], registry=registry)
            _counters[registry] = counter
        return counter


def to_point(event: dict[str, Any]) -> Any:
    """One Event JSON as an InfluxDB point; absent tags and fields (e.g. no pool) are left out."""
    from influxdb_client import Point

    point = Point(MEASUREMENT)
    for tag in TAGS:
        if event.get(tag) not in (None, ""):
            point = point.tag(tag, str(event[tag]))
    for field in ("from", "to"):
        if isinstance(event.get(field), int):
            point = point.field(field, event[field])
    point = point.field("reason", str(event.get("reason") or ""))
    if event.get("id") is not None:
        point = point.field("event_id", str(event["id"]))
    stamp = event.get("time")
    if isinstance(stamp, str):
        point = point.time(datetime.fromisoformat(stamp.replace("Z", "+00:00")))
    return point


class InfluxSink:
    """Writes events to InfluxDB off the request path; drops (and counts) what it cannot deliver."""

    def __init__(self, config: InfluxConfig, *, registry: CollectorRegistry = REGISTRY, dropped: Counter | None = None,
                 queue_size: int = 10_000, timeout: float = 5.0) -> None:
        """``dropped`` is a Counter with a ``sink`` label (the app's); else one is made on ``registry``."""
        from influxdb_client import InfluxDBClient
        from influxdb_client.client.write_api import SYNCHRONOUS

        self.config = config
        self._dropped = (dropped if dropped is not None else dropped_counter(registry)).labels(SINK_NAME)
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=queue_size)
        self._client = InfluxDBClient(url=config.url, token=config.token.get_secret_value(), org=config.org,
                                      timeout=int(timeout * 1000))
        self._write = self._client.write_api(write_options=SYNCHRONOUS)
        self._idle = threading.Condition()
        self._in_flight = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="influx-sink", daemon=True)
        self._thread.start()
        log.info("influxdb event sink: url=%s org=%s bucket=%s batch_size=%d flush_interval=%.1fs",
                 redact_url(config.url), config.org, config.bucket, config.batch_size, config.flush_interval)

    def emit(self, event: dict[str, Any]) -> None:
        """Queue one event; never blocks, never raises."""
        if self._stop.is_set():
            self._dropped.inc()
            return
        with self._idle:
            try:
                self._queue.put_nowait(event)
                self._in_flight += 1
            except queue.Full:
                self._dropped.inc()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued event was written or dropped; False if that took longer than ``timeout``."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (waiting at most ``timeout``), stop the thread, close the client."""
        self._stop.set()
        self._thread.join(timeout)
        left = 0
        while True:
            try:
                self._queue.get_nowait()
                left += 1
            except queue.Empty:
                break
        if left:
            self._dropped.inc(left)
            log.warning("influxdb event sink: dropped %d queued event(s) at shutdown", left)
        self._client.close()

    def _batch(self) -> list[dict[str, Any]]:
        """Up to ``batch_size`` events, waiting at most ``flush_interval`` after the first one."""
        try:
            batch = [self._queue.get(timeout=0.1)]
        except queue.Empty:
            return []
        deadline = time.monotonic() + self.config.flush_interval
        while len(batch) < self.config.batch_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._stop.is_set():
                try:
                    batch.append(self._queue.get_nowait())
                    continue
                except queue.Empty:
                    break
            try:
                batch.append(self._queue.get(timeout=remaining))
            except queue.Empty:
                break
        return batch

    def _run(self) -> None:
        while not (self._stop.is_set() and self._queue.empty()):
            batch = self._batch()
            if batch:
                self._send(batch)

    def _send(self, batch: list[dict[str, Any]]) -> None:
        try:
            points = [to_point(event) for event in batch]
            self._write.write(bucket=self.config.bucket, org=self.config.org, record=points)
        except Exception as exc:  # noqa: BLE001 - any failure of the sink must stay inside the sink
            self._dropped.inc(len(batch))
            log.warning("influxdb event sink: dropped %d event(s): %s: %s", len(batch), type(exc).__name__,
                        redact_text(str(exc))[:300])
        finally:
            with self._idle:
                self._in_flight -= len(batch)
                self._idle.notify_all()
