"""doctor's DRA checks, judged over facts: the API and KEP-5004's stage by kube-apiserver
version, DRA nodes with their driver mode and the ones migslice does not understand, the
DeviceClasses (NVIDIA's and migslice's), and the steer's rules left without an extender."""

from __future__ import annotations

from typing import Any

import pytest

from harness import dra_slices
from harness.builders import make_node, make_policy
from migslice.doctor.checks.dra import (
    DELETE_STEER_RULES,
    DRA_RESOURCES,
    DraFacts,
    SteerFacts,
    judge_dra_api,
    judge_dra_classes,
    judge_dra_nodes,
    judge_dra_steer,
)
from migslice.doctor.facts import Settings
from migslice.doctor.findings import Verdict
from migslice.mig import CATALOG
from migslice.objects.device_classes import mig_profiles, migslice_device_class
from migslice.objects.device_taint_rules import steer_rule
from tests.doctor_cluster import available, rendered_one
from tests.dra_objects import fixture, make_dra_node

SETTINGS = Settings()
DISCOVERY = {"resources": [{"name": r} for r in DRA_RESOURCES]}


def facts(
    *,
    version: str = "v1.37.2",
    discovery: dict[str, Any] | None = DISCOVERY,
    slices: list[dict[str, Any]] | None = None,
    classes: list[dict[str, Any]] | None = None,
    nodes: list[dict[str, Any]] | None = None,
    policies: list[dict[str, Any]] | None = None,
) -> DraFacts:
    return DraFacts(
        discovery,
        {"gitVersion": version},
        [] if slices is None and discovery is not None else slices,
        [] if classes is None and discovery is not None else classes,
        nodes or [],
        policies or [],
    )


API = [
    ("1.37: GA", "v1.37.2", DISCOVERY, Verdict.OK, "DRAExtendedResource GA"),
    ("1.36: beta", "v1.36.3", DISCOVERY, Verdict.OK, "beta, on by default"),
    ("1.35: alpha", "v1.35.4", DISCOVERY, Verdict.WARNING, "feature gate DRAExtendedResource"),
    ("not served", "v1.33.1", None, Verdict.OK, "serves no resource.k8s.io/v1"),
    (
        "templates not served",
        "v1.37.2",
        {"resources": [{"name": "resourceclaims"}]},
        Verdict.FAILED,
        "does not serve deviceclasses, resourceclaimtemplates, resourceslices",
    ),
]


@pytest.mark.parametrize(
    ("version", "discovery", "verdict", "detail"), [a[1:] for a in API], ids=[a[0] for a in API]
)
def test_the_dra_api_and_kep_5004_by_version(
    version: str, discovery: dict[str, Any] | None, verdict: Verdict, detail: str
) -> None:
    found = judge_dra_api(facts(version=version, discovery=discovery), SETTINGS)
    assert found.verdict is verdict and detail in found.detail + found.fix


def slices_of(node: str, gpus: list[dra_slices.Gpu], dynamic: bool = True) -> list[dict[str, Any]]:
    layouts = [[("3g.40gb", 4), ("1g.10gb", 0)]] if not dynamic else ()
    return dra_slices.node_slices(node, f"uid-{node}", gpus, dynamic=dynamic, layouts=layouts)


def test_dra_nodes_are_listed_with_their_mode_and_unknown_ones_warned() -> None:
    slices = slices_of("dyn", [dra_slices.a100(0)]) + slices_of(
        "static", [dra_slices.h100(0)], dynamic=False
    )
    odd = slices_of("odd", [dra_slices.a100(0)])
    odd[1]["spec"]["devices"][0]["attributes"]["type"] = {"string": "vfio"}
    nodes = [make_dra_node(n) for n in ("dyn", "static", "odd")]
    found = judge_dra_nodes(facts(slices=slices + odd, nodes=nodes), SETTINGS)
    assert found.verdict is Verdict.WARNING
    assert "DRA node odd not understood by migslice" in found.detail
    assert "left to kube-scheduler's first fit" in found.detail  # no DeviceTaintRules here
    assert "dyn (DynamicMIG, 1 x A100-80GB)" in found.detail
    assert "static (static MIG, 1 x H100-80GB)" in found.detail
    none = judge_dra_nodes(facts(), SETTINGS)
    assert (none.verdict, none.detail) == (
        Verdict.OK,
        "no DRA nodes (no gpu.nvidia.com ResourceSlices)",
    )


def test_a_node_of_both_the_device_plugin_and_the_dra_driver_warns_how_to_run_one() -> None:
    """gpu-a has the device plugin's MIG allocatable and NVIDIA's DRA driver publishes it too:
    migslice never re-partitions it (claims from those slices are not in the view it reads),
    and the fix says how to keep one of the two there."""
    both = {
        "slices": slices_of("gpu-a", [dra_slices.a100(0)], dynamic=False),
        "nodes": [make_node("gpu-a", gpu_count=1, mig={"1g.10gb": 7})],
    }
    found = judge_dra_nodes(facts(**both), SETTINGS)
    assert found.verdict is Verdict.WARNING
    assert "gpu-a" in found.detail
    assert "never re-partitioned by migslice" in found.detail
    assert "nvidia.com/gpu.deploy.device-plugin=false" in found.fix
    assert "kubelet plugin" in found.fix


def test_dynamicmig_nodes_warn_where_device_taint_rules_are_not_served() -> None:
    dra = {"slices": slices_of("dyn", [dra_slices.a100(0)]), "nodes": [make_dra_node("dyn")]}
    found = judge_dra_nodes(facts(**dra), SETTINGS)
    assert found.verdict is Verdict.WARNING
    assert "DynamicMIG nodes dyn are left to kube-scheduler's first fit" in found.detail
    assert "Kubernetes 1.37 serves DeviceTaintRules" in found.fix
    served = {"resources": [*DISCOVERY["resources"], {"name": "devicetaintrules"}]}
    assert judge_dra_nodes(facts(discovery=served, **dra), SETTINGS).verdict is Verdict.OK
    static = {
        "slices": slices_of("static", [dra_slices.h100(0)], dynamic=False),
        "nodes": [make_dra_node("static")],
    }
    assert judge_dra_nodes(facts(**static), SETTINGS).verdict is Verdict.OK


def test_missing_device_classes_fail_where_dra_nodes_are() -> None:
    every = [migslice_device_class(p) for p in mig_profiles(CATALOG)]
    nvidia = fixture("deviceclass-mig.nvidia.com.yaml")
    dra = {"slices": slices_of("dyn", [dra_slices.a100(0)]), "nodes": [make_dra_node("dyn")]}
    assert judge_dra_classes(facts(classes=[nvidia, *every], **dra), SETTINGS).verdict is Verdict.OK
    found = judge_dra_classes(facts(classes=every[:3], **dra), SETTINGS)
    assert found.verdict is Verdict.FAILED
    assert "DeviceClass mig.nvidia.com is missing" in found.detail
    assert f"{len(every) - 3} of migslice's {len(every)} DeviceClasses missing" in found.detail
    assert "dra.deviceClasses.enabled=true" in found.fix
    none = judge_dra_classes(facts(classes=every[:3]), SETTINGS)
    assert none.verdict is Verdict.OK
    assert none.detail == (
        f"no DRA nodes, nothing to serve yet (mig.nvidia.com absent; 3 of migslice's "
        f"{len(every)} DeviceClasses)"
    )


def test_a_resource_claim_tenant_without_device_classes_or_dra_nodes_is_told_what_it_meets() -> (
    None
):
    every = [migslice_device_class(p) for p in mig_profiles(CATALOG)]
    nvidia = fixture("deviceclass-mig.nvidia.com.yaml")
    claims = make_policy("claims", deviceAPI="ResourceClaim", allowedProfiles=["3g.40gb"])
    plain = make_policy("plain", namespaces=["team-b"])
    dra = {"slices": slices_of("dyn", [dra_slices.a100(0)]), "nodes": [make_dra_node("dyn")]}
    three_g = next(c for c in every if c["metadata"]["name"] == "migslice-mig-3g.40gb")
    # Every class a tenant may be given, DRA nodes: nothing to say.
    kept = facts(classes=[nvidia, *every], policies=[claims, plain], **dra)
    assert judge_dra_classes(kept, SETTINGS).verdict is Verdict.OK
    # Its one profile's class missing: its pods are refused, even with no DRA node at all.
    others = [c for c in every if c is not three_g]
    for lacking in (
        facts(classes=[nvidia, *others], policies=[claims, plain], **dra),
        facts(classes=others, policies=[claims, plain]),
    ):
        found = judge_dra_classes(lacking, SETTINGS)
        assert found.verdict is Verdict.FAILED
        assert 'TenantPolicy "claims" gives sized pods ResourceClaims' in found.detail
        assert "(migslice-mig-3g.40gb): the webhook refuses those pods" in found.detail
        assert "spec.deviceAPI: ExtendedResource" in found.fix
        assert '"plain"' not in found.detail
    # Classes there but no DRA node: its pods wait.
    idle = judge_dra_classes(facts(classes=[nvidia, three_g], policies=[claims]), SETTINGS)
    assert idle.verdict is Verdict.WARNING
    assert "no node publishes gpu.nvidia.com ResourceSlices: its GPU pods stay pending" in (
        idle.detail
    )
    # Another tenant's missing classes are not this tenant's problem.
    assert judge_dra_classes(facts(classes=[three_g], policies=[plain]), SETTINGS).verdict is (
        Verdict.OK
    )
    # No DRA API at all.
    gone = judge_dra_classes(facts(discovery=None, policies=[claims]), SETTINGS)
    assert gone.verdict is Verdict.FAILED
    assert "serves no resource.k8s.io/v1" in gone.detail


def test_an_account_denied_the_dra_objects_still_gets_the_dra_api_judged() -> None:
    """dra-api reads discovery and /version alone: a read-only account that may not list
    ResourceSlices, DeviceClasses, Nodes or TenantPolicies fails the checks that read those
    (docs/doctor.md, "Rights"), not dra-api with a fix about what it does not read."""
    from tests.doctor_cluster import DoctorCluster
    from tests.doctor_serve import judge

    cluster = DoctorCluster()
    try:
        cluster.objects["/apis/resource.k8s.io/v1"] = DISCOVERY
        denied = {
            path: (403, f'{path.rsplit("/", 1)[-1]} is forbidden: User "viewer" cannot list it')
            for path in (
                "/apis/resource.k8s.io/v1/resourceslices",
                "/apis/resource.k8s.io/v1/deviceclasses",
                "/api/v1/nodes",
                "/apis/migslice.io/v1alpha1/tenantpolicies",
            )
        }
        api = judge(cluster, "dra-api", errors=denied)
        assert api.verdict is Verdict.WARNING  # 1.34: DRAExtendedResource alpha, off
        assert "kube-apiserver v1.34.4 serves resource.k8s.io/v1" in api.detail
        assert "cannot read" not in api.detail
        nodes = judge(cluster, "dra-nodes", errors=denied)
        assert nodes.verdict is Verdict.FAILED
        assert nodes.detail.startswith("cannot read the cluster: HTTP 403")
        # Denied the DeviceClasses and TenantPolicies alone, dra-nodes reads what it judges.
        policies_too = {k: v for k, v in denied.items() if "resourceslices" not in k}
        policies_too.pop("/api/v1/nodes")
        nodes = judge(cluster, "dra-nodes", errors=policies_too)
        assert "cannot read" not in nodes.detail, nodes.detail
        classes = judge(cluster, "dra-device-classes", errors=policies_too)
        assert classes.detail.startswith("cannot read the cluster: HTTP 403")
    finally:
        cluster.close()


def _extender(*, replicas: int = 2, up: int | None = None, args: tuple[str, ...] = ()) -> Any:
    """The chart's extender Deployment, ``replicas`` wanted, ``up`` of them available (all by
    default), with ``args`` added to its container's."""
    deployment = available(rendered_one("extender/deployment.yaml", "Deployment"))
    deployment["spec"]["replicas"] = replicas
    deployment["status"]["availableReplicas"] = replicas if up is None else up
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    container["args"] = [*container.get("args", ()), *args]
    return deployment


STEER = [
    steer_rule("dyn-1", "gpu-0-mig-1g10gb-19-0", "1g.10gb"),
    steer_rule("dyn-1", "gpu-0-mig-1g10gb-19-1", "1g.10gb"),
    steer_rule("dyn-2", "gpu-1-mig-2g20gb-14-0", "2g.20gb"),
]
ADMINS = {  # named like the steer's but not labelled as migslice's: an admin's, not counted
    **steer_rule("dyn-3", "gpu-0-mig-3g40gb-9-0", "3g.40gb"),
    "metadata": {"name": "migslice-steer-maintenance"},
}

DOWN = [
    ("not found", None, "Deployment migslice-system/migslice-extender not found"),
    ("scaled to 0", _extender(replicas=0), "Deployment migslice-extender is scaled to 0 replicas"),
    ("crash-looping", _extender(up=0), "Deployment migslice-extender: 0/2 replicas available"),
]


@pytest.mark.parametrize(("extender", "why"), [d[1:] for d in DOWN], ids=[d[0] for d in DOWN])
def test_steer_rules_left_without_an_extender_warn_with_the_fix(extender: Any, why: str) -> None:
    found = judge_dra_steer(SteerFacts([*STEER, ADMINS], extender), SETTINGS)
    assert found.verdict is Verdict.WARNING
    assert found.detail.startswith("3 steer rule(s) on 2 node(s) (dyn-1, dyn-2) and no extender")
    assert f"({why})" in found.detail
    assert "kubectl -n migslice-system scale deploy/migslice-extender --replicas=2" in found.fix
    assert found.fix.endswith(DELETE_STEER_RULES)


def test_steer_rules_kept_by_a_running_extender_or_none_at_all_are_ok() -> None:
    running = judge_dra_steer(SteerFacts(STEER, _extender()), SETTINGS)
    assert running.verdict is Verdict.OK
    assert (
        running.detail
        == "3 steer rule(s) on 2 node(s) (dyn-1, dyn-2), kept current by the extender"
    )
    for extender in (None, _extender(replicas=0), _extender()):
        none = judge_dra_steer(SteerFacts([ADMINS], extender), SETTINGS)
        assert (none.verdict, none.detail) == (Verdict.OK, "no steer rule")
    unserved = judge_dra_steer(SteerFacts(None, None), SETTINGS)
    assert unserved.verdict is Verdict.OK
    assert "serves no devicetaintrules" in unserved.detail


def test_steer_rules_left_though_the_steer_is_off_warn() -> None:
    found = judge_dra_steer(SteerFacts(STEER, _extender(args=("--no-dra-steer",))), SETTINGS)
    assert found.verdict is Verdict.WARNING
    assert "though the extender runs with --no-dra-steer" in found.detail
    assert "logs deploy/migslice-extender" in found.fix and DELETE_STEER_RULES in found.fix


def test_the_documented_deletion_is_the_one_doctor_gives() -> None:
    """docs/dra.md gives the same command to delete the steer's rules by hand."""
    from harness.paths import REPO

    assert DELETE_STEER_RULES in (REPO / "docs" / "dra.md").read_text().replace("\n", " ")


def test_dra_steer_reads_the_rules_and_the_extender_from_the_api() -> None:
    from tests.doctor_cluster import DoctorCluster
    from tests.doctor_serve import judge

    cluster = DoctorCluster()
    try:
        assert judge(cluster, "dra-steer").detail.startswith("resource.k8s.io/v1 serves no")
        cluster.objects["/apis/resource.k8s.io/v1/devicetaintrules"] = [*STEER, ADMINS]
        assert judge(cluster, "dra-steer").verdict is Verdict.OK
        path = "/apis/apps/v1/namespaces/migslice-system/deployments/migslice-extender"
        cluster.objects[path]["status"]["availableReplicas"] = 0
        down = judge(cluster, "dra-steer")
        assert down.verdict is Verdict.WARNING
        assert "(Deployment migslice-extender: 0/2 replicas available)" in down.detail
        del cluster.objects[path]
        assert "migslice-system/migslice-extender not found" in judge(cluster, "dra-steer").detail
    finally:
        cluster.close()


def test_the_readmes_doctor_lines_of_dra_are_what_doctor_prints_on_its_cluster() -> None:
    """The README's sample (README.md, "Check the install") is a device-plugin cluster after
    the Helm install: migslice's DeviceClasses, no DRA node, no NVIDIA DRA driver, no steer
    rule. Its DRA lines are what the checks print there (dra-device-classes said the classes
    were there, a line doctor prints only where DRA nodes are)."""
    from harness.paths import REPO

    every = [migslice_device_class(p) for p in mig_profiles(CATALOG)]
    cluster = facts(classes=every)
    found = [
        judge_dra_api(cluster, SETTINGS),
        judge_dra_nodes(cluster, SETTINGS),
        judge_dra_classes(cluster, SETTINGS),
        judge_dra_steer(SteerFacts([], None), SETTINGS),
    ]
    readme = {
        line.split()[0]: line.split(None, 2)[1:]
        for line in (REPO / "README.md").read_text().splitlines()
        if line.startswith("dra-")
    }
    assert {f.check: [f.verdict.value, f.detail] for f in found} == readme


def test_missing_device_classes_are_fixed_by_a_helm_command_that_sets_the_value() -> None:
    """The fix was 'helm upgrade --install migslice charts/migslice -n NS (or kubectl apply
    ...) with dra.deviceClasses.enabled=true', twice for a ResourceClaim tenant: run as
    written, Helm reuses the release's values (dra.deviceClasses.enabled=false among them) and
    renders no class; with --set added, it resets every other value to the chart's default."""
    nvidia = fixture("deviceclass-mig.nvidia.com.yaml")
    claims = make_policy("claims", deviceAPI="ResourceClaim")
    dra = {"slices": slices_of("dyn", [dra_slices.a100(0)]), "nodes": [make_dra_node("dyn")]}
    found = judge_dra_classes(facts(classes=[nvidia], policies=[claims], **dra), SETTINGS)
    assert found.verdict is Verdict.FAILED
    upgrade = (
        "helm upgrade migslice charts/migslice -n migslice-system --reset-then-reuse-values "
        "--set dra.deviceClasses.enabled=true (or kubectl apply --server-side -k manifests)"
    )
    assert found.fix.count("helm upgrade") == 1
    assert found.fix.startswith(upgrade), found.fix
    assert "kubectl edit tenantpolicy claims (spec.deviceAPI: ExtendedResource)" in found.fix


def test_dra_nodes_none_of_them_ready_are_not_said_to_be_no_dra_nodes() -> None:
    """Where every DRA node is unknown or mid-publish, the line went on 'no DRA nodes (no
    gpu.nvidia.com ResourceSlices)' after naming the node and its slices."""
    odd = slices_of("odd", [dra_slices.a100(0)])
    odd[1]["spec"]["devices"][0]["attributes"]["type"] = {"string": "vfio"}
    found = judge_dra_nodes(facts(slices=odd, nodes=[make_dra_node("odd")]), SETTINGS)
    assert found.verdict is Verdict.WARNING
    assert "DRA node odd not understood by migslice" in found.detail
    assert "no gpu.nvidia.com ResourceSlices" not in found.detail
    assert "no DRA node ready" in found.detail


def test_classes_stored_without_their_extended_resource_name_name_the_feature_gate() -> None:
    """Before 1.36 kube-apiserver drops a DeviceClass's extendedResourceName while the gate
    DRAExtendedResource is off (measured: v1.37.2 at --emulated-version=1.35 stored the
    chart's 75 classes without it). doctor said the classes had 'another
    extendedResourceName than migslice's' and to upgrade with dra.deviceClasses.enabled=true,
    which stores them the same again."""
    every = [migslice_device_class(p) for p in mig_profiles(CATALOG)]
    for c in every:
        del c["spec"]["extendedResourceName"]
    nvidia = fixture("deviceclass-mig.nvidia.com.yaml")
    dra = {"slices": slices_of("dyn", [dra_slices.a100(0)]), "nodes": [make_dra_node("dyn")]}
    for version in ("v1.35.4", "v1.34.1"):
        found = judge_dra_classes(facts(version=version, classes=[nvidia, *every], **dra), SETTINGS)
        assert found.verdict is Verdict.WARNING, found
        assert "another extendedResourceName" not in found.detail
        assert f"{len(every)} of migslice's DeviceClasses have no extendedResourceName" in (
            found.detail
        )
        assert "feature gate DRAExtendedResource" in found.fix
        assert found.detail.endswith(
            f"mig.nvidia.com and migslice's {len(every)} DeviceClasses are there"
        )
    found = judge_dra_classes(facts(classes=[nvidia, *every], **dra), SETTINGS)  # 1.37
    assert found.verdict is Verdict.FAILED
    assert "another extendedResourceName than migslice's" in found.detail


def test_an_api_server_emulating_an_older_version_is_judged_as_that_version() -> None:
    """kube-apiserver --emulated-version=1.35 (compatibility versions, KEP-4330) behaves as
    1.35, DRAExtendedResource off, while its gitVersion says v1.37.2: dra-api said 'GA'."""
    version = {"gitVersion": "v1.37.2", "emulationMajor": "1", "emulationMinor": "35"}
    found = judge_dra_api(DraFacts(DISCOVERY, version, [], [], []), SETTINGS)
    assert found.verdict is Verdict.WARNING
    assert "kube-apiserver v1.37.2 (emulating 1.35)" in found.detail
    assert "DRAExtendedResource alpha" in found.detail


def _admin_class(name: str, resource: str, driver: str | None) -> dict[str, Any]:
    selectors = [{"cel": {"expression": f'device.driver == "{driver}"'}}] if driver else []
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": selectors, "extendedResourceName": resource},
    }


def test_a_class_serving_nvidia_gpus_as_a_resource_outside_nvidia_com_warns() -> None:
    """Pods asking example.com/gpu, which an admin's DeviceClass serves with NVIDIA's devices
    (or any device), never reach migslice's pod webhook, which is called for pods asking
    nvidia.com/* resources or naming claims: no node pool, no migslice-scheduler."""
    every = [migslice_device_class(p) for p in mig_profiles(CATALOG)]
    nvidia = fixture("deviceclass-mig.nvidia.com.yaml")
    dra = {"slices": slices_of("dyn", [dra_slices.a100(0)]), "nodes": [make_dra_node("dyn")]}
    nic = _admin_class("nic", "example.com/nic", "nic.example.com")
    gpu = _admin_class("team-gpu", "example.com/gpu", "gpu.nvidia.com")
    anything = _admin_class("anything", "example.com/any", None)
    kept = judge_dra_classes(facts(classes=[nvidia, *every, nic], **dra), SETTINGS)
    assert kept.verdict is Verdict.OK
    for odd in (gpu, anything):
        found = judge_dra_classes(facts(classes=[nvidia, *every, nic, odd], **dra), SETTINGS)
        assert found.verdict is Verdict.WARNING, found
        name = odd["metadata"]["name"]
        resource = odd["spec"]["extendedResourceName"]
        assert f"DeviceClass {name} serves {resource}" in found.detail
        assert "never reach migslice's pod webhook" in found.detail
        assert "nic" not in found.detail.split("DeviceClass ")[1].split(" ")[0]
