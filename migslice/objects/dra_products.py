"""Which GPU product a DRA node has, from NVIDIA's ResourceSlices: each device's
``productName`` (NVML's name), as the GPU Feature Discovery label it would carry
(:func:`migslice.mig.catalog.product_label_of`), so a DRA node without GFD offers its model to
admission as a labelled node does."""

from __future__ import annotations

from migslice.mig.catalog import product_label_of
from migslice.names import DRA_DRIVER
from migslice.objects.json import JsonObject, items, mapping, text


def slice_products(raw_slice: JsonObject) -> tuple[str, frozenset[str]] | None:
    """(node, the product labels of its devices) of one ``gpu.nvidia.com`` slice that is
    local to a node; None for any other slice."""
    spec = mapping(raw_slice.get("spec"))
    node = text(spec.get("nodeName"))
    if spec.get("driver") != DRA_DRIVER or not node:
        return None
    found: set[str] = set()
    for raw in items(spec.get("devices")):
        attribute = mapping(mapping(mapping(raw).get("attributes")).get("productName"))
        name = text(attribute.get("string"))
        if name:
            found.add(product_label_of(name))
    return node, frozenset(found)


def slim_slice(raw_slice: JsonObject) -> dict[str, object] | None:
    """What the webhook keeps of a slice (its products), for a watch cache."""
    read = slice_products(raw_slice)
    if read is None:
        return None
    name = text(mapping(raw_slice.get("metadata")).get("name")) or ""
    return {"name": name, "node": read[0], "products": sorted(read[1])}
