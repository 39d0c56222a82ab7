"""A stand-in for NVIDIA's dcgm-exporter: serves ``DCGM_FI_DEV_GPU_UTIL`` per GPU with values the test sets."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Gpu:
    """One GPU as dcgm-exporter labels it."""

    index: int
    uuid: str
    hostname: str
    pool: str
    model: str = "NVIDIA H100 80GB HBM3"


def _labels(gpu: Gpu) -> str:
    pairs = {"gpu": str(gpu.index), "UUID": gpu.uuid, "device": f"nvidia{gpu.index}",
             "modelName": gpu.model, "Hostname": gpu.hostname, "autoscaler_pool": gpu.pool}
    return ",".join(f'{k}="{v}"' for k, v in pairs.items())


class DcgmExporter:
    """Serves ``/metrics`` in the text exposition format on 127.0.0.1; ``set_utilization`` changes every GPU."""

    def __init__(self, gpus: list[Gpu], utilization: float = 50.0) -> None:
        self.gpus = gpus
        self._values = {gpu.uuid: utilization for gpu in gpus}
        self._lock = threading.Lock()
        self.scrapes = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="dcgm-fake", daemon=True)

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    @property
    def target(self) -> str:
        """``host:port`` for a Prometheus static config."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> "DcgmExporter":
        """Start serving in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

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

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = exporter.exposition().encode()
                exporter.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence access logs
                return

        return Handler


def h100_pool(pool: str, nodes: int = 2, gpus_per_node: int = 2) -> list[Gpu]:
    """GPUs of a pool of ``nodes`` nodes, as dcgm-exporter on each node would label them."""
    return [Gpu(index=i, uuid=f"GPU-{pool}-{n:02d}{i:02d}-5f3c-4b1e-9a2d-000000000000", hostname=f"{pool}-node-{n}",
                pool=pool) for n in range(nodes) for i in range(gpus_per_node)]
