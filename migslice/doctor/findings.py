"""What a check concludes: one line, ``ok``, ``warning`` or ``failed``, with the fix."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class Verdict(enum.StrEnum):
    OK = "ok"
    WARNING = "warning"
    FAILED = "failed"

    @property
    def rank(self) -> int:
        return (Verdict.OK, Verdict.WARNING, Verdict.FAILED).index(self)


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing a check found wrong, and what fixes it."""

    verdict: Verdict
    text: str
    fix: str = ""


@dataclass(frozen=True, slots=True)
class Finding:
    """A check's line: ``detail`` says what was found, ``fix`` the command or setting that
    repairs it (empty when ok)."""

    check: str
    verdict: Verdict
    detail: str
    fix: str = ""


def finding(check: str, problems: Iterable[Problem], ok_detail: str) -> Finding:
    """One line from a check's problems: the worst verdict, the problems worst first (then in
    the order found), each fix once. ``ok_detail`` when there are none, or appended after the
    warnings when nothing failed (so a warning line still says what was fine)."""
    found = sorted(problems, key=lambda p: -p.verdict.rank)
    if not found:
        return Finding(check, Verdict.OK, ok_detail)
    verdict = found[0].verdict
    texts = [p.text for p in found]
    if verdict is Verdict.WARNING and ok_detail:
        texts.append(ok_detail)
    fixes: list[str] = []
    for problem in found:
        if problem.fix and problem.fix not in fixes and problem.verdict is verdict:
            fixes.append(problem.fix)
    return Finding(check, verdict, "; ".join(texts), "; ".join(fixes))


def ok(check: str, detail: str) -> Finding:
    return Finding(check, Verdict.OK, detail)


def failed(check: str, detail: str, fix: str = "") -> Finding:
    return Finding(check, Verdict.FAILED, detail, fix)


def warning(check: str, detail: str, fix: str = "") -> Finding:
    return Finding(check, Verdict.WARNING, detail, fix)
