"""``provisioning_requests:`` (the all-or-nothing requests the service serves) and a pool's ``node_labels``."""
from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from autoscaler.config.common import Frozen
from autoscaler.config.durations import Duration

#: cluster-autoscaler's atomic class, the one Kueue's ProvisioningRequestConfig names for all-or-nothing scale-ups.
ATOMIC_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class ProvisioningRequestsConfig(Frozen):
    """Which ProvisioningRequests (``autoscaling.x-k8s.io/v1``) the service serves, and how long nodes it provisioned
    for one are kept for the pods that will come (``booking``)."""

    class_: str = Field(default=ATOMIC_CLASS, alias="class", min_length=1, max_length=253,
                       description="spec.provisioningClassName of the requests served; others are left alone.")
    booking: Duration = Field(default=600.0, description="How long provisioned nodes are kept for the request's "
                              "pods before they may go (BookingExpired).")

    @field_validator("booking")
    @classmethod
    def _booking(cls, v: float) -> float:
        if not 0 < v <= 7 * 86400:
            raise ValueError("must be more than 0 and at most 7d")
        return v


def label_problem(key: Any, value: Any) -> str:
    """Why ``key: value`` is not a Kubernetes label, or "" (a key is ``[prefix/]name``)."""
    if not isinstance(key, str) or not isinstance(value, str):
        return f"{key!r}: keys and values are strings (quote a number or true/false)"
    prefix, _, name = key.rpartition("/")
    if (prefix and not _PREFIX.match(prefix)) or not _NAME.match(name):
        return f"{key[:80]!r} is not a label key (e.g. nvidia.com/gpu.product)"
    if not _VALUE.match(value):
        return f"{key[:80]}: {value[:80]!r} is not a label value (at most 63 of A-Z a-z 0-9 - _ .)"
    return ""


def node_labels(value: Any) -> dict[str, str]:
    """A pool's ``node_labels`` mapping, checked label by label (ValueError naming the first bad one)."""
    if not isinstance(value, dict):
        raise ValueError("a mapping of label: value, e.g. {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}")
    for key, val in value.items():
        why = label_problem(key, val)
        if why:
            raise ValueError(why)
    return dict(value)
