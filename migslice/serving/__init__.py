"""Serving our Flask apps: gunicorn's master, event-loop workers with TLS and limits, certificates.

A shell package (I/O, clocks): the pure core never imports it.
"""

from migslice.serving.apps import load_cluster_file, serve_app
from migslice.serving.limits import ServingLimits
from migslice.serving.server import ServerOptions, add_server_arguments, options_from_args, serve
from migslice.serving.worker import ServeError
from migslice.serving.wsgi import BODY_LIMIT, BODY_TOO_LARGE

__all__ = [
    "BODY_LIMIT",
    "BODY_TOO_LARGE",
    "ServeError",
    "ServerOptions",
    "ServingLimits",
    "add_server_arguments",
    "load_cluster_file",
    "options_from_args",
    "serve",
    "serve_app",
]
