"""The geometry commands: output formats, and one clear line for every bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from migslice.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_models_lists_every_catalog_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models", "-o", "json")
    assert code == 0
    keys = [m["model"] for m in json.loads(out)]
    assert "A100-80GB" in keys and "RTX-PRO-6000" in keys


def test_profiles_shows_ids_and_placements(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "profiles", "--gpu", "H100-80GB")
    assert code == 0
    assert "3g.40gb      9    2     40448        60    3         4        {0,4}:4" in out
    code, out, _ = run(capsys, "profiles", "--gpu", "NVIDIA-H100-80GB-HBM3", "-o", "json")
    profiles = {p["name"]: p for p in json.loads(out)["profiles"]}
    assert profiles["2g.20gb"]["placements"] == [
        {"start": 0, "size": 2},
        {"start": 2, "size": 2},
        {"start": 4, "size": 2},
    ]


def test_layouts_json_is_a_list_of_placements(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "layouts",
        "--gpu",
        "A100-80GB",
        "--profiles",
        "1g.10gb,2g.20gb,3g.40gb,4g.40gb,7g.80gb",
        "-o",
        "json",
    )
    assert code == 0
    layouts = json.loads(out)
    assert len(layouts) == 19
    assert [{"profile": "7g.80gb", "start": 0, "size": 8}] in layouts
    code, out, _ = run(
        capsys,
        "layouts",
        "--gpu",
        "A100-80GB",
        "--profiles",
        "1g.10gb,2g.20gb,3g.40gb,4g.40gb,7g.80gb",
        "--pre-r510",
    )
    assert out.startswith("18 maximal layouts of A100-80GB (drivers before R510)")


def test_fit_prints_placement_commands_and_config(capsys: pytest.CaptureFixture[str]) -> None:
    existing = json.dumps([{"profile": "1g.10gb", "start": 6, "size": 1}])
    code, out, _ = run(
        capsys,
        "fit",
        "--gpu",
        "A100-80GB",
        "4g.40gb",
        "2g.20gb",
        "--layout",
        existing,
        "-o",
        "json",
    )
    assert code == 0
    answer = json.loads(out)
    assert answer["feasible"] is True
    assert answer["reason"] is None
    assert {"profile": "1g.10gb", "start": 6, "size": 1} in answer["placement"]
    assert answer["nvidiaSmi"] == ["nvidia-smi mig -i 0 -cgi 5,14 -C"]
    code, out, _ = run(capsys, "fit", "--gpu", "A100-80GB", "3g.40gb", "-o", "mig-parted")
    assert "mig-devices:\n      3g.40gb: 1" in out
    code, out, _ = run(capsys, "fit", "--gpu", "A100-80GB", "3g.40gb", "2g.20gb")
    assert "|3g.40gb" in out


def test_an_impossible_fit_is_json_with_a_reason(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", "--gpu", "A100-80GB", "7g.80gb", "1g.10gb", "-o", "json")
    assert code == 1
    answer = json.loads(out)
    assert answer["feasible"] is False
    assert answer["placement"] == []
    assert "compute slices" in answer["reason"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fit", "--gpu", "X100", "1g.10gb"], "unknown GPU model 'X100'; known models: A30-24GB"),
        (["fit", "--gpu", "A100-80GB", "1g.9gb"], "has no MIG profile '1g.9gb'"),
        (["fit", "--gpu", "A100-80GB", "1g.10gb", "--layout", "[{"], "--layout is not valid JSON"),
        (
            ["fit", "--gpu", "A100-80GB", "1g.10gb", "--layout", "{}"],
            "--layout must be a JSON list",
        ),
        (
            [
                "fit",
                "--gpu",
                "A100-80GB",
                "1g.10gb",
                "--layout",
                '[{"profile": "2g.20gb", "start": 6}]',
            ],
            "2g.20gb cannot start at memory slice 6",
        ),
        (["fit", "--gpu", "A100-80GB", "3g.40gb", "3g.40gb", "3g.40gb"], "exceed the maximum of 2"),
        (["layouts", "--gpu", "A30", "--profiles", ","], "no profiles given"),
    ],
)
def test_bad_input_prints_one_clear_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("migslice: error: ")
    assert message in err


def test_the_console_script_exits_non_zero_without_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "migslice.cli", "fit", "--gpu", "NOPE", "1g.10gb"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "unknown GPU model 'NOPE'" in done.stderr
