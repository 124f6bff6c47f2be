"""ResourceClaims (``resource.k8s.io/v1``): what a claim asks for, and what it was given.

:func:`claim_facts_from_raw` keeps a claim's requests (``exactly``: ``deviceClassName``,
selectors, ``count``), its allocation (``status.allocation.devices.results[]``: request,
driver, pool, device; only ``gpu.nvidia.com`` devices are kept, and not those given with
``adminAccess``, which hold nothing), who it is reserved for
(``status.reservedFor``), its controlling Pod and whether kube-scheduler made it for a pod's
extended resources (KEP-5004: annotation ``resource.kubernetes.io/extended-resource-claim:
"true"``, named ``<pod>-extended-resources-<random>``).

:func:`gpu_asks` reads, with the DeviceClasses, what a claim's requests ask of NVIDIA's GPUs:
a MIG profile or whole GPUs, how many, and the selection that narrows which (see
:mod:`migslice.objects.dra_selectors`). A request of another driver asks nothing of them,
whatever its form (each ``firstAvailable`` sub-request's class names that driver); one
migslice cannot read (``firstAvailable``, ``allocationMode: All``, ``adminAccess``, a
capacity request, a selector it does not read, a MIG request without a profile) is named in
the answer's ``unread``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

from migslice.errors import shown
from migslice.names import DRA_DRIVER, EXTENDED_RESOURCE_CLAIM_ANNOTATION, MIGSLICE_PREFIX
from migslice.objects.device_classes import DeviceClassFacts
from migslice.objects.dra_selectors import DeviceSelection, read_selectors
from migslice.objects.json import JsonObject, items, mapping, text
from migslice.objects.resource_slices import DeviceKind

RawClaim = JsonObject


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One ``exactly`` request; ``unread``: why migslice cannot read it ("" when it can)."""

    name: str
    device_class: str
    selection: DeviceSelection
    count: int = 1
    unread: str = ""
    tolerates: bool = False
    """It carries ``tolerations``: kube-scheduler's allocator may give it devices that a taint
    (the driver's, a DeviceTaintRule's, migslice's steer) keeps off other claims
    (``allocator_incubating.go`` ``taintPreventsAllocation``)."""
    alternatives: tuple[tuple[str, DeviceSelection], ...] = ()
    """The class and selection of each ``firstAvailable`` sub-request: whether the request
    may be given NVIDIA's devices at all."""


@dataclass(frozen=True, slots=True)
class ClaimFacts:
    """The decision-relevant part of a ResourceClaim.

    ``devices``: (pool, device) of every ``gpu.nvidia.com`` device its allocation holds: a
    result with ``adminAccess: true`` holds none (kube-scheduler's allocator does not count
    it as in use, ``foreachAllocatedDevice``, and gives the device to other claims);
    ``reserved_for``: the ``namespace/name`` of the pods it is reserved for; ``owner``: that of
    the Pod that controls it (template and extended-resource claims), else None."""

    key: str
    requests: tuple[ClaimRequest, ...] = ()
    allocated: bool = False
    devices: tuple[tuple[str, str], ...] = ()
    reserved_for: tuple[str, ...] = ()
    owner: str | None = None
    extended_resource: bool = False

    def devices_in(self, pool: str) -> tuple[str, ...]:
        return tuple(device for name, device in self.devices if name == pool)


@dataclass(frozen=True, slots=True)
class GpuAsk:
    """``count`` devices of ``kind`` (a MIG ``profile``, or whole GPUs) matching ``selection``
    (the class's and the request's selectors together)."""

    request: str
    kind: DeviceKind
    profile: str | None
    count: int
    selection: DeviceSelection
    tolerates: bool = False
    """Its request tolerates device taints (:attr:`ClaimRequest.tolerates`): where it lands
    is not predicted, since migslice keeps which devices are tainted, not by which taint."""


@dataclass(frozen=True, slots=True)
class GpuAsks:
    asks: tuple[GpuAsk, ...] = ()
    unread: tuple[str, ...] = ()
    """One line per request migslice cannot read."""


def claim_facts_from_raw(raw_claim: RawClaim) -> ClaimFacts | None:
    metadata = mapping(raw_claim.get("metadata"))
    name = text(metadata.get("name"))
    if not name:
        return None
    namespace = text(metadata.get("namespace")) or "default"
    spec = mapping(mapping(raw_claim.get("spec")).get("devices"))
    status = mapping(raw_claim.get("status"))
    allocation = status.get("allocation")
    results = items(mapping(mapping(allocation).get("devices")).get("results"))
    devices = tuple(
        (sys.intern(text(result.get("pool")) or ""), sys.intern(text(result.get("device")) or ""))
        for result in (mapping(raw) for raw in results)
        if result.get("driver") == DRA_DRIVER and result.get("adminAccess") is not True
    )
    reserved = tuple(
        f"{namespace}/{text(ref.get('name'))}"
        for ref in (mapping(raw) for raw in items(status.get("reservedFor")))
        if ref.get("resource") == "pods" and text(ref.get("name"))
    )
    owner = None
    for ref in (mapping(raw) for raw in items(metadata.get("ownerReferences"))):
        if ref.get("kind") == "Pod" and ref.get("controller") is True and text(ref.get("name")):
            owner = f"{namespace}/{text(ref.get('name'))}"
    annotations = mapping(metadata.get("annotations"))
    raw_requests = items(spec.get("requests"))
    too_much = too_much_to_read(spec)
    return ClaimFacts(
        key=f"{namespace}/{name}",
        requests=tuple(
            _request(mapping(raw), i)
            if not too_much
            else ClaimRequest(
                text(mapping(raw).get("name")) or f"#{i}", "", DeviceSelection(), unread=too_much
            )
            for i, raw in enumerate(raw_requests)
        ),
        allocated=isinstance(allocation, Mapping),
        devices=devices,
        reserved_for=reserved,
        owner=owner,
        extended_resource=annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true",
    )


MAX_REQUESTS = 32
"""kube-apiserver's limits on a claim (``DeviceRequestsMaxSize``, ``DeviceSelectorsMaxSize``,
``FirstAvailableDeviceRequestMaxSize``, ``DeviceConfigMaxSize``); the webhook reads a claim
before kube-apiserver validates it."""
MAX_SELECTORS = 32
MAX_ALTERNATIVES = 8
MAX_CONFIGS = 32
MAX_CLAIM_CEL = 32 * 1024
"""The most CEL text of one claim migslice reads: selectors cost up to tens of milliseconds
per 10 KiB each to read, under the lock every admission takes."""


def too_much_to_read(raw_devices: JsonObject) -> str:
    """Why a claim's ``spec.devices`` (its requests, their sub-requests and selectors, its
    config entries) is too large or too long to read, or "" when it is not."""
    raw_requests = items(raw_devices.get("requests"))
    if len(raw_requests) > MAX_REQUESTS:
        return f"{len(raw_requests)} requests, more than kube-apiserver takes ({MAX_REQUESTS})"
    configs = items(raw_devices.get("config"))
    if len(configs) > MAX_CONFIGS:
        return f"{len(configs)} config entries, more than kube-apiserver takes ({MAX_CONFIGS})"
    for raw in raw_requests:
        alternatives = items(mapping(raw).get("firstAvailable"))
        if len(alternatives) > MAX_ALTERNATIVES:
            return (
                f"{len(alternatives)} firstAvailable sub-requests in one request, more than "
                f"kube-apiserver takes ({MAX_ALTERNATIVES})"
            )
    total = 0
    for raw in raw_requests:
        request = mapping(raw)
        parts = [mapping(request.get("exactly"))]
        parts += [mapping(p) for p in items(request.get("firstAvailable"))]
        for part in parts:
            selectors = items(part.get("selectors"))
            if len(selectors) > MAX_SELECTORS:
                return (
                    f"{len(selectors)} selectors in one request, more than kube-apiserver "
                    f"takes ({MAX_SELECTORS})"
                )
            for selector in selectors:
                expression = mapping(mapping(selector).get("cel")).get("expression")
                total += len(expression) if isinstance(expression, str) else 0
    if total > MAX_CLAIM_CEL:
        return f"selectors of {total} characters in all, more than migslice reads ({MAX_CLAIM_CEL})"
    return ""


def _request(raw: JsonObject, index: int) -> ClaimRequest:
    name = text(raw.get("name")) or f"#{index}"
    if raw.get("firstAvailable") is not None:
        alternatives = tuple(
            (text(sub.get("deviceClassName")) or "", _selection(sub))
            for sub in (mapping(s) for s in items(raw.get("firstAvailable")))
        )
        return ClaimRequest(
            name,
            "",
            DeviceSelection(),
            unread="firstAvailable sub-requests",
            alternatives=alternatives,
        )
    exactly = mapping(raw.get("exactly"))
    device_class = text(exactly.get("deviceClassName")) or ""
    selection = _selection(exactly)
    count = exactly.get("count", 1)
    unread = ""
    mode = exactly.get("allocationMode", "ExactCount")
    if mode != "ExactCount":
        unread = f"allocationMode {mode if isinstance(mode, str) else shown(mode)}"
    elif not isinstance(count, int) or isinstance(count, bool) or count < 1:
        unread = f"count {shown(count)}"
    elif exactly.get("adminAccess") is True:
        unread = "adminAccess"
    elif exactly.get("capacity") is not None:
        unread = "a capacity request"
    return ClaimRequest(
        sys.intern(name),
        sys.intern(device_class),
        selection,
        count if isinstance(count, int) and not isinstance(count, bool) else 1,
        unread,
        bool(items(exactly.get("tolerations"))),
    )


def _selection(raw_request: JsonObject) -> DeviceSelection:
    """What the selectors of an ``exactly`` request or a sub-request ask of a device."""
    return read_selectors(
        text(mapping(mapping(selector).get("cel")).get("expression")) or "<not a CEL selector>"
        for selector in items(raw_request.get("selectors"))
    )


def _another_drivers(request: ClaimRequest, classes: Mapping[str, DeviceClassFacts]) -> bool:
    """Whether every device the request may be given is another driver's: its class (each
    sub-request's) exists and, with its selectors, names a driver other than NVIDIA's."""
    for device_class, selection in request.alternatives or (
        (request.device_class, request.selection),
    ):
        found = classes.get(device_class)
        if found is None:
            return False
        both = found.selection.both(selection)
        if both.driver is None or is_nvidia_gpu(both):
            return False
    return True


def gpu_asks(claim: ClaimFacts, classes: Mapping[str, DeviceClassFacts]) -> GpuAsks:
    """What the claim's requests ask of NVIDIA's GPUs (see the module docstring)."""
    asks: list[GpuAsk] = []
    unread: list[str] = []
    for request in claim.requests:
        where = f"ResourceClaim {claim.key} request {request.name}"
        if request.unread:
            if not _another_drivers(request, classes):
                unread.append(f"{where}: {request.unread}")
            continue
        found = classes.get(request.device_class)
        if found is None:
            unread.append(f"{where}: DeviceClass {request.device_class!r} not known")
            continue
        selection = found.selection.both(request.selection)
        if not is_nvidia_gpu(selection):
            continue
        if selection.unread or selection.conflict:
            what = selection.unread[0] if selection.unread else "selectors that contradict"
            unread.append(f"{where}: {what}")
            continue
        kind = selection.device_type
        if kind == DeviceKind.MIG and selection.profile:
            asks.append(
                GpuAsk(
                    request.name,
                    DeviceKind.MIG,
                    selection.profile,
                    request.count,
                    selection,
                    request.tolerates,
                )
            )
        elif kind == DeviceKind.GPU and not selection.profile:
            asks.append(
                GpuAsk(
                    request.name, DeviceKind.GPU, None, request.count, selection, request.tolerates
                )
            )
        else:
            shown = "any" if kind is None else kind
            unread.append(f"{where}: device type {shown} without one MIG profile")
    return GpuAsks(tuple(asks), tuple(unread))


def profiles_asked(
    claim: ClaimFacts, classes: Mapping[str, DeviceClassFacts]
) -> frozenset[str] | None:
    """The MIG profiles the claim's requests may be given, read by :func:`gpu_asks` or not:
    each request's (each ``firstAvailable`` sub-request's) class and selectors together, where
    they name one profile; None where a request may be given a MIG device of any profile (it
    names none, or selects by what migslice does not read). Whole GPUs, another driver's
    devices, a class not known (nothing is allocated from it), selectors that contradict
    and ``allocationMode: All`` (docs/dra.md, "Cost, and the cap") add none."""
    found: set[str] = set()
    for request in claim.requests:
        if request.unread.startswith("allocationMode"):
            continue
        for device_class, selection in request.alternatives or (
            (request.device_class, request.selection),
        ):
            known = classes.get(device_class)
            if known is None:
                continue
            both = known.selection.both(selection)
            if not is_nvidia_gpu(both) or both.conflict or both.device_type == DeviceKind.GPU:
                continue
            if both.profile is None:
                return None
            found.add(both.profile)
    return frozenset(found)


def is_nvidia_gpu(selection: DeviceSelection) -> bool:
    """Whether a class's and a request's selection, together, are of NVIDIA's driver."""
    if selection.driver is not None:
        return selection.driver == DRA_DRIVER
    return any(key.startswith(DRA_DRIVER + "/") for key, _ in selection.equal)


def slim_claim(raw_claim: JsonObject) -> dict[str, object]:
    """What the webhook reads of a claim (metadata it uses, spec, the allocation's results and
    reservedFor), for a watch cache."""
    metadata = mapping(raw_claim.get("metadata"))
    status = mapping(raw_claim.get("status"))
    kept: dict[str, object] = {
        k: metadata[k] for k in ("name", "namespace", "ownerReferences") if k in metadata
    }
    annotations = mapping(metadata.get("annotations"))
    kept["annotations"] = {
        k: v
        for k, v in annotations.items()
        if k.startswith(MIGSLICE_PREFIX) or k == EXTENDED_RESOURCE_CLAIM_ANNOTATION
    }
    slim: dict[str, object] = {"metadata": kept, "spec": raw_claim.get("spec")}
    allocation = status.get("allocation")
    if isinstance(allocation, Mapping):
        results = mapping(allocation.get("devices")).get("results")
        slim["status"] = {
            "allocation": {"devices": {"results": results}},
            "reservedFor": status.get("reservedFor"),
        }
    elif status.get("reservedFor") is not None:
        slim["status"] = {"reservedFor": status.get("reservedFor")}
    return slim
