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

import reprlib


class MigsliceError(Exception):
    """Root of every error migslice raises on purpose."""


class InvalidInputError(MigsliceError, ValueError):
    """Input that is not what it should be; the message says where and how to fix it."""


class NotFoundError(MigsliceError, LookupError):
    """A name the catalog does not know; the message lists what it knows."""


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel = 3
_SHOWN.maxstring = _SHOWN.maxother = 60
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = 6
SHOWN_MAX = 120


def shown(value: object) -> str:
    """``repr(value)`` for a message, three levels deep and at most 120 characters: a value
    read off the wire (an object the webhook reads before kube-apiserver validates it) may run
    to megabytes, or nest past Python's recursion limit, where ``repr`` itself raises."""
    try:
        text = _SHOWN.repr(value)
    except (RecursionError, ValueError):  # ValueError: an int past str()'s 4300 digits
        text = f"<{type(value).__name__}>"
    return text if len(text) <= SHOWN_MAX else text[: SHOWN_MAX - 3] + "..."
