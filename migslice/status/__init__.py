"""``migslice status`` and ``migslice why``: the whole cluster as migslice sees it, read-only.

read (:mod:`~migslice.status.gather`: a kubeconfig, the pod's service account or a cluster
file, all into one :class:`~migslice.objects.ClusterObjects`) -> derive, pure and in one
pass (:mod:`~migslice.status.cluster`: the inventory, tenancy and usage; then
:mod:`~migslice.status.tenants`, :mod:`~migslice.status.pools`,
:mod:`~migslice.status.waiting` and :mod:`~migslice.status.why`) -> report
(:mod:`~migslice.status.report`, :mod:`~migslice.status.why_report`). The derivations call
the same core functions the services decide with: the webhook's usage in slice units, the
extender's filter over the inventory, the repartition controller's ``decide()``.
"""
