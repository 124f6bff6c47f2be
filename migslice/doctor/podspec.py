"""What a Deployment's pods run with, read from its pod template: a container's flags, and the
Secret or ConfigMap key behind a file path (``--tls-cert=/etc/migslice/tls/tls.crt`` ->
Secret ``migslice-webhook-tls`` key ``tls.crt``).

That is how doctor finds the certificate a server serves from outside the cluster and the CA
file kube-scheduler trusts, without assuming the chart's names: it follows the objects as
installed.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from migslice.objects.json import JsonObject, items, mapping, text


@dataclass(frozen=True, slots=True)
class FileSource:
    """A file of a pod: ``key`` of the Secret or ConfigMap ``name`` (the pod's namespace)."""

    kind: str  # "Secret" or "ConfigMap"
    name: str
    key: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name} key {self.key}"


def pod_spec(raw_workload: JsonObject | None) -> JsonObject:
    """``spec.template.spec`` of a Deployment or DaemonSet ({} when absent)."""
    if raw_workload is None:
        return {}
    return mapping(mapping(mapping(raw_workload.get("spec")).get("template")).get("spec"))


def containers(spec: JsonObject) -> list[JsonObject]:
    return [mapping(c) for c in items(spec.get("containers"))]


def command_line(container: JsonObject) -> list[str]:
    """``command`` + ``args`` of a container, as strings."""
    words = [*items(container.get("command")), *items(container.get("args"))]
    return [w for w in words if isinstance(w, str)]


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag=V`` or ``--flag V`` (the last one given); None if absent."""
    found: str | None = None
    for i, word in enumerate(argv):
        if word.startswith(flag + "="):
            found = word[len(flag) + 1 :]
        elif word == flag and i + 1 < len(argv):
            found = argv[i + 1]
    return found


def container_with_flag(spec: JsonObject, flag: str) -> tuple[JsonObject, str] | None:
    """The first container whose command line has ``flag``, and the flag's value."""
    for container in containers(spec):
        value = flag_value(command_line(container), flag)
        if value is not None:
            return container, value
    return None


def file_source(spec: JsonObject, container: JsonObject, path: str) -> FileSource | None:
    """The Secret or ConfigMap key mounted at ``path`` in ``container``; None when ``path`` is
    on no such volume (an emptyDir, a hostPath, the image)."""
    volumes = {text(v.get("name")): v for v in (mapping(v) for v in items(spec.get("volumes")))}
    mounts = sorted(
        (mapping(m) for m in items(container.get("volumeMounts"))),
        key=lambda m: -len(text(m.get("mountPath")) or ""),
    )
    path = posixpath.normpath(path)
    for mount in mounts:
        mount_path = posixpath.normpath(text(mount.get("mountPath")) or "/")
        sub_path = text(mount.get("subPath")) or ""
        if path == mount_path and sub_path:
            relative = sub_path
        elif path.startswith(mount_path.rstrip("/") + "/"):
            relative = posixpath.join(sub_path, path[len(mount_path.rstrip("/")) + 1 :])
        else:
            continue
        volume = volumes.get(text(mount.get("name")))
        return None if volume is None else _source_in_volume(volume, relative)
    return None


def _source_in_volume(volume: JsonObject, relative: str) -> FileSource | None:
    for kind, field, name_key in (
        ("Secret", "secret", "secretName"),
        ("ConfigMap", "configMap", "name"),
    ):
        if field in volume:
            source = mapping(volume.get(field))
            key = _key_for(source, relative)
            name = text(source.get(name_key))
            return FileSource(kind, name, key) if name and key else None
    projected = mapping(volume.get("projected"))
    for entry in (mapping(s) for s in items(projected.get("sources"))):
        for kind, field in (("Secret", "secret"), ("ConfigMap", "configMap")):
            source = mapping(entry.get(field))
            if not source or not items(source.get("items")):
                continue
            key = _key_for(source, relative)
            name = text(source.get("name"))
            if name and key:
                return FileSource(kind, name, key)
    return None


def _key_for(source: JsonObject, relative: str) -> str | None:
    """The key projected to ``relative``: by ``items`` (key -> path), else the key itself."""
    listed = [mapping(i) for i in items(source.get("items"))]
    if not listed:
        return relative if "/" not in relative else None
    for item in listed:
        if posixpath.normpath(text(item.get("path")) or "") == relative:
            return text(item.get("key"))
    return None
