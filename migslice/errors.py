"""The roots of the errors migslice raises on purpose.

One root for the whole project, one per layer beneath it, so that a caller can catch what it
can answer and let its own bugs surface:

* the pure core raises :class:`InvalidInputError` (a value, a document or a file that is not what
  it should be; the message names the field and what would be right) and :class:`NotFoundError`
  (a GPU model or profile the catalog does not know);
* ``migslice.kube`` raises ``KubeError`` (the API server said no, or could not be reached),
  ``migslice.serving`` raises ``ServingError``;
* services and the command line raise ``migslice.console.CommandError``, printed as one line.

Anything else is a bug: the servers answer it as their own failure (HTTP 500, or the
extender's ``Error``) with a logged traceback.
"""

from __future__ import annotations


class MigsliceError(Exception):
    """Root of every error migslice raises on purpose."""


class InvalidInputError(MigsliceError, ValueError):
    """Input that is not what it should be; the message says where and how to fix it."""


class NotFoundError(MigsliceError, LookupError):
    """A name the catalog does not know; the message lists what it knows."""
