"""``migslice status`` and ``migslice why``: their flags and run functions (also run as the
kubectl plugin ``kubectl migslice``, :mod:`migslice.cli.kubectl`)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from migslice import console, names
from migslice.console import CommandError
from migslice.objects.clusterfile import ClusterFileError, ClusterObjects
from migslice.repartition.settings import CARVE_MIN_PENDING_S, CarveSettings, PlanSettings

if TYPE_CHECKING:
    from migslice.kube.transport import KubernetesTransport
    from migslice.repartition import ControllerSettings
    from migslice.status.cluster import Cluster
    from migslice.status.why import WhyReport

OUTPUTS = ("table", "wide", "json", "yaml")
DEFAULT_CONFIG_MAP = f"{names.GPU_OPERATOR_NAMESPACE}/{names.MIG_CONFIG_MAP}"


def _source_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--kubeconfig",
        metavar="FILE",
        type=console.path_name,
        help="kubeconfig (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)",
    )
    where.add_argument(
        "--cluster-file",
        metavar="FILE",
        type=console.file_path,
        help="read a cluster file (the YAML stream migslice plan reads, or `kubectl get -o "
        "json` output) instead of a cluster",
    )
    parser.add_argument("--context", metavar="NAME", help="the kubeconfig context to use")
    parser.add_argument(
        "--mig-config-map",
        default=DEFAULT_CONFIG_MAP,
        type=console.namespaced_name,
        metavar="NAMESPACE/NAME",
        help="the mig-parted ConfigMap that holds the repartition record (default %(default)s)",
    )
    parser.add_argument(
        "--scheduler-name", default=names.SCHEDULER_NAME, type=console.dns_subdomain
    )
    parser.add_argument(
        "--cooldown-s",
        type=console.seconds(),
        default=PlanSettings().cooldown_s,
        help="the controller's --repartition-cooldown-s (default %(default)s)",
    )
    parser.add_argument(
        "--carve-cooldown-s",
        type=console.seconds(),
        default=CarveSettings().cooldown_s,
        help="the controller's --repartition-carve-cooldown-s, the cooldown of carve-mode "
        "nodes (default %(default)s)",
    )
    parser.add_argument(
        "--mode-default",
        choices=names.REPARTITION_MODES,
        default=names.MODE_MIG_MANAGER,
        help="the controller's --repartition-mode-default (default %(default)s)",
    )
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    parser.add_argument(
        "--timeout-s",
        type=console.seconds(allow_zero=False),
        default=30.0,
        help="time each API read may take (default 30)",
    )
    console.add_log_level(parser, default="warning")


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    _source_arguments(parser)
    parser.add_argument(
        "--pool-label",
        metavar="LABEL",
        type=console.label_key,
        help=f"group nodes into pools by this node label (default: {names.PRODUCT_LABEL})",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        type=console.dns_label,
        help="show only this namespace's tenant and waiting pods (the pools stay whole)",
    )


def _pod_name(text: str) -> str:
    """A pod's name; NAMESPACE/NAME, as status lists pods, is refused saying what to type."""
    namespace, slash, name = text.partition("/")
    if slash and namespace and name:
        raise argparse.ArgumentTypeError(
            f"{text!r} is NAMESPACE/NAME, as status lists pods; give the name and the "
            f"namespace apart: why {name} -n {namespace}"
        )
    return console.dns_subdomain(text)


def add_why_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "pod",
        metavar="POD",
        nargs="?",
        type=_pod_name,
        help="the pod's name (with -f: default the manifest's)",
    )
    parser.add_argument(
        "-f",
        "--filename",
        metavar="FILE",
        type=console.file_path,
        help="the manifest of a pod that is not there (a Pod, or a workload with a pod "
        "template): say what the webhook would answer for it",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        type=console.dns_label,
        help="the pod's namespace (default: the kubeconfig context's, else default)",
    )
    _source_arguments(parser)
    parser.add_argument(
        "--min-pending-s",
        type=console.seconds(),
        default=PlanSettings().min_pending_s,
        help="the controller's --repartition-min-pending-s (default %(default)s)",
    )
    parser.add_argument(
        "--carve-min-pending-s",
        type=console.seconds(),
        default=CARVE_MIN_PENDING_S,
        help="the controller's --repartition-carve-min-pending-s (default %(default)s)",
    )
    parser.add_argument("--max-nodes-in-flight", type=console.count(1, 100_000), default=1)


def _objects(args: argparse.Namespace) -> ClusterObjects:
    return _read(args)[0]


def _read(args: argparse.Namespace) -> tuple[ClusterObjects, KubernetesTransport | None]:
    from migslice.status.gather import connect, read_cluster, read_cluster_file

    if args.cluster_file is not None:
        if args.context is not None:
            raise CommandError(
                f"--context {args.context} names a kubeconfig context; --cluster-file reads no "
                "cluster: drop one of them"
            )
        return read_cluster_file(args.cluster_file), None
    transport = connect(args.kubeconfig, args.context, args.timeout_s)
    namespace, _, name = args.mig_config_map.partition("/")
    return read_cluster(transport, (namespace, name)), transport


@contextlib.contextmanager
def _without_cyclic_collector() -> Iterator[None]:
    """A run reads, derives and prints once: every object it makes lives until it ends, so
    the cyclic collector would walk them all, again and again as they grow, to free nothing
    (at 5,000 nodes and 40,000 pods, a third of the run). Off for the run, as it was after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _print(document: object, output: str) -> None:
    if output == "json":
        console.print_json(document)
    else:
        print(yaml.safe_dump(document, sort_keys=False, width=1000), end="")


def _record_settings(args: argparse.Namespace) -> ControllerSettings:
    """The controller's settings that say how long each node of the record cools down."""
    from migslice.repartition import ControllerSettings

    return ControllerSettings(
        plan=PlanSettings(cooldown_s=args.cooldown_s),
        carve=CarveSettings(cooldown_s=args.carve_cooldown_s, default_mode=args.mode_default),
    )


def run_status(args: argparse.Namespace) -> int:
    with _without_cyclic_collector():
        return _run_status(args)


def _run_status(args: argparse.Namespace) -> int:
    from migslice.status.cluster import StatusSettings, build_cluster
    from migslice.status.report import build_status, render_text, scoped, status_document

    console.setup_logging(args.log_level)
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    objects = _objects(args)
    namespace, _, name = args.mig_config_map.partition("/")
    settings = StatusSettings(
        now_s=time.time(),
        pool_label=args.pool_label,
        mig_config_map=(namespace, name),
        scheduler_name=args.scheduler_name,
    )
    cluster = build_cluster(objects, settings)
    report = build_status(cluster, settings=_record_settings(args))
    if args.namespace:
        report = scoped(report, cluster, args.namespace)
    if args.output in ("json", "yaml"):
        _print(status_document(report), args.output)
    else:
        print(render_text(report, wide=args.output == "wide"))
    sys.stdout.flush()
    return 0


def run_why(args: argparse.Namespace) -> int:
    with _without_cyclic_collector():
        return _run_why(args)


def _run_why(args: argparse.Namespace) -> int:
    from migslice.objects.pods import pod_key
    from migslice.status.cluster import StatusSettings, build_cluster
    from migslice.status.gather import context_namespace
    from migslice.status.why import explain
    from migslice.status.why_report import render_why, why_document

    console.setup_logging(args.log_level)
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    namespace = args.namespace
    if namespace is None:
        namespace = (
            "default"
            if args.cluster_file is not None
            else context_namespace(args.kubeconfig, args.context)
        )
    manifest = None if args.filename is None else _manifest(args.filename)
    if manifest is not None:
        metadata = manifest.get("metadata")
        if not isinstance(metadata, dict):
            raise CommandError(f"-f {args.filename}: metadata must be an object")
        written = metadata.get("namespace")
        if written is not None and not isinstance(written, str):
            raise CommandError(f"-f {args.filename}: metadata.namespace must be a string")
        namespace = args.namespace or written or namespace
    pod = args.pod or (None if manifest is None else _manifest_name(manifest))
    if pod is None:
        raise CommandError(
            "name the pod (POD), or give its manifest with -f FILE"
            if manifest is None
            else f"-f {args.filename}: no metadata.name or generateName; name the pod (POD)"
        )
    objects, transport = _read(args)
    key = f"{namespace}/{pod}"
    raw_pod = next((p for p in objects.pods if pod_key(p) == key), None)
    cm_namespace, _, cm_name = args.mig_config_map.partition("/")
    now = time.time()
    settings = StatusSettings(
        now_s=now,
        mig_config_map=(cm_namespace, cm_name),
        scheduler_name=args.scheduler_name,
    )
    cluster = build_cluster(objects, settings)
    record = _record_settings(args)
    controller = replace(
        record,
        plan=replace(
            record.plan,
            min_pending_s=args.min_pending_s,
            max_nodes_in_flight=args.max_nodes_in_flight,
        ),
        carve=replace(record.carve, min_pending_s=args.carve_min_pending_s),
    )
    if raw_pod is None:
        report = _explain_absent(args, cluster, objects, transport, namespace, pod, manifest)
    else:
        report = explain(cluster, raw_pod, settings=controller)
        if report.waiting is not None:
            report = _with_scheduler_events(report, objects, transport, namespace, pod)
    if args.output in ("json", "yaml"):
        _print(why_document(report), args.output)
    else:
        print(render_why(report, now, wide=args.output == "wide"))
    sys.stdout.flush()
    return 0


def _with_scheduler_events(
    report: WhyReport,
    objects: ClusterObjects,
    transport: KubernetesTransport | None,
    namespace: str,
    pod: str,
) -> WhyReport:
    """``report`` with the waiting pod's ``FailedScheduling`` Events (from the API server, or
    from the cluster file's Events)."""
    import dataclasses

    from migslice.status.absent import events_of
    from migslice.status.gather import read_scheduling_events

    raw = objects.others if transport is None else read_scheduling_events(transport, namespace, pod)
    said = events_of(raw, namespace, "Pod", pod, "FailedScheduling")
    return dataclasses.replace(report, scheduler_said=said)


def _manifest(path: Path) -> dict[str, Any]:
    """The first object of ``path`` that is a Pod or has a pod template."""
    from migslice.objects.clusterfile import load_yaml_documents
    from migslice.status.absent import WORKLOAD_KINDS

    text = console.read_text_file(path, flag="-f")
    try:
        documents = load_yaml_documents(text, f"-f {path}")
    except ClusterFileError as error:
        raise CommandError(str(error)) from None
    for document in documents:
        if isinstance(document, dict) and document.get("kind") in ("Pod", *WORKLOAD_KINDS):
            return document
    raise CommandError(
        f"-f {path}: no Pod, Job, CronJob, ReplicaSet, StatefulSet, DaemonSet or Deployment in it"
    )


def _manifest_name(manifest: dict[str, Any]) -> str | None:
    """The manifest's name; for one with ``generateName`` only, that prefix: no live pod has
    it, so the pod is explained as the one the manifest would create."""
    metadata = manifest.get("metadata") or {}
    if not isinstance(metadata, dict):
        return None
    for field in ("name", "generateName"):
        name = metadata.get(field)
        if isinstance(name, str) and name:
            return name
    return None


def _explain_absent(
    args: argparse.Namespace,
    cluster: Cluster,
    objects: ClusterObjects,
    transport: KubernetesTransport | None,
    namespace: str,
    pod: str,
    manifest: dict[str, Any] | None,
) -> WhyReport:
    """``why`` of a pod that is not among the live pods: the webhook's answer for the pod
    its manifest or its workload would create (:mod:`migslice.status.absent`)."""
    from migslice.admission import MalformedPodError
    from migslice.objects.pods import metadata_of
    from migslice.status.absent import (
        create_events,
        explain_absent,
        find_workload,
        template_field,
        template_pod,
    )
    from migslice.status.gather import read_absent
    from migslice.status.why import explain_missing

    key = f"{namespace}/{pod}"
    events: tuple[Any, ...] = ()
    if manifest is not None:
        source, template_kind = f"file {args.filename}", manifest.get("kind")
        raw = template_pod(manifest, namespace, name=pod)
    else:
        others = objects.others if transport is None else read_absent(transport, namespace)
        workload = find_workload(others, namespace, pod)
        if workload is None:
            raise CommandError(
                f"pod {key} not found (among live pods), and no Job, CronJob, ReplicaSet, "
                f"StatefulSet, DaemonSet or Deployment in {namespace} is named after it: a pod "
                "refused at admission leaves nothing; give its manifest with -f FILE to see "
                "what the webhook answers"
            )
        kind, name = str(workload["kind"]), str(metadata_of(workload).get("name"))
        source, template_kind = f"{kind} {namespace}/{name}", kind
        raw = template_pod(workload, namespace, name=pod if kind == "StatefulSet" else None)
        events = create_events(others, namespace, kind, name)
    if raw is None:
        raise CommandError(f"{source} has no pod template")
    try:
        absent = explain_absent(cluster, raw, source=source, events=events)
    except MalformedPodError as error:  # named as the webhook's review names it: object.<field>
        field = template_field(template_kind) + str(error).removeprefix("object.")
        raise CommandError(f"{source}: {field}; kube-apiserver would refuse it") from None
    return explain_missing(cluster, key, absent)


STATUS = console.Command(
    "status",
    help="show the whole cluster: tenants against quota, GPU maps per pool, waiting pods",
    description=(
        "Reads the cluster (kubeconfig, in-cluster, or --cluster-file), read-only, and shows "
        "per tenant its slices against its quota, per node pool every GPU's layout with who "
        "holds each instance and the pool's fragmentation index, every waiting GPU pod with "
        "the extender's reasons, and the repartition controller's plan in progress and the "
        "nodes it holds back. docs/status.md says what each number means."
    ),
    add_arguments=add_status_arguments,
    run=run_status,
)
WHY = console.Command(
    "why",
    help="say every reason a pod waits: admission, placement, re-partition, held nodes",
    description=(
        "Reads the cluster as status does and explains one pod: its TenantPolicy, size, "
        "profile and quota; the extender's filter verdict per class of node; what the "
        "repartition controller would do for it (its own decide()) and the state of a plan "
        "in progress; quarantined, cooling or backed-off nodes that could serve it. A pod "
        "that does not wait says where it is."
    ),
    add_arguments=add_why_arguments,
    run=run_why,
)
COMMANDS = (STATUS, WHY)
