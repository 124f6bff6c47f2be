"""Which GPU products the cluster's nodes have: the offers admission resolves sizes against.

A node's product is its GPU Feature Discovery label ``nvidia.com/gpu.product``; a DRA node
without that label has the product its ResourceSlices' devices name
(:func:`migslice.objects.dra_products.node_product`)."""

from __future__ import annotations

from collections import Counter

from migslice.mig import CATALOG
from migslice.objects.dra_products import node_product
from migslice.policy import Offer


class NodeProducts:
    """Per node its GPU product (known to the catalog); per product how many nodes have it.
    Not thread-safe: the webhook's state holds its lock around every call."""

    def __init__(self) -> None:
        self._labelled: dict[str, str] = {}
        self._dra: dict[str, dict[str, frozenset[str]]] = {}  # node -> slice -> products
        self._nodes: dict[str, str] = {}
        self._counts: Counter[str] = Counter()
        self._offers: tuple[Offer, ...] = ()
        self._model_keys: tuple[str, ...] = ()

    @property
    def offers(self) -> tuple[Offer, ...]:
        return self._offers

    @property
    def model_keys(self) -> tuple[str, ...]:
        """The catalog keys of every model in the cluster."""
        return self._model_keys

    def product_of(self, node: str) -> str | None:
        return self._nodes.get(node)

    def set_node(self, node: str, product: str | None) -> None:
        """The node's GFD product label (None: it has none)."""
        if product is None:
            self._labelled.pop(node, None)
        else:
            self._labelled[node] = product
        self._settle(node)

    def forget_node(self, node: str) -> None:
        self._labelled.pop(node, None)
        self._settle(node)

    def set_slice(self, node: str, name: str, products: frozenset[str]) -> None:
        """The products one of the node's ResourceSlices names."""
        self._dra.setdefault(node, {})[name] = products
        self._settle(node)

    def forget_slice(self, node: str, name: str) -> None:
        slices = self._dra.get(node, {})
        slices.pop(name, None)
        if not slices:
            self._dra.pop(node, None)
        self._settle(node)

    def _settle(self, node: str) -> None:
        product = node_product(self._labelled.get(node), self._dra.get(node, {}).values())
        before = self._nodes.get(node)
        if before == product:
            return
        if before is not None:
            self._nodes.pop(node)
            self._counts[before] -= 1
            if self._counts[before] <= 0:
                del self._counts[before]
        if product is not None:
            self._nodes[node] = product
            self._counts[product] += 1
        self._rebuild()

    def _rebuild(self) -> None:
        offers = []
        for product in sorted(self._counts):
            model = CATALOG.by_product(product)
            if model is not None:
                offers.append(Offer(product, model))
        self._offers = tuple(offers)
        self._model_keys = tuple(sorted({o.model.key for o in offers}))
