"""Which of a cloud's failure codes mean "accepted, but no machines to be had": one pure classification for every
cloud (no I/O), so that each code is table-tested once and every provider reports a shortfall the same way.

``classify`` answers ``capacity`` (a stockout: the zone or region has no such machine now), ``quota`` (a limit of
the account: cores, instances, addresses) or None for any other failure (auth, a bad request, a busy pool), which
is not a shortfall and is never passed over as one.
"""
from __future__ import annotations

import re

from autoscaler.models import Shortfall

CAPACITY, QUOTA = "capacity", "quota"

#: Each cloud's codes, exactly as the cloud writes them.
_CODES: dict[str, dict[str, str]] = {
    "aks": {  # the agent pool's status.provisioningError / the PUT's async operation error
        "ZonalAllocationFailed": CAPACITY,
        "AllocationFailed": CAPACITY,
        "OverconstrainedAllocationRequest": CAPACITY,
        "OverconstrainedZonalAllocationRequest": CAPACITY,
        "SkuNotAvailable": CAPACITY,
        "QuotaExceeded": QUOTA,
    },
    "eks": {  # node group health.issues codes, and the codes an Auto Scaling activity's StatusMessage names
        "InsufficientInstanceCapacity": CAPACITY,
        "InsufficientFreeAddresses": CAPACITY,
        "InstanceLimitExceeded": QUOTA,
        "VcpuLimitExceeded": QUOTA,
    },
    "gke": {  # managed instances' lastAttempt.errors, node pool conditions
        "ZONE_RESOURCE_POOL_EXHAUSTED": CAPACITY,
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": CAPACITY,
        "RESOURCE_POOL_EXHAUSTED": CAPACITY,
        "INSUFFICIENT_CAPACITY": CAPACITY,
        "GCE_STOCKOUT": CAPACITY,
        "GCE_QUOTA_EXCEEDED": QUOTA,
    },
    "ack": {  # the scaling task's error, failed nodes
        "OperationDenied.NoStock": CAPACITY,
        "Zone.NotOnSale": CAPACITY,
        "QuotaExceed.ElasticQuota": QUOTA,
    },
    "simulated": {"SimulatedStockout": CAPACITY},  # the stand-in cloud's stockout (providers/simulated.py)
}
#: A message that names a cores (vCPU) quota: AKS's OperationNotAllowed says "... exceeding approved
#: standardNCADSH100v5Family Cores quota ..."; EKS's AsgInstanceLaunchFailures carries the launch error's text.
_CORES_QUOTA = re.compile(r"\b(cores?|vcpus?)\b.{0,80}\bquota\b|\bquota\b.{0,80}\b(cores?|vcpus?)\b", re.I | re.S)
#: Codes that only say "launching failed"; the message says why (EKS's health issue).
_BY_MESSAGE = {("eks", "AsgInstanceLaunchFailures")}


def classify(cloud: str, code: str, message: str = "") -> str | None:
    """``capacity``, ``quota`` or None for one failure the cloud reported (its code and message)."""
    known = _CODES.get(cloud, {})
    if code in known:
        return known[code]
    if cloud == "gke" and "QUOTA" in code.upper():
        return QUOTA
    if cloud == "ack" and code.startswith("QuotaExceed"):
        return QUOTA
    if cloud == "aks" and code == "OperationNotAllowed" and _CORES_QUOTA.search(message):
        return QUOTA
    if (cloud, code) in _BY_MESSAGE:
        named = [kind for name, kind in known.items() if name in message]
        return QUOTA if QUOTA in named else (CAPACITY if named else None)
    return None


def known(code: str) -> bool:
    """Whether ``code`` is one this module lists for some cloud: a bounded set, so a metric may take it as a label
    (a code matched only by a pattern, such as GKE's ``*QUOTA*`` or ACK's ``QuotaExceed.*``, is not)."""
    return any(code in codes for codes in _CODES.values()) or any(code == name for _, name in _BY_MESSAGE)


def named_code(cloud: str, code: str, message: str) -> str:
    """The most telling code: for a code that only says "launching failed", the capacity or quota code its message
    names (EKS's AsgInstanceLaunchFailures naming InsufficientInstanceCapacity), else ``code`` itself."""
    if (cloud, code) in _BY_MESSAGE:
        return next((name for name in _CODES.get(cloud, {}) if name in message), code)
    return code


def shortfall(cloud: str, code: str, message: str, asked: int, delivered: int, *,
              give_back: bool = True) -> Shortfall | None:
    """The shortfall to report for a failure, or None when it is not one (another kind, or nothing undelivered)."""
    kind = classify(cloud, code, message)
    if kind is None or delivered >= asked:
        return None
    return Shortfall(asked=asked, delivered=max(0, delivered), code=named_code(cloud, code, message),
                     message=message[:1000], quota=kind == QUOTA, give_back=give_back)
