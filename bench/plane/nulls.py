"""Null extenders for ``bench.plane.cluster --floor``: what the extender protocol itself costs.

Two servers that answer kube-scheduler's extender calls without deciding anything (a filter
answers the first name it was sent and fails none, as the best-fit filter answers one node):

* ``go``: ``bench/plane/floor/main.go``, Go's ``net/http`` over TLS, built here with the Go
  toolchain the e2e builds with (``GO``, else ``go`` on PATH, else ``/usr/local/go/bin/go``).
  Through it kube-scheduler pays the protocol (the ExtenderArgs with the whole Pod and the
  names marshalled, TLS, HTTP/1.1, the answer read) and a compiled server's least cost: the
  most any extender could reach on this machine.
* ``python``: the same answer from a tiny WSGI app on migslice's own server (asyncio, TLS,
  HTTP/1.1 with h11, the verbs inline on the event loop, the Pod decoded with orjson), run as
  the extender command runs it: what our serving stack costs before any decision.

Run on the shipped scheduler configuration with only ``urlPrefix`` changed, next to the real
extender and no extender at all, they split the extender's share of kube-scheduler's cycle
into the protocol, our server and our decision. Their binds ignore MIG geometry and are for
timing only.
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from extender import VERBS
from harness.paths import REPO

GO_SOURCE = Path(__file__).resolve().parent / "floor" / "main.go"
KINDS = ("go", "python")


def go_binary() -> str:
    """The Go toolchain, found as ``e2e/build.sh`` finds it."""
    named = os.environ.get("GO")
    if named:
        return named
    return shutil.which("go") or "/usr/local/go/bin/go"


def build_go(out: Path, source: Path = GO_SOURCE, name: str = "migslice-bench-floor") -> Path:
    """``source``, a one-file Go command (default ``bench/plane/floor/main.go``), built into
    ``out/name`` (Go's build cache makes a rebuild quick)."""
    out.mkdir(parents=True, exist_ok=True)
    binary = out / name
    command = [go_binary(), "build", "-o", str(binary), str(source)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        relative = source.relative_to(REPO)
        raise RuntimeError(f"building {relative} failed: {done.stderr.strip()[:2000]}")
    return binary


class Floor:
    """One null extender, serving on 127.0.0.1 with the extender's certificate."""

    def __init__(self, kind: str, *, cert: Path, key: Path, ca: Path, workdir: Path) -> None:
        if kind not in KINDS:
            raise ValueError(f"floor kind {kind!r}: use one of {', '.join(KINDS)}")
        from migslice.serving.process import free_port

        self.kind = kind
        self.port = free_port()
        self.ca = ca
        self.log_path = workdir / f"floor-{kind}.log"
        if kind == "go":
            address = f"127.0.0.1:{self.port}"
            binary = build_go(workdir)
            command = [str(binary), "-listen", address, "-cert", str(cert), "-key", str(key)]
        else:
            command = [
                sys.executable, "-m", "bench.plane.nulls", "--serve", "--port", str(self.port),
                "--tls-cert", str(cert), "--tls-key", str(key),
            ]  # fmt: skip
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=log)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        context = ssl.create_default_context(cafile=str(self.ca))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the {self.kind} floor exited: {tail}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"the {self.kind} floor did not answer /readyz in {timeout_s:.0f}s")

    def stop(self) -> None:
        stop_process(self.process)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (a gunicorn master stops its worker), then SIGKILL after 10 s."""
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def pointed_at(config: Mapping[str, Any], url: str) -> dict[str, Any]:
    """``config`` with every extender's ``urlPrefix`` set to ``url`` (TLS settings kept)."""
    moved = copy.deepcopy(dict(config))
    for extender in moved.get("extenders", []):
        extender["urlPrefix"] = url
    return moved


# -- the Python null extender (child process) ------------------------------------------------


def null_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """The null extender's answers, as a bare WSGI app."""
    import orjson

    path = environ.get("PATH_INFO", "")
    if path == "/readyz":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]
    if path not in VERBS or environ.get("REQUEST_METHOD") != "POST":
        start_response("404 Not Found", [("Content-Length", "0")])
        return []
    length = int(environ.get("CONTENT_LENGTH") or 0)
    args = orjson.loads(environ["wsgi.input"].read(length))
    names = args.get("NodeNames") or []
    if path == "/prioritize":
        answer: Any = [{"Host": name, "Score": 0} for name in names]
    else:
        answer = {"NodeNames": names[:1], "FailedNodes": {}, "Error": ""}
    body = orjson.dumps(answer)
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    start_response("200 OK", headers)
    return [body]


def serve_main(args: argparse.Namespace) -> None:
    from bench.latency.extender_latency import served_as_the_extender
    from migslice.serving import serve

    serve(lambda: null_app, served_as_the_extender(args.port, args.tls_cert, args.tls_key))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-cert", required=True)
    parser.add_argument("--tls-key", required=True)
    serve_main(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
