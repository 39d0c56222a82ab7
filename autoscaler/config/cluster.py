"""``kubernetes:``: how the service sees the cluster's nodes and pods."""
from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, SecretStr, model_validator

from autoscaler.config.durations import Duration
from autoscaler.config.common import DEFAULT_GPU_DEVICE_CLASSES, DEFAULT_GPU_RESOURCES, Frozen

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _class_name(value: str) -> str:
    if not _DNS_SUBDOMAIN.match(value):
        raise ValueError(f"{value[:60]!r} is not a DeviceClass name (a lower-case DNS subdomain, e.g. gpu.nvidia.com)")
    return value


#: A DeviceClass's name (a DNS subdomain).
ClassName = Annotated[str, AfterValidator(_class_name)]


class KubernetesConfig(Frozen):
    """How the service sees the cluster's nodes and pods (node-aware scale-in): ``in_cluster`` and/or
    ``kubeconfig``, or ``host``. With both ``in_cluster: true`` and ``kubeconfig``, the service account is used when
    the process runs in a pod (``KUBERNETES_SERVICE_HOST`` set) and the kubeconfig otherwise, so one file serves
    both. ``host`` (+ ``token``) is for out-of-cluster use without a kubeconfig and tests."""

    in_cluster: bool = False
    kubeconfig: str | None = Field(default=None, min_length=1)
    context: str | None = None
    host: str | None = Field(default=None, pattern=r"^https?://[^\s/?#]+/?$")
    token: SecretStr | None = None
    verify_ssl: bool = True
    ca_cert: str | None = None
    gpu_resources: list[str] = Field(default_factory=lambda: list(DEFAULT_GPU_RESOURCES), min_length=1)
    gpu_device_classes: list[ClassName] = Field(default_factory=lambda: list(DEFAULT_GPU_DEVICE_CLASSES),
                                          description="DRA DeviceClasses whose devices are GPUs ([] : none).")
    timeout: Duration = Field(default=5.0, gt=0, description="Read timeout of one API call.")

    @model_validator(mode="after")
    def _one_source(self) -> "KubernetesConfig":
        given = [k for k, on in (("in_cluster", self.in_cluster), ("kubeconfig", self.kubeconfig is not None),
                                 ("host", self.host is not None)) if on]
        if not given or (self.host is not None and len(given) > 1):  # in_cluster + kubeconfig: pod or not
            raise ValueError("give `in_cluster: true` and/or `kubeconfig:`, or `host:` alone"
                             + (f" (got {', '.join(given)})" if given else ""))
        if self.context is not None and self.kubeconfig is None:
            raise ValueError("`context` needs `kubeconfig`")
        if (self.token is not None or self.ca_cert is not None) and self.host is None:
            raise ValueError("`token` and `ca_cert` go with `host`")
        return self


#: The name of the one cluster ``kubernetes:`` configures (and of a cluster handed to ``create_app`` alone).
DEFAULT_CLUSTER = "default"


class ClusterConfig(KubernetesConfig):
    """One entry of ``clusters:``: the keys of ``kubernetes:`` plus the ``name`` pools point at with ``cluster:``
    (a bounded label value: it names the ``gpu_autoscaler_cluster_reachable`` series)."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9_.]{0,61}[a-z0-9])?$",
                      description="The cluster's name (lower case, as a DNS label; pools name it in `cluster:`).")


def cluster_problems(kubernetes: object, clusters: list[object], pool_clusters: list[object]) -> list[str]:
    """``clusters:`` against ``kubernetes:`` and the pools' ``cluster:`` (read from the raw file too, so check-config
    reports them beside field errors): both sections, duplicate names, an unknown name, a pool that must choose."""
    problems: list[str] = []
    names = [getattr(c, "name", c.get("name") if isinstance(c, dict) else None) for c in clusters]
    if kubernetes is not None and clusters:
        problems.append("clusters: give either `kubernetes:` (one cluster, named \"default\") or `clusters:`, not "
                        "both")
    seen: set[str] = set()
    for index, name in enumerate(names):
        if isinstance(name, str) and name in seen:
            problems.append(f"clusters[{index}].name: duplicate cluster name {name!r}")
        if isinstance(name, str):
            seen.add(name)
    known = sorted(seen) if clusters else ([DEFAULT_CLUSTER] if kubernetes is not None else [])
    for index, wanted in enumerate(pool_clusters):
        if wanted is None:
            if len(known) > 1:
                problems.append(f"pools[{index}].cluster: required with several clusters (one of "
                                f"{', '.join(known)})")
        elif isinstance(wanted, str) and wanted not in known:
            problems.append(f"pools[{index}].cluster: no cluster named {wanted!r}" + (
                f" (configured: {', '.join(known)})" if known else
                " (no cluster configured: add `clusters:` or `kubernetes:`)"))
    return problems
