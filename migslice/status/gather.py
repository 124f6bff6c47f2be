"""What status and why read (the shell of the room): a cluster through the API server, read
only (lists of Nodes, live Pods, TenantPolicies, Namespaces, and a GET of the mig-parted
ConfigMap), or a cluster file; both into the same :class:`ClusterObjects`."""

from __future__ import annotations

from pathlib import Path

from migslice import console, names
from migslice.console import CommandError
from migslice.kube.transport import ApiError, KubernetesTransport, RawObject
from migslice.objects import ClusterFileError, ClusterObjects, load_cluster_text

LIST_PAGE = "500"
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
POLICIES = f"/apis/{names.GROUP}/{names.VERSION}/{names.POLICY_PLURAL}"


def read_cluster_file(path: Path) -> ClusterObjects:
    text = console.read_text_file(path, flag="--cluster-file")
    try:
        objects = load_cluster_text(text)
    except ClusterFileError as error:
        raise CommandError(f"--cluster-file {path}: {error}") from None
    if not objects.nodes:
        raise CommandError(f"--cluster-file {path}: it holds no Node; there is no GPU to show")
    return objects


def connect(kubeconfig: str | None, context: str | None, timeout_s: float) -> KubernetesTransport:
    """A transport to the cluster (in-cluster, else the kubeconfig and context); CommandError
    in one line when there is none or the API server does not answer."""
    console.check_kubeconfig(kubeconfig)
    try:
        transport = KubernetesTransport.from_environment(
            kubeconfig, timeout_s=timeout_s, context=context
        )
    except Exception as error:  # the kubernetes client raises several kinds here
        raise CommandError(
            f"no access to a cluster ({error}); run in a pod, or pass --kubeconfig"
        ) from None
    try:
        transport.get_json("/version", {})
    except ApiError as error:
        raise CommandError(
            f"the API server does not answer ({error}); check --kubeconfig and "
            "`kubectl get --raw /readyz`"
        ) from None
    return transport


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's context (``context``, else the current one), as
    kubectl takes it; ``default`` without one (or in a pod without a kubeconfig: the pod's
    own namespace)."""
    from kubernetes import config

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
    namespace, name = mig_config_map
    try:
        nodes = _list(transport, "/api/v1/nodes", {}) or []
        pods = _list(transport, "/api/v1/pods", {"fieldSelector": LIVE_PODS}) or []
        policies = _list(transport, POLICIES, {})
        namespaces = _list(transport, "/api/v1/namespaces", {}) or []
        config_map = _get(transport, f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    except ApiError as error:
        raise CommandError(f"cannot read the cluster: {error}") from None
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
    )


def _get(transport: KubernetesTransport, path: str) -> RawObject | None:
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
