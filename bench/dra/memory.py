"""Benchmark: webhook and extender worker memory and sync time with DynamicMIG ResourceSlices of
1,000 DRA nodes of 8 A100s (a report).

The same measurement as ``bench/latency/sync_memory.py`` (a fresh child process per service
builds its app as a worker does in a cluster, against a server shaped like kube-apiserver, and
reports its RSS once ``/readyz`` says every cache has synced), over DRA objects: real-shaped
Nodes without device-plugin GPU resources, each with the ResourceSlices NVIDIA's driver
publishes in DynamicMIG mode (``harness.dra_slices``: a counter slice and one slice per GPU,
25 devices a GPU), and ``--claims-per-gpu`` allocated ResourceClaims on every GPU. Discovery
lists ``resourceslices``, ``resourceclaims`` and ``deviceclasses`` only, so the extender's
steer stays off: its state is a rule name per steered device, at most
``--dra-steer-max-rules`` of them.

    python -m bench.dra.memory                          # 1,000 nodes x 8 GPUs, 2 claims a GPU
    python -m bench.dra.memory --nodes 100

Writes the section ``memory`` of ``bench/dra/report.json`` (and ``report.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.dra.suite import SUITE
from bench.latency.extender_latency import raw_node
from bench.latency.sync_memory import Lists, measure, serve
from harness import dra_slices
from harness.dra_driver import MIG_CLASS
from migslice.kube.informer import SLICE_PAGE_SIZE
from migslice.names import DRA_API

PROFILE_1G = ("1g.10gb", 19)


def dra_node(index: int) -> dict[str, Any]:
    """A real-shaped Node with no device-plugin GPU resource (a DRA node)."""
    node = raw_node(index, heavy=True)
    node["metadata"]["name"] = f"dra-{index:05d}"
    labels = node["metadata"]["labels"]
    for key in [k for k in labels if k.startswith("nvidia.com/mig")]:
        del labels[key]
    for field in ("capacity", "allocatable"):
        found = node["status"].get(field) or {}
        for key in [k for k in found if k.startswith("nvidia.com/")]:
            del found[key]
    return node


def allocated_claim(node: str, gpu: int, start: int) -> dict[str, Any]:
    """A ResourceClaim kube-scheduler allocated a 1g.10gb at ``start`` of ``gpu`` on ``node``."""
    name = f"{node}-g{gpu}-s{start}"
    device = dra_slices.mig_device_name(gpu, PROFILE_1G[0], PROFILE_1G[1], start)
    selector = f"device.attributes['gpu.nvidia.com'].profile == '{PROFILE_1G[0]}'"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "mig",
                        "exactly": {
                            "deviceClassName": "mig.nvidia.com",
                            "allocationMode": "ExactCount",
                            "count": 1,
                            "selectors": [{"cel": {"expression": selector}}],
                        },
                    }
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "mig",
                            "driver": "gpu.nvidia.com",
                            "pool": node,
                            "device": device,
                        }
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": name, "uid": f"pod-{name}"}],
        },
    }


class DraLists(Lists):
    """The lists of a cluster of DRA nodes only."""

    def __init__(self, nodes: int, gpus: int, claims_per_gpu: int) -> None:
        super().__init__(0, 0)
        raw_nodes = [dra_node(i) for i in range(nodes)]
        slices: list[bytes] = []
        claims: list[bytes] = []
        for raw in raw_nodes:
            name = raw["metadata"]["name"]
            for item in dra_slices.node_slices(
                name, raw["metadata"]["uid"], [dra_slices.a100(g) for g in range(gpus)]
            ):
                slices.append(json.dumps(item).encode())
            for gpu in range(gpus):
                for k in range(claims_per_gpu):
                    claims.append(json.dumps(allocated_claim(name, gpu, 6 - k)).encode())
        self.items["/api/v1/nodes"] = [json.dumps(n).encode() for n in raw_nodes]
        self.items[f"{DRA_API}/resourceslices"] = slices
        self.items[f"{DRA_API}/resourceclaims"] = claims
        self.items[f"{DRA_API}/deviceclasses"] = [json.dumps(MIG_CLASS).encode()]
        self.list_bytes = {path: sum(map(len, items)) for path, items in self.items.items()}

    def page(self, path: str, query: dict[str, str]) -> bytes:
        if path == DRA_API:
            listed = [
                {"name": name, "namespaced": name == "resourceclaims", "kind": kind}
                for name, kind in (
                    ("resourceslices", "ResourceSlice"),
                    ("resourceclaims", "ResourceClaim"),
                    ("deviceclasses", "DeviceClass"),
                )
            ]
            return json.dumps(
                {
                    "kind": "APIResourceList",
                    "groupVersion": "resource.k8s.io/v1",
                    "resources": listed,
                }
            ).encode()
        return super().page(path, query)


def markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    lines = [
        "# Worker memory with 1,000 DynamicMIG nodes (`bench/dra/memory.py`)",
        "",
        f"{s['nodes']} DRA nodes x {s['gpus']} A100-80GB, DynamicMIG: {s['slices']} "
        f"ResourceSlices ({s['slice_list_mib']} MiB as JSON), {s['claims']} allocated "
        f"ResourceClaims ({s['claim_list_mib']} MiB); Nodes {s['node_list_mib']} MiB. One fresh "
        f"process per service, ResourceSlices {SLICE_PAGE_SIZE} a page; the steer off (see the "
        "program's docstring). Goal: each worker at most 300 MB.",
        "",
        "| service | sync s | RSS after sync MiB | peak RSS MiB | RSS before the lists MiB "
        "| at most 300 MB |",
        "|---|---|---|---|---|---|",
    ]
    for service, result in report["services"].items():
        met = result["peak_mib"] * 2**20 <= 300e6
        lines.append(
            f"| {service} | {result['sync_s']} | {result['rss_mib']} | {result['peak_mib']} "
            f"| {result.get('baseline_mib', '-')} | {'yes' if met else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--claims-per-gpu", type=int, default=2)
    parser.add_argument("--services", nargs="*", default=["webhook", "extender"])
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/dra)")
    args = parser.parse_args(argv)
    lists = DraLists(args.nodes, args.gpus, args.claims_per_gpu)
    server, url = serve(lists)
    services = {}
    for service in args.services:
        services[service] = measure(service, url)
        print(service, json.dumps(services[service]), flush=True)
    server.shutdown()
    mib = 2**20
    report = {
        "benchmark": "memory",
        "settings": {
            "nodes": args.nodes,
            "gpus": args.gpus,
            "slices": len(lists.items[f"{DRA_API}/resourceslices"]),
            "claims": len(lists.items[f"{DRA_API}/resourceclaims"]),
            "node_list_mib": round(lists.list_bytes["/api/v1/nodes"] / mib),
            "slice_list_mib": round(lists.list_bytes[f"{DRA_API}/resourceslices"] / mib),
            "claim_list_mib": round(lists.list_bytes[f"{DRA_API}/resourceclaims"] / mib),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
        },
        "services": services,
    }
    SUITE.write("memory", report, args.out)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
