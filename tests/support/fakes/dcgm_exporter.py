"""A stand-in for NVIDIA's dcgm-exporter: serves ``DCGM_FI_DEV_GPU_UTIL`` per GPU with values the test sets.

The labels are dcgm-exporter's own (internal/pkg/rendermetrics/render_metrics.go): ``gpu``, ``UUID``,
``pci_bus_id``, ``device``, ``modelName`` and ``Hostname``, the node's name (the NODE_NAME its Helm chart and the GPU
Operator set). No pool label: the rules find the pool through kube-state-metrics
(``tests.support.fakes.kube_state_metrics``).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from tests.support.fakes.httpbase import FakeHttpServer, Reply, Request


@dataclass(frozen=True)
class Gpu:
    """One GPU as dcgm-exporter labels it; ``pool`` is the stand-in's bookkeeping, never exported."""

    index: int
    uuid: str
    hostname: str
    pool: str
    model: str = "NVIDIA H100 80GB HBM3"


def _labels(gpu: Gpu) -> str:
    pairs = {"gpu": str(gpu.index), "UUID": gpu.uuid, "pci_bus_id": f"00000000:{gpu.index + 0x18:02X}:00.0",
             "device": f"nvidia{gpu.index}", "modelName": gpu.model, "Hostname": gpu.hostname}
    return ",".join(f'{k}="{v}"' for k, v in pairs.items())


class DcgmExporter(FakeHttpServer):
    """Serves ``/metrics`` in the text exposition format on 127.0.0.1; ``set_utilization`` changes every GPU."""

    name = "dcgm-fake"

    def __init__(self, gpus: list[Gpu], utilization: float = 50.0) -> None:
        self.gpus = gpus
        self._values = {gpu.uuid: utilization for gpu in gpus}
        self._lock = threading.Lock()
        self.scrapes = 0
        super().__init__()

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    @property
    def target(self) -> str:
        """``host:port`` for a Prometheus static config."""
        return f"127.0.0.1:{self.port}"

    def set_utilization(self, value: float, uuid: str | None = None) -> None:
        """Set the utilisation (0-100) of one GPU, or of every GPU when ``uuid`` is None."""
        with self._lock:
            for key in self._values:
                if uuid is None or key == uuid:
                    self._values[key] = value

    def exposition(self) -> str:
        """The body of ``/metrics``."""
        lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
        with self._lock:
            for gpu in self.gpus:
                lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{_labels(gpu)}}} {self._values[gpu.uuid]:g}")
        return "\n".join(lines) + "\n"

    def handle(self, request: Request) -> Reply:
        if request.method != "GET" or request.path != "/metrics":
            return Reply(404, "not found", content_type="text/plain")
        body = self.exposition()
        with self._lock:
            self.scrapes += 1
        return Reply(200, body, content_type="text/plain; version=0.0.4; charset=utf-8")


def h100_pool(pool: str, nodes: int = 2, gpus_per_node: int = 2) -> list[Gpu]:
    """GPUs of a pool of ``nodes`` nodes, as dcgm-exporter on each node would label them (AKS-style node names)."""
    return [Gpu(index=i, uuid=f"GPU-{pool}-{n:02d}{i:02d}-5f3c-4b1e-9a2d-000000000000",
                hostname=f"aks-{pool}-12345678-vmss{n:06d}", pool=pool)
            for n in range(nodes) for i in range(gpus_per_node)]
