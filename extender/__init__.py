"""The migslice scheduler extender: filter and prioritize for kube-scheduler over HTTPS.

Its public entry points, for the command line, the demo, the benchmarks and any other caller:
``create_app`` over an ``ExtenderState``; ``state_from_objects`` (a fixed cluster, as a
cluster file gives it); ``standalone_app`` (the app over a cluster file) and
``in_cluster_app`` (over watch caches of the API server), each from ``ExtenderSettings``; and
``VERBS``, the paths kube-scheduler calls.
"""

from extender.app import create_app
from extender.command import VERBS
from extender.service import in_cluster_app, standalone_app
from extender.settings import ExtenderSettings
from extender.state import ExtenderState, state_from_objects

__all__ = [
    "VERBS",
    "ExtenderSettings",
    "ExtenderState",
    "create_app",
    "in_cluster_app",
    "standalone_app",
    "state_from_objects",
]
