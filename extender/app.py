"""The extender's Flask app: ``POST /filter``, ``POST /filter-best-fit``, ``POST /prioritize``,
health, readiness, metrics.

``/filter-best-fit`` answers as ``/filter`` but keeps only the nodes of the highest score
among those that fit: the scheduler configuration that names it as its ``filterVerb`` needs
no ``prioritizeVerb`` (every node it is left with has the same score), so a pod costs one
call, and when one node is left kube-scheduler binds without scoring at all.

Every verb answers HTTP 200: kube-scheduler treats any other status as a failed call. Our own
failures (a body that is not ExtenderArgs, an internal error) are reported in ``Error``
(filter) or as ``{"Error": ...}`` (prioritize, which kube-scheduler then ignores).

A ``POST`` to a verb is answered by :class:`Verbs`, a thin WSGI layer in front of Flask: the
verbs read only the body and answer only JSON, and Flask's request and app contexts cost a
sixth of a call's CPU at a hundred node names. Every other request, including a verb's path
with another method (405), is Flask's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import orjson
from flask import Flask, Response, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.wsgi import get_content_length, get_input_stream

from extender.metrics import ExtenderMetrics
from extender.reserve import Arrivals, current_reserve
from extender.retries import PodRef, Retries
from extender.settings import ExtenderSettings
from extender.state import ExtenderState, new_index
from extender.wire import (
    ExtenderFilterResult,
    HostPriority,
    PrioritizeError,
    RawNode,
    filter_error,
    host_priority,
)
from migslice.errors import InvalidInputError
from migslice.objects import node_facts_from_raw
from migslice.objects.pods import nominated_node_of, pod_key, pod_priority, unschedulable_since
from migslice.scheduling import (
    DemandReader,
    PodDemand,
    PreparedNode,
    best_fit_nodes,
    filter_nodes,
    score_nodes,
)
from migslice.scheduling.decide import FilterResult, best_fit_rank, best_fits
from migslice.scheduling.demand import with_claims
from migslice.scheduling.reserve import LargeReserve, device_sizes, hold_back, is_large
from migslice.serving.clients import ClientPolicy
from migslice.serving.wsgi import BODY_TOO_LARGE, buffered_body

log = logging.getLogger(__name__)

EXTENSION = "migslice_extender"
JSON = "application/json"


class BadArgsError(InvalidInputError):
    """A body that is not a usable ExtenderArgs; the message says what is wrong."""


class Context:
    """What the routes use, kept on ``app.extensions[EXTENSION]``."""

    def __init__(self, settings: ExtenderSettings, state: ExtenderState) -> None:
        self.settings = settings
        self.state = state
        self.metrics = ExtenderMetrics(state)
        self.demands = DemandReader()
        self.arrivals = Arrivals()


def create_app(
    settings: ExtenderSettings | None = None, state: ExtenderState | None = None
) -> Flask:
    """An extender app over ``state`` (default: an empty cluster, for tests)."""
    app = Flask("extender")
    context = Context(settings or ExtenderSettings(), state or ExtenderState(new_index()))
    context.metrics.follow(
        max_blind_s=context.settings.max_blind_s,
        tls_cert=context.settings.server.tls_cert,
        tls_key=context.settings.server.tls_key,
    )
    app.extensions[EXTENSION] = context

    verbs: dict[str, Callable[[dict[str, Any]], bytes]] = {
        "/filter": lambda environ: _filter_call(context, environ, "filter", best_fit=False),
        "/filter-best-fit": lambda environ: _filter_call(
            context, environ, "filter-best-fit", best_fit=True
        ),
        "/prioritize": lambda environ: _prioritize_call(context, environ),
    }
    served = Verbs(
        app.wsgi_app,
        verbs,
        ClientPolicy.of(context.settings.server),
        refused=lambda path, seconds: context.metrics.answered(
            path.strip("/"), "unauthenticated", seconds
        ),
    )
    for path in verbs:  # Flask keeps the routes: its URL map, its 405s, and the requests
        # that reach a verb by another spelling (a lower-case method, repeated slashes)

        def route(path: str = path) -> Response:
            status, body = served.respond(path, request.environ)
            return Response(body, status=status, mimetype=JSON)

        app.add_url_rule(path, path.strip("/"), route, methods=["POST"])
    app.wsgi_app = served  # type: ignore[method-assign]

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        ready, problems = context.state.readiness(context.settings.max_blind_s)
        if ready:
            return Response("ok\n", mimetype="text/plain")
        return Response("\n".join(problems) + "\n", status=503, mimetype="text/plain")

    @app.get("/metrics")
    def metrics() -> Response:
        # content_type, not mimetype: Flask adds a charset to a mimetype, and this one has it
        body = generate_latest(context.metrics.registry)
        return Response(body, content_type=CONTENT_TYPE_LATEST)

    return app


class Verbs:
    """WSGI: ``POST`` to a verb's path answered by its function (the body in, JSON out, 200),
    anything else by ``fallback`` (Flask). A caller ``clients`` refuses gets 403 and no
    answer (it is not migslice-scheduler), whichever way its request reached the verb:
    :meth:`respond` is the one place a verb is answered."""

    def __init__(
        self,
        fallback: Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]],
        verbs: Mapping[str, Callable[[dict[str, Any]], bytes]],
        clients: ClientPolicy | None = None,
        refused: Callable[[str, float], None] = lambda path, seconds: None,
    ) -> None:
        self._fallback = fallback
        self._verbs = dict(verbs)
        self._clients = clients or ClientPolicy()
        self._refused = refused  # counts a refused call: its verb's path, seconds taken

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in self._verbs or environ.get("REQUEST_METHOD") != "POST":
            return self._fallback(environ, start_response)
        status, body = self.respond(path, environ)
        start_response(
            "200 OK" if status == 200 else "403 Forbidden",
            [("Content-Type", JSON), ("Content-Length", str(len(body)))],
        )
        return [body]

    def respond(self, path: str, environ: dict[str, Any]) -> tuple[int, bytes]:
        """The status and body of a call of the verb at ``path``."""
        started = time.perf_counter()
        refusal = self._clients.refusal(environ)
        if refusal is not None:
            self._refused(path, time.perf_counter() - started)
            log.warning(
                "Refusing %s from peer=%s: %s",
                environ.get("PATH_INFO"),
                environ.get("REMOTE_ADDR"),
                refusal,
            )
            return 403, orjson.dumps({"Error": refusal})
        return 200, self._verbs[path](environ)


def _filter_call(context: Context, environ: dict[str, Any], verb: str, *, best_fit: bool) -> bytes:
    started = time.perf_counter()
    args: Mapping[str, Any] | None = None
    try:
        args = _read_args(context, environ)
        answer, outcome = _filter(context, args, best_fit=best_fit)
    except BadArgsError as error:
        answer, outcome = filter_error(str(error)), "error"
    except Exception as error:  # our own failure: still 200, with Error
        log.exception("%s failed pod=%s; answering with Error", verb, _pod_of(args))
        answer, outcome = filter_error(f"migslice extender internal error: {error}"), "error"
    return _finish(context, verb, answer, outcome, started)


def _prioritize_call(context: Context, environ: dict[str, Any]) -> bytes:
    started = time.perf_counter()
    answer: list[HostPriority] | PrioritizeError
    args: Mapping[str, Any] | None = None
    try:
        args = _read_args(context, environ)
        answer, outcome = _prioritize(args, context), "ok"
    except BadArgsError as error:
        answer, outcome = {"Error": str(error)}, "error"
    except Exception as error:
        log.exception("prioritize failed pod=%s; answering with Error", _pod_of(args))
        answer, outcome = {"Error": f"migslice extender internal error: {error}"}, "error"
    return _finish(context, "prioritize", answer, outcome, started)


def _finish(context: Context, verb: str, answer: Any, outcome: str, started: float) -> bytes:
    try:
        body = orjson.dumps(answer)
    except orjson.JSONEncodeError as error:  # an echoed Node nests deeper than 254 levels
        message = f"answer cannot be encoded as JSON: {error}"
        body = orjson.dumps({"Error": message} if verb == "prioritize" else filter_error(message))
        outcome = "error"
    context.metrics.answered(verb, outcome, time.perf_counter() - started)
    return body


def _pod_of(args: Mapping[str, Any] | None) -> str:
    """``namespace/name`` of the call's pod, for the log ("-" before the body was read)."""
    pod = args.get("Pod") if args is not None else None
    metadata = pod.get("metadata") if isinstance(pod, dict) else None
    if not isinstance(metadata, dict):
        return "-"
    namespace, name = metadata.get("namespace"), metadata.get("name")
    namespace = namespace[:253] if isinstance(namespace, str) and namespace else "default"
    return f"{namespace}/{name[:253] if isinstance(name, str) and name else '-'}"


def _read_args(context: Context, environ: dict[str, Any]) -> dict[str, Any]:
    limit = context.settings.max_body_bytes
    length = get_content_length(environ)
    if environ.get(BODY_TOO_LARGE) or (length is not None and length > limit):
        raise BadArgsError(_too_large(limit))  # our server has not read it (chunked or not)
    data = buffered_body(environ)
    if data is None:
        data = get_input_stream(environ).read(limit + 1)
    if len(data) > limit:
        raise BadArgsError(_too_large(limit))
    try:
        args = orjson.loads(data)  # nesting deeper than 1,024 levels is a ValueError
    except ValueError as error:
        raise BadArgsError(f"request body is not JSON ExtenderArgs: {error}") from None
    if not isinstance(args, dict):
        raise BadArgsError(f"ExtenderArgs must be a JSON object, got {type(args).__name__}")
    pod = args.get("Pod")
    if not isinstance(pod, dict):
        raise BadArgsError(f"ExtenderArgs.Pod is {_kind(pod)}; expected the Pod object")
    return args


def _too_large(limit: int) -> str:
    return (
        f"request body is larger than the limit {limit} bytes (--max-body-mib); "
        "use nodeCacheCapable: true, or raise --max-body-mib for full Node objects"
    )


def _kind(value: object) -> str:
    return "missing" if value is None else type(value).__name__


def _names(args: Mapping[str, Any]) -> list[str] | None:
    """The NodeNames of a ``nodeCacheCapable`` request, None when it sends Nodes."""
    names = args.get("NodeNames")
    if names is None:
        return None
    if not isinstance(names, list) or not _all_strings(names):
        raise BadArgsError("ExtenderArgs.NodeNames must be a list of node names")
    return names


def _all_strings(values: list[Any]) -> bool:
    try:
        "".join(values)  # one pass in C: joining fails on anything but str
    except TypeError:
        return False
    return True


def _candidates(
    args: Mapping[str, Any], context: Context
) -> tuple[list[tuple[str, PreparedNode | None]], dict[str, RawNode]]:
    """(name, prepared node) pairs of the Nodes sent, and the Nodes by name."""
    nodes = args.get("Nodes")
    if nodes is None:
        raise BadArgsError("ExtenderArgs has neither NodeNames nor Nodes (both null)")
    items = nodes.get("items") if isinstance(nodes, dict) else None
    if not isinstance(items, list):
        raise BadArgsError("ExtenderArgs.Nodes must be a NodeList with items")
    by_name: dict[str, RawNode] = {}
    candidates: list[tuple[str, PreparedNode | None]] = []
    for position, raw in enumerate(items):
        metadata = raw.get("metadata") if isinstance(raw, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if not isinstance(name, str) or not name:
            raise BadArgsError(f"ExtenderArgs.Nodes.items[{position}] has no metadata.name")
        by_name.setdefault(name, raw)
        candidates.append((name, _prepared_from_raw(context, name, raw)))
    return candidates, by_name


def _prepared_from_raw(context: Context, name: str, raw: RawNode) -> PreparedNode:
    """The cached answer when the sent Node is the version we cached, else one built now."""
    cached = context.state.index.get(name)
    version = (raw.get("metadata") or {}).get("resourceVersion")
    if cached is not None and version and cached.resource_version == version:
        return cached
    return context.state.index.derive_for(node_facts_from_raw(raw))


def _demand(context: Context, raw_pod: dict[str, Any]) -> PodDemand:
    """The pod's GPU demand: its extended resources, and its ResourceClaims' requests of
    NVIDIA's DRA devices as the claim cache shows them."""
    index = context.state.index
    return with_claims(context.demands.read(raw_pod), raw_pod, index.claim, index.classes)


def _asks_nothing(demand: PodDemand) -> bool:
    """A pod with no GPU demand migslice reads: every node passes, whatever the caches say
    (kube-scheduler calls the extender for every pod of its profile; the webhook sends only
    GPU pods there)."""
    return not demand.units and not demand.error and not demand.wait


def _filter(
    context: Context, args: Mapping[str, Any], *, best_fit: bool
) -> tuple[ExtenderFilterResult, str]:
    demand = _demand(context, args["Pod"])
    names = _names(args)
    by_name: dict[str, RawNode] | None = None
    candidates: list[tuple[str, PreparedNode | None]] | None = None
    if names is None:
        candidates, by_name = _candidates(args, context)
        names = [name for name, _ in candidates]
    if _asks_nothing(demand):
        return _all_pass(context, names, by_name), "ok"
    if demand.wait:
        # The pod's claim has not reached the cache: no node can be judged yet. An Error, not
        # every node failed: kube-scheduler retries a pod its extender answered with an error
        # after its backoff (1 s, doubling to 10 s), while a pod every node failed waits for
        # the next cluster event, and the claim's came before the pod's attempt (in a quiet
        # cluster the next one may be minutes away).
        return filter_error(f"{demand.wait}; kube-scheduler retries after its backoff"), "waiting"
    ready, problems = context.state.readiness(context.settings.max_blind_s)
    if not ready:
        # Blind caches cannot vouch for any node (a re-partition may have begun): an Error.
        # Not every node failed: kube-scheduler reads an answer that leaves no node as a pod
        # that fits nowhere and preempts on the nodes its own filters found full (a blind
        # answer evicted a running GPU pod on each while a node with free instances stayed
        # empty); an Error preempts nothing and is retried after kube-scheduler's backoff
        # (an ignorable extender's is passed over: the pod is placed by kube-scheduler's own
        # counts, as when no extender answers). The pod is also touched once the caches follow
        # the API again, so that it is tried then.
        _retry(context, args["Pod"], lambda retries, pod: retries.after_blind(pod))
        _say_blind(problems, demand.key)
        return filter_error(f"node state unknown: migslice {problems[0]}"), "blind"
    steer = context.state.steer
    reserve = None
    if steer is not None and steer.reserve.enabled:
        sizes = device_sizes(demand)
        steer.reserve.share = share = context.arrivals.saw(demand, sizes)
        reserve = None if is_large(sizes) else current_reserve(steer.reserve, share)
    judge = partial(_judge, context, args, demand, names, by_name, reserve, best_fit=best_fit)
    result = judge(candidates)
    if not result.fits:
        result = _caught_up(context, args, names, by_name, result, judge)
    if result.fits:
        _retry(context, args["Pod"], lambda retries, pod: retries.forget(pod))
    metrics = context.metrics
    metrics.nodes_fit.inc(len(result.fits))
    metrics.nodes_failed.inc(len(result.failed))
    metrics.nodes_unresolvable.inc(len(result.unresolvable))
    _log_decision("filter-best-fit" if best_fit else "filter", demand, len(names), len(result.fits))
    # kube-scheduler reads the failures only when no node is left (its FitError and
    # preemption); while one fits, their reasons would be encoded here and decoded, a status
    # each, inside its serial scheduling cycle for nothing.
    leave_out = bool(result.fits)
    answer: ExtenderFilterResult = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": {} if leave_out else _as_dict(result.failed),
        "FailedAndUnresolvableNodes": {} if leave_out else _as_dict(result.unresolvable),
        "Error": "",
    }
    if by_name is None:
        answer["NodeNames"] = list(result.fits)
    else:
        answer["Nodes"] = {"metadata": {}, "items": [by_name[name] for name in result.fits]}
    return answer, "ok"


def _judge(
    context: Context,
    args: Mapping[str, Any],
    demand: PodDemand,
    names: list[str],
    by_name: dict[str, RawNode] | None,
    reserve: LargeReserve | None,
    candidates: list[tuple[str, PreparedNode | None]] | None,
    *,
    best_fit: bool,
) -> FilterResult:
    """Which of ``names`` the pod fits, which fail and why (``candidates``: the Nodes sent,
    prepared; None when only their names were)."""
    if nominated := _uncounted_nominations(context, args["Pod"], names):
        # A node holding a pod only nominated there that kube-scheduler does not count for
        # this one (the pod itself, a preemptor whose victims are leaving; or one of lower
        # priority) is judged without it, past the shared decisions: counted, the preemptor
        # found the node it had cleared full and kube-scheduler evicted a second victim.
        candidates = _without_uncounted(context, args["Pod"], names, candidates, by_name, nominated)
    if reserve is not None:
        now = time.time()
        waited_s = _unschedulable_for(args["Pod"], now)
        result, held = _held_back(
            context, demand, names, candidates, reserve, waited_s, best_fit=best_fit
        )
        if held:
            # Touched when the hold ends: kube-scheduler retries a pod every node failed only
            # on the next cluster event.
            ends_at = now - waited_s + reserve.max_hold_s
            _retry(context, args["Pod"], lambda retries, pod: retries.after_hold(pod, ends_at))
    elif candidates is None:
        decisions = context.state.decisions
        result = (decisions.best_fit if best_fit else decisions.filter)(demand, names)
    else:
        result = (best_fit_nodes if best_fit else filter_nodes)(demand, candidates)
    return result


def _caught_up(
    context: Context,
    args: Mapping[str, Any],
    names: list[str],
    by_name: dict[str, RawNode] | None,
    result: FilterResult,
    judge: Callable[[list[tuple[str, PreparedNode | None]] | None], FilterResult],
) -> FilterResult:
    """``result`` judged again as the pod cache catches up on the node the pod is nominated
    to, while it fits no node and a pod of lower priority is still cached there
    (:mod:`extender.catch_up`)."""
    raw_pod, index = args["Pod"], context.state.index
    node, priority = nominated_node_of(raw_pod), pod_priority(raw_pod)
    if node is None or node not in names or not index.holds_lower(node, priority):
        return result
    with context.state.changes.watching(node) as changed:
        while True:  # judged once more first: the cache may have changed before the watch
            result = judge(None if by_name is None else _candidates(args, context)[0])
            if result.fits or not index.holds_lower(node, priority) or not changed():
                return result


def _uncounted_nominations(context: Context, raw_pod: Any, names: Sequence[str]) -> frozenset[str]:
    """The nodes among ``names`` holding a pod only nominated there that kube-scheduler does
    not count for ``raw_pod`` (:meth:`migslice.objects.pods.PodFacts.counts_for`)."""
    found = context.state.index.uncounted_nominations(pod_key(raw_pod), pod_priority(raw_pod))
    return found.intersection(names) if found else found


def _without_uncounted(
    context: Context,
    raw_pod: Any,
    names: Sequence[str],
    candidates: list[tuple[str, PreparedNode | None]] | None,
    by_name: dict[str, RawNode] | None,
    nominated: frozenset[str],
) -> list[tuple[str, PreparedNode | None]]:
    """The (name, prepared node) pairs to judge ``raw_pod`` on: those of ``nominated`` derived
    again without the nominated pods kube-scheduler does not count for it; the node as sent
    where the ExtenderArgs carry Nodes, else the cached one."""
    index, key, priority = context.state.index, pod_key(raw_pod), pod_priority(raw_pod)
    if candidates is None:
        return [
            (n, index.derive_for_pod(n, key, priority) if n in nominated else index.get(n))
            for n in names
        ]
    assert by_name is not None
    return [
        (
            n,
            index.derive_for_pod(n, key, priority, node_facts_from_raw(by_name[n]))
            if n in nominated
            else prepared,
        )
        for n, prepared in candidates
    ]


def _retry(context: Context, raw_pod: Any, call: Callable[[Retries, PodRef], None]) -> None:
    """``call`` the worker's :class:`Retries` with the pod (in a cluster, when it is named)."""
    retries = context.state.retries
    pod = None if retries is None else PodRef.of(raw_pod)
    if retries is not None and pod is not None:
        call(retries, pod)


def _held_back(
    context: Context,
    demand: PodDemand,
    names: Sequence[str],
    candidates: Sequence[tuple[str, PreparedNode | None]] | None,
    reserve: LargeReserve,
    waited_s: float,
    *,
    best_fit: bool,
) -> tuple[FilterResult, bool]:
    """The filter's answer for a small pod while the large-job reserve keeps idle GPUs: the
    nodes where it would break one fail (:func:`hold_back`) unless the pod has been
    unschedulable ``reserve.max_hold_s`` (``waited_s``), and the best fit is chosen among
    those left; and whether the reserve left the pod without a node that it fits."""
    lookup: Callable[[str], PreparedNode | None]
    if candidates is None:
        result = context.state.decisions.filter(demand, names)
        lookup = context.state.index.get
    else:
        result = filter_nodes(demand, candidates)
        given = dict(candidates)
        lookup = lambda name: given.get(name)  # noqa: E731
    first_try = hold_back(result, demand, lookup, reserve)
    released = reserve.lets_past(waited_s)
    kept = result if released else first_try
    held = bool(result.fits) and not kept.fits
    steer = context.state.steer
    if steer is not None:
        if released and len(first_try.fits) < len(result.fits):
            context.arrivals.released(steer.reserve)  # let past where a first try was not
        if held:
            context.arrivals.held_back(steer.reserve)
    if not best_fit or len(kept.fits) <= 1:
        return kept, held
    scores = [best_fit_rank(demand, lookup(name)) for name in kept.fits]
    return FilterResult(best_fits(kept.fits, scores), kept.failed, kept.unresolvable), held


def _unschedulable_for(raw_pod: Any, now: float) -> float:
    """Seconds ``raw_pod`` has waited for a node (:func:`unschedulable_since`); 0 for a pod
    kube-scheduler never found unschedulable, or whose conditions cannot be read."""
    since = unschedulable_since(raw_pod) if isinstance(raw_pod, Mapping) else None
    return 0.0 if since is None else max(0.0, now - since.timestamp())


def _as_dict(mapping: Mapping[str, str]) -> dict[str, str]:
    return mapping if isinstance(mapping, dict) else dict(mapping)


def _all_pass(
    context: Context, names: Sequence[str], by_name: Mapping[str, RawNode] | None
) -> ExtenderFilterResult:
    distinct = list(dict.fromkeys(names))
    context.metrics.nodes_fit.inc(len(distinct))
    return {
        "Nodes": None
        if by_name is None
        else {"metadata": {}, "items": [by_name[n] for n in distinct]},
        "NodeNames": distinct if by_name is None else None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


def _say_blind(problems: Sequence[str], pod: str) -> None:
    """Log a blind answer: no node it was asked about could be judged, so none is counted in
    ``migslice_extender_filter_nodes_total`` (the call is, as ``outcome="blind"``)."""
    log.warning("filter judges no node pod=%s: %s", pod, "; ".join(problems))


def _prioritize(args: Mapping[str, Any], context: Context) -> list[HostPriority]:
    raw_pod = args["Pod"]
    demand = _demand(context, raw_pod)
    names = _names(args)
    candidates: list[tuple[str, PreparedNode | None]] | None = None
    by_name: dict[str, RawNode] | None = None
    if names is None:
        candidates, by_name = _candidates(args, context)
        names = [name for name, _ in candidates]
    if not _asks_nothing(demand) and (nominated := _uncounted_nominations(context, raw_pod, names)):
        # Scored on the node as the filter judges it: without the pods only nominated there
        # that kube-scheduler does not count for this one (counted, a node the filter passed
        # scored 0, as one that cannot take the pod).
        candidates = _without_uncounted(context, raw_pod, names, candidates, by_name, nominated)
    if candidates is not None:
        answer = [host_priority(name, score) for name, score in score_nodes(demand, candidates)]
    elif _asks_nothing(demand):
        answer = [host_priority(name, 0) for name in dict.fromkeys(names)]
    else:
        answer = context.state.decisions.score(demand, names)
    _log_decision("prioritize", demand, len(answer), len(answer))
    return answer


def _log_decision(verb: str, demand: PodDemand, candidates: int, kept: int) -> None:
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s pod=%s candidates=%d kept=%d", verb, demand.key, candidates, kept)
