"""Following a pod template's files to the Secret or ConfigMap key behind them, on the chart's
own Deployments, and the flag forms a command line may use."""

from __future__ import annotations

import pytest

from migslice.doctor.podspec import (
    FileSource,
    command_line,
    container_with_flag,
    file_source,
    flag_value,
    pod_spec,
)
from tests.doctor_cluster import rendered_one


@pytest.mark.parametrize(
    ("deployment", "flag", "source"),
    [
        ("webhook", "--tls-cert", FileSource("Secret", "migslice-webhook-tls", "tls.crt")),
        ("extender", "--tls-key", FileSource("Secret", "migslice-extender-tls", "tls.key")),
        (
            "scheduler",
            "--config",
            FileSource("ConfigMap", "migslice-scheduler-config", "config.yaml"),
        ),
    ],
)
def test_the_charts_flags_lead_to_their_secret_or_config_map(
    deployment: str, flag: str, source: FileSource
) -> None:
    spec = pod_spec(rendered_one(f"{deployment}/deployment.yaml", "Deployment"))
    found = container_with_flag(spec, flag)
    assert found is not None
    container, path = found
    assert file_source(spec, container, path) == source


def test_the_schedulers_ca_file_is_the_one_key_it_mounts_of_the_extenders_secret() -> None:
    spec = pod_spec(rendered_one("scheduler/deployment.yaml", "Deployment"))
    container, _ = container_with_flag(spec, "--config") or ({}, "")
    source = file_source(spec, container, "/etc/migslice/extender-ca/ca.crt")
    assert source == FileSource("Secret", "migslice-extender-tls", "ca.crt")
    assert file_source(spec, container, "/etc/migslice/extender-ca/tls.key") is None
    assert file_source(spec, container, "/tmp/ca.crt") is None  # an emptyDir


def test_sub_path_and_projected_mounts_are_followed() -> None:
    spec = {
        "volumes": [
            {"name": "one", "configMap": {"name": "settings"}},
            {
                "name": "both",
                "projected": {
                    "sources": [
                        {"configMap": {"name": "cfg", "items": [{"key": "a", "path": "x/a"}]}},
                        {"secret": {"name": "sec", "items": [{"key": "ca.crt", "path": "ca.pem"}]}},
                    ]
                },
            },
        ]
    }
    container = {
        "volumeMounts": [
            {"name": "one", "mountPath": "/etc/app/config.yaml", "subPath": "config.yaml"},
            {"name": "both", "mountPath": "/etc/both"},
        ]
    }
    assert file_source(spec, container, "/etc/app/config.yaml") == FileSource(
        "ConfigMap", "settings", "config.yaml"
    )
    assert file_source(spec, container, "/etc/both/ca.pem") == FileSource("Secret", "sec", "ca.crt")
    assert file_source(spec, container, "/etc/both/x/a") == FileSource("ConfigMap", "cfg", "a")
    assert file_source(spec, container, "/etc/both/other") is None


def test_flags_are_read_in_both_forms_the_last_winning() -> None:
    container = {"command": ["migslice"], "args": ["webhook", "--port", "1", "--port=2", "--x"]}
    argv = command_line(container)
    assert flag_value(argv, "--port") == "2"
    assert flag_value(argv, "--x") is None  # no value after it
    assert flag_value(["--tls-cert", "/a"], "--tls-cert") == "/a"
