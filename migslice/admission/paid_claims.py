"""Which of kube-scheduler's claims for a pod's extended resources the pod pays for (pure).

On a DRA node kube-scheduler serves a pod's ``nvidia.com/mig-<profile>`` from a ResourceClaim
it makes for that pod (KEP-5004: annotation ``resource.kubernetes.io/extended-resource-claim:
"true"``, controlled by the pod). The pod is charged for those resources, so the claim is
charged nothing while the pod pays for it: the pod is a live GPU pod with the uid the claim's
owner reference names, its GPU requests cover what the claim asks, the claim is the first by
name of such claims the pod controls and does not name by ``resourceClaimName`` (kube-scheduler
never puts its claim there), and no other pod uses it (docs/policy.md, "How claims
are charged"). Any other claim is charged what it asks. The webhook's claim cache and
``migslice status`` both decide with these.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from migslice.admission.usage import ClaimAsk, claim_requests
from migslice.objects.resource_claims import ClaimFacts

OwnedClaim = tuple[str, str, tuple[ClaimAsk, ...]]
"""An extended-resource claim a pod controls: its key, the pod uid its owner reference names,
and its asks."""


def covers(pod_requests: Mapping[str, int], asks: tuple[ClaimAsk, ...]) -> bool:
    """Whether a pod's GPU extended resources include every device the claim asks for (the
    claim kube-scheduler makes asks for at most what the pod requests)."""
    wanted = claim_requests(asks)
    return bool(wanted) and all(pod_requests.get(r, 0) >= n for r, n in wanted.items())


def paid_claim(
    pod_requests: Mapping[str, int], pod_uid: str | None, owned: Iterable[OwnedClaim]
) -> str | None:
    """The claim a live GPU pod (its GPU requests and uid) pays for, if any: of the
    extended-resource claims it controls (``owned``), the first by key whose owner reference
    names this pod's uid and whose asks its requests cover."""
    for key, owner_uid, asks in sorted(owned):
        if owner_uid == pod_uid and covers(pod_requests, asks):
            return key
    return None


def claim_users(
    claim: ClaimFacts, naming: Iterable[str], is_live: Callable[[str], bool]
) -> tuple[str, ...]:
    """The pods (names) that use ``claim``: the live pods that name it by
    ``resourceClaimName`` (``naming``, their keys), and the pods it is reserved for or
    controlled by that are live (``is_live``, of a key)."""
    users = {key.partition("/")[2] for key in naming}
    held = set(claim.reserved_for)
    if claim.owner is not None:
        held.add(claim.owner)
    users |= {key.partition("/")[2] for key in held if is_live(key)}
    return tuple(sorted(users))


def is_paid_by_owner(
    claim: ClaimFacts,
    owner: tuple[str, str] | None,
    users: Sequence[str],
    paid_by: Callable[[str], str | None],
) -> bool:
    """Whether ``claim`` costs nothing, being kube-scheduler's claim for the extended
    resources of the pod that controls it (``owner``: its name and uid), which pays for it:
    no other pod uses it (``users``: names) and it is the claim that pod pays for
    (``paid_by``: of a pod key, :func:`paid_claim` of that pod, None for a pod that is not a
    live GPU pod)."""
    if owner is None or not claim.extended_resource:
        return False
    if any(user != owner[0] for user in users):
        return False  # a claim another pod uses is not (only) its owner's
    namespace = claim.key.partition("/")[0]
    return paid_by(f"{namespace}/{owner[0]}") == claim.key
