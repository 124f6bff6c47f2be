"""Which GPU product a DRA node has, from NVIDIA's ResourceSlices: each device's
``productName`` (NVML's name), as the GPU Feature Discovery label it would carry
(:func:`migslice.mig.catalog.product_label_of`), so a DRA node without GFD offers its model to
admission as a labelled node does."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from migslice.mig import CATALOG
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
    return node, frozenset(product_label_of(n) for n in slice_product_names(raw_slice))


def slice_product_names(raw_slice: JsonObject) -> frozenset[str]:
    """The ``productName`` values of a slice's devices as the driver publishes them (NVML's
    names), which a claim's ``productName`` selector must equal to be allocated."""
    found: set[str] = set()
    for raw in items(mapping(raw_slice.get("spec")).get("devices")):
        attribute = mapping(mapping(mapping(raw).get("attributes")).get("productName"))
        name = text(attribute.get("string"))
        if name:
            found.add(name)
    return frozenset(found)


def slim_slice(raw_slice: JsonObject) -> dict[str, object] | None:
    """What the webhook keeps of a slice (its products, as labels and as published), for a
    watch cache."""
    read = slice_products(raw_slice)
    if read is None:
        return None
    name = text(mapping(raw_slice.get("metadata")).get("name")) or ""
    return {
        "name": name,
        "node": read[0],
        "products": sorted(read[1]),
        "names": sorted(slice_product_names(raw_slice)),
    }


def node_product(label: str | None, named: Iterable[frozenset[str]]) -> str | None:
    """A node's GPU product as admission offers and prices it: its GFD label (``label``);
    without one, the one product its ResourceSlices name (``named``: per slice, from
    :func:`slice_products`; a node of several models is left out, as migslice's DRA reader
    leaves it unknown); None where the catalog does not know the product."""
    product = label
    if product is None:
        found: set[str] = set().union(*named)
        product = next(iter(found)) if len(found) == 1 else None
    if product is not None and CATALOG.by_product(product) is None:
        return None
    return product


def node_products(
    labels: Mapping[str, str | None], raw_slices: Sequence[JsonObject]
) -> dict[str, str]:
    """Per node its product (:func:`node_product`) over a whole cluster: ``labels``, the GFD
    product label of every Node (None: it has none), and every ResourceSlice; nodes without
    one are left out."""
    named: dict[str, list[frozenset[str]]] = {}
    for raw in raw_slices:
        read = slice_products(raw)
        if read is not None:
            named.setdefault(read[0], []).append(read[1])
    found = {}
    for node in sorted(labels.keys() | named.keys()):
        product = node_product(labels.get(node), named.get(node, ()))
        if product is not None:
            found[node] = product
    return found
