"""Running the checks: each in its own thread, given ``timeout_s``; an API error or a check
that does not finish in time is that check's ``failed`` line, and the others still run."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from migslice.doctor.facts import Settings
from migslice.doctor.findings import Finding, failed
from migslice.doctor.reading import ClusterReader
from migslice.doctor.registry import Check
from migslice.kube.transport import ApiError

log = logging.getLogger(__name__)


def run_checks(
    checks: Sequence[Check], reader: ClusterReader, settings: Settings, timeout_s: float
) -> list[Finding]:
    return [run_check(check, reader, settings, timeout_s) for check in checks]


def run_check(check: Check, reader: ClusterReader, settings: Settings, timeout_s: float) -> Finding:
    done: list[Finding] = []
    errors: list[Exception] = []

    def work() -> None:
        try:
            done.append(check.run(reader, settings))
        except Exception as error:  # one check's failure is its own line
            errors.append(error)

    thread = threading.Thread(target=work, name=f"doctor-{check.name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return failed(
            check.name,
            f"no answer within {timeout_s:g}s (--timeout-s)",
            "kubectl get --raw /readyz; or a longer --timeout-s",
        )
    if errors:
        return _error_finding(check, errors[0])
    return done[0]


def _error_finding(check: Check, error: Exception) -> Finding:
    if isinstance(error, ApiError):
        if error.status in (401, 403):
            fix = (
                "run doctor as a cluster admin, or grant get and list on what it reads "
                f"({check.reads})"
            )
        else:
            fix = "kubectl get --raw /readyz"
        return failed(check.name, f"cannot read the cluster: {error}", fix)
    log.debug("check %s failed", check.name, exc_info=error)
    return failed(
        check.name,
        f"the check itself failed ({type(error).__name__}: {error})",
        "run again with --log-level debug and report it",
    )
