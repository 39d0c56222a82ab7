"""A stand-in for kube-state-metrics v2: serves the node and pod series the scaling rules read, in the exposition
text and with the label sets kube-state-metrics produces (docs/metrics/cluster/node-metrics.md and
workload/pod-metrics.md): ``kube_node_labels`` with the allowlisted node labels as ``label_<sanitized key>``, and for
each pod ``kube_pod_container_resource_requests``, ``kube_pod_status_phase``, ``kube_pod_status_scheduled`` and
``kube_pod_labels``."""
from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass, field

from tests.support.fakes.httpbase import FakeHttpServer, Reply, Request

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def label_name(key: str) -> str:
    """A Kubernetes label key as kube-state-metrics names it (``kubernetes.azure.com/agentpool`` ->
    ``label_kubernetes_azure_com_agentpool``)."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


@dataclass(frozen=True)
class Pod:
    """A pod that requests GPUs; ``node`` None while it waits for one (PodScheduled=False)."""

    namespace: str
    name: str
    gpus: int
    phase: str = "Pending"
    node: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))


def _series(name: str, labels: dict[str, str], value: float) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" + f" {value:g}"


def _pod_lines(pod: Pod) -> list[str]:
    who = {"namespace": pod.namespace, "pod": pod.name, "uid": pod.uid}
    request = {**who, "container": "main", **({"node": pod.node} if pod.node else {}),
               "resource": "nvidia_com_gpu", "unit": "integer"}
    lines = [_series("kube_pod_container_resource_requests", request, pod.gpus)]
    lines += [_series("kube_pod_status_phase", {**who, "phase": p}, int(p == pod.phase)) for p in PHASES]
    scheduled = "true" if pod.node else "false"
    lines += [_series("kube_pod_status_scheduled", {**who, "condition": c}, int(c == scheduled))
              for c in ("true", "false", "unknown")]
    lines.append(_series("kube_pod_labels", {**who, **{label_name(k): v for k, v in pod.labels.items()}}, 1))
    return lines


class KubeStateMetrics(FakeHttpServer):
    """Serves ``/metrics`` on 127.0.0.1; ``nodes`` maps node name -> its allowlisted labels, ``set_pods`` changes
    the pods."""

    name = "ksm-fake"

    def __init__(self, nodes: dict[str, dict[str, str]]) -> None:
        self.nodes = nodes
        self._pods: list[Pod] = []
        self._lock = threading.Lock()
        super().__init__()

    @property
    def target(self) -> str:
        """``host:port`` for a Prometheus static config."""
        return f"127.0.0.1:{self._server.server_address[1]}"

    def set_pods(self, pods: list[Pod]) -> None:
        """The pods served from now on."""
        with self._lock:
            self._pods = list(pods)

    def exposition(self) -> str:
        """The body of ``/metrics``."""
        lines = ["# HELP kube_node_labels Kubernetes labels converted to Prometheus labels.",
                 "# TYPE kube_node_labels gauge"]
        lines += [_series("kube_node_labels", {"node": node, **{label_name(k): v for k, v in labels.items()}}, 1)
                  for node, labels in self.nodes.items()]
        with self._lock:
            pods = list(self._pods)
        for name in ("kube_pod_container_resource_requests", "kube_pod_status_phase", "kube_pod_status_scheduled",
                     "kube_pod_labels"):
            lines += [f"# TYPE {name} gauge"]
            lines += [line for pod in pods for line in _pod_lines(pod) if line.startswith(name + "{")]
        return "\n".join(lines) + "\n"

    def handle(self, request: Request) -> Reply:
        if request.method != "GET" or request.path != "/metrics":
            return Reply(404, "not found", content_type="text/plain")
        return Reply(200, self.exposition(), content_type="text/plain; version=0.0.4; charset=utf-8")
