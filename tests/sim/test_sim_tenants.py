"""Tenants in the simulator: the trace's QoS groups, quotas of their share of the demand charged
and checked by the webhook's own code, and Jain's fairness index."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from migslice.sim import GPU_MODEL, SaturationConfig, SimPod, make_policy, map_pod, run_sequence
from migslice.sim.tenants import QuotaLedger, jain_index, quota_policies, tenant_of
from migslice.sim.trace import MappingKind, parse_pod_list

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time"


def test_the_qos_column_is_the_pods_tenant_and_an_empty_one_the_default() -> None:
    pods = parse_pod_list(
        f"{HEADER}\na,1000,1024,1,1000,,LS,Running,0\nb,1000,1024,1,300,,BE,Running,0\n"
        "c,1000,1024,2,1000,,,Running,0\n"
    )
    mapped = [map_pod(p, MappingKind.COMPUTE_CEIL) for p in pods]
    assert [(p.tenant, p.profile, p.count) for p in mapped if p] == [
        ("LS", "7g.80gb", 1),
        ("BE", "3g.40gb", 1),
        ("", "7g.80gb", 2),
    ]
    assert [tenant_of(p) for p in mapped if p] == ["LS", "BE", "default"]
    # the 5-column lists have no qos: one tenant
    (old,) = parse_pod_list("name,num_gpu,gpu_milli,cpu_milli,memory_mib\nx,1,1000,0,0\n")
    assert old.group == ""


def test_each_tenants_quota_is_its_share_of_the_demand() -> None:
    pods = [SimPod(f"l{i}", "7g.80gb", tenant="LS") for i in range(3)]
    pods += [SimPod(f"b{i}", "1g.10gb", tenant="BE") for i in range(7)]
    policies = quota_policies(pods, 56)
    assert {t: p.quota.compute_slices for t, p in policies.items()} == {"BE": 14, "LS": 42}


def test_a_pod_over_its_tenants_quota_is_denied_and_a_release_makes_room() -> None:
    ledger = QuotaLedger(quota_policies([SimPod("x", "7g.80gb", tenant="LS")], 7), GPU_MODEL)
    assert ledger.admit(SimPod("a", "4g.40gb", tenant="LS"))
    assert ledger.admit(SimPod("b", "3g.40gb", tenant="LS"))
    assert not ledger.admit(SimPod("c", "1g.10gb", tenant="LS"))
    assert ledger.used["LS"].compute_slices == 7
    ledger.release("b")
    assert ledger.admit(SimPod("c", "1g.10gb", tenant="LS"))
    assert ledger.used["LS"].compute_slices == 5
    # a tenant without a policy is not limited
    assert ledger.admit(SimPod("d", "7g.80gb", 2, tenant="BE"))


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["LS", "BE"]),
            st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
            st.booleans(),
        ),
        max_size=40,
    )
)
def test_no_tenant_ever_holds_more_than_its_quota(steps: list[tuple[str, str, bool]]) -> None:
    policies = quota_policies(
        [SimPod("l", "4g.40gb", tenant="LS"), SimPod("b", "3g.40gb", tenant="BE")], 21
    )
    ledger = QuotaLedger(policies, GPU_MODEL)
    held: list[str] = []
    for n, (tenant, profile, leave) in enumerate(steps):
        if leave and held:
            ledger.release(held.pop(0))
        pod = SimPod(f"p{n}", profile, tenant=tenant)
        if ledger.admit(pod):
            held.append(pod.name)
        for name, policy in policies.items():
            quota = policy.quota.compute_slices
            assert quota is not None and ledger.used[name].compute_slices <= quota


def test_with_quotas_a_run_denies_the_pods_over_a_tenants_share_before_placement() -> None:
    pods = [SimPod(f"l{i}", "7g.80gb", tenant="LS") for i in range(6)]
    pods += [SimPod(f"b{i}", "1g.10gb", tenant="BE") for i in range(14)]
    config = SaturationConfig(nodes=1, gpus_per_node=4, max_load_pct=200, quotas=True)
    # LS asks 42 of 56 compute slices: its quota is 3/4 of the cluster's 28, three 7g pods
    result = run_sequence(pods, make_policy("M-dra", GPU_MODEL, pods, gpus=4), config)
    tenants = {t: (a, p, d) for t, a, p, d in result.points[-1].tenants}
    assert tenants["LS"] == (6, 3, 3)
    assert tenants["BE"] == (14, 7, 7)
    assert result.failed_pods == 0
    off = run_sequence(
        pods,
        make_policy("M-dra", GPU_MODEL, pods, gpus=4),
        SaturationConfig(nodes=1, gpus_per_node=4),
    )
    assert {t: (a, p, d) for t, a, p, d in off.points[-1].tenants}["LS"] == (6, 4, 0)


def test_jains_index_is_one_when_even_and_one_over_n_when_one_takes_all() -> None:
    assert jain_index([0.8, 0.8, 0.8]) == 1.0
    assert jain_index([1.0, 0.0]) == 0.5
    assert jain_index([]) is None
