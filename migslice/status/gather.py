"""What status and why read (the shell of the room): a cluster through the API server, read
only (lists of Nodes, live Pods, TenantPolicies, Namespaces, NVIDIA's DRA objects where the
API serves them, and a GET of the mig-parted ConfigMap), or a cluster file; both into the same
:class:`ClusterObjects`. For ``why`` of a pod that is not there, also the namespace's
workloads and their ``FailedCreate`` Events (:func:`read_absent`).

The Kubernetes client is imported only to read a cluster (a cluster file needs none of it)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from migslice import console, names
from migslice.console import CommandError
from migslice.objects import ClusterObjects
from migslice.serving import load_cluster_file

if TYPE_CHECKING:
    from migslice.kube.transport import KubernetesTransport

RawObject = dict[str, Any]
LIST_PAGE = "500"
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
POLICIES = f"/apis/{names.GROUP}/{names.VERSION}/{names.POLICY_PLURAL}"
DRA_LISTS = (
    ("resource_slices", f"{names.DRA_API}/resourceslices", "ResourceSlice"),
    ("resource_claims", f"{names.DRA_API}/resourceclaims", "ResourceClaim"),
    ("device_classes", f"{names.DRA_API}/deviceclasses", "DeviceClass"),
    ("device_taint_rules", f"{names.DRA_API}/devicetaintrules", "DeviceTaintRule"),
)
"""The DRA objects a DRA node's state is read from (none where resource.k8s.io/v1 is not
served; no DeviceTaintRules where the DRADeviceTaints feature is off)."""
WORKLOADS = (
    ("/apis/batch/v1", "jobs", "Job"),
    ("/apis/batch/v1", "cronjobs", "CronJob"),
    ("/apis/apps/v1", "replicasets", "ReplicaSet"),
    ("/apis/apps/v1", "statefulsets", "StatefulSet"),
    ("/apis/apps/v1", "daemonsets", "DaemonSet"),
    ("/apis/apps/v1", "deployments", "Deployment"),
)
"""What may have tried to create a pod that is not there (read by ``why`` only then)."""


def read_cluster_file(path: Path) -> ClusterObjects:
    objects = load_cluster_file(path)
    if not objects.nodes:
        raise CommandError(f"--cluster-file {path}: it holds no Node; there is no GPU to show")
    return objects


def connect(kubeconfig: str | None, context: str | None, timeout_s: float) -> KubernetesTransport:
    """A transport to the cluster (in-cluster, else the kubeconfig and context); CommandError
    in one line when there is none, or the API server does not answer or refuses the
    credentials (:func:`~migslice.kube.transport.unanswered`)."""
    from migslice.kube.transport import ApiError, KubeconfigError, KubernetesTransport, unanswered

    console.check_kubeconfig(kubeconfig)
    try:
        transport = KubernetesTransport.from_environment(
            kubeconfig, timeout_s=timeout_s, context=context
        )
    except KubeconfigError as error:  # no kubeconfig, or one that cannot be used: it says
        raise CommandError(str(error)) from None
    except Exception as error:  # the kubernetes client raises several kinds here
        raise CommandError(
            f"no access to a cluster ({error}); pass --kubeconfig, or set $KUBECONFIG"
        ) from None
    try:
        transport.get_json("/version", {})
    except ApiError as error:
        raise CommandError(unanswered(error)) from None
    return transport


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's context (``context``, else the current one), as
    kubectl takes it; ``default`` without one (or in a pod without a kubeconfig: the pod's
    own namespace). The context is the one :func:`connect` uses
    (:func:`~migslice.kube.transport.kubectl_context`: with several files in ``$KUBECONFIG``,
    the first's current context, where the client's merge would take the last's)."""
    from kubernetes import config

    from migslice.kube.transport import kubectl_context

    context = kubectl_context(kubeconfig, context)
    try:
        contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except Exception:  # no kubeconfig (in a pod), or one the client cannot read
        return _pod_namespace() or "default"
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
    namespace = (chosen or {}).get("context", {}).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else "default"


def _pod_namespace() -> str | None:
    path = Path(SERVICE_ACCOUNT_NAMESPACE)
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def read_cluster(transport: KubernetesTransport, mig_config_map: tuple[str, str]) -> ClusterObjects:
    """The objects status reads, from the API server; CommandError when a read is refused
    (naming what could not be read)."""
    from migslice.kube.transport import ApiError

    namespace, name = mig_config_map
    try:
        nodes = _list(transport, "/api/v1/nodes", {}) or []
        pods = _list(transport, "/api/v1/pods", {"fieldSelector": LIVE_PODS}) or []
        policies = _list(transport, POLICIES, {})
        namespaces = _list(transport, "/api/v1/namespaces", {}) or []
        config_map = _get(transport, f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        dra: dict[str, tuple[RawObject, ...]] = {}
        for field, path, kind in DRA_LISTS:
            try:
                found = _list(transport, path, {}) or []
            except ApiError as error:
                if field != "device_taint_rules" or error.status != 403:
                    raise
                found = []  # who may not list the rules still gets the rest
            for raw in found:
                raw.setdefault("kind", kind)
            dra[field] = tuple(found)
    except ApiError as error:
        grant = (
            "; run status and why as a cluster admin, or grant get and list on Nodes, Pods, "
            "Namespaces, TenantPolicies and (where served) ResourceSlices, ResourceClaims and "
            f"DeviceClasses, and get on ConfigMap {namespace}/{name} (docs/status.md, Rights)"
            if error.status == 403
            else ""
        )
        raise CommandError(f"cannot read the cluster: {error}{grant}") from None
    if policies is None:
        policies = []
    for raw in namespaces:
        raw.setdefault("kind", "Namespace")
    if config_map is not None:
        metadata = config_map.get("metadata")
        if isinstance(metadata, dict):
            metadata.setdefault("namespace", namespace)
    return ClusterObjects(
        nodes=tuple(nodes),
        pods=tuple(pods),
        tenant_policies=tuple(policies),
        config_maps=() if config_map is None else (config_map,),
        others=tuple(namespaces),
        **dra,
    )


def read_absent(transport: KubernetesTransport, namespace: str) -> tuple[RawObject, ...]:
    """The namespace's workloads (:data:`WORKLOADS`) and ``FailedCreate`` Events, for a pod
    that is not there; a kind the caller may not list, or the API does not serve, is left
    out."""
    from migslice.kube.transport import ApiError

    found: list[RawObject] = []
    reads: list[tuple[str, str, dict[str, str]]] = [
        (f"{group}/namespaces/{namespace}/{plural}", kind, {}) for group, plural, kind in WORKLOADS
    ]
    failed = {"fieldSelector": "reason=FailedCreate"}
    reads.append((f"/api/v1/namespaces/{namespace}/events", "Event", failed))
    for path, kind, query in reads:
        try:
            listed = _list(transport, path, query) or []
        except ApiError as error:
            if error.status in (401, 403):
                continue
            raise CommandError(f"cannot read the cluster: {error}") from None
        for raw in listed:
            raw.setdefault("kind", kind)
        found += listed
    return tuple(found)


def read_scheduling_events(
    transport: KubernetesTransport, namespace: str, pod: str
) -> tuple[RawObject, ...]:
    """The ``FailedScheduling`` Events of pod ``namespace/pod`` (none where the caller may not
    list Events)."""
    from migslice.kube.transport import ApiError

    query = {"fieldSelector": f"involvedObject.name={pod},reason=FailedScheduling"}
    try:
        listed = _list(transport, f"/api/v1/namespaces/{namespace}/events", query) or []
    except ApiError as error:
        if error.status in (401, 403):
            return ()
        raise CommandError(f"cannot read the cluster: {error}") from None
    for raw in listed:
        raw.setdefault("kind", "Event")
    return tuple(listed)


def _get(transport: KubernetesTransport, path: str) -> RawObject | None:
    from migslice.kube.transport import ApiError

    try:
        return transport.get_json(path, {})
    except ApiError as error:
        if error.status == 404:
            return None
        raise


def _list(
    transport: KubernetesTransport, path: str, query: dict[str, str]
) -> list[RawObject] | None:
    """Every item of a collection (all pages); None when the resource is not served (404)."""
    from migslice.kube.transport import ApiError

    found: list[RawObject] = []
    token = ""
    while True:
        page_query = {**query, "limit": LIST_PAGE, **({"continue": token} if token else {})}
        try:
            page = transport.get_json(path, page_query)
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        found.extend(i for i in page.get("items") or () if isinstance(i, dict))
        metadata = page.get("metadata")
        token = str(metadata.get("continue") or "") if isinstance(metadata, dict) else ""
        if not token:
            return found
