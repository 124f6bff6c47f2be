"""The server raises its soft limit of open files for ``--max-connections``: a container that
starts with a soft limit of 1,024 would otherwise cap a worker's connections below the table
(measured: accept() fails with EMFILE and new connections wait in the listen backlog)."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

PROBE = """
import resource
from migslice.serving.server import raise_open_files
got = raise_open_files({wanted})
print(got, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def probe(soft: int, hard: int, wanted: int) -> tuple[int, int]:
    """raise_open_files(wanted) in a child started with the limits (soft, hard)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(wanted=wanted)],
        preexec_fn=limit,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    returned, now = done.stdout.split()
    return int(returned), int(now)


def hard_limit() -> int:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 4200:
        pytest.skip(f"this machine's hard limit of open files is {hard}")
    return 4200 if hard == resource.RLIM_INFINITY else hard


def test_a_soft_limit_of_1024_is_raised_to_what_the_table_needs() -> None:
    hard = hard_limit()
    assert probe(1024, hard, 4160) == (4160, 4160)


def test_a_hard_limit_below_the_table_caps_it_there() -> None:
    hard_limit()
    assert probe(256, 2000, 4160) == (2000, 2000)


def test_a_soft_limit_already_high_enough_is_left_alone() -> None:
    hard = hard_limit()
    assert probe(4200, hard, 4160) == (4200, 4200)
