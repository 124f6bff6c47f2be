"""The chart's alerts under promtool (built from its Go module by e2e/build.sh), and the
kubectl plugin as kubectl finds it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.binaries import DEFAULT_BIN_DIR

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> Path:
    for folder in (DEFAULT_BIN_DIR, ROOT / "e2e" / ".bin"):
        if (folder / name).exists():
            return folder / name
    found = shutil.which(name)
    if found is not None:
        return Path(found)
    pytest.fail(f"no {name} in {DEFAULT_BIN_DIR}; run e2e/build.sh {name}")


def test_promtool_checks_the_rendered_rules_and_passes_every_alert_test(tmp_path: Path) -> None:
    helm, promtool = _tool("helm"), _tool("promtool")
    rendered = subprocess.run(
        [
            str(helm),
            "template",
            "migslice",
            str(ROOT / "charts" / "migslice"),
            "-n",
            "migslice-system",
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--show-only",
            "templates/monitoring/prometheusrule.yaml",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rule = yaml.safe_load(rendered)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    shutil.copy(ROOT / "tests" / "rules" / "alerts_test.yaml", tmp_path)
    checked = subprocess.run(
        [str(promtool), "check", "rules", "rules.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        [str(promtool), "test", "rules", "alerts_test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_kubectl_plugin_list_finds_kubectl_migslice() -> None:
    kubectl = _tool("kubectl")
    scripts = Path(sys.executable).parent
    assert (scripts / "kubectl-migslice").exists()
    env = {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}"}
    listed = subprocess.run(
        [str(kubectl), "plugin", "list"], capture_output=True, text=True, env=env
    )
    assert str(scripts / "kubectl-migslice") in listed.stdout
