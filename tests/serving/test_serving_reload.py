"""Standalone servers rebuild from the cluster file when it changes."""

from __future__ import annotations

import os
from pathlib import Path

from flask import Flask
from werkzeug.test import Client

from migslice.serving.reload import ReloadingApp


def app_saying(text: str) -> Flask:
    app = Flask("probe")
    app.add_url_rule("/", "index", lambda: text)
    return app


def build_from(path: Path) -> Flask:
    text = path.read_text()
    if text.startswith("broken"):
        raise ValueError("cannot parse")
    return app_saying(text)


def rewrite(path: Path, text: str) -> None:
    """Write and move the mtime forward (file systems with coarse timestamps)."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))


def test_a_request_after_a_rewrite_sees_the_new_file(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("first")
    client = Client(ReloadingApp(path, build_from))
    assert client.get("/").text == "first"
    rewrite(path, "second")
    assert client.get("/").text == "second"


def test_an_unchanged_file_is_not_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("same")
    builds: list[Path] = []

    def counting(p: Path) -> Flask:
        builds.append(p)
        return build_from(p)

    client = Client(ReloadingApp(path, counting))
    for _ in range(3):
        assert client.get("/").text == "same"
    assert len(builds) == 1


def test_a_broken_or_missing_file_keeps_the_previous_cluster(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("good")
    client = Client(ReloadingApp(path, build_from))
    rewrite(path, "broken!")
    assert client.get("/").text == "good"
    path.unlink()
    assert client.get("/").text == "good"
    path.write_text("fixed")
    assert client.get("/").text == "fixed"
