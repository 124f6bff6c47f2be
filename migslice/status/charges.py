"""What the webhook charges each ResourceClaim of a cluster (pure).

The webhook prices its claim cache one event at a time (``webhook.state``); this prices the
claims of one read of the cluster the same way, with the same functions: what a claim asks
(:func:`~migslice.admission.usage.claim_asks`), priced on the model its ``productName``
names, else on that of its allocation's node, else on the cluster's models
(:func:`~migslice.admission.usage.claim_usage`), and nothing for kube-scheduler's claim for
a pod's extended resources while that pod pays for it (:mod:`migslice.admission.paid_claims`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from migslice.admission.paid_claims import (
    OwnedClaim,
    claim_users,
    is_paid_by_owner,
    paid_claim,
)
from migslice.admission.usage import ClaimAsk, SliceUsage, claim_asks, claim_usage, pricing_models
from migslice.objects.device_classes import DeviceClassFacts
from migslice.objects.json import JsonObject
from migslice.objects.pod_gpus import Requests
from migslice.objects.pods import is_terminal, named_claims, pod_key
from migslice.objects.resource_claims import ClaimFacts, gpu_asks

Payer = tuple[Requests, str | None]
"""A GPU pod the webhook charges (live, not behind the admission gate, asking for GPU
extended resources): its requests and its uid."""


def claim_charges(
    raw_pods: Sequence[JsonObject],
    claims: Mapping[str, ClaimFacts],
    owners: Mapping[str, tuple[str, str] | None],
    classes: Mapping[str, DeviceClassFacts],
    payers: Mapping[str, Payer],
    *,
    pricing: tuple[Mapping[str, str], tuple[str, ...]],
) -> dict[str, SliceUsage]:
    """Per claim key what the webhook charges it (see the module docstring); claims charged
    nothing are left out. ``owners``: per claim the (name, uid) of the pod controlling it;
    ``payers``: the GPU pods the webhook charges, by key; ``pricing``: per node its product
    (:func:`~migslice.objects.dra_products.node_products`) and the cluster's models."""
    products, cluster_models = pricing
    live: set[str] = set()
    naming: dict[str, list[str]] = {}  # claim key -> the live pods naming it
    for raw in raw_pods:
        if is_terminal(raw):
            continue
        key = pod_key(raw)
        live.add(key)
        for claim_key in named_claims(raw, key.partition("/")[0]):
            naming.setdefault(claim_key, []).append(key)
    asks: dict[str, tuple[ClaimAsk, ...]] = {}
    owned: dict[str, list[OwnedClaim]] = {}  # pod key -> the extended-resource claims it controls
    for key, claim in claims.items():
        asks[key] = claim_asks(gpu_asks(claim, classes).asks)
        owner = owners.get(key)
        if claim.extended_resource and owner is not None:
            pod = f"{key.partition('/')[0]}/{owner[0]}"
            if pod in naming.get(key, ()):
                continue  # kube-scheduler's claim is never in its pod's spec.resourceClaims
            owned.setdefault(pod, []).append((key, owner[1], asks[key]))

    def paid_by(key: str) -> str | None:
        payer = payers.get(key)
        if payer is None:
            return None
        requests, uid = payer
        return paid_claim(dict(requests), uid, owned.get(key, ()))

    charges: dict[str, SliceUsage] = {}
    for key, claim in sorted(claims.items()):
        users = claim_users(claim, naming.get(key, ()), live.__contains__)
        if is_paid_by_owner(claim, owners.get(key), users, paid_by):
            continue
        node = claim.devices[0][0] if claim.devices else None
        product = products.get(node) if node is not None else None
        charge = claim_usage(asks[key], pricing_models(product, cluster_models))
        if not charge.is_zero:
            charges[key] = charge
    return charges
