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
