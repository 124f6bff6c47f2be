"""The chart's DRA objects: one DeviceClass per MIG profile of the catalog (KEP-5004's
``extendedResourceName``), kept equal to the catalog, and the value that turns them off."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from extender.command import add_arguments, settings_from_args
from manifests import render
from migslice.mig import CATALOG
from migslice.objects.device_classes import mig_profiles, migslice_device_class
from migslice.objects.dra_selectors import read_selectors
from tests import paths

CHART = paths.ROOT / "charts" / "migslice"
BASE = paths.ROOT / "manifests" / "base"
HELM = render.default_helm()


def rendered_classes() -> list[dict[str, Any]]:
    path = BASE / "dra" / "deviceclasses.yaml"
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_the_profile_list_is_the_catalogs_every_profile_once() -> None:
    listed = yaml.safe_load((CHART / "files" / "dra" / "mig-profiles.yaml").read_text())
    expected = list(mig_profiles(CATALOG))
    assert listed == expected, "files/dra/mig-profiles.yaml should read:\n" + "\n".join(
        f'- "{p}"' for p in expected
    )


def test_the_chart_renders_one_class_per_catalog_profile_as_migslice_builds_it() -> None:
    classes = rendered_classes()
    for found in classes:
        labels = found["metadata"].pop("labels")
        assert labels["app.kubernetes.io/component"] == "dra"
    assert classes == [migslice_device_class(p) for p in mig_profiles(CATALOG)]


@pytest.mark.parametrize("profile", ["1g.10gb", "1g.10gb+me", "1g.24gb-me", "2g.48gb+me.all"])
def test_a_class_is_read_as_its_profile_and_serves_its_resource(profile: str) -> None:
    (found,) = [
        c
        for c in rendered_classes()
        if c["spec"]["extendedResourceName"] == "nvidia.com/mig-" + profile.replace("+", ".")
    ]
    selection = read_selectors(s["cel"]["expression"] for s in found["spec"]["selectors"])
    assert (selection.driver, selection.device_type, selection.profile) == (
        "gpu.nvidia.com",
        "mig",
        profile,
    )
    assert not selection.unread and "config" not in found["spec"]


def test_the_classes_validate_against_kubernetes_1_37() -> None:
    for document in rendered_classes():
        kubernetes_validate.validate(document, "1.37", strict=True)


@pytest.mark.skipif(not Path(HELM).exists(), reason="no helm (e2e/build.sh; MIGSLICE_E2E_BIN)")
def test_dra_device_classes_enabled_false_renders_no_class() -> None:
    text = subprocess.run(
        [HELM, "template", "migslice", str(CHART), "--set", "dra.deviceClasses.enabled=false"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    kinds = {d["kind"] for d in yaml.safe_load_all(text) if d}
    assert "DeviceClass" not in kinds and "Deployment" in kinds


@pytest.mark.skipif(not Path(HELM).exists(), reason="no helm (e2e/build.sh; MIGSLICE_E2E_BIN)")
@pytest.mark.parametrize("enabled", [False, True])
def test_the_large_job_reserve_value_gives_the_extender_its_flag(enabled: bool) -> None:
    value = f"dra.largeJobReserve.enabled={str(enabled).lower()}"
    text = subprocess.run(
        [HELM, "template", "migslice", str(CHART), "--set", value],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (extender,) = [
        d
        for d in yaml.safe_load_all(text)
        if d and d["kind"] == "Deployment" and d["metadata"]["name"].endswith("extender")
    ]
    args = extender["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "extender"
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    known = [a for a in args[1:] if not a.startswith(("--tls-", "--client-"))]
    settings = settings_from_args(parser.parse_args(known))
    assert settings.dra_large_reserve is enabled
    assert settings.dra_large_reserve_max_hold_s == 60


@pytest.mark.skipif(not Path(HELM).exists(), reason="no helm (e2e/build.sh; MIGSLICE_E2E_BIN)")
def test_the_reserve_max_hold_must_be_a_positive_number_of_seconds() -> None:
    values = ["dra.largeJobReserve.enabled=true", "dra.largeJobReserve.maxHoldSeconds=0"]
    refused = subprocess.run(
        [HELM, "template", "migslice", str(CHART), *(f"--set={v}" for v in values)],
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0
    assert "maxHoldSeconds" in refused.stderr


@pytest.mark.skipif(not Path(HELM).exists(), reason="no helm (e2e/build.sh; MIGSLICE_E2E_BIN)")
@pytest.mark.parametrize(
    ("values", "named"),
    [
        (["dra.largeJobReserve.enabled=true", "dra.steer.enabled=false"], "dra.steer.enabled"),
        (["repartition.defaultNodeMode=carve"], "agent.carve=true"),
        (
            ["repartition.defaultNodeMode=carve", "agent.carve=true", "agent.enabled=false"],
            "agent.enabled=true",
        ),
    ],
    ids=[
        "reserve-without-steer",
        "carve-default-without-carving-agent",
        "carve-default-without-any-agent",
    ],
)
def test_values_that_cannot_work_together_are_refused_naming_the_one_to_set(
    values: list[str], named: str
) -> None:
    """Rendered, each was an install that did nothing it was asked: the extender logged that
    the reserve was off, or every carve the controller asked for timed out."""
    refused = subprocess.run(
        [HELM, "template", "migslice", str(CHART), *(f"--set={v}" for v in values)],
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0
    assert named in refused.stderr, refused.stderr
    works = [*values, "dra.steer.enabled=true", "agent.carve=true", "agent.enabled=true"]
    rendered = subprocess.run(
        [HELM, "template", "migslice", str(CHART), *(f"--set={v}" for v in works)],
        capture_output=True,
        text=True,
    )
    assert rendered.returncode == 0, rendered.stderr


@pytest.mark.skipif(not Path(HELM).exists(), reason="no helm (e2e/build.sh; MIGSLICE_E2E_BIN)")
def test_with_the_steer_off_the_extender_may_still_delete_the_rules_a_steering_release_left() -> (
    None
):
    """Measured before: dra.steer.enabled=false took the delete from the ClusterRole and the
    policy away, and the extender ran no loop that deletes: the rules an earlier release wrote
    kept their devices off for ever (extender/steer.py, steer=False)."""
    text = subprocess.run(
        [HELM, "template", "migslice", str(CHART), "--set", "dra.steer.enabled=false"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    docs = [d for d in yaml.safe_load_all(text) if d]
    (role,) = [
        d
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "migslice-extender"
    ]
    writes = [
        r
        for r in role["rules"]
        if r["resources"] == ["devicetaintrules"] and set(r["verbs"]) - {"get", "list", "watch"}
    ]
    assert writes == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["devicetaintrules"], "verbs": ["delete"]}
    ]
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    assert "migslice-extender-steer-rules" in names
