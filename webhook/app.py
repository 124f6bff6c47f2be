"""The admission webhook as a Flask app: ``create_app(settings=..., state=...)``.

Routes read as three steps: parse the AdmissionReview, call the core, serialise the answer.
Error channels: a malformed review is HTTP 400 (JSON ``{"error": ...}``); a policy denial is
HTTP 200 with ``allowed: false`` and a message; "cannot decide now" (caches not synced or
not following the API server, the quota ledger unreachable) is HTTP 503 with ``Retry-After``
and a ``Status`` body, which kube-apiserver retries within the webhook's timeout and then
reports under failurePolicy; our own failure is HTTP 500 with a logged traceback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from flask import Flask, Response, current_app, jsonify, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from migslice.admission import AdmissionDecision, MalformedPodError, PodAdmission
from migslice.admission.claims import (
    ClaimAdmission,
    decide_claim_reservation,
    decide_claim_update,
)
from migslice.admission.decision import Denial
from migslice.admission.intent import pod_label
from migslice.mig import CATALOG
from migslice.policy import FieldError, check_against_catalog, read_tenant_policy
from migslice.serving.clients import ClientPolicy
from migslice.serving.wsgi import BODY_TOO_LARGE, buffered_body
from webhook import review
from webhook.metrics import Metrics
from webhook.quota import MemoryLedgers, QuotaKeeper, UnavailableError
from webhook.review import Review, ReviewError
from webhook.settings import WebhookSettings
from webhook.state import ClusterState
from webhook.templates import MemoryTemplates, TemplateKeeper, TemplateUnavailableError

log = logging.getLogger(__name__)

EXTENSION = "migslice_webhook"
RETRY_AFTER_S = 1


DRA_GROUP = "resource.k8s.io"
CLAIM_KINDS = frozenset({"ResourceClaim", "ResourceClaimTemplate"})


class _Ports:
    def __init__(
        self,
        settings: WebhookSettings,
        state: ClusterState,
        quota: QuotaKeeper,
        metrics: Metrics,
        templates: TemplateKeeper,
    ) -> None:
        self.settings = settings
        self.state = state
        self.quota = quota
        self.metrics = metrics
        self.templates = templates
        self.clients = ClientPolicy.of(settings.server)


def create_app(
    settings: WebhookSettings | None = None,
    state: ClusterState | None = None,
    quota: QuotaKeeper | None = None,
    templates: TemplateKeeper | None = None,
) -> Flask:
    """The app over ``state``; ``quota`` charges admissions (default: ledgers in this
    process, as for a cluster file); ``templates`` keeps migslice's ResourceClaimTemplates
    (default: in the state only)."""
    settings = settings or WebhookSettings()
    state = state or ClusterState()
    quota = quota or QuotaKeeper(
        state,
        MemoryLedgers(state),
        settings=settings.admission,
        hold_s=settings.quota_hold_s,
        max_blind_s=settings.max_blind_s,
    )
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    registry = Metrics()
    registry.pending_charges.set_function(state.pending_charges)
    registry.follow(
        state,
        max_blind_s=settings.max_blind_s,
        tls_cert=settings.server.tls_cert,
        tls_key=settings.server.tls_key,
    )
    quota.fence_listeners.append(
        lambda fence: registry.ledger_fences.labels(fence.damage.name.lower()).inc()
    )
    templates = templates or TemplateKeeper(state, MemoryTemplates())
    app.extensions[EXTENSION] = _Ports(settings, state, quota, registry, templates)

    app.add_url_rule("/mutate", "mutate", mutate, methods=["POST"])
    app.add_url_rule("/validate", "validate", validate, methods=["POST"])
    app.add_url_rule("/healthz", "healthz", healthz, methods=["GET"])
    app.add_url_rule("/readyz", "readyz", readyz, methods=["GET"])
    app.add_url_rule("/metrics", "metrics", metrics, methods=["GET"])
    app.register_error_handler(RequestEntityTooLarge, _too_large)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _our_bug)
    return app


def _ports() -> _Ports:
    ports: _Ports = current_app.extensions[EXTENSION]
    return ports


def mutate() -> Response:
    ports = _ports()
    started = time.perf_counter()
    refusal = ports.clients.refusal(request.environ)
    if refusal is not None:
        return _refused("mutate", refusal, started)
    parsed: Review | None = None
    try:
        parsed = review.parse_review(_body(ports.settings))
        claim = parsed.group == DRA_GROUP and parsed.kind in CLAIM_KINDS
        if parsed.operation == "UPDATE" and claim and parsed.kind == "ResourceClaim":
            decision = _decide_claim_update(ports, parsed)
        elif parsed.operation != "CREATE":
            return _answer("mutate", "allowed", review.allow(parsed.uid), started)
        elif claim:
            decision = _decide_claim(ports, parsed)
        elif (parsed.group, parsed.kind) == ("", "Pod"):
            decision = _with_templates(ports, _decide_pod(ports, parsed), parsed.dry_run)
        else:
            raise ReviewError(
                f"/mutate handles core/v1 Pod and {DRA_GROUP}/v1 ResourceClaim and "
                f"ResourceClaimTemplate, got {parsed.group or 'core'} {parsed.kind}"
            )
    except (ReviewError, MalformedPodError) as error:
        return _malformed("mutate", str(error), started)
    except (UnavailableError, TemplateUnavailableError) as error:
        pod = "-" if parsed is None else pod_label(parsed.namespace, parsed.raw_object or {})
        return _unavailable("mutate", str(error), started, f"pod={pod}")
    if not decision.allowed:
        ports.metrics.denials.labels("mutate", decision.reason).inc()
        return _answer(
            "mutate", "denied", review.deny(parsed.uid, decision.message, decision.code), started
        )
    outcome = "patched" if decision.patch else "allowed"
    return _answer(
        "mutate", outcome, review.allow(parsed.uid, decision.patch, decision.warnings), started
    )


def _decide_pod(ports: _Ports, parsed: Review) -> AdmissionDecision:
    assert parsed.raw_object is not None  # parse_review guarantees an object for CREATE
    namespace = parsed.namespace or _namespace_of(parsed.raw_object)
    if not namespace:
        raise ReviewError("pod CREATE without a namespace (request.namespace is empty)")
    if namespace in ports.settings.exclude_namespaces:
        return AdmissionDecision(allowed=True, reason="excluded-namespace")
    admission = PodAdmission(namespace, parsed.raw_object, parsed.uid)
    return ports.quota.admit(admission, dry_run=parsed.dry_run)


def _decide_claim(ports: _Ports, parsed: Review) -> AdmissionDecision:
    assert parsed.raw_object is not None
    namespace = parsed.namespace or _namespace_of(parsed.raw_object)
    if not namespace:
        raise ReviewError(f"{parsed.kind} CREATE without a namespace (request.namespace is empty)")
    if namespace in ports.settings.exclude_namespaces:
        return AdmissionDecision(allowed=True, reason="excluded-namespace")
    template = parsed.kind == "ResourceClaimTemplate"
    admission = ClaimAdmission(namespace, parsed.raw_object, parsed.uid, template=template)
    return ports.quota.admit(admission, dry_run=parsed.dry_run)


def _decide_claim_update(ports: _Ports, parsed: Review) -> AdmissionDecision:
    """A ResourceClaim UPDATE: of its status (kube-scheduler reserving the claim for a pod,
    :func:`decide_claim_reservation`), or of the claim (:func:`decide_claim_update`)."""
    assert parsed.raw_object is not None
    namespace = parsed.namespace or _namespace_of(parsed.raw_object)
    if namespace in ports.settings.exclude_namespaces:
        return AdmissionDecision(allowed=True, reason="excluded-namespace")
    old = parsed.raw_old_object or {}
    judge = decide_claim_reservation if parsed.sub_resource == "status" else decide_claim_update
    with ports.state.admission_lock:
        return judge(namespace, old, parsed.raw_object, ports.state)


def _with_templates(ports: _Ports, decision: AdmissionDecision, dry_run: bool) -> AdmissionDecision:
    """An allowed pod that names migslice's templates, once they exist (none made on dryRun)."""
    if not decision.allowed or dry_run:
        return decision
    for namespace, profile in decision.templates:
        problem = ports.templates.ensure(namespace, profile)
        if problem is not None:
            reason = "foreign-template" if "is not migslice's" in problem else "no-device-class"
            return AdmissionDecision.deny(Denial(reason, problem), decision.tenant)
    return decision


def validate() -> Response:
    ports = _ports()
    started = time.perf_counter()
    refusal = ports.clients.refusal(request.environ)
    if refusal is not None:
        return _refused("validate", refusal, started)
    parsed: Review | None = None
    try:
        parsed = review.parse_review(_body(ports.settings))
        if parsed.operation not in ("CREATE", "UPDATE"):
            return _answer("validate", "allowed", review.allow(parsed.uid), started)
        if parsed.kind != "TenantPolicy":
            raise ReviewError(
                f"/validate handles migslice.io TenantPolicy, got {parsed.group} {parsed.kind}"
            )
        if _keeps_spec(parsed):  # labels, annotations, finalizers: nothing the checks read
            return _answer("validate", "allowed", review.allow(parsed.uid), started)
        ports.quota.require_sight()  # conflicts need every policy and namespace
    except ReviewError as error:
        return _malformed("validate", str(error), started)
    except UnavailableError as error:
        tenant = "-" if parsed is None else _name_of(parsed.raw_object or {})
        return _unavailable("validate", str(error), started, f"tenant={tenant}")
    assert parsed.raw_object is not None
    errors = _policy_errors(ports.state, parsed.raw_object)
    if errors:
        name = _name_of(parsed.raw_object)
        message = f'TenantPolicy "{name}" is invalid: ' + "; ".join(str(e) for e in errors)
        ports.metrics.denials.labels("validate", "invalid-policy").inc()
        return _answer("validate", "denied", review.deny(parsed.uid, message, 422), started)
    return _answer("validate", "allowed", review.allow(parsed.uid), started)


def _keeps_spec(parsed: Review) -> bool:
    """An UPDATE that leaves the policy's spec as stored: nothing /validate checks changes.
    Refused for a problem the stored spec already had (a namespace another policy came to
    select as well), a policy deleted in the foreground kept its finalizer (the garbage
    collector's patch that removes it was refused) and stayed, still selecting its
    namespaces."""
    old = parsed.raw_old_object
    new = parsed.raw_object
    return (
        parsed.operation == "UPDATE"
        and old is not None
        and new is not None
        and "spec" in old
        and old.get("spec") == new.get("spec")
    )


def _policy_errors(state: ClusterState, raw_policy: Mapping[str, object]) -> tuple[FieldError, ...]:
    """Every problem at once: the policy's form, and its checks against the catalog and the
    other policies over the fields whose form is right."""
    _, policy, errors = read_tenant_policy(raw_policy)
    if policy is None:
        return errors
    wrong = {error.path for error in errors}
    more = check_against_catalog(policy, CATALOG) + state.conflicts(policy)
    return errors + tuple(e for e in more if not _within(e.path, wrong))


def _within(path: str, paths: set[str]) -> bool:
    """Whether ``path`` is one of ``paths`` or lies under one."""
    return any(path == p or path.startswith((f"{p}.", f"{p}[")) for p in paths)


def healthz() -> Response:
    return jsonify({"status": "ok"})


def readyz() -> Response:
    """200 while every cache is synced and following the API server (a quiet cluster is
    ready); 503 with the problems otherwise."""
    ports = _ports()
    problems = ports.state.blindness(ports.settings.max_blind_s)
    if not problems:
        return jsonify({"status": "ready"})
    response = jsonify({"status": "not ready", "problems": problems})
    response.status_code = 503
    return response


def metrics() -> Response:
    return Response(_ports().metrics.exposition(), mimetype="text/plain; version=0.0.4")


def _body(settings: WebhookSettings) -> bytes:
    """The request body. One over ``max_body_bytes`` is refused alike whether announced by
    Content-Length or chunked, and whether the server or werkzeug sees it first (413,
    answered as 400); our server does not even read it (``BODY_TOO_LARGE``)."""
    if request.environ.get(BODY_TOO_LARGE):
        raise RequestEntityTooLarge()
    data = buffered_body(request.environ)
    if data is None:
        data = request.stream.read(settings.max_body_bytes + 1)
    if len(data) > settings.max_body_bytes:
        raise RequestEntityTooLarge()
    return data


def _answer(
    endpoint: str, outcome: str, body: review.AdmissionReviewWire, started: float
) -> Response:
    ports = _ports()
    ports.metrics.requests.labels(endpoint, outcome).inc()
    ports.metrics.latency.labels(endpoint).observe(time.perf_counter() - started)
    return jsonify(body)


def _malformed(endpoint: str, message: str, started: float) -> Response:
    ports = _ports()
    ports.metrics.requests.labels(endpoint, "malformed").inc()
    ports.metrics.latency.labels(endpoint).observe(time.perf_counter() - started)
    response = jsonify({"error": message})
    response.status_code = 400
    return response


def _refused(endpoint: str, message: str, started: float) -> Response:
    """403 to a caller that is not kube-apiserver (``--client-ca-file``): it decides nothing
    and charges no quota."""
    ports = _ports()
    ports.metrics.requests.labels(endpoint, "unauthenticated").inc()
    ports.metrics.latency.labels(endpoint).observe(time.perf_counter() - started)
    log.warning(
        "Refusing %s from peer=%s: %s", endpoint, request.environ.get("REMOTE_ADDR"), message
    )
    response = jsonify({"error": message})
    response.status_code = 403
    return response


def _unavailable(endpoint: str, message: str, started: float, subject: str) -> Response:
    """503 with Retry-After: kube-apiserver's webhook client retries it within the webhook's
    timeout; the Status message reaches the user if it still fails (failurePolicy Fail)."""
    ports = _ports()
    ports.metrics.requests.labels(endpoint, "unavailable").inc()
    ports.metrics.latency.labels(endpoint).observe(time.perf_counter() - started)
    log.warning("Answering %s %s with 503: %s", endpoint, subject, message)
    status = {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "message": message,
        "reason": "ServiceUnavailable",
        "code": 503,
    }
    response = jsonify(status)
    response.status_code = 503
    response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


def _too_large(error: RequestEntityTooLarge) -> Response:
    limit = _ports().settings.max_body_bytes
    endpoint = request.path.strip("/") or "unknown"
    if endpoint in ("mutate", "validate"):
        _ports().metrics.requests.labels(endpoint, "malformed").inc()
    response = jsonify({"error": f"request body is larger than the limit of {limit} bytes"})
    response.status_code = 400
    return response


def _http_error(error: HTTPException) -> Response:
    response = jsonify({"error": error.description or error.name})
    response.status_code = error.code or 500
    return response


def _our_bug(error: Exception) -> Response:
    log.exception("Unhandled error answering path=%s; returning HTTP 500", request.path)
    endpoint = request.path.strip("/")
    if endpoint in ("mutate", "validate"):
        _ports().metrics.requests.labels(endpoint, "error").inc()
    response = jsonify({"error": f"internal error: {type(error).__name__}"})
    response.status_code = 500
    return response


def _namespace_of(raw_object: Mapping[str, object]) -> str:
    metadata = raw_object.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    return namespace if isinstance(namespace, str) else ""


def _name_of(raw_object: Mapping[str, object]) -> str:
    metadata = raw_object.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else "?"
