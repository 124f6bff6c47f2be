"""``migslice models | profiles | layouts | fit``: the MIG geometry engine on the command line."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from migslice.console import (
    MAX_GPU_INDEX,
    CommandError,
    format_table,
    gpu_index,
    print_json,
)
from migslice.mig import (
    CATALOG,
    GpuModel,
    Placed,
    Rules,
    UnknownModelError,
    UnknownProfileError,
    enumerate_maximal_layouts,
    fit,
    violations,
)
from migslice.mig.migparted import mig_parted_entries, render_mig_parted
from migslice.mig.render import nvidia_smi_create, render_bar


def register(commands: Any) -> None:
    models = commands.add_parser("models", help="list the GPU models the catalog knows")
    models.add_argument("-o", "--output", choices=("table", "json"), default="table")
    models.set_defaults(handler=run_models)

    profiles = commands.add_parser(
        "profiles",
        help="a model's MIG profiles and legal placements (like nvidia-smi -lgip/-lgipp)",
    )
    _add_gpu(profiles)
    profiles.add_argument("-o", "--output", choices=("table", "json"), default="table")
    profiles.set_defaults(handler=run_profiles)

    layouts = commands.add_parser("layouts", help="all maximal layouts of a model")
    _add_gpu(layouts)
    layouts.add_argument(
        "--profiles", help="comma-separated profiles to build from (default: all of the model's)"
    )
    _add_driver(layouts)
    layouts.add_argument("-o", "--output", choices=("table", "json"), default="table")
    layouts.set_defaults(handler=run_layouts)

    fitting = commands.add_parser(
        "fit", help="place MIG profiles on one GPU, optionally beside existing instances"
    )
    _add_gpu(fitting)
    fitting.add_argument("profile", nargs="+", metavar="PROFILE", help="e.g. 3g.40gb 1g.10gb")
    fitting.add_argument(
        "--layout",
        metavar="JSON",
        help='existing instances: [{"profile": "1g.10gb", "start": 6, "size": 1}, ...]',
    )
    fitting.add_argument(
        "--gpu-index",
        type=gpu_index,
        default=0,
        metavar="N",
        help=f"GPU index for rendered output (0 to {MAX_GPU_INDEX}; default 0)",
    )
    _add_driver(fitting)
    fitting.add_argument(
        "-o", "--output", choices=("table", "json", "mig-parted", "nvidia-smi"), default="table"
    )
    fitting.set_defaults(handler=run_fit)


def _add_gpu(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gpu",
        required=True,
        metavar="MODEL",
        help="GFD product label (NVIDIA-A100-SXM4-80GB), alias (A100-80GB) or PCI id (0x20B2)",
    )


def _add_driver(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pre-r510",
        action="store_true",
        help="drivers before R510: a 4g and a 3g instance may not share a GPU",
    )


def _model(text: str) -> GpuModel:
    try:
        return CATALOG.get(text)
    except UnknownModelError as error:
        raise CommandError(str(error)) from None


def _profile_list(model: GpuModel, text: str | Sequence[str]) -> list[str]:
    names = [n.strip() for n in text.split(",")] if isinstance(text, str) else list(text)
    names = [n for n in names if n]
    if not names:
        raise CommandError("no profiles given; name at least one, e.g. 3g.40gb")
    for name in names:
        try:
            model.profile(name)
        except UnknownProfileError as error:
            raise CommandError(str(error)) from None
    return names


def run_models(args: argparse.Namespace) -> int:
    if args.output == "json":
        print_json(
            [
                {
                    "model": m.key,
                    "description": m.description,
                    "products": list(m.product_names),
                    "pciDeviceIds": [f"0x{d:04X}" for d in m.pci_device_ids],
                    "aliases": list(m.aliases),
                    "memorySlices": m.memory_slices,
                    "computeSlices": m.compute_slices,
                    "profiles": list(m.profile_names),
                    "source": m.source,
                }
                for m in CATALOG.models
            ]
        )
        return 0
    rows = [
        (
            m.key,
            m.product_names[0],
            ",".join(f"0x{d:04X}" for d in m.pci_device_ids),
            f"{m.compute_slices}/{m.memory_slices}",
            len(m.profiles),
        )
        for m in CATALOG.models
    ]
    print(format_table(("model", "gfd product", "pci ids", "slices c/m", "profiles"), rows))
    return 0


def run_profiles(args: argparse.Namespace) -> int:
    model = _model(args.gpu)
    if args.output == "json":
        print_json(
            {
                "model": model.key,
                "memorySlices": model.memory_slices,
                "computeSlices": model.compute_slices,
                "source": model.source,
                "profiles": [
                    {
                        "name": p.name,
                        "id": p.gi_profile_id,
                        "resource": p.resource_name,
                        "computeSlices": p.compute_slices,
                        "memorySlices": p.memory_slices,
                        "memoryMiB": p.memory_mib,
                        "smCount": p.sm_count,
                        "maxCount": p.max_count,
                        "placements": [{"start": s, "size": p.memory_slices} for s in p.placements],
                    }
                    for p in model.profiles
                ],
            }
        )
        return 0
    rows = [
        (
            p.name,
            p.gi_profile_id if p.gi_profile_id is not None else "?",
            p.max_count,
            p.memory_mib if p.memory_mib is not None else "?",
            p.sm_count if p.sm_count is not None else "?",
            p.compute_slices,
            p.memory_slices,
            "{" + ",".join(map(str, p.placements)) + f"}}:{p.memory_slices}",
        )
        for p in model.profiles
    ]
    print(
        f"{model.description}: {model.compute_slices} compute slices, "
        f"{model.memory_slices} memory slices"
    )
    print(
        format_table(
            ("profile", "id", "max", "memory mib", "sms", "compute", "memory", "placements"),
            rows,
        )
    )
    return 0


def run_layouts(args: argparse.Namespace) -> int:
    model = _model(args.gpu)
    names = _profile_list(model, args.profiles) if args.profiles else None
    found = enumerate_maximal_layouts(model, names, Rules(pre_r510=args.pre_r510))
    if args.output == "json":
        print_json([[p.as_dict() for p in layout] for layout in found])
        return 0
    print(
        f"{len(found)} maximal layouts of {model.key}"
        + (" (drivers before R510)" if args.pre_r510 else "")
    )
    for number, layout in enumerate(found, 1):
        print(f"{number:>4}  {render_bar(model, layout)}")
    return 0


def parse_layout_json(model: GpuModel, text: str) -> list[Placed]:
    """Parse ``--layout`` JSON: a list of ``{"profile", "start"[, "size"]}`` objects."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise CommandError(
            f"--layout is not valid JSON: {error.msg} at position {error.pos}"
        ) from None
    except RecursionError:
        raise CommandError("--layout nests too deep; it is a flat list of instances") from None
    if not isinstance(raw, list):
        raise CommandError('--layout must be a JSON list like [{"profile": "1g.10gb", "start": 0}]')
    placed: list[Placed] = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("profile"), str):
            raise CommandError(f"--layout[{index}] must be an object with a string 'profile'")
        start = item.get("start")
        if not isinstance(start, int) or isinstance(start, bool):
            raise CommandError(f"--layout[{index}].start must be an integer memory-slice index")
        try:
            profile = model.profile(item["profile"])
        except UnknownProfileError as error:
            raise CommandError(f"--layout[{index}]: {error}") from None
        size = item.get("size", profile.memory_slices)
        if not isinstance(size, int) or isinstance(size, bool):
            raise CommandError(f"--layout[{index}].size must be an integer")
        placed.append(Placed(start, profile.name, size))
    problems = violations(model, placed)
    if problems:
        raise CommandError("--layout is not a legal layout: " + "; ".join(problems))
    return placed


def run_fit(args: argparse.Namespace) -> int:
    model = _model(args.gpu)
    wanted = _profile_list(model, args.profile)
    existing = parse_layout_json(model, args.layout) if args.layout else []
    rules = Rules(pre_r510=args.pre_r510)
    result = fit(model, wanted, existing=existing, rules=rules)
    new = [p for p in result.placement if p not in existing]
    config_name = f"migslice-gpu{args.gpu_index}"
    mig_parted = (
        render_mig_parted(
            {config_name: mig_parted_entries(model, {args.gpu_index: result.placement})}
        )
        if result.feasible
        else ""
    )
    commands = nvidia_smi_create(args.gpu_index, model, new) if result.feasible else []
    if args.output == "json":
        print_json(
            {
                "model": model.key,
                "feasible": result.feasible,
                "placement": [p.as_dict() for p in result.placement],
                "new": [p.as_dict() for p in new],
                "reason": result.reason or None,
                "nvidiaSmi": commands,
                "migParted": mig_parted or None,
            }
        )
    elif not result.feasible:
        pass
    elif args.output == "mig-parted":
        print(mig_parted, end="")
    elif args.output == "nvidia-smi":
        print("\n".join(commands))
    else:
        print(f"{model.key}: {' + '.join(wanted)} {'fits' if len(wanted) == 1 else 'fit'}")
        print(f"  before  {render_bar(model, existing)}")
        print(f"  after   {render_bar(model, result.placement)}")
        print("\nnvidia-smi (largest first, so the driver's default placement succeeds):")
        for command in commands:
            print(f"  {command}")
        print("\nmig-parted config:")
        print("  " + mig_parted.rstrip().replace("\n", "\n  "))
    if not result.feasible:
        if args.output != "json":
            verb = "does not fit" if len(wanted) == 1 else "do not fit"
            raise CommandError(f"{' + '.join(wanted)} {verb}: {result.reason}")
        return 1
    return 0
