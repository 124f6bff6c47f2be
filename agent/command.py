"""``migslice agent`` (publish the node's MIG state) and ``migslice inspect`` (show it here)."""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import signal
import sys
import threading
from typing import Any

from migslice.cli.common import CommandError, format_table
from migslice.objects.times import format_time

log = logging.getLogger(__name__)


def register(commands: Any) -> None:
    agent = commands.add_parser(
        "agent",
        help="node agent: publish this node's real MIG layout (NVML) on its Node object",
        description=(
            "Reads every GPU through NVML (never changes anything) and writes the Node "
            "annotation migslice.io/gpu-layout when it changes, or every --heartbeat-s. "
            "Warnings (a GPU model the catalog lacks, NVML and the catalog disagreeing, a MIG "
            "GPU without instances) are logged and recorded as Node Events."
        ),
    )
    agent.add_argument(
        "--node-name", required=True, help="this node (the downward API's spec.nodeName)"
    )
    agent.add_argument("--kubeconfig", metavar="FILE", help="default: in-cluster, then ~/.kube")
    agent.add_argument("--interval-s", type=float, default=30.0, help="seconds between NVML reads")
    agent.add_argument(
        "--heartbeat-s", type=float, default=300.0, help="rewrite an unchanged layout this often"
    )
    agent.add_argument("--once", action="store_true", help="publish once and exit")
    agent.add_argument("--log-level", default="info", choices=("debug", "info", "warning"))
    agent.set_defaults(handler=run_agent)

    inspect = commands.add_parser(
        "inspect", help="show this machine's GPUs and MIG instances as NVML reports them"
    )
    inspect.add_argument("-o", "--output", choices=("table", "json", "annotation"), default="table")
    inspect.set_defaults(handler=run_inspect)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _read() -> Any:
    from agent.nvml import NvmlUnavailableError, nvml_session, read_gpus

    try:
        with nvml_session():
            return read_gpus()
    except NvmlUnavailableError as error:
        raise CommandError(str(error)) from None


def run_inspect(args: argparse.Namespace) -> int:
    from agent.report import build_report
    from migslice.mig import CATALOG, Placed, model_from_nvml
    from migslice.mig.render import render_bar

    gpus = _read()
    report = build_report(gpus, format_time(_now()))
    if args.output == "annotation":
        print(report.text())
        return 0
    if args.output == "json":
        print(json.dumps(json.loads(report.text()), indent=2))
        return 0
    if not gpus:
        print("no NVIDIA GPU found")
        return 0
    rows = []
    for gpu, entry in zip(gpus, report.layout.gpus, strict=True):
        if not gpu.mig_capable:
            rows.append((gpu.index, gpu.name, "unsupported", ""))
            continue
        if not gpu.mig_enabled:
            rows.append((gpu.index, gpu.name, "disabled", ""))
            continue
        model = CATALOG.find(f"0x{gpu.pci_device_id:04X}")
        if model is None:
            model = model_from_nvml(gpu.name, gpu.pci_device_id, report.layout.profiles)
        layout = [Placed(i.start, i.profile, i.size) for i in entry.instances]
        busy = ",".join(f"{i.profile}@{i.start}" for i in entry.instances if i.busy) or "-"
        rows.append((gpu.index, gpu.name, render_bar(model, layout), busy))
    print(format_table(("gpu", "name", "mig layout (memory slices)", "busy"), rows))
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def run_agent(args: argparse.Namespace) -> int:
    from agent.nvml import NvmlUnavailableError, nvml_session, read_gpus
    from agent.publisher import Publisher
    from migslice.kube.nodes import KubeNodeStore
    from migslice.kube.transport import ApiError, KubernetesTransport

    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.interval_s <= 0:
        raise CommandError(f"--interval-s {args.interval_s}: must be more than 0")
    try:
        transport = KubernetesTransport.from_environment(args.kubeconfig)
    except Exception as error:  # the kubernetes client raises several config errors
        raise CommandError(f"cannot configure access to the API server: {error}") from None

    def read() -> Any:
        with nvml_session():
            return read_gpus()

    publisher = Publisher(
        node_name=args.node_name,
        store=KubeNodeStore(transport),
        read=read,
        now=_now,
        heartbeat_s=args.heartbeat_s,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    delay = args.interval_s
    while True:
        try:
            written, _ = publisher.publish_once()
            delay = args.interval_s
            log.debug("agent pass node=%s written=%s", args.node_name, written)
        except NvmlUnavailableError as error:
            if args.once:
                raise CommandError(str(error)) from None
            log.error(
                "NVML unavailable node=%s: %s; retrying in %.0fs", args.node_name, error, delay
            )
        except ApiError as error:
            if args.once:
                raise CommandError(f"cannot publish on node {args.node_name}: {error}") from None
            delay = min(delay * 2, 300.0)
            log.error("publish failed node=%s: %s; retrying in %.0fs", args.node_name, error, delay)
        if args.once or stop.wait(delay):
            return 0
