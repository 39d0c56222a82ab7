"""Each cloud's capacity and quota codes through the one pure classification, and the failures that are neither."""
from __future__ import annotations

import pytest

from providers.shortfalls import classify, shortfall

CORES = ("Operation could not be completed as it results in exceeding approved standardNCADSH100v5Family Cores "
         "quota. Additional details - Deployment Model: Resource Manager, Location: westeurope, Current Limit: 40, "
         "Current Usage: 40, Additional Required: 40, (Minimum) New Limit Required: 80.")


@pytest.mark.parametrize("cloud, code, message, kind", [
    ("aks", "ZonalAllocationFailed", "Allocation failed. We do not have sufficient capacity for the requested VM "
                                     "size in this zone.", "capacity"),
    ("aks", "AllocationFailed", "Allocation failed.", "capacity"),
    ("aks", "OverconstrainedAllocationRequest", "Allocation failed. VM(s) with the following constraints cannot be "
                                                "allocated", "capacity"),
    ("aks", "OverconstrainedZonalAllocationRequest", "Allocation failed in zone 2.", "capacity"),
    ("aks", "SkuNotAvailable", "The requested VM size Standard_ND96asr_v4 is currently not available in location "
                               "westeurope zones '1'.", "capacity"),
    ("aks", "QuotaExceeded", "Quota exceeded for family standardNDASv4_A100Family.", "quota"),
    ("aks", "OperationNotAllowed", CORES, "quota"),
    ("aks", "OperationNotAllowed", "Operation not allowed: the agent pool is being upgraded.", None),
    ("aks", "AuthorizationFailed", "The client does not have authorization", None),
    ("aks", "InvalidParameter", "count must be within 0..1000", None),
    ("eks", "InsufficientInstanceCapacity", "We currently do not have sufficient p5.48xlarge capacity in the "
                                            "Availability Zone you requested (us-east-1a).", "capacity"),
    ("eks", "InsufficientFreeAddresses", "One or more of the subnets has no free IP addresses.", "capacity"),
    ("eks", "InstanceLimitExceeded", "You have requested more instances than your current instance limit.",
     "quota"),
    ("eks", "VcpuLimitExceeded", "You have requested more vCPU capacity than your current vCPU limit of 192.",
     "quota"),
    ("eks", "AsgInstanceLaunchFailures", "Could not launch On-Demand Instances. InsufficientInstanceCapacity - We "
                                         "currently do not have sufficient p4d.24xlarge capacity.", "capacity"),
    ("eks", "AsgInstanceLaunchFailures", "Could not launch On-Demand Instances. VcpuLimitExceeded - You have "
                                         "requested more vCPU capacity than your current vCPU limit.", "quota"),
    ("eks", "AsgInstanceLaunchFailures", "Could not launch On-Demand Instances. InvalidParameterCombination - The "
                                         "requested configuration is currently not supported.", None),
    ("eks", "AccessDenied", "not authorized", None),
    ("gke", "ZONE_RESOURCE_POOL_EXHAUSTED", "The zone 'projects/p/zones/us-central1-a' does not have enough "
                                            "resources available to fulfill the request.", "capacity"),
    ("gke", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "The zone does not have enough resources: a2-highgpu-8g.",
     "capacity"),
    ("gke", "RESOURCE_POOL_EXHAUSTED", "The zone does not have enough resources.", "capacity"),
    ("gke", "INSUFFICIENT_CAPACITY", "Insufficient capacity.", "capacity"),
    ("gke", "GCE_STOCKOUT", "Instances could not be created: stockout.", "capacity"),
    ("gke", "GCE_QUOTA_EXCEEDED", "Quota exceeded.", "quota"),
    ("gke", "QUOTA_EXCEEDED", "Quota 'NVIDIA_A100_GPUS' exceeded. Limit: 16.0 in region us-central1.", "quota"),
    ("gke", "REGIONAL_QUOTA_EXCEEDED", "Quota 'GPUS_ALL_REGIONS' exceeded.", "quota"),
    ("gke", "PERMISSION_DENIED", "Required 'compute.instances.create' permission", None),
    ("ack", "OperationDenied.NoStock", "The requested resource is sold out in the specified zone.", "capacity"),
    ("ack", "Zone.NotOnSale", "The specified zone is not available for purchase.", "capacity"),
    ("ack", "QuotaExceed.ElasticQuota", "The number of instances exceeds the elastic quota.", "quota"),
    ("ack", "Forbidden.RAM", "User not authorized to operate on the specified resource.", None),
    ("simulated", "ZonalAllocationFailed", "a code of another cloud", None),
])
def test_classify(cloud: str, code: str, message: str, kind: str | None) -> None:
    assert classify(cloud, code, message) == kind


def test_a_shortfall_only_for_capacity_or_quota_with_nodes_undelivered() -> None:
    short = shortfall("aks", "QuotaExceeded", "Quota exceeded.", asked=5, delivered=3)
    assert short is not None and (short.undelivered, short.quota, short.give_back) == (2, True, True)
    assert shortfall("aks", "AuthorizationFailed", "no", asked=5, delivered=3) is None
    assert shortfall("aks", "ZonalAllocationFailed", "no", asked=5, delivered=5) is None
