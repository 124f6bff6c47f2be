"""``migslice agent`` (publish the node's MIG state) and ``migslice inspect`` (show it here)."""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import signal
import sys
import threading

from agent.readings import GpuReading
from agent.settings import AgentSettings
from migslice import console
from migslice.console import CommandError, format_table
from migslice.objects.times import format_time

log = logging.getLogger(__name__)


def add_agent_arguments(agent: argparse.ArgumentParser) -> None:
    agent.add_argument(
        "--node-name",
        required=True,
        type=console.dns_subdomain,
        help="this node (the downward API's spec.nodeName)",
    )
    agent.add_argument("--kubeconfig", metavar="FILE", help="default: in-cluster, then ~/.kube")
    agent.add_argument(
        "--interval-s",
        type=console.seconds(allow_zero=False),
        default=30.0,
        help="seconds between NVML reads",
    )
    agent.add_argument(
        "--heartbeat-s",
        type=console.seconds(allow_zero=False),
        default=300.0,
        help="rewrite an unchanged layout this often",
    )
    agent.add_argument("--once", action="store_true", help="publish once and exit")
    console.add_log_level(agent)


def add_inspect_arguments(inspect: argparse.ArgumentParser) -> None:
    inspect.add_argument("-o", "--output", choices=("table", "json", "annotation"), default="table")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _read() -> tuple[GpuReading, ...]:
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
    return serve_agent(
        AgentSettings(
            node_name=args.node_name,
            kubeconfig=args.kubeconfig,
            interval_s=args.interval_s,
            heartbeat_s=args.heartbeat_s,
            once=args.once,
            log_level=args.log_level,
        )
    )


def serve_agent(settings: AgentSettings) -> int:
    """Publish the node's MIG state every ``interval_s`` until SIGTERM (or once)."""
    from agent.nvml import NvmlUnavailableError, nvml_session, read_gpus
    from agent.publisher import Publisher
    from migslice.kube.nodes import KubeNodeStore
    from migslice.kube.transport import ApiError, KubernetesTransport

    console.setup_logging(settings.log_level)
    try:
        transport = KubernetesTransport.from_environment(settings.kubeconfig)
    except Exception as error:  # the kubernetes client raises several config errors
        raise CommandError(f"cannot configure access to the API server: {error}") from None

    def read() -> tuple[GpuReading, ...]:
        with nvml_session():
            return read_gpus()

    publisher = Publisher(
        node_name=settings.node_name,
        store=KubeNodeStore(transport),
        read=read,
        now=_now,
        heartbeat_s=settings.heartbeat_s,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    delay = settings.interval_s
    while True:
        try:
            written, _ = publisher.publish_once()
            delay = settings.interval_s
            log.debug("agent pass node=%s written=%s", settings.node_name, written)
        except NvmlUnavailableError as error:
            if settings.once:
                raise CommandError(str(error)) from None
            log.error(
                "NVML unavailable node=%s: %s; retrying in %.0fs", settings.node_name, error, delay
            )
        except ApiError as error:
            if settings.once:
                raise CommandError(
                    f"cannot publish on node {settings.node_name}: {error}"
                ) from None
            delay = min(delay * 2, 300.0)
            log.error(
                "publish failed node=%s: %s; retrying in %.0fs", settings.node_name, error, delay
            )
        if settings.once or stop.wait(delay):
            return 0


AGENT = console.Command(
    "agent",
    help="node agent: publish this node's real MIG layout (NVML) on its Node object",
    description=(
        "Reads every GPU through NVML (never changes anything) and writes the Node "
        "annotation migslice.io/gpu-layout when it changes, or every --heartbeat-s. "
        "Warnings (a GPU model the catalog lacks, NVML and the catalog disagreeing, a MIG "
        "GPU without instances) are logged and recorded as Node Events."
    ),
    add_arguments=add_agent_arguments,
    run=run_agent,
)
INSPECT = console.Command(
    "inspect",
    help="show this machine's GPUs and MIG instances as NVML reports them",
    description="Reads every GPU through NVML (never changes anything) and prints it.",
    add_arguments=add_inspect_arguments,
    run=run_inspect,
)
COMMANDS = (AGENT, INSPECT)
