"""The migslice admission webhook: TenantPolicy sizes to MIG resources, quota, placement.

Its public entry points, for the command line, the demo, the benchmarks and any other caller:
``create_app`` over a ``ClusterState`` (filled with its ``load`` from a cluster's objects);
``standalone_app`` (the app over a cluster file) and ``in_cluster_app`` (over watch caches of
the API server), each from ``WebhookSettings``.
"""

from webhook.app import create_app
from webhook.service import in_cluster_app, standalone_app
from webhook.settings import WebhookSettings
from webhook.state import ClusterState

__all__ = ["ClusterState", "WebhookSettings", "create_app", "in_cluster_app", "standalone_app"]
