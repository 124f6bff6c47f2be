"""A generic list+watch cache of one Kubernetes resource (the pattern of client-go's informer).

    informer = Informer(
        name="nodes",
        transport=KubernetesTransport.from_environment(),
        resource=ResourceRef("/api/v1/nodes"),
        project=node_facts_from_raw,        # raw JSON -> the compact value to keep (or None)
        sink=my_sink,                       # replace(items) / upsert(key, item) / delete(key)
    )
    informer.start()                        # a daemon thread; informer.stop() ends it

The loop lists the resource in pages (``limit``/``continue``), hands the sink the whole set
(``replace``), then watches from the list's ``resourceVersion`` with bookmarks, passing every
event on (``upsert``/``delete``). A watch that ends normally is resumed from the last
resourceVersion seen; ``410 Gone`` (as an HTTP status or an ERROR event) means the version
is too old, so it lists again. Any other error waits with exponential backoff (``Backoff``:
0.5 s doubling to a cap of 4 s, each wait shortened by up to a fifth at random so that many
informers do not knock in step), then lists again: a cache is whole again within a few
seconds of the API server's return. ``project`` keeps only what callers need; returning None
for an object means "not of interest" and is delivered as a delete of its key.

Readiness: :attr:`Informer.synced` turns true after the first complete list and stays true.
:attr:`Informer.connected` says whether the cache follows the API server now: true from a
complete list on, while its watches answer; false from the first failed list or watch until
the next complete list, and false while a watch has not been answered for longer than it was
asked to last (``watch_timeout_s`` plus ``WATCH_GRACE_S``: the server ends every watch by
then, so a quiet, healthy cluster stays connected). :meth:`Informer.blind_s` is how long it
has not been connected; :meth:`Informer.staleness_s` the time since the API server last
answered (a list page, a watch event or bookmark, or a watch that ended normally).
"""

from __future__ import annotations

import gc
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import orjson

from migslice.kube.transport import ApiError, KubeError, RawObject, Transport, decode_object

log = logging.getLogger(__name__)
_SUBJECTS = {"pods": "pod", "nodes": "node", "tenantpolicies": "tenant"}
"""The log field of an object of a collection (docs/operate.md, "Logs")."""

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class Sink(Protocol[T_contra]):
    """Where an informer delivers projected objects, keyed ``namespace/name`` (or ``name``)."""

    def replace(self, items: Mapping[str, T_contra]) -> None: ...

    def upsert(self, key: str, item: T_contra) -> None: ...

    def delete(self, key: str) -> None: ...


@runtime_checkable
class PageSink(Protocol[T_contra]):
    """A sink that takes a list page by page instead of whole: ``upsert`` for every object of
    a page as the page arrives, then ``listed`` with the keys of the complete list (drop every
    other key: the cache is whole again). Nothing of a 40,000-object list is held by the
    informer in between; the sink keeps only its own compact values."""

    def upsert(self, key: str, item: T_contra) -> None: ...

    def delete(self, key: str) -> None: ...

    def listed(self, keys: frozenset[str]) -> None: ...


@dataclass(frozen=True, slots=True)
class ResourceRef:
    """A collection path (``/api/v1/pods``, ``/apis/migslice.io/v1alpha1/tenantpolicies``,
    ``/api/v1/namespaces/gpu-operator/configmaps``) and optional selectors."""

    path: str
    label_selector: str = ""
    field_selector: str = ""

    def query(self) -> dict[str, str]:
        query: dict[str, str] = {}
        if self.label_selector:
            query["labelSelector"] = self.label_selector
        if self.field_selector:
            query["fieldSelector"] = self.field_selector
        return query


WATCH_TIMEOUT_S = 60
"""How long an informer asks each watch to last (``timeoutSeconds``), unless told otherwise."""

WATCH_GRACE_S = 15.0
"""How long past its own timeout a watch may stay unanswered before its cache counts as
disconnected (the server ends a watch at ``timeoutSeconds``; this covers a slow close)."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff: ``initial_s`` doubling up to ``max_s``; :meth:`wait_s` shortens
    each delay by up to ``jitter`` (a fraction) at random."""

    initial_s: float = 0.5
    max_s: float = 30.0
    jitter: float = 0.0

    def delay_s(self, failures: int) -> float:
        return float(min(self.max_s, self.initial_s * 2 ** max(0, failures - 1)))

    def wait_s(self, failures: int, unit: float) -> float:
        """The delay after ``failures`` failures, with ``unit`` (0 <= unit < 1) of the jitter."""
        return self.delay_s(failures) * (1.0 - self.jitter * unit)


RELIST_BACKOFF = Backoff(initial_s=0.5, max_s=4.0, jitter=0.2)


@dataclass(slots=True)
class InformerStats:
    """Counters for metrics: lists done, re-lists after 410 Gone, errors, events applied."""

    lists: int = 0
    relists_gone: int = 0
    errors: int = 0
    events: int = 0
    skipped: int = 0
    last_error: str = ""


class GoneError(KubeError):
    """The resourceVersion is too old (410 Gone): list again."""


class ContinueExpiredError(GoneError):
    """A list's ``continue`` token expired (410): list again, whole, in one request
    (client-go's pager does the same: paging again could expire again, forever)."""


SHORT_WATCH_S = 1.0
"""A watch that ends normally sooner than this without one event is followed by a backoff (as
client-go's "very short watch"): a server or proxy that closes every watch at once would
otherwise be asked again in a tight loop."""


_LIST_HEAD = re.compile(
    rb'\s*\{\s*"kind"\s*:\s*"[^"]*"\s*,\s*"apiVersion"\s*:\s*"[^"]*"\s*,\s*"metadata"\s*:\s*\{([^{}]*)\}'
)
_CONTINUE = re.compile(rb'"continue"\s*:\s*"([A-Za-z0-9+/=_.-]*)"')


def continue_token_of(body: bytes) -> str:
    """The ``continue`` token of a list answer read from its head (kube-apiserver writes
    ``kind``, ``apiVersion`` and ``metadata`` before ``items``); "" when the head does not
    read that way or has none."""
    head = _LIST_HEAD.match(body, 0, 4096)
    if head is None:
        return ""
    token = _CONTINUE.search(head.group(1))
    return "" if token is None else token.group(1).decode("ascii")


class _Fetch:
    """One list page asked for in a daemon thread: the answer (or the error) waits in
    :meth:`result`. A page nobody reads any more (the list failed) is left to finish or time
    out on its own and never holds up the process's exit."""

    def __init__(self, fetch: Callable[[str], bytes], token: str, name: str) -> None:
        self._done = threading.Event()
        self._body = b""
        self._error: BaseException | None = None
        thread = threading.Thread(target=self._run, args=(fetch, token), name=name, daemon=True)
        thread.start()

    def _run(self, fetch: Callable[[str], bytes], token: str) -> None:
        try:
            self._body = fetch(token)
        except BaseException as error:  # handed to the reader, raised there
            self._error = error
        finally:
            self._done.set()

    def result(self) -> bytes:
        self._done.wait()
        if self._error is not None:
            raise self._error
        body, self._body = self._body, b""  # the caller holds the only reference
        return body


_pause_lock = threading.Lock()
_pauses = 0
_was_enabled = False


@contextmanager
def collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while the block runs (nested and from
    several threads alike: it resumes when the last block ends, if it was on before).

    A list page decodes into about 100,000 dicts and lists that the collector would otherwise
    walk, together with everything the process holds, every few hundred allocations: 40 % of
    the decode's CPU in ``bench/latency/sync_memory.py``. JSON makes no reference cycles, so the
    page is freed by reference counting alike; what other threads leave in cycles meanwhile waits
    for the next collection."""
    global _pauses, _was_enabled
    with _pause_lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()


def object_key(raw: Mapping[str, Any]) -> str:
    metadata = raw.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = str(metadata.get("name") or "")
    return f"{namespace}/{name}" if namespace else name


SLICE_PAGE_SIZE = 50
"""List page size for ResourceSlices: a DynamicMIG slice of NVIDIA's driver is about 27 KB of
JSON (25 devices with their counters), so 500 of them decode into some 130 MB of objects at
once; 50 keeps a page near the size of 500 Nodes (bench/dra/memory.py)."""


@dataclass
class Informer(Generic[T]):
    """List+watch one resource into a :class:`Sink` (see the module docstring)."""

    name: str
    transport: Transport
    resource: ResourceRef
    project: Callable[[RawObject], T | None]
    sink: Sink[T] | PageSink[T]
    page_size: int = 500
    watch_timeout_s: int = WATCH_TIMEOUT_S
    backoff: Backoff = RELIST_BACKOFF
    clock: Callable[[], float] = time.monotonic
    random_unit: Callable[[], float] = random.random
    stats: InformerStats = field(default_factory=InformerStats)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _synced: bool = field(default=False, repr=False)
    _last_contact: float | None = field(default=None, repr=False)
    _lost_at: float | None = field(default=None, repr=False)
    _resource_version: str = field(default="", repr=False)
    _keys: set[str] = field(default_factory=set, repr=False)
    _unpaged: bool = field(default=False, repr=False)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def synced(self) -> bool:
        return self._synced

    @property
    def resource_version(self) -> str:
        return self._resource_version

    def staleness_s(self) -> float | None:
        """Seconds since the API server last answered; None before it ever did."""
        if self._last_contact is None:
            return None
        return max(0.0, self.clock() - self._last_contact)

    @property
    def connected(self) -> bool:
        """Listed completely and following the API server's watch now."""
        return self.blind_s() == 0.0

    def blind_s(self) -> float | None:
        """Seconds the cache has not followed the API server: 0.0 while connected, None
        before the first complete list."""
        if not self._synced:
            return None
        now = self.clock()
        if self._lost_at is not None:
            return max(0.0, now - self._lost_at)
        assert self._last_contact is not None  # a complete list touched it
        overdue_at = self._last_contact + self.watch_timeout_s + WATCH_GRACE_S
        return max(0.0, now - overdue_at)

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        """List, then watch, until stopped (runs in the informer's thread)."""
        failures = 0
        gone = 0  # 410s in a row: the first lists again at once, the next ones back off
        while not self._stop.is_set():
            try:
                self.list_once()
                failures = 0
                short = 0  # watches in a row that ended at once without an event
                while not self._stop.is_set():
                    started = self.clock()
                    delivered = self.watch_once()
                    gone = 0  # a watch ended as watches do: a later 410 lists again at once
                    if delivered or self.clock() - started >= SHORT_WATCH_S:
                        short = 0
                    else:
                        short += 1  # client-go's "very short watch": back off, then again
                        self._stop.wait(self.backoff.wait_s(short, self.random_unit()))
            except GoneError as error:
                self._lose()
                self.stats.relists_gone += 1
                gone += 1
                if isinstance(error, ContinueExpiredError):
                    self._unpaged = True
                delay = 0.0 if gone == 1 else self.backoff.wait_s(gone - 1, self.random_unit())
                log.info(
                    "informer=%s resourceVersion=%s expired (410 Gone: %s); listing again%s "
                    "in %.1fs",
                    self.name,
                    self._resource_version,
                    error,
                    " in one request" if self._unpaged else "",
                    delay,
                )
                self._stop.wait(delay)
            except Exception as error:  # the loop must outlive any one failure
                failures += 1
                self.stats.errors += 1
                self.stats.last_error = str(error)
                self._lose()
                delay = self.backoff.wait_s(failures, self.random_unit())
                log.warning(
                    "informer=%s list/watch failed (%s); retrying in %.1fs",
                    self.name,
                    error,
                    delay,
                    exc_info=not isinstance(error, ApiError | ValueError | OSError),
                )
                self._stop.wait(delay)

    def list_once(self) -> None:
        """List every object (in pages) and hand the complete set to the sink: whole
        (``Sink.replace``), or page by page as each arrives (a :class:`PageSink`)."""
        sink = self.sink
        paged = sink if isinstance(sink, PageSink) else None
        items: dict[str, T] = {}
        keys: set[str] = set()
        pages = self._pages()
        while True:
            with collection_paused():  # a page: decoded, projected, handed on, then freed
                page = next(pages, None)
                if page is None:
                    break
                self._touch()
                for raw in page.pop("items", None) or ():
                    if isinstance(raw, dict):
                        projected = self._project(raw)
                        if projected is None:
                            continue
                        key = object_key(raw)
                        if paged is None:
                            items[key] = projected
                        else:
                            keys.add(key)
                            paged.upsert(key, projected)
                del page
        if paged is None:
            assert not isinstance(sink, PageSink)
            sink.replace(items)
            keys = set(items)
        else:
            paged.listed(frozenset(keys))
        self._keys = keys
        self._unpaged = False
        self.stats.lists += 1
        self._synced = True
        self._lost_at = None
        log.info(
            "informer=%s listed objects=%d resourceVersion=%s",
            self.name,
            len(keys),
            self._resource_version,
        )

    def _pages(self) -> Iterator[RawObject]:
        """The list's pages, in order (``limit``/``continue``), each decoded; the last one
        sets the resourceVersion to watch from.

        The next page is asked for while the caller works on this one: its ``continue`` token
        is read from the head of the answer, where kube-apiserver writes the list's metadata,
        before the body is decoded, so the API server encodes page n+1 while this process
        decodes and projects page n. An answer whose head does not read that way is followed
        once decoded (the same pages, one after the other)."""
        pending = _Fetch(self._fetch, "", f"list-{self.name}")
        while True:
            body = pending.result()
            ahead = continue_token_of(body)
            if ahead:
                pending = _Fetch(self._fetch, ahead, f"list-{self.name}")
            page = decode_object("GET", self.resource.path, body)
            del body
            metadata = page.get("metadata") or {}
            token = str(metadata.get("continue") or "")
            if not token:
                self._resource_version = str(metadata.get("resourceVersion") or "")
            yield page
            if not token:
                return
            if token != ahead:  # the head did not say (or said otherwise): ask now
                pending = _Fetch(self._fetch, token, f"list-{self.name}")

    def _fetch(self, token: str) -> bytes:
        query = self.resource.query()
        if not self._unpaged:
            query["limit"] = str(self.page_size)
        if token:
            query["continue"] = token
        try:
            return self.transport.get_bytes(self.resource.path, query)
        except ApiError as error:
            if error.status == 410:
                raise (ContinueExpiredError if token else GoneError)(str(error)) from None
            raise

    def watch_once(self) -> bool:
        """Watch from the last resourceVersion until the server ends the stream; whether it
        delivered an event (a bookmark counts)."""
        events = 0
        query = self.resource.query()
        query.update(
            {
                "watch": "true",
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(self.watch_timeout_s),
                "resourceVersion": self._resource_version,
            }
        )
        try:
            lines = self.transport.stream_lines(
                self.resource.path, query, read_timeout_s=self.watch_timeout_s + 30.0
            )
            for line in lines:
                if self._stop.is_set():
                    return True
                self._apply(line)
                events = -1
        except ApiError as error:
            if error.status == 410:
                raise GoneError(str(error)) from None
            raise
        self._touch()
        return events < 0

    def _apply(self, line: bytes) -> None:
        event = orjson.loads(line)
        if not isinstance(event, dict):
            raise ValueError(f"watch event is not an object: {line[:200]!r}")
        kind = event.get("type")
        raw = event.get("object")
        if not isinstance(raw, dict):
            raise ValueError(f"watch event without object: {line[:200]!r}")
        self._touch()
        if kind == "ERROR":
            code = raw.get("code")
            message = raw.get("message", "")
            if code == 410:
                raise GoneError(str(message))
            raise ApiError(int(code) if isinstance(code, int) else 0, f"watch error: {message}")
        version = (raw.get("metadata") or {}).get("resourceVersion")
        if isinstance(version, str) and version:
            self._resource_version = version
        if kind == "BOOKMARK":
            return
        key = object_key(raw)
        projected = None if kind == "DELETED" else self._project(raw)
        self.stats.events += 1
        if projected is None:
            if key in self._keys:
                self._keys.discard(key)
                self.sink.delete(key)
            return
        self._keys.add(key)
        self.sink.upsert(key, projected)

    def _project(self, raw: RawObject) -> T | None:
        """The projection of ``raw``; an object it cannot read counts as absent (logged), so
        one odd object never keeps the whole cache from syncing."""
        try:
            return self.project(raw)
        except Exception as error:
            key = object_key(raw)
            self.stats.skipped += 1
            self.stats.last_error = f"{key}: {error}"
            kind = self.resource.path.rsplit("/", 1)[-1]
            field = _SUBJECTS.get(kind, "object")
            log.warning("informer=%s %s=%s skipped: %s", self.name, field, key, error)
            return None

    def _lose(self) -> None:
        """Mark the cache as not following the API server, from when it stopped: a watch that
        failed after hanging unanswered counts from when it became overdue (as
        :meth:`blind_s` counted it), not from when the read finally timed out."""
        if self._lost_at is not None:
            return
        now = self.clock()
        if self._synced and self._last_contact is not None:
            now = min(now, self._last_contact + self.watch_timeout_s + WATCH_GRACE_S)
        self._lost_at = now

    def _touch(self) -> None:
        self._last_contact = self.clock()
