"""Benchmark: webhook and extender worker memory and sync time on a large cluster (a report).

Serves realistic lists from a real HTTP server shaped like kube-apiserver (paged with
``limit``/``continue``, ``metadata.resourceVersion``, watches that stay open with nothing to
say): real-shaped GPU Nodes and bound training pods of ``harness.builders`` (``real=True``:
the labels of the kubelet, Node Feature Discovery, GPU Feature Discovery and MIG Manager,
conditions, nodeInfo, images; owner references, an init container, three containers with env,
probes and mounts, volumes, tolerations, a running status), with managedFields. For each
service, a fresh child process builds the service's app as a worker does in a cluster
(``in_cluster_app``: its informers, with the webhook's quota settler), waits until ``/readyz``
says every cache has synced, and reports its resident memory (now and peak) and the seconds to
sync.

    python -m bench.latency.sync_memory                     # 5,000 nodes, 40,000 pods
    python -m bench.latency.sync_memory --nodes 500 --pods-per-node 8

Writes the section ``sync_memory`` of ``bench/latency/report.json`` (and ``report.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.latency.extender_latency import bound_pods, raw_node
from bench.latency.suite import SUITE
from harness.paths import REPO

RESOURCE_VERSION = "100000"


class Lists:
    """Every collection as pre-encoded pages, keyed by (path, page size, token)."""

    def __init__(self, nodes: int, pods_per_node: int) -> None:
        self.items: dict[str, list[bytes]] = {
            "/api/v1/nodes": [json.dumps(raw_node(i, heavy=True)).encode() for i in range(nodes)],
            "/api/v1/pods": [
                json.dumps(pod).encode() for pod in bound_pods(nodes, pods_per_node, 1, real=True)
            ],
            "/api/v1/namespaces": [
                json.dumps({"metadata": {"name": name, "labels": {"team": name}}}).encode()
                for name in ("team-a", "default", "kube-system")
            ],
        }
        self.list_bytes = {path: sum(map(len, items)) for path, items in self.items.items()}

    def page(self, path: str, query: dict[str, str]) -> bytes:
        items = self.items.get(path, [])
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or len(items) or 1)
        end = min(len(items), start + limit)
        metadata: dict[str, Any] = {"resourceVersion": RESOURCE_VERSION}
        if end < len(items):
            metadata["continue"] = str(end)
            metadata["remainingItemCount"] = len(items) - end
        head = json.dumps({"kind": "List", "apiVersion": "v1", "metadata": metadata})
        return head[:-1].encode() + b',"items":[' + b",".join(items[start:end]) + b"]}"


def serve(lists: Lists) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            if query.get("watch") == "true":
                # A watch with nothing to say: headers, then silence until the client leaves.
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                time.sleep(min(60.0, float(query.get("timeoutSeconds") or 60)))
                try:
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass
                self.close_connection = True
                return
            body = lists.page(url.path.rstrip("/"), query)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


# -- the service side (a child process) -----------------------------------------------------


def rss_mib() -> tuple[float, float]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.split()
    return int(fields["VmRSS"][0]) / 1024, int(fields["VmHWM"][0]) / 1024


def child(service: str, url: str) -> None:
    """In a fresh process: the service's app as a worker builds it in a cluster
    (``in_cluster_app``, through a kubeconfig naming ``url``), until ``/readyz`` says its caches
    are synced; prints the seconds that took and the memory."""
    import tempfile

    import yaml

    if service == "webhook":
        import webhook as package  # what a worker imports: its baseline
    else:
        import extender as package  # type: ignore[no-redef]
    baseline, _ = rss_mib()
    kubeconfig = Path(tempfile.mkdtemp()) / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "bench", "cluster": {"server": url}}],
                "users": [{"name": "bench", "user": {}}],
                "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
                "current-context": "bench",
            }
        )
    )
    started = time.perf_counter()
    if service == "webhook":
        settings: Any = package.WebhookSettings(kubeconfig=str(kubeconfig), status_interval_s=0)
    else:
        settings = package.ExtenderSettings(kubeconfig=str(kubeconfig))
    client = package.in_cluster_app(settings).test_client()
    while client.get("/readyz").status_code != 200:
        time.sleep(0.05)
    sync_s = time.perf_counter() - started
    rss, peak = rss_mib()
    result = {
        "sync_s": round(sync_s, 1),
        "rss_mib": round(rss),
        "peak_mib": round(peak),
        "baseline_mib": round(baseline),
    }
    print(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # the informers' watches are still open; nothing to clean up


def measure(service: str, url: str) -> dict[str, Any]:
    root = REPO
    output = subprocess.run(
        [sys.executable, "-m", "bench.latency.sync_memory", "--child", service, "--url", url],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if output.returncode != 0:
        raise RuntimeError(f"{service} did not sync:\n{output.stderr[-3000:]}")
    return dict(json.loads(output.stdout.strip().splitlines()[-1]))


def markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    lines = [
        "# Worker memory and cache sync on a large cluster (`bench/latency/sync_memory.py`)",
        "",
        f"{s['nodes']} Nodes ({s['node_list_mib']} MiB as JSON), {s['pods']} Pods "
        f"({s['pod_list_mib']} MiB as JSON), pages of 500; one fresh process per service; "
        "shared machine, times noisy.",
        "",
        "| service | sync s | RSS after sync MiB | peak RSS MiB | RSS before the lists MiB |",
        "|---|---|---|---|---|",
    ]
    for service, result in report["services"].items():
        lines.append(
            f"| {service} | {result['sync_s']} | {result['rss_mib']} | {result['peak_mib']} "
            f"| {result.get('baseline_mib', '-')} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods-per-node", type=int, default=8)
    parser.add_argument("--services", nargs="*", default=["webhook", "extender"])
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/latency)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.url)
        return 0
    lists = Lists(args.nodes, args.pods_per_node)
    server, url = serve(lists)
    services = {}
    for service in args.services:
        services[service] = measure(service, url)
        print(service, json.dumps(services[service]), flush=True)
    server.shutdown()
    report = {
        "benchmark": "sync_memory",
        "settings": {
            "nodes": args.nodes,
            "pods": len(lists.items["/api/v1/pods"]),
            "node_list_mib": round(lists.list_bytes["/api/v1/nodes"] / 2**20),
            "pod_list_mib": round(lists.list_bytes["/api/v1/pods"] / 2**20),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
        },
        "services": services,
    }
    SUITE.write("sync_memory", report, args.out)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
