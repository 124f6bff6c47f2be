"""Values doctor's checks share: how a probe of a server went, a certificate and where it was
found, and the settings every judgement takes (the release namespace, the time, bounds)."""

from __future__ import annotations

from dataclasses import dataclass

from migslice import names


@dataclass(frozen=True, slots=True)
class Settings:
    """``namespace``: where migslice is installed. ``now``: epoch seconds of the run.
    ``pending_bound_s``: a node longer at ``nvidia.com/mig.config.state=pending`` is stuck."""

    namespace: str = names.SYSTEM_NAMESPACE
    now: float = 0.0
    pending_bound_s: float = 600.0


@dataclass(frozen=True, slots=True)
class Probe:
    """An HTTPS ``GET /healthz`` of a server. ``target`` says how it was reached; ``answer``
    is the body of a 200 ("" when none), ``error`` why there was none (no answer, or another
    status), ``certificate_pem`` the certificate the server presented (only when reached
    directly)."""

    target: str
    answer: str = ""
    error: str = ""
    certificate_pem: bytes | None = None

    @property
    def healthy(self) -> bool:
        return not self.error


@dataclass(frozen=True, slots=True)
class Pem:
    """PEM text read from somewhere (``source`` says where), or why it could not be
    (``problem``; then ``data`` is None)."""

    source: str
    data: bytes | None = None
    problem: str = ""
