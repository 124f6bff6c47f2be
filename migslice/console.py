"""What every command of the ``migslice`` program shares: the user-facing error, flag types
that validate at parse time, logging set-up and plain output (tables, JSON).

Services (``webhook``, ``extender``, ``agent``, the demo, the simulator) define their own
flags with these types, so a bad value is refused with argparse's one-line error before
anything starts: ``migslice webhook: error: argument --port: 70000 is not a port (1-65535)``.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import math
import os
import re
import signal
import stat
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from migslice.errors import MigsliceError

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class CommandError(MigsliceError):
    """An error the user can fix; printed as one line, exit status 1."""


# -- flag types ----------------------------------------------------------------------------------


def _number(text: str, kind: Callable[[str], Any], what: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def port(text: str) -> int:
    """A TCP port; 0 lets the kernel pick a free one (for tests)."""
    value = _number(text, int, "a port number")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (1-65535, or 0 for any)")
    return int(value)


def count(minimum: int = 1, maximum: int | None = None) -> Callable[[str], int]:
    """A whole number from ``minimum`` (to ``maximum``)."""

    def parse(text: str) -> int:
        value = int(_number(text, int, "a whole number"))
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
            raise argparse.ArgumentTypeError(f"{value} is out of range; expected {bound}")
        return value

    parse.__name__ = "count"
    return parse


MAX_GPU_INDEX = 63
"""The largest GPU index a flag accepts: NVML numbers a machine's GPUs from 0, and no server
holds more than 64 (the largest have 8 or 16); ``nvidia-smi -i`` and mig-parted's ``devices``
take the same index."""


def gpu_index(text: str) -> int:
    """An NVML GPU index, 0 to :data:`MAX_GPU_INDEX`."""
    value = int(_number(text, int, "a GPU index"))
    if not 0 <= value <= MAX_GPU_INDEX:
        raise argparse.ArgumentTypeError(
            f"{value} is not a GPU index (0 to {MAX_GPU_INDEX}, migslice.console.MAX_GPU_INDEX)"
        )
    return value


MAX_SECONDS = 366 * 86400
"""The longest duration a flag takes, a year: every wait and interval of migslice is far
shorter, and a timeout past the platform's (``threading.TIMEOUT_MAX``, ``time_t``) would fail
with a traceback when first waited on."""


def seconds(
    minimum: float = 0.0, *, allow_zero: bool = True, maximum: float = MAX_SECONDS
) -> Callable[[str], float]:
    """A finite number of seconds, at least ``minimum`` (more than 0 without ``allow_zero``),
    at most ``maximum`` (a year, :data:`MAX_SECONDS`)."""

    def parse(text: str) -> float:
        value = float(_number(text, float, "a number of seconds"))
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds")
        if value < minimum or (not allow_zero and value <= 0):
            bound = f"more than {minimum:g}" if not allow_zero else f"at least {minimum:g}"
            raise argparse.ArgumentTypeError(f"{value:g} is out of range; expected {bound}")
        if value > maximum:
            raise argparse.ArgumentTypeError(
                f"{value:g} is out of range; expected at most {maximum:.0f} "
                "(a year, migslice.console.MAX_SECONDS)"
            )
        return value

    parse.__name__ = "seconds"
    return parse


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def dns_label(text: str) -> str:
    """An RFC 1123 label (a Service or Namespace name): lower case, digits, ``-``, <= 63."""
    if not _DNS_LABEL.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a DNS label (lower-case letters, digits and '-', at most 63, "
            "starting and ending with a letter or digit)"
        )
    return text


def dns_subdomain(text: str) -> str:
    """An RFC 1123 subdomain (a DNS name, a node or ConfigMap name)."""
    if len(text) > 253 or not all(_DNS_LABEL.fullmatch(part) for part in text.split(".")):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a DNS name (dot-separated DNS labels, at most 253 characters)"
        )
    return text


def dns_subdomain_or_empty(text: str) -> str:
    """A DNS subdomain, or '' (a name a flag may leave unset, e.g. a scheduler name)."""
    return text if text == "" else dns_subdomain(text)


_HOST_LABEL = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?$")


def host(text: str) -> str:
    """An address to listen on: an IPv4 or IPv6 address, or a host name (RFC 1123 labels,
    either case, at most 253 characters). Whether it resolves is known only on binding."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    name = text.removesuffix(".")
    if not name or len(name) > 253 or not all(_HOST_LABEL.fullmatch(p) for p in name.split(".")):
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an IP address nor a host name (dot-separated labels of "
            "letters, digits and '-', at most 253 characters)"
        )
    return text


MAX_PATH_BYTES = 4096
"""Linux's PATH_MAX: the longest path a system call takes."""


def path_name(text: str) -> str:
    """A file or folder path as given: not empty, no NUL byte, at most PATH_MAX bytes. Whether
    it exists, and what it holds, is said when it is read (one line naming the flag)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names no file")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} holds a NUL byte; no path can")
    if len(os.fsencode(text)) > MAX_PATH_BYTES:
        raise argparse.ArgumentTypeError(
            f"a path of {len(os.fsencode(text))} bytes; the limit is {MAX_PATH_BYTES} (PATH_MAX)"
        )
    return text


def file_path(text: str) -> Path:
    """:func:`path_name` as a :class:`~pathlib.Path`."""
    return Path(path_name(text))


_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_SET_REQUIREMENT = re.compile(r"^(\S+)\s+(in|notin)\s+\((.*)\)$")


def label_key(text: str) -> str:
    """A Kubernetes label key (``[prefix/]name``) as the API server validates it."""
    if len(text.rpartition("/")[0]) > 253 or not _LABEL_KEY.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a label key ([DNS prefix/]name of letters, digits, '-', '_' and "
            "'.', at most 63, starting and ending with a letter or digit)"
        )
    return text


def label_selector(text: str) -> str:
    """A Kubernetes label selector as ``kubectl -l`` takes it: comma-separated requirements
    ``key``, ``!key``, ``key=value``, ``key==value``, ``key!=value``, ``key in (a,b)``,
    ``key notin (a,b)``; keys and values as the API server validates them."""

    def fail(reason: str) -> argparse.ArgumentTypeError:
        return argparse.ArgumentTypeError(f"{text!r} is not a label selector: {reason}")

    def key(name: str) -> None:
        if len(name.rpartition("/")[0]) > 253 or not _LABEL_KEY.match(name):
            raise fail(f"{name!r} is not a label key")

    def value(raw: str) -> None:
        if not _LABEL_VALUE.fullmatch(raw):
            raise fail(f"{raw!r} is not a label value")

    if not text.strip():
        raise fail("it is empty")
    for part in re.split(r",(?![^(]*\))", text):
        part = part.strip()
        found = _SET_REQUIREMENT.match(part)
        if found:
            key(found[1])
            for item in found[3].split(","):
                value(item.strip())
            continue
        for operator in ("!=", "==", "="):
            name, sign, raw = part.partition(operator)
            if sign:
                key(name.strip())
                value(raw.strip())
                break
        else:
            key(part.removeprefix("!").strip())
    return text


def ip_address(text: str) -> str:
    """An IPv4 or IPv6 address."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IP address") from None


def name_list(text: str) -> tuple[str, ...]:
    """A comma-separated list of DNS labels (namespaces); empty entries are ignored."""
    return tuple(dns_label(part.strip()) for part in text.split(",") if part.strip())


def namespaced_name(text: str) -> str:
    """``NAMESPACE/NAME`` of a namespaced object."""
    namespace, slash, name = text.partition("/")
    if not slash:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE/NAME")
    dns_label(namespace)
    dns_subdomain(name)
    return text


# -- logging and output --------------------------------------------------------------------------


LOG_FORMATS = ("text", "json")
LOG_FIELDS = ("pod", "namespace", "tenant", "node")
"""The identifiers a JSON log line carries as fields of their own when its sentence names
them (``node=gpu-a``) or the call passes them (``extra={"node": "gpu-a"}``)."""
_FIELD = re.compile(r"\b(" + "|".join(LOG_FIELDS) + r")=([^\s,;:()]+)")


def add_log_level(parser: argparse.ArgumentParser, default: str = "info") -> None:
    parser.add_argument("--log-level", default=default, choices=LOG_LEVELS)
    parser.add_argument(
        "--log-format",
        default="text",
        choices=LOG_FORMATS,
        help="text: sentences with key=value; json: one object a line, with the pod, "
        "namespace, tenant and node it is about as fields",
    )


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (RFC 3339, UTC), level, logger, message, and the fields of
    :data:`LOG_FIELDS` (a ``namespace/name`` pod is split into both), plus the traceback."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",  # UTC, never the pod's local time
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": message,
        }
        for key, value in _FIELD.findall(message):
            if key not in line:
                line[key] = value
            elif value not in str(line[key]).split(","):
                line[key] = f"{line[key]},{value}"  # a line about several: all of them
        for key in LOG_FIELDS:
            value = getattr(record, key, None)
            if isinstance(value, str) and value:
                line[key] = value
        pod = line.get("pod")
        if isinstance(pod, str) and "/" in pod:
            # each NAMESPACE/NAME of a line about several pods: its name and its namespace
            pods = [part.partition("/") for part in pod.split(",")]
            line["pod"] = ",".join(name if sep else ns for ns, sep, name in pods)
            namespaces = str(line.get("namespace") or "").split(",")
            namespaces += [ns for ns, sep, _ in pods if sep]
            line["namespace"] = ",".join(dict.fromkeys(n for n in namespaces if n))
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def setup_logging(level: str, log_format: str = "text") -> None:
    """The root logger for a command: ``text`` (:data:`LOG_FORMAT`) or ``json``
    (:class:`JsonFormatter`), the same for every service."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(LOG_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler])


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain table in the style of ``kubectl get``: upper-case headers, padded columns."""
    cells = [[str(h).upper() for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines)


def fail(message: str) -> int:
    """Print ``migslice: error: <message>`` and return the exit status 1."""
    print(f"migslice: error: {message}", file=sys.stderr)
    return 1


# -- commands ------------------------------------------------------------------------------------


def run_handler(args: argparse.Namespace) -> int:
    """Run the command a program's parser chose (``args.handler``) and end as a Unix tool
    does: an error of ours as one line (exit status 1); the reader gone away (``migslice
    layouts ... | head -1``, ``kubectl migslice status | head``) quietly, as a tool stopped by
    SIGPIPE; Ctrl-C with 130. The one ending of ``migslice`` and ``kubectl-migslice``."""
    try:
        code: int = args.handler(args)
    except MigsliceError as error:  # CommandError and any core error a command let through
        return fail(str(error))
    except BrokenPipeError:
        # Keep the interpreter from complaining at exit, when it flushes what is left.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:
        print("migslice: interrupted", file=sys.stderr)
        return 130
    return code


class Command:
    """One command of the ``migslice`` program, defined by the room that runs it."""

    def __init__(
        self,
        name: str,
        *,
        help: str,
        description: str,
        add_arguments: Callable[[argparse.ArgumentParser], None],
        run: Callable[[argparse.Namespace], int],
    ) -> None:
        self.name = name
        self.help = help
        self.description = description
        self.add_arguments = add_arguments
        self.run = run

    def parser(self, prog: str | None = None) -> argparse.ArgumentParser:
        """A parser of this command alone (``python -m webhook ...``)."""
        parser = argparse.ArgumentParser(prog=prog or self.name, description=self.description)
        self.add_arguments(parser)
        return parser

    def main(self, argv: Sequence[str] | None = None, prog: str | None = None) -> int:
        """Parse ``argv`` and run, printing a CommandError as one line (exit status 1)."""
        args = self.parser(prog).parse_args(argv)
        try:
            return self.run(args)
        except MigsliceError as error:
            return fail(str(error))
        except KeyboardInterrupt:
            return 130


# -- input files ---------------------------------------------------------------------------------

MAX_INPUT_BYTES = 256 << 20
MAX_KUBECONFIG_BYTES = 16 << 20
KUBECONFIG_LISTS = ("clusters", "contexts", "users")


def kubeconfig_problem(path: Path) -> str:
    """What keeps ``path`` from being a kubeconfig the kubernetes client can read, or "":
    a regular UTF-8 file of one YAML mapping whose ``clusters``, ``contexts`` and ``users``
    are lists of named entries (the client fails on anything else with a type error that
    names nothing, such as "'str' object does not support item assignment")."""
    from migslice.objects.clusterfile import ClusterFileError, load_yaml_documents

    if not path.exists():
        return "no such file"
    try:
        text = read_text_file(path, flag="kubeconfig", limit_bytes=MAX_KUBECONFIG_BYTES)
    except CommandError as error:
        return str(error).removeprefix(f"cannot read kubeconfig {path}: ")
    try:
        documents = [d for d in load_yaml_documents(text, "it") if d is not None]
    except ClusterFileError as error:
        return str(error)
    if not documents:
        return "it is empty; a kubeconfig is a YAML mapping of clusters, contexts and users"
    if len(documents) > 1:
        return f"it holds {len(documents)} YAML documents; a kubeconfig is one"
    config = documents[0]
    if not isinstance(config, dict):
        return (
            f"it is a YAML {_yaml_kind(config)}, not a mapping; a kubeconfig is a YAML mapping "
            "of clusters, contexts and users"
        )
    for key in KUBECONFIG_LISTS:
        entries = config.get(key)
        if entries is None:
            continue
        if not isinstance(entries, list):
            return f"{key} is a YAML {_yaml_kind(entries)}; it must be a list of named entries"
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                return f"{key}[{index}] must be a mapping with a string name"
    return ""


def check_kubeconfig(path: str | None) -> None:
    """CommandError, one line naming ``--kubeconfig``, when ``path`` is given and is no
    kubeconfig (:func:`kubeconfig_problem`)."""
    if path is None:
        return
    problem = kubeconfig_problem(Path(path))
    if problem:
        raise CommandError(f"--kubeconfig {path}: {problem}")


def _yaml_kind(value: object) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def read_text_file(path: Path, *, flag: str, limit_bytes: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of a regular file given on the command line; CommandError (one line,
    naming the flag) when it is missing, not a regular file (a directory, a FIFO that would
    block), larger than ``limit_bytes`` or not UTF-8."""
    try:
        info = path.stat()
    except OSError as error:
        raise CommandError(f"cannot read {flag} {path}: {error.strerror or error}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise CommandError(f"cannot read {flag} {path}: it is {kind}")
    if info.st_size > limit_bytes:
        raise CommandError(
            f"cannot read {flag} {path}: {info.st_size} bytes; the limit is {limit_bytes}"
        )
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CommandError(f"cannot read {flag} {path}: {error.strerror or error}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CommandError(
            f"cannot read {flag} {path}: not UTF-8 text (byte {error.start})"
        ) from None
