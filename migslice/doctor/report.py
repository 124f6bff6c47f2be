"""doctor's output: an aligned table for people (the fix on the check's own line), or JSON."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from migslice.console import format_table
from migslice.doctor.findings import Finding, Verdict
from migslice.doctor.registry import Check


def summary(findings: Sequence[Finding]) -> str:
    counts = Counter(f.verdict for f in findings)
    parts = [f"{counts[v]} {v.value}" for v in Verdict if counts[v]]
    checks = "check" if len(findings) == 1 else "checks"
    return f"{len(findings)} {checks}: {', '.join(parts)}"


def render_table(findings: Sequence[Finding]) -> str:
    rows = [
        (f.check, f.verdict.value, f"{f.detail}; fix: {f.fix}" if f.fix else f.detail)
        for f in findings
    ]
    return f"{format_table(('check', 'result', 'detail'), rows)}\n\n{summary(findings)}"


def render_json(
    findings: Sequence[Finding], checks: Sequence[Check], *, namespace: str, via: str
) -> dict[str, Any]:
    reads = {c.name: c.reads for c in checks}
    counts = Counter(f.verdict for f in findings)
    return {
        "namespace": namespace,
        "via": via,
        "checks": [
            {
                "name": f.check,
                "result": f.verdict.value,
                "detail": f.detail,
                "fix": f.fix,
                "reads": reads.get(f.check, ""),
            }
            for f in findings
        ],
        "summary": {v.value: counts[v] for v in Verdict},
    }
