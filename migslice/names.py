"""The names migslice shares with Kubernetes, NVIDIA's components and its own parts.

ARCHITECTURE §4 lists them as stable interfaces: tests, docs and other programs depend on
them. Every module reads a name from here; none spells one out again. This module imports
nothing, so every layer may use it.
"""

from __future__ import annotations

# -- the TenantPolicy API -------------------------------------------------------------------------

GROUP = "migslice.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
POLICY_KIND = "TenantPolicy"
POLICY_PLURAL = "tenantpolicies"
POLICY_SHORT_NAME = "tp"
POLICY_CRD = f"{POLICY_PLURAL}.{GROUP}"

# -- pod annotations: what a team asks for --------------------------------------------------------

GPU_SIZE = "migslice.io/gpu-size"
GPU_MEMORY = "migslice.io/gpu-memory"
GPU_COMPUTE = "migslice.io/gpu-compute"
GPU_COUNT = "migslice.io/gpu-count"
GPU_CONTAINER = "migslice.io/gpu-container"
INPUT_ANNOTATIONS = (GPU_SIZE, GPU_MEMORY, GPU_COMPUTE, GPU_COUNT, GPU_CONTAINER)

# -- pod annotations: what the webhook decided ----------------------------------------------------

TENANT = "migslice.io/tenant"
PROFILE = "migslice.io/profile"
POLICY = "migslice.io/policy"
RESERVATION = "migslice.io/reservation"
"""The admission request uid that admitted the pod (written by the webhook; the charge of
that admission is released once the pod itself is counted)."""
OUTPUT_ANNOTATIONS = (TENANT, PROFILE, POLICY, RESERVATION)
LEDGER_STATUS_KEY = "quotaLedger"
"""The key of a TenantPolicy's status where the webhook records its quota ledger's epoch
(``migslice.kube.ledger``); the status writer leaves it alone."""

# -- annotations of the node agent and the repartition controller ---------------------------------

LAYOUT_ANNOTATION = "migslice.io/gpu-layout"
"""On a Node: the node agent's report of its GPUs' real MIG layouts (versioned JSON)."""
RECORD_ANNOTATION = "migslice.io/repartition"
"""On the mig-parted ConfigMap: the repartition controller's plan record (JSON)."""
TOUCH_ANNOTATION = "migslice.io/repartitioned"
"""On a pending Pod: the config a finished re-partition applied for it (makes kube-scheduler
retry the pod at once)."""
RETRY_ANNOTATION = "migslice.io/retry"
"""On a pending Pod: why and when the extender asked kube-scheduler to try it again
(``hold-ended`` or ``caches-ready`` and the time; ``extender.retries``)."""
CARVE_ANNOTATION = "migslice.io/carve"
"""On a Node in carve mode: the carve the repartition controller asks its node agent for (JSON:
the plan id and, per GPU, the instances to destroy and to create)."""
CARVE_STATE_ANNOTATION = "migslice.io/carve-state"
"""On a Node in carve mode: the node agent's journal and outcome of the last carve (JSON: the
plan id, ``pending``, ``rolling-back``, ``success`` or ``failed``, and the steps)."""
REPARTITION_MODE_LABEL = "migslice.io/repartition-mode"
"""On a Node: how its GPUs are re-shaped, ``carve`` (the node agent, around running instances)
or ``mig-manager`` (NVIDIA MIG Manager, idle GPUs only); absent: the controller's default."""
DRA_STEER_LABEL = "migslice.io/dra-steer"
"""On a Node: ``off`` leaves its DynamicMIG devices to kube-scheduler's first fit (no steer rules;
docs/dra.md); absent or any other value: steered."""
MODE_CARVE = "carve"
MODE_MIG_MANAGER = "mig-manager"
REPARTITION_MODES = (MODE_MIG_MANAGER, MODE_CARVE)
ADMISSION_LABEL = "migslice.io/admission"
"""On a Namespace: ``disabled`` keeps the webhook configurations from calling migslice."""
ADMISSION_DISABLED = "disabled"

# -- outages: fail-open namespaces and the admission gate (docs/outages.md) -----------------------

OUTAGE_LABEL = "migslice.io/outage"
"""On a Namespace: ``open`` makes it fail-open. While the webhook cannot be called, its GPU
pods are created behind :data:`ADMISSION_GATE` (a MutatingAdmissionPolicy adds it) and
admitted later by the webhook's gate reconciler; absent (or any other value): fail-closed."""
OUTAGE_OPEN = "open"
ADMISSION_GATE = "migslice.io/admission"
"""The scheduling gate of a GPU pod migslice has not admitted yet: added to GPU pods of
fail-open namespaces by the MutatingAdmissionPolicy :data:`GATE_POLICY`, removed by the
webhook as it admits (in its patch, or later by its gate reconciler), and by nobody else
(the ValidatingAdmissionPolicy :data:`GATE_OWNER_POLICY`)."""
GATE_POLICY = "migslice-admission-gate"
"""MutatingAdmissionPolicy (and its binding): the gate (and migslice-scheduler) on GPU pods of
fail-open namespaces."""
UNAVAILABLE_POLICY = "migslice-admission-unavailable"
"""ValidatingAdmissionPolicy (and its binding): refuses a pod with migslice size annotations
that reaches validation still gated (the webhook did not answer)."""
GATE_OWNER_POLICY = "migslice-admission-gate-owner"
"""ValidatingAdmissionPolicy (and its binding): only the webhook's ServiceAccount removes
:data:`ADMISSION_GATE`."""
GATE_LEASE_NAME = "migslice-admission-gate"
"""The Lease of the webhook replicas' gate reconciler (one leader admits gated pods)."""
ADMITTED_CONDITION = "migslice.io/Admitted"
"""The pod condition the gate reconciler sets: False while it waits (reason, numbers), True
once admitted."""

MIGSLICE_PREFIX = "migslice.io/"

QUARANTINE_LABEL = "migslice.io/repartition-quarantine"
"""On a Node MIG Manager left short of ``success`` past the deadline: ``timeout``. No plan
touches the node until MIG Manager reports success or an admin removes this label."""
QUARANTINE_ANNOTATION = "migslice.io/repartition-quarantine"
"""Beside the label: why, since when and how to release it (JSON, for ``kubectl`` and tools)."""
QUARANTINE_TIMEOUT = "timeout"

# -- the scheduler -----------------------------------------------------------------------------

SCHEDULER_NAME = "migslice-scheduler"

# -- NVIDIA GPU Feature Discovery and MIG Manager node labels -------------------------------------

PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_MANAGER_DEPLOY_LABEL = "nvidia.com/gpu.deploy.mig-manager"
"""The GPU Operator's MIG Manager DaemonSet (and NVIDIA's example one) runs only on nodes where
this is ``true``; ``false`` turns it off on a node, other values pause it."""

MIG_STATE_PENDING = "pending"
MIG_STATE_REBOOTING = "rebooting"
MIG_STATE_SUCCESS = "success"
MIG_STATE_FAILED = "failed"
MIG_TRANSITION_STATES = frozenset({MIG_STATE_PENDING, MIG_STATE_REBOOTING})
"""MIG Manager is working on the node: no GPU pod may use it and no plan may touch it."""
MIG_STRATEGY_MIXED = "mixed"
"""The device plugin's and GFD's MIG strategy migslice needs (``nvidia.com/mig-<profile>``)."""

# -- the NVIDIA GPU Operator's ClusterPolicy ------------------------------------------------------

CLUSTER_POLICY_GROUP = "nvidia.com"
CLUSTER_POLICY_VERSION = "v1"
CLUSTER_POLICY_PLURAL = "clusterpolicies"
CLUSTER_POLICY_CRD = f"{CLUSTER_POLICY_PLURAL}.{CLUSTER_POLICY_GROUP}"
CLUSTER_POLICY_NAME = "cluster-policy"
"""The name the GPU Operator's Helm chart gives its ClusterPolicy (the README's patch)."""
DEFAULT_MIG_PARTED_CONFIG_MAP = "default-mig-parted-config"
"""What MIG Manager reads when ``spec.migManager.config.name`` is empty."""

# -- NVIDIA device plugin resources (mixed strategy) ----------------------------------------------

GPU_RESOURCE_PREFIX = "nvidia.com/"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
WHOLE_GPU_RESOURCE = "nvidia.com/gpu"
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"


def mig_resource_name(profile: str) -> str:
    """The mixed-strategy resource of a profile: ``1g.10gb+me`` -> ``nvidia.com/mig-1g.10gb.me``."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


# -- Kubernetes Dynamic Resource Allocation (resource.k8s.io/v1) and NVIDIA's DRA driver --------

DRA_API = "/apis/resource.k8s.io/v1"
DRA_DRIVER = "gpu.nvidia.com"
"""The driver name of NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu): the driver of
its ResourceSlices and of the devices it allocates, and the domain of its device attributes."""
MIG_DEVICE_CLASS = "mig.nvidia.com"
"""NVIDIA's DeviceClass of MIG devices (``type == 'mig'``; no profile, no extendedResourceName)."""
GPU_DEVICE_CLASS = "gpu.nvidia.com"
"""NVIDIA's DeviceClass of whole GPUs (``type == 'gpu'``; extendedResourceName nvidia.com/gpu)."""
DRA_PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
"""The standard device attribute of a device's PCI bus id (the parent GPU's, for MIG devices)."""
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
"""On the ResourceClaim kube-scheduler creates for a pod's extended resources served by DRA
(KEP-5004), value ``"true"``."""
POD_CLAIM = "migslice-gpu"
"""The name migslice gives the claim it adds to a sized pod of a ResourceClaim tenant
(``spec.resourceClaims[].name``; a second device is ``migslice-gpu-1``, and so on)."""
STEER_TAINT_KEY = f"{GROUP}/steer"
"""The taint key of migslice's steer rules (``DeviceTaintRule``, effect ``NoSchedule``): a device
the allocator's first fit would take before the placement migslice prefers (docs/dra.md)."""
STEER_RULE_PREFIX = "migslice-steer-"
"""The name prefix of migslice's steer rules
(:func:`migslice.objects.device_taint_rules.steer_rule_name`)."""

MIG_DEVICE_CLASS_PREFIX = "migslice-mig-"
"""migslice's own DeviceClasses, one per MIG profile (:func:`mig_device_class`)."""


def mig_device_class(profile: str) -> str:
    """migslice's DeviceClass of one MIG profile: ``1g.10gb`` -> ``migslice-mig-1g.10gb``,
    ``1g.10gb+me`` -> ``migslice-mig-1g.10gb.me``, ``1g.24gb-me`` -> ``migslice-mig-1g.24gb-me``.

    The profile is written as in the device plugin's resource name (``+`` -> ``.``), so the
    class of ``nvidia.com/mig-<x>`` is ``migslice-mig-<x>`` and carries that resource as its
    ``extendedResourceName``. It is a valid DeviceClass name (a DNS subdomain: dots are
    allowed, ``+`` is not); writing dots and ``+`` alike as ``-`` would give ``1g.24gb+me``
    and ``1g.24gb-me`` (both RTX PRO 6000 profiles) the same name."""
    return MIG_DEVICE_CLASS_PREFIX + profile.replace("+", ".")


def mig_claim_template(profile: str) -> str:
    """migslice's ResourceClaimTemplate of one MIG profile, in each namespace of a tenant whose
    policy says ``deviceAPI: ResourceClaim``: named as the profile's DeviceClass
    (``migslice-mig-1g.10gb``), whose one device it asks for."""
    return mig_device_class(profile)


def profile_of_device_class(name: str) -> str | None:
    """The MIG profile of a :func:`mig_device_class` name, else None."""
    if not name.startswith(MIG_DEVICE_CLASS_PREFIX):
        return None
    profile = name[len(MIG_DEVICE_CLASS_PREFIX) :]
    for attribute in (".me.all", ".me", ".gfx"):
        if profile.endswith(attribute):
            return profile[: -len(attribute)] + "+" + attribute[1:]
    return profile or None


# -- the NVIDIA device plugin as the GPU Operator deploys it ------------------------------------

DEVICE_PLUGIN_SELECTOR = "app=nvidia-device-plugin-daemonset"
"""The GPU Operator's label on its device plugin pods (MIG Manager deletes them by it)."""

# -- MIG Manager's mig-parted ConfigMap ----------------------------------------------------------

MIG_CONFIG_MAP = "migslice-mig-config"
MIG_CONFIG_KEY = "config.yaml"
GPU_OPERATOR_NAMESPACE = "gpu-operator"
OWN_CONFIG_PREFIX = "migslice-"
"""Configs migslice writes into the file are named ``migslice-<node>-<hash>``."""

# -- migslice's own namespace and objects ---------------------------------------------------------

SYSTEM_NAMESPACE = "migslice-system"
LEASE_NAME = "migslice-repartition"
WEBHOOK_SERVICE = "migslice-webhook"
EXTENDER_SERVICE = "migslice-extender"
SCHEDULER_DEPLOYMENT = "migslice-scheduler"
AGENT_DAEMONSET = "migslice-agent"
WEBHOOK_CONFIGURATION = "migslice-webhook"
"""The Mutating- and ValidatingWebhookConfiguration (one name for both)."""

# -- pod phases -----------------------------------------------------------------------------------

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
