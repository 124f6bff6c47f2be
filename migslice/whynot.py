"""The one shape of a "no" in migslice: a short reason code and the sentence for the user.

Functions that may refuse return ``T | WhyNot``: a mig-parted config whose effect on a node
is unknown, a plan node that may not be applied, a size no profile fits, a pod admission
refuses (:class:`migslice.admission.Denial` adds the HTTP status). ``reason`` is stable (a
metrics label, a test's handle); ``message`` names the subject, the value, the limit and where
it is set.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WhyNot:
    reason: str
    message: str

    def __str__(self) -> str:
        return self.message
