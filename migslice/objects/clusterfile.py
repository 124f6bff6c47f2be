"""Cluster files: a YAML stream of Kubernetes objects (Node, Pod, TenantPolicy, ConfigMap, and
the DRA objects ResourceSlice, ResourceClaim, DeviceClass).

Used by the standalone servers (``--cluster-file``), the demo, ``migslice plan``, tests and
benchmarks in place of a live API server. A Pod with ``spec.nodeName`` is bound. A Pod not
shaped as the API server would store it (``spec`` not a mapping, containers not a list of
mappings, resources not a mapping, a request or limit that is no quantity) is refused with
its document, name and field paths (``pod_gpus.shape_problems``), as kube-apiserver refuses it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import orjson
import yaml

from migslice.errors import InvalidInputError
from migslice.mig.goyaml import excessive_aliasing
from migslice.objects.pod_gpus import PodGpuMemo

RawObject = dict[str, object]


class ClusterFileError(InvalidInputError):
    """A cluster file that cannot be read; the message names the document."""


@dataclass(frozen=True, slots=True)
class ClusterObjects:
    """Raw API objects by kind, in file order."""

    nodes: tuple[RawObject, ...] = ()
    pods: tuple[RawObject, ...] = ()
    tenant_policies: tuple[RawObject, ...] = ()
    config_maps: tuple[RawObject, ...] = ()
    resource_slices: tuple[RawObject, ...] = ()
    resource_claims: tuple[RawObject, ...] = ()
    device_classes: tuple[RawObject, ...] = ()
    device_taint_rules: tuple[RawObject, ...] = ()
    others: tuple[RawObject, ...] = field(default=())

    def config_map(self, namespace: str, name: str) -> RawObject | None:
        """The ConfigMap ``namespace/name`` (one written without a namespace matches too)."""
        for raw in self.config_maps:
            metadata = raw.get("metadata")
            if not isinstance(metadata, Mapping) or metadata.get("name") != name:
                continue
            if metadata.get("namespace") in (None, "", namespace):
                return raw
        return None


_KINDS = {
    "Node": "nodes",
    "Pod": "pods",
    "TenantPolicy": "tenant_policies",
    "ConfigMap": "config_maps",
    "ResourceSlice": "resource_slices",
    "ResourceClaim": "resource_claims",
    "DeviceClass": "device_classes",
    "DeviceTaintRule": "device_taint_rules",
}


def parse_cluster_objects(documents: Iterable[object]) -> ClusterObjects:
    """Sort already-loaded documents by kind; ``List`` objects are flattened."""
    buckets: dict[str, list[RawObject]] = {name: [] for name in (*_KINDS.values(), "others")}
    pods = PodGpuMemo()  # the pods of one controller are checked once

    def take(where: str, document: object) -> None:
        if document is None:
            return
        if not isinstance(document, Mapping) or not isinstance(document.get("kind"), str):
            raise ClusterFileError(f"{where} is not a Kubernetes object (no kind)")
        raw = dict(document)
        if raw["kind"].endswith("List") and isinstance(raw.get("items"), list):
            for position, item in enumerate(raw["items"]):
                take(f"{where}, item {position + 1} of its {raw['kind']}", item)
            return
        metadata = raw.get("metadata")
        if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
            raise ClusterFileError(f"{where} ({raw['kind']}) has no metadata.name")
        if raw["kind"] == "Pod":
            problems = pods.shape_problems(raw)
            if problems:
                namespace = metadata.get("namespace") or "default"
                raise ClusterFileError(
                    f"{where} (Pod {namespace}/{metadata['name']}): " + "; ".join(problems)
                )
        buckets[_KINDS.get(raw["kind"], "others")].append(raw)

    for index, document in enumerate(documents):
        take(f"document {index + 1}", document)
    return ClusterObjects(**{name: tuple(items) for name, items in buckets.items()})


def load_cluster_text(text: str) -> ClusterObjects:
    """The objects of a cluster file: a YAML stream, or one JSON object (``kubectl get ... -o
    json``'s ``List``), which is read as JSON: tens of megabytes in a second, not a minute."""
    if text.lstrip().startswith("{"):
        try:
            return parse_cluster_objects([orjson.loads(text)])
        except orjson.JSONDecodeError:
            pass  # not one JSON document: YAML says what is wrong
    return parse_cluster_objects(load_yaml_documents(text, "cluster file"))


def load_yaml_documents(
    text: str, what: str, *, fix: str = "write the objects out (kubectl get -o yaml does)"
) -> list[object]:
    """Every document of a YAML stream; ClusterFileError (one line) if it is not one, nests
    deeper than any Kubernetes object does, or aliases too much
    (:func:`migslice.mig.goyaml.excessive_aliasing`; ``fix``: what to do then)."""
    try:
        # The reader refuses a character YAML does not allow (NUL, a control character)
        # as it is made, for the whole text.
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as error:
        raise ClusterFileError(f"{what} is not valid YAML: {one_line(str(error))}") from None
    try:
        documents: list[object] = []
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                break
            excess = excessive_aliasing(node)
            if excess:
                raise ClusterFileError(f"{what}: document {len(documents) + 1}: {excess}; {fix}")
            documents.append(loader.construct_document(node))
        return documents
    except yaml.YAMLError as error:
        raise ClusterFileError(f"{what} is not valid YAML: {one_line(str(error))}") from None
    except RecursionError:
        raise ClusterFileError(f"{what} nests too deep to be a Kubernetes object") from None
    finally:
        loader.dispose()


def one_line(text: str) -> str:
    """A multi-line message (a YAML parser's, with its caret drawing) as one line."""
    return " ".join(
        part.strip() for part in text.splitlines() if part.strip() and part.strip() != "^"
    )
