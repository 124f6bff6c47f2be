"""Which GPU products the cluster's nodes have: the offers admission resolves sizes against."""

from __future__ import annotations

from collections import Counter

from migslice.mig import CATALOG
from migslice.policy import Offer


class NodeProducts:
    """Per node its GPU product (known to the catalog); per product how many nodes have it.
    Not thread-safe: the webhook's state holds its lock around every call."""

    def __init__(self) -> None:
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
        self.forget_node(node)
        if product is not None and CATALOG.by_product(product) is not None:
            self._nodes[node] = product
            self._counts[product] += 1
            if self._counts[product] == 1:
                self._rebuild()

    def forget_node(self, node: str) -> None:
        product = self._nodes.pop(node, None)
        if product is not None:
            self._counts[product] -= 1
            if self._counts[product] <= 0:
                del self._counts[product]
                self._rebuild()

    def _rebuild(self) -> None:
        offers = []
        for product in sorted(self._counts):
            model = CATALOG.by_product(product)
            if model is not None:
                offers.append(Offer(product, model))
        self._offers = tuple(offers)
        self._model_keys = tuple(sorted({o.model.key for o in offers}))
