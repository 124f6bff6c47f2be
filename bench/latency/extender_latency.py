"""Benchmark: extender filter + prioritize over HTTP(S) at cluster scale (a report, not a test).

Starts ``migslice``'s extender app under gunicorn (one worker, gthread, TLS by default) on a
synthetic cluster of 8-GPU A100-80GB nodes, then plays kube-scheduler: for each pod, one
``/filter`` and one ``/prioritize`` call on a kept-alive connection, with ``candidates`` random
node names (``nodeCacheCapable: true``) or full Node objects (``false``). Reports pair latency
percentiles, calls per second, and the worker's resident memory.

    python -m bench.latency.extender_latency      # 5,000 nodes, 40,000 pods, 3,000 names
    python -m bench.latency.extender_latency --nodes 500 --pods-per-node 8 --duration-s 5   # quick

Writes the section ``extender_latency`` of ``bench/latency/report.json`` (and ``report.md``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common.plots import bars
from bench.latency.suite import SUITE
from harness.builders import A100_80GB, make_node, make_pod, running_status
from harness.paths import REPO

CONFIGS = (("all-balanced", 0.4), ("all-1g.10gb", 0.3), ("all-3g.40gb", 0.2), ("all-2g.20gb", 0.1))
GPUS_PER_NODE = 8
PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb")
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
RESOURCES = {"cpu": "96", "memory": "1Ti", "pods": "110", "ephemeral-storage": "1Ti"}


# -- the synthetic cluster -----------------------------------------------------------------


def node_name(index: int) -> str:
    """A node name shaped like a cloud provider's (kube-scheduler sends thousands per call)."""
    return (
        f"ip-10-{20 + index // 65536}-{index // 256 % 256}-{index % 256}.us-west-2.compute.internal"
    )


def node_config(index: int) -> str:
    point = (index * 0.6180339887) % 1.0
    for name, share in CONFIGS:
        if point < share:
            return name
        point -= share
    return CONFIGS[0][0]


def node_allocatable(config: str) -> dict[str, int]:
    from migslice.inventory import builtin_counts
    from migslice.mig import CATALOG

    built = builtin_counts(config, CATALOG.get("A100-80GB"))
    assert built is not None
    return {"nvidia.com/mig-" + p.replace("+", "."): c * GPUS_PER_NODE for p, c in built[1].items()}


def raw_node(index: int, heavy: bool = False) -> dict[str, Any]:
    """A Node as the API serves it; ``heavy``: with the bulk a real GPU node carries and its
    ``managedFields`` (``harness.builders``, ``real=True``)."""
    config = node_config(index)
    mig = {k.removeprefix("nvidia.com/mig-"): v for k, v in node_allocatable(config).items()}
    return make_node(
        node_name(index),
        gpu_count=GPUS_PER_NODE,
        mig=mig,
        config=config,
        config_state="success",
        uid=f"00000000-0000-0000-0000-{index:012d}",
        resource_version=str(1000 + index),
        extra_labels={
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": "p4de.24xlarge",
            "topology.kubernetes.io/zone": f"zone-{index % 3}",
        },
        resources=None if heavy else RESOURCES,
        spec={"providerID": f"aws:///zone/i-{index:017x}"},
        kubelet=False,
        real=heavy,
        index=index,
        managed_fields=heavy,
    )


def raw_pod(name: str, profile: str, bound_to: str | None, count: int = 1) -> dict[str, Any]:
    """A GPU pod as kube-scheduler sends it: one MIG instance (``count``), an affinity to the
    A100 and the GPU toleration; Running when ``bound_to`` a node."""
    return make_pod(
        name,
        profile=profile,
        count=count,
        limits={"cpu": "4", "memory": "32Gi"},
        also_requests=True,
        node_name=bound_to,
        phase="Running" if bound_to else "Pending",
        labels={"app": "train", "job": name.rsplit("-", 1)[0]},
        command=["python", "train.py"],
        affinity_products=[A100_80GB],
        spec={
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        },
        uid=f"uid-{name}",
        restart_policy=None,
    )


def real_pod(name: str, profile: str, node: str, number: int) -> dict[str, Any]:
    """A bound, running pod of a training Job as kube-apiserver serves it (``real=True``)."""
    pod = make_pod(
        name,
        profile=profile,
        limits={"cpu": "4", "memory": "32Gi"},
        node_name=node,
        affinity_products=[A100_80GB],
        uid=f"uid-{name}",
        resource_version=str(200_000 + number),
        real=True,
        managed_fields=True,
    )
    pod.update(running_status(pod, number))
    return pod


def bound_pods(
    nodes: int, pods_per_node: int, seed: int, *, real: bool = False
) -> Iterator[dict[str, Any]]:
    """Up to ``pods_per_node`` pods bound to each node, each on a free instance;
    ``real``: real-shaped (:func:`real_pod`)."""
    rng = random.Random(seed)
    number = 0
    for index in range(nodes):
        free = dict(node_allocatable(node_config(index)))
        for k in range(pods_per_node):
            offered = [r for r, c in free.items() if c > 0]
            if not offered:
                break
            resource = rng.choice(offered)
            free[resource] -= 1
            profile = resource.removeprefix("nvidia.com/mig-")
            name, node = f"job{index}-{k}", node_name(index)
            yield real_pod(name, profile, node, number) if real else raw_pod(name, profile, node)
            number += 1


# -- the server (child process) ------------------------------------------------------------


def warm_state(nodes: int, pods_per_node: int) -> Any:
    """The extender's state over ``nodes`` nodes with their bound pods, every node derived
    once, as the informers' warm-up leaves it when every list is in."""
    from extender import ExtenderSettings, state_from_objects
    from migslice.objects import ClusterObjects

    objects = ClusterObjects(
        nodes=tuple(raw_node(i) for i in range(nodes)),
        pods=tuple(bound_pods(nodes, pods_per_node, 1)),
    )
    return state_from_objects(objects, ExtenderSettings())


def serve_main(args: argparse.Namespace) -> None:
    from extender import ExtenderSettings, create_app
    from migslice.serving import serve

    def factory() -> Any:
        state = warm_state(args.nodes, args.pods_per_node)
        if args.watch_events_per_s > 0:
            apply_watch_events(state.index, watch_events(args.nodes), args.watch_events_per_s)
        return create_app(ExtenderSettings(), state)

    serve(factory, served_as_the_extender(args.port, args.tls_cert, args.tls_key, args.threads))


WATCH_BURST = 4
"""Events applied back to back: a watch's read returns the lines that arrived together."""


def watch_events(nodes: int, count: int = 200) -> list[bytes]:
    """Pod watch events as kube-apiserver streams binds: ``count`` real-shaped bound pods
    (``harness.builders``, ``real=True``: a Job's pod, three containers and an init container,
    running), one per node in turn and of a profile the node has, each a MODIFIED line."""
    import orjson

    from bench.plane.objects import pod_body

    lines = []
    for k in range(count):
        offered = sorted(node_allocatable(node_config(k % nodes)))  # a profile the node has
        profile = offered[k % len(offered)].removeprefix("nvidia.com/mig-")
        pod = pod_body(f"watched-{k:04d}", "bench-watch", profile, node=node_name(k % nodes))
        pod["metadata"]["resourceVersion"] = str(100_000 + k)
        pod["status"] = running_status(pod, k)
        lines.append(orjson.dumps({"type": "MODIFIED", "object": pod}))
    return lines


def apply_watch_events(index: Any, lines: list[bytes], per_s: float) -> threading.Thread:
    """A thread that applies ``per_s`` of ``lines`` a second to ``index``, ``WATCH_BURST`` at
    a time (see :func:`apply_events`)."""

    def run() -> None:
        applied = 0
        while True:
            applied = apply_events(index, lines, applied, WATCH_BURST)
            time.sleep(WATCH_BURST / per_s)

    thread = threading.Thread(target=run, name="bench-watch-events", daemon=True)
    thread.start()
    return thread


def apply_events(index: Any, lines: list[bytes], applied: int, count: int) -> int:
    """Apply ``count`` events from ``lines`` (cyclic, from the ``applied``-th) to the
    extender's cluster ``index`` as its pod informer does: decode the line, project the pod,
    upsert it and derive the node it touched on this thread. Every other pass over ``lines``
    deletes the pods instead, so the cluster keeps its size. Returns the events applied."""
    import orjson

    from migslice.objects import pod_facts_from_raw

    for _ in range(count):
        raw = orjson.loads(lines[applied % len(lines)])["object"]
        facts = pod_facts_from_raw(raw)
        key = f"{raw['metadata']['namespace']}/{raw['metadata']['name']}"
        if facts is not None and (applied // len(lines)) % 2 == 0:
            touched = index.upsert_pod(facts)
        else:
            touched = index.delete_pod(key)
        if touched:
            index.derive(touched)
        applied += 1
    return applied


def served_as_the_extender(
    port: int, tls_cert: str | None, tls_key: str | None, threads: int = 8
) -> Any:
    """Server options on 127.0.0.1 as the extender command serves its verbs: one worker, the
    verbs inline on the event loop with the extender's body limit (plain HTTP without TLS)."""
    from extender import VERBS, ExtenderSettings
    from migslice.serving import ServerOptions, ServingLimits

    limit = ExtenderSettings().max_body_bytes
    return ServerOptions(
        host="127.0.0.1",
        port=port,
        tls_cert=tls_cert,
        tls_key=tls_key,
        insecure_http=tls_cert is None,
        workers=1,
        threads=threads,
        limits=ServingLimits().with_body_limits(dict.fromkeys(VERBS, limit)),
        inline_paths=frozenset(VERBS),
    )


# -- the client ---------------------------------------------------------------------------


class Client:
    """One kept-alive connection, like kube-scheduler's http.Client."""

    def __init__(self, port: int, context: ssl.SSLContext | None) -> None:
        if context is None:
            self.connection: http.client.HTTPConnection = http.client.HTTPConnection(
                "127.0.0.1", port, timeout=30
            )
        else:
            self.connection = http.client.HTTPSConnection(
                "127.0.0.1", port, timeout=30, context=context
            )

    def post(self, verb: str, body: bytes) -> Any:
        self.connection.request(
            "POST",
            f"/{verb}",
            body=body,
            headers={"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1"},
        )
        response = self.connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{verb} answered HTTP {response.status}")
        return json.loads(data)

    def get(self, path: str) -> int:
        self.connection.request("GET", path)
        response = self.connection.getresponse()
        response.read()
        return response.status


def requests_for(
    args: argparse.Namespace, cache_capable: bool, candidates: int, count: int
) -> list[bytes]:
    rng = random.Random(7)
    heavy_nodes = {} if cache_capable else {i: raw_node(i, heavy=True) for i in range(args.nodes)}
    bodies = []
    for n in range(count):
        pod = raw_pod(f"new-{n}", rng.choice(PROFILES), None)
        chosen = rng.sample(range(args.nodes), min(candidates, args.nodes))
        if cache_capable:
            names = [node_name(i) for i in chosen]
            document = {"Pod": pod, "Nodes": None, "NodeNames": names}
        else:
            items = [heavy_nodes[i] for i in chosen]
            document = {"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
        bodies.append(json.dumps(document, separators=(",", ":")).encode())
    return bodies


def measure(
    client_factory: Any, bodies: list[bytes], duration_s: float, clients: int
) -> dict[str, float]:
    """Closed loop: each client sends filter then prioritize, back to back, until time is up."""
    latencies: list[float] = []
    by_verb: dict[str, list[float]] = {"filter": [], "prioritize": []}
    calls = [0]
    lock = threading.Lock()
    stop_at = time.perf_counter() + duration_s

    def run(offset: int) -> None:
        client = client_factory()
        mine: list[float] = []
        verbs: dict[str, list[float]] = {"filter": [], "prioritize": []}
        done = 0
        k = offset
        while time.perf_counter() < stop_at:
            body = bodies[k % len(bodies)]
            k += clients
            started = time.perf_counter()
            answer = client.post("filter", body)
            if answer["Error"]:
                raise RuntimeError(answer["Error"])
            between = time.perf_counter()
            client.post("prioritize", body)
            ended = time.perf_counter()
            mine.append(ended - started)
            verbs["filter"].append(between - started)
            verbs["prioritize"].append(ended - between)
            done += 2
        with lock:
            latencies.extend(mine)
            for verb, values in verbs.items():
                by_verb[verb].extend(values)
            calls[0] += done

    started = time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    latencies.sort()

    def pct(p: float, values: list[float] = latencies) -> float:
        return values[min(len(values) - 1, int(p * len(values)))] * 1000

    for values in by_verb.values():
        values.sort()
    return {
        **{
            f"{verb}_{name}_ms": round(pct(p, values), 3)
            for verb, values in by_verb.items()
            for name, p in (("p50", 0.5), ("p99", 0.99))
        },
        "pairs": len(latencies),
        "p50_ms": round(pct(0.50), 3),
        "p90_ms": round(pct(0.90), 3),
        "p99_ms": round(pct(0.99), 3),
        "max_ms": round(latencies[-1] * 1000, 3),
        "mean_ms": round(statistics.fmean(latencies) * 1000, 3),
        "calls_per_s": round(calls[0] / elapsed, 1),
    }


def worker_cpu_s(master_pid: int) -> float:
    """User + system CPU seconds of the server's workers so far."""
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    ticks = 0
    for pid in children:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def worker_rss_mib(master_pid: int) -> float:
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    rss = 0.0
    for pid in children:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = max(rss, int(line.split()[1]) / 1024)
    return round(rss, 1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(
    args: argparse.Namespace, nodes: int, tls: tuple[str, str] | None
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    command = [
        sys.executable, "-m", "bench.latency.extender_latency", "--serve", "--port", str(port),
        "--nodes", str(nodes), "--pods-per-node", str(args.pods_per_node),
        "--threads", str(args.threads),
        "--watch-events-per-s", str(getattr(args, "watch_events_per_s", 0.0)),
    ]  # fmt: skip
    if tls:
        command += ["--tls-cert", tls[0], "--tls-key", tls[1]]
    root = REPO
    process = subprocess.Popen(
        command, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return process, port


def wait_ready(client_factory: Any, process: subprocess.Popen[bytes], timeout_s: float) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        if process.poll() is not None:
            raise RuntimeError("benchmark server exited")
        try:
            if client_factory().get("/readyz") == 200:
                return time.perf_counter() - started
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("benchmark server not ready in time")


def run_case(
    args: argparse.Namespace,
    nodes: int,
    cache_capable: bool,
    candidates: int,
    tls: tuple[str, str, str] | None,
) -> dict[str, Any]:
    context = None
    if tls:
        context = ssl.create_default_context(cafile=tls[2])
        context.check_hostname = False
    sized = argparse.Namespace(**{**vars(args), "nodes": nodes})
    process, port = start_server(sized, nodes, (tls[0], tls[1]) if tls else None)
    try:

        def client_factory() -> Client:
            return Client(port, context)

        startup_s = wait_ready(client_factory, process, timeout_s=600)
        bodies = requests_for(sized, cache_capable, candidates, 200)
        measure(client_factory, bodies, min(2.0, args.duration_s), 1)  # warm up
        cpu_before = worker_cpu_s(process.pid)
        single = measure(client_factory, bodies, args.duration_s, 1)
        cpu_s = worker_cpu_s(process.pid) - cpu_before
        calls = single["calls_per_s"] * args.duration_s
        single["worker_cpu_ms_per_call"] = round(cpu_s / max(1.0, calls) * 1000, 3)
        loaded = measure(client_factory, bodies, args.duration_s, args.clients)
        rss = worker_rss_mib(process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    return {
        "nodes": nodes,
        "pods": nodes * args.pods_per_node,
        "candidates": candidates,
        "node_cache_capable": cache_capable,
        "request_bytes": len(bodies[0]),
        "startup_s": round(startup_s, 1),
        "one_client": single,
        f"{args.clients}_clients": loaded,
        "worker_rss_mib": rss,
    }


def markdown(report: dict[str, Any]) -> str:
    clients = report["settings"]["clients"]
    lines = [
        "# Extender filter + prioritize over HTTPS (`bench/latency/extender_latency.py`)",
        "",
        "| nodes | pods | candidates | nodeCacheCapable | request KiB | pair p50 ms | pair p99 ms "
        "| filter p50/p99 ms | prioritize p50/p99 ms | worker CPU ms/call "
        f"| calls/s (1 client) | calls/s ({clients} clients) | p99 ms ({clients} clients) "
        "| worker RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in report["cases"]:
        one, many = case["one_client"], case[f"{clients}_clients"]
        lines.append(
            f"| {case['nodes']} | {case['pods']} | {case['candidates']} | "
            f"{str(case['node_cache_capable']).lower()} | {case['request_bytes'] / 1024:.0f} | "
            f"{one['p50_ms']} | {one['p99_ms']} | "
            f"{one['filter_p50_ms']}/{one['filter_p99_ms']} | "
            f"{one['prioritize_p50_ms']}/{one['prioritize_p99_ms']} | "
            f"{one['worker_cpu_ms_per_call']} | {one['calls_per_s']} | {many['calls_per_s']} | "
            f"{many['p99_ms']} | {case['worker_rss_mib']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods-per-node", type=int, default=8)
    parser.add_argument("--candidates", type=int, default=3000)
    parser.add_argument("--uncached-nodes", type=int, nargs="*", default=[100, 500])
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--insecure-http", action="store_true", help="plain HTTP, not TLS")
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/latency)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--tls-cert", help=argparse.SUPPRESS)
    parser.add_argument("--tls-key", help=argparse.SUPPRESS)
    parser.add_argument(
        "--watch-events-per-s",
        type=float,
        default=0.0,
        help="pod watch events a second the server applies while it answers (as the "
        "extender's informer does on its own thread; default none)",
    )
    args = parser.parse_args()
    if args.serve:
        serve_main(args)
        return 0
    from migslice.serving.certs import write_tls_bundle

    with tempfile.TemporaryDirectory() as scratch:
        tls = None
        if not args.insecure_http:
            bundle = write_tls_bundle(
                scratch, "migslice-extender", "migslice-system", ip_addresses=["127.0.0.1"]
            )
            tls = (str(bundle.cert), str(bundle.key), str(bundle.ca_cert))
        cases = [run_case(args, args.nodes, True, args.candidates, tls)]
        print(json.dumps(cases[-1]), flush=True)
        for count in args.uncached_nodes:
            cases.append(run_case(args, count, False, count, tls))
            print(json.dumps(cases[-1]), flush=True)
    report = {
        "benchmark": "extender_latency",
        "settings": {
            "gpus_per_node": GPUS_PER_NODE,
            "tls": not args.insecure_http,
            "duration_s": args.duration_s,
            "clients": args.clients,
            "gunicorn": f"1 worker, gthread, {args.threads} threads",
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
        },
        "cases": cases,
    }
    SUITE.write("extender_latency", report, args.out)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def plot(report: dict[str, Any], path: Path) -> str:
    """Filter and prioritize p50 and p99 per case and number of clients."""
    groups: list[str] = []
    series: dict[str, list[float | None]] = {
        "filter p50": [],
        "filter p99": [],
        "prioritize p50": [],
        "prioritize p99": [],
    }
    for case in report["cases"]:
        for key, load in case.items():
            if not (isinstance(load, dict) and "filter_p50_ms" in load):
                continue
            groups.append(f"{case['nodes']} nodes, {case['candidates']} candidates\n{key}")
            for name in series:
                verb, quantile = name.split()
                series[name].append(load[f"{verb}_{quantile}_ms"])
    return bars(
        path,
        title="Extender over HTTPS: one filter and one prioritize call",
        groups=groups,
        series=series,
        ylabel="ms per call",
    )
