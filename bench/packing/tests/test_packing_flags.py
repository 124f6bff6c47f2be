"""``bench.packing.packing``'s flags: a bad ``--percentage-of-nodes-to-score`` or a lone
``--partitioned-ahead`` is refused in one line, before any work."""

from __future__ import annotations

import pytest

from bench.packing.packing import main


def test_bench_packing_refuses_a_bad_setting_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--data-dir", ".", "--percentage-of-nodes-to-score", "100,abc"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "bench.packing.packing: --percentage-of-nodes-to-score: 'abc' is not a whole number "
        "0..100 (e.g. 100,0,30)"
    )


def test_bench_packing_takes_partitioned_ahead_only_with_settings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--data-dir", ".", "--partitioned-ahead"]) == 2
    assert "--partitioned-ahead needs --percentage-of-nodes-to-score" in capsys.readouterr().err
