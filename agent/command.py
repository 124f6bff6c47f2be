"""``migslice agent`` (publish the node's MIG state) and ``migslice inspect`` (show it here)."""

from __future__ import annotations

import argparse
import datetime
import json
import sys

from agent.readings import GpuReading
from agent.settings import AgentSettings
from migslice import console, names
from migslice.console import CommandError, format_table
from migslice.objects.times import format_time


def add_agent_arguments(agent: argparse.ArgumentParser) -> None:
    agent.add_argument(
        "--node-name",
        required=True,
        type=console.dns_subdomain,
        help="this node (the downward API's spec.nodeName)",
    )
    agent.add_argument(
        "--kubeconfig",
        metavar="FILE",
        type=console.path_name,
        help="default: in-cluster, then ~/.kube",
    )
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
    carve = agent.add_argument_group(
        "carve mode",
        "create and destroy MIG instances when the repartition controller asks "
        f"({names.CARVE_ANNOTATION}); never on a node labelled "
        f"{names.REPARTITION_MODE_LABEL}={names.MODE_MIG_MANAGER}",
    )
    carve.add_argument("--carve", action="store_true", help="carve when asked (off: read only)")
    carve.add_argument(
        "--carve-interval-s",
        type=console.seconds(allow_zero=False),
        default=5.0,
        help="seconds between reads of the Node for a carve request",
    )
    carve.add_argument(
        "--device-plugin-namespace",
        default=names.GPU_OPERATOR_NAMESPACE,
        type=console.dns_label,
        help="namespace of the NVIDIA device plugin pods, restarted after a carve",
    )
    carve.add_argument(
        "--device-plugin-selector",
        default=names.DEVICE_PLUGIN_SELECTOR,
        type=console.label_selector,
        help="label selector of the device plugin pods (the GPU Operator's by default)",
    )
    carve.add_argument(
        "--device-plugin-timeout-s",
        type=console.seconds(allow_zero=False),
        default=120.0,
        help="how long to wait for the device plugin to advertise carved devices",
    )
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
        if gpu.error:
            rows.append((gpu.index, gpu.name or "-", f"not read: {gpu.error}", ""))
            continue
        if not gpu.mig_capable:
            rows.append((gpu.index, gpu.name, "unsupported", ""))
            continue
        if not gpu.mig_enabled:
            rows.append((gpu.index, gpu.name, "disabled", ""))
            continue
        model = CATALOG.find(f"0x{gpu.pci_device_id:04X}")
        if model is None:  # the GPU's own table (the annotation's is the first model's)
            model = model_from_nvml(gpu.name, gpu.pci_device_id, gpu.profiles)
        layout = [Placed(i.start, i.profile, i.size) for i in entry.instances]
        busy = ",".join(f"{i.profile}@{i.start}" for i in entry.instances if i.busy) or "-"
        rows.append((gpu.index, gpu.name, render_bar(model, layout), busy))
    print(format_table(("gpu", "name", "mig layout (memory slices)", "busy"), rows))
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def run_agent(args: argparse.Namespace) -> int:
    from agent.service import serve_agent

    console.check_kubeconfig(args.kubeconfig)
    return serve_agent(
        AgentSettings(
            node_name=args.node_name,
            kubeconfig=args.kubeconfig,
            interval_s=args.interval_s,
            heartbeat_s=args.heartbeat_s,
            once=args.once,
            log_level=args.log_level,
            log_format=args.log_format,
            carve=args.carve,
            carve_interval_s=args.carve_interval_s,
            device_plugin_namespace=args.device_plugin_namespace,
            device_plugin_selector=args.device_plugin_selector,
            device_plugin_timeout_s=args.device_plugin_timeout_s,
        )
    )


AGENT = console.Command(
    "agent",
    help="node agent: publish this node's real MIG layout (NVML) on its Node object",
    description=(
        "Reads every GPU through NVML and writes the Node annotation migslice.io/gpu-layout "
        "when it changes, or every --heartbeat-s; changes nothing unless --carve is given "
        "and the repartition controller asks this node to carve (migslice.io/carve). "
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
