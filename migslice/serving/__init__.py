"""Serving our Flask apps: gunicorn in-process with TLS, and certificates.

A shell package (I/O, clocks): the pure core never imports it.
"""

from migslice.serving.server import ServerOptions, add_server_arguments, options_from_args, serve

__all__ = ["ServerOptions", "add_server_arguments", "options_from_args", "serve"]
