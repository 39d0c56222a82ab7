"""GPUs through Dynamic Resource Allocation (``resource.k8s.io/v1``), as plain facts (pure: stdlib only).

A node publishes its devices in ResourceSlices (``spec.nodeName``, ``spec.driver``, ``spec.pool{name, generation,
resourceSliceCount}``, ``spec.devices[{name, taints}]``); a pod asks through ``spec.resourceClaims`` and its claim's
``status.allocation.devices.results[{request, driver, pool, device}]`` names what it got. :func:`dra_state` turns
the three lists (DeviceClasses, ResourceSlices, ResourceClaims) into one :class:`Dra`, read once; the node view
(:func:`autoscaler.cluster.nodes.node_view`) asks it for a node's GPUs and a pod's.

The rules:

- A class is a GPU class when ``kubernetes.gpu_device_classes`` names it; its driver is the one its CEL selector
  names in the simple form ``device.driver == 'x'`` (the first such selector), else the class's own name (NVIDIA's
  classes ``gpu.nvidia.com`` and ``mig.nvidia.com`` both select driver ``gpu.nvidia.com``).
- A node's GPUs: the devices of those drivers in the slices naming the node, of each pool's highest
  ``generation`` only, and only once all ``resourceSliceCount`` slices of that generation are there (a pool being
  published counts nothing yet), less devices tainted ``NoSchedule`` or ``NoExecute``. Each device is one GPU (a MIG
  device one, as ``nvidia.com/mig-*`` counts one per slice).
- A claim's GPUs: the results of its GPU-class requests once allocated; before, each GPU-class request's
  ``count`` (``allocationMode: All``: the most devices of that driver one node has). A claim the scheduler made for
  an extended resource (annotated ``resource.kubernetes.io/extended-resource-claim: "true"``) counts nothing here:
  the pod's extended resource request counts it already.
- Free GPUs on a node: its GPUs less the devices any claim holds.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

EXTENDED_CLAIM = "resource.kubernetes.io/extended-resource-claim"
_BLOCKING = ("NoSchedule", "NoExecute")
_DRIVER_IS = re.compile(r"""^\s*device\.driver\s*==\s*(['"])([^'"]+)\1""")

READ = "read"
NOT_READ = "not_read"
UNUSED = "unused"  # nothing the read looked at needed it (every node has device-plugin GPUs, no pod has a claim)


@dataclass(frozen=True)
class Claim:
    """A ResourceClaim as GPU facts."""

    gpus: int  # GPU devices it holds (allocated) or asks for (not yet)
    gpu_class: str  # the first GPU class it asks for ("" when none)
    driver: str  # that class's driver
    allocated: bool
    extended: bool  # made by the scheduler for an extended resource request


@dataclass(frozen=True)
class Dra:
    """What the DRA API said, once per read (or why it was not read: ``status`` ``not_read`` and ``reason``)."""

    status: str = NOT_READ
    reason: str = ""
    drivers: Mapping[str, str] = field(default_factory=dict)  # GPU class -> driver
    devices: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # node -> driver -> usable GPU devices
    taken: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # node -> driver -> usable ones claimed
    claims: Mapping[tuple[str, str], Claim] = field(default_factory=dict)  # (namespace, name) -> claim
    unseen: str = ""  # not read although the API may be there (its status, "403"): a pod's claims may hold GPUs

    @property
    def blind(self) -> bool:
        """Not read for a reason other than the API's absence: a pod with ``spec.resourceClaims`` may hold GPUs
        this read cannot see (with the API absent, 404, no pod can hold a claim)."""
        return bool(self.unseen) and not self.read

    @property
    def read(self) -> bool:
        return self.status == READ

    def node_gpus(self, node: str) -> int:
        return sum(self.devices.get(node, {}).values())

    def node_taken(self, node: str) -> int:
        return sum(self.taken.get(node, {}).values())

    def node_free(self, node: str) -> dict[str, int]:
        """Per driver: the node's usable GPU devices no claim holds."""
        have, taken = self.devices.get(node, {}), self.taken.get(node, {})
        return {d: n - taken.get(d, 0) for d, n in have.items()}


def not_read(reason: str, unseen: str = "") -> Dra:
    return Dra(status=NOT_READ, reason=reason, unseen=unseen)


def class_driver(device_class: Mapping[str, Any]) -> str:
    """The driver a DeviceClass selects (``device.driver == '…'`` leading a CEL selector), else its own name."""
    meta, spec = device_class.get("metadata") or {}, device_class.get("spec") or {}
    for selector in spec.get("selectors") or ():
        match = _DRIVER_IS.match(str((selector.get("cel") or {}).get("expression") or ""))
        if match:
            return match.group(2)
    return str(meta.get("name", ""))


def _usable(slices: Iterable[Mapping[str, Any]], drivers: set[str]) -> dict[tuple[str, str, str], tuple[str, bool]]:
    """(driver, pool, device) -> (node, untainted) for the GPU drivers' devices of complete, current pools."""
    newest: dict[tuple[str, str], tuple[int, int, list[Mapping[str, Any]]]] = {}  # pool -> generation, count, slices
    for s in slices:
        spec = s.get("spec") or {}
        driver, pool = str(spec.get("driver", "")), spec.get("pool") or {}
        if driver not in drivers or not spec.get("nodeName"):
            continue
        key, gen = (driver, str(pool.get("name", ""))), int(pool.get("generation") or 0)
        count = int(pool.get("resourceSliceCount") or 1)
        have = newest.get(key)
        if have is None or gen > have[0]:
            newest[key] = (gen, count, [spec])
        elif gen == have[0]:
            have[2].append(spec)
    out: dict[tuple[str, str, str], tuple[str, bool]] = {}
    for (driver, pool), (_, count, specs) in newest.items():
        if len(specs) < count:
            continue  # the driver is still publishing this pool: its view is not complete
        for spec in specs:
            for device in spec.get("devices") or ():
                clean = not any(t.get("effect") in _BLOCKING for t in device.get("taints") or ())
                out[(driver, pool, str(device.get("name", "")))] = (str(spec["nodeName"]), clean)
    return out


def _requests(spec: Mapping[str, Any], drivers: Mapping[str, str]) -> list[tuple[str, str, str, int | None]]:
    """The claim's GPU-class requests: (name, class, allocationMode, count); a ``firstAvailable`` request by its
    first GPU-class choice."""
    out = []
    for req in (spec.get("devices") or {}).get("requests") or ():
        choices = [req.get("exactly") or req] + list(req.get("firstAvailable") or ())
        chosen = next((c for c in choices if c.get("deviceClassName") in drivers), None)
        if chosen is not None:
            count = chosen.get("count")
            out.append((str(req.get("name", "")), str(chosen["deviceClassName"]),
                        str(chosen.get("allocationMode") or "ExactCount"), int(count) if count is not None else None))
    return out


def claim_of(raw: Mapping[str, Any], drivers: Mapping[str, str], per_node: Mapping[str, int]) -> Claim:
    """One ResourceClaim; ``per_node``: the most GPU devices of each driver one node has (``All`` before
    allocation)."""
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    asked = _requests(spec, drivers)
    extended = str((meta.get("annotations") or {}).get(EXTENDED_CLAIM, "")).lower() == "true"
    gpu_class = asked[0][1] if asked else ""
    driver = drivers.get(gpu_class, "")
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results")
    if results is not None and status.get("allocation"):
        names = {name for name, _, _, _ in asked}
        gpus = sum(1 for r in results if str(r.get("request", "")).split("/")[0] in names)
        return Claim(gpus, gpu_class, driver, True, extended)
    gpus = sum((per_node.get(drivers[c], 1) or 1) if mode == "All" else (n if n is not None else 1)
               for _, c, mode, n in asked)
    return Claim(gpus, gpu_class, driver, False, extended)


def dra_state(classes: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]],
              claims: Iterable[Mapping[str, Any]], gpu_classes: Sequence[str]) -> Dra:
    """The three lists as the API server sends them, into one :class:`Dra`."""
    found = {str((c.get("metadata") or {}).get("name", "")): c for c in classes}
    drivers = {name: class_driver(found[name]) if name in found else name for name in gpu_classes}
    usable = _usable(slices, set(drivers.values()))
    devices: dict[str, dict[str, int]] = {}
    for (driver, _, _), (node, clean) in usable.items():
        if clean:
            devices.setdefault(node, {}).setdefault(driver, 0)
            devices[node][driver] += 1
    per_node: dict[str, int] = {}
    for by_driver in devices.values():
        for driver, n in by_driver.items():
            per_node[driver] = max(per_node.get(driver, 0), n)
    taken: dict[str, dict[str, int]] = {}
    out: dict[tuple[str, str], Claim] = {}
    for raw in claims:
        meta = raw.get("metadata") or {}
        out[(str(meta.get("namespace", "")), str(meta.get("name", "")))] = claim_of(raw, drivers, per_node)
        allocation = (raw.get("status") or {}).get("allocation") or {}
        for r in (allocation.get("devices") or {}).get("results") or ():
            where = usable.get((str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", ""))))
            if where is not None and where[1]:
                by_driver = taken.setdefault(where[0], {})
                by_driver[str(r["driver"])] = by_driver.get(str(r["driver"]), 0) + 1
    return Dra(READ, "", drivers, devices, taken, out)


def pod_claims(pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (namespace, name) of each ResourceClaim the pod uses: named, or generated from a template (as
    ``status.resourceClaimStatuses`` says; a template's claim not made yet is not there)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    made = {s.get("name"): s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses")
            or ()}
    namespace = str(meta.get("namespace", ""))
    out = []
    for ref in spec.get("resourceClaims") or ():
        name = ref.get("resourceClaimName") or made.get(ref.get("name"))
        if name:
            out.append((namespace, str(name)))
    return out


def asks_through_claims(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("resourceClaims"))


def pod_gpu_claims(pod: Mapping[str, Any], dra: Dra | None) -> list[tuple[tuple[str, str], Claim]]:
    """The pod's GPU claims (not the extended-resource ones: its requests count those)."""
    if dra is None or not dra.read:
        return []
    found = ((key, dra.claims.get(key)) for key in pod_claims(pod))
    return [(key, c) for key, c in found if c is not None and c.gpus > 0 and not c.extended]
