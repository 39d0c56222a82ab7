"""Several clusters in one tick: each cluster's pools read and decided on their own thread, so a cluster whose API
hangs or refuses stalls only its own pools, never the tick's other clusters (nor the service: requests never wait
on this loop).

The tick groups the pools by cluster (pools that no cluster reads run on the tick's own thread); with one group
nothing is started and the tick runs as it always did. With several, each group runs on a small thread pool (one
thread per configured cluster) and the tick waits for them at most ``wait`` seconds: a group still running then (its
API hung past every deadline, or a slow cloud call) is left to finish in the background, and its cluster's pools are
skipped by the next ticks until it has, so a hung cluster never piles up threads.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait as wait_all
from typing import Callable, Sequence, TypeVar

from autoscaler.engine.parts import Parts
from autoscaler.models import PoolSpec

log = logging.getLogger(__name__)

T = TypeVar("T")
LOCAL = ""  # the group of pools that no cluster reads: run on the tick's own thread


class Fleet:
    """The tick's fan-out over clusters (``run``) and which cluster a pool is read in (``group_of``)."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self._executor: ThreadPoolExecutor | None = None
        self._running: dict[str, Future[object]] = {}
        self._lock = threading.Lock()

    def group_of(self, spec: PoolSpec) -> str:
        """The pool's cluster name when that cluster reads its nodes (configured, a node selector), else LOCAL."""
        return spec.cluster if self.parts.cluster_for(spec) is not None and spec.node_selector else LOCAL

    def groups(self, specs: Sequence[PoolSpec]) -> dict[str, list[PoolSpec]]:
        """The pools by the cluster that reads them, in config order."""
        out: dict[str, list[PoolSpec]] = {}
        for spec in specs:
            out.setdefault(self.group_of(spec), []).append(spec)
        return out

    def run(self, groups: dict[str, list[PoolSpec]], each: Callable[[str, list[PoolSpec]], T],
            wait: float) -> dict[str, T]:
        """``each(cluster, pools)`` for every group; the results of those done within ``wait`` seconds. With at most
        one cluster's group, inline (as a single-cluster service always ran); else one thread per cluster, the
        LOCAL group inline meanwhile. A cluster whose last group still runs is skipped (logged)."""
        clusters = [name for name in groups if name != LOCAL]
        if len(clusters) <= 1:
            return {name: each(name, specs) for name, specs in groups.items()}
        started: dict[str, Future[T]] = {}
        with self._lock:
            pool = self._pool()
            for name in clusters:
                busy = self._running.get(name)
                if busy is not None and not busy.done():
                    log.warning("cluster=%s still read by the last tick (its API hung or a decision is slow): its "
                                "pools %s wait for the next tick", name, ", ".join(s.name for s in groups[name]))
                    continue
                started[name] = pool.submit(each, name, groups[name])
                self._running[name] = started[name]  # type: ignore[assignment]
        out: dict[str, T] = {}
        if LOCAL in groups:
            out[LOCAL] = each(LOCAL, groups[LOCAL])
        done, _ = wait_all(list(started.values()), timeout=wait)
        for name, future in started.items():
            if future in done:
                out[name] = future.result()  # a bug in a round raises here, as it would inline
            else:
                log.warning("cluster=%s not read within %.0fs: its pools are left to finish in the background",
                            name, wait)
        return out

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=max(1, len(self.parts.clusters)),
                                                thread_name_prefix="autoscaler-cluster")
        return self._executor
