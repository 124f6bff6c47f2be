"""The container image's recipe agrees with the project it packages (the build itself and the
image running in a cluster are proven by ``make image`` and ``e2e/test_image_e2e.py``)."""

from __future__ import annotations

import ast
import json
import re
import tomllib

from tests import paths

ROOT = paths.ROOT
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instructions(name: str) -> list[str]:
    """Arguments of every ``name`` instruction, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [
        line.split(None, 1)[1] if " " in line else ""
        for line in text.splitlines()
        if line.split(None, 1)[:1] == [name]
    ]


def labels() -> dict[str, str]:
    found: dict[str, str] = {}
    for argument in instructions("LABEL"):
        for key, value in re.findall(r'([\w.-]+)="([^"]*)"', argument):
            found[key] = value
    return found


def test_the_build_context_holds_every_package_of_the_wheel() -> None:
    allowed = {
        line[1:].strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    packages = {
        p.rstrip("*") for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    assert packages <= allowed
    assert {"pyproject.toml", PYPROJECT["project"]["readme"]} <= allowed
    # PEP 639: a license-files pattern that matches nothing is an error (setuptools warns
    # until 2027-02-18, then refuses to build the wheel)
    assert set(PYPROJECT["project"].get("license-files", ())) <= allowed
    for path in allowed:
        assert (ROOT / path).exists(), f".dockerignore lets in {path}, which does not exist"


def test_the_image_runs_migslice_as_65532_with_home_and_tmpdir_on_tmp() -> None:
    assert [json.loads(e) for e in instructions("ENTRYPOINT")] == [["migslice"]]
    assert instructions("USER")[-1] == "65532:65532"
    env = instructions("ENV")[-1]
    assert "HOME=/tmp" in env and "TMPDIR=/tmp" in env and "PYTHONDONTWRITEBYTECODE=1" in env
    assert instructions("FROM")[-1] == "${BASE}"


def test_the_oci_labels_say_what_pyproject_says() -> None:
    found = labels()
    assert found["org.opencontainers.image.title"] == PYPROJECT["project"]["name"]
    license = PYPROJECT["project"]["license"]  # {text = "..."} or, newer, an SPDX string
    expected = license["text"] if isinstance(license, dict) else license
    assert found["org.opencontainers.image.licenses"] == expected
    assert found["org.opencontainers.image.version"] == "${VERSION}"
    assert {"org.opencontainers.image.description", "org.opencontainers.image.source"} <= set(found)


def test_nothing_imports_the_asyncio_client_the_image_leaves_out() -> None:
    offenders = []
    for package in ("migslice", "webhook", "extender", "agent"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                if any(n == "kubernetes.aio" or n.startswith("kubernetes.aio.") for n in names):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == [], "the image drops kubernetes/aio (see Dockerfile)"
