"""Prometheus metrics of one extender app (its own registry: no process-global state)."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from extender.state import ExtenderState
from migslice.inventory.beside import Place, beside_claims
from migslice.mig.stranding import complete_rule, strand_guard
from migslice.scheduling.fragmentation import NO_FREE_SPACE, FreeSpace, node_free_space
from migslice.serving.certificate_metric import CertificateExpiry

LATENCY_BUCKETS_S = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
)
"""To 10 s: past the chart's extenderTimeout (2 s) and kube-scheduler's own default (5 s), so a
p99 near a raised timeout reads as itself, not as the last bucket."""


class ExtenderMetrics:
    def __init__(self, state: ExtenderState) -> None:
        self._state = state
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "migslice_extender_requests",
            "Extender calls by verb and outcome (ok; error: answered with Error; waiting: "
            "answered with Error while the pod's ResourceClaim is not in the cache yet; blind: "
            "answered with Error, judging no node, while a cache did not follow the API "
            "server; unauthenticated: refused with 403, the caller lacking the client "
            "certificate --client-ca-file asks for).",
            ("verb", "outcome"),
            registry=self.registry,
        )
        self.duration = Histogram(
            "migslice_extender_request_duration_seconds",
            "Time to answer an extender call, body read to body written.",
            ("verb",),
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.filtered = Counter(
            "migslice_extender_filter_nodes",
            "Nodes judged by filter, by result (fits: answered as feasible, on filter-best-fit "
            "only those of the best score; failed; unresolvable).",
            ("result",),
            registry=self.registry,
        )
        self.registry.register(_CacheCollector(state))
        self.registry.register(_RepartitionCollector(state))
        self.registry.register(_PoolCollector(state))
        self.registry.register(_SteerCollector(state))
        self.registry.register(_RetryCollector(state))
        # The labelled children the verbs count into, kept: labels() takes a lock and builds
        # its key on every call, a tenth of a best-fit call's own time.
        self.nodes_fit = self.filtered.labels("fits")
        self.nodes_failed = self.filtered.labels("failed")
        self.nodes_unresolvable = self.filtered.labels("unresolvable")
        self._calls: dict[tuple[str, str], Any] = {}
        self._durations: dict[str, Any] = {}

    def follow(
        self, *, max_blind_s: float, tls_cert: str | None, tls_key: str | None = None
    ) -> None:
        """Also export readiness (as /readyz judges it) and the serving certificate's expiry."""
        self.registry.register(_ReadyCollector(self._state, max_blind_s))
        self.registry.register(CertificateExpiry(tls_cert, tls_key))

    def answered(self, verb: str, outcome: str, seconds: float) -> None:
        """Count one call of ``verb`` with its ``outcome`` and observe how long it took."""
        calls = self._calls.get((verb, outcome))
        if calls is None:
            calls = self._calls[(verb, outcome)] = self.requests.labels(verb, outcome)
        calls.inc()
        duration = self._durations.get(verb)
        if duration is None:
            duration = self._durations[verb] = self.duration.labels(verb)
        duration.observe(seconds)


class _CacheCollector(Collector):
    def __init__(self, state: ExtenderState) -> None:
        self._state = state

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        index = self._state.index
        nodes = GaugeMetricFamily("migslice_extender_cached_nodes", "Nodes in the cache.")
        nodes.add_metric((), index.node_count)
        pods = GaugeMetricFamily(
            "migslice_extender_cached_pods", "Pods holding GPU resources in the cache."
        )
        pods.add_metric((), index.pod_count)
        synced = GaugeMetricFamily(
            "migslice_extender_cache_synced", "1 once a cache has listed.", labels=("cache",)
        )
        staleness = GaugeMetricFamily(
            "migslice_extender_cache_staleness_seconds",
            "Seconds since a cache last heard from the API server (-1: never).",
            labels=("cache",),
        )
        blind = GaugeMetricFamily(
            "migslice_extender_cache_blind_seconds",
            "Seconds a cache has not followed the API server (0: connected; -1: never listed).",
            labels=("cache",),
        )
        relists = CounterMetricFamily(
            "migslice_extender_cache_relists_gone",
            "Re-lists after 410 Gone.",
            labels=("cache",),
        )
        errors = CounterMetricFamily(
            "migslice_extender_cache_errors",
            "List/watch errors (each backed off).",
            labels=("cache",),
        )
        dra = GaugeMetricFamily(
            "migslice_extender_dra_nodes",
            "Nodes whose GPUs NVIDIA's DRA driver publishes, by the state of their pool (ready; "
            "incomplete: slices still being published; unknown: a shape migslice does not "
            "read, the node's Warning Event says which).",
            labels=("state",),
        )
        for state, count in sorted(self._state.dra_nodes().items()):
            dra.add_metric((state,), count)
        for cache in self._state.caches:
            synced.add_metric((cache.name,), 1.0 if cache.synced else 0.0)
            age = cache.staleness_s()
            staleness.add_metric((cache.name,), -1.0 if age is None else age)
            blind_s = cache.blind_s()
            blind.add_metric((cache.name,), -1.0 if blind_s is None else blind_s)
            stats = getattr(cache, "stats", None)
            if stats is not None:
                relists.add_metric((cache.name,), stats.relists_gone)
                errors.add_metric((cache.name,), stats.errors)
        yield from (nodes, pods, synced, staleness, blind, relists, errors, dra)


class _RepartitionCollector(Collector):
    def __init__(self, state: ExtenderState) -> None:
        self._state = state

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        stats = self._state.repartition
        if stats is None:
            return
        yield _gauge("leader", "1 while this process holds the repartition Lease.", stats.is_leader)
        yield _gauge("dry_run", "1 when the controller only logs what it would do.", stats.dry_run)
        yield _counter(
            "plans_started", "Plans written (before being applied).", stats.plans_started
        )
        yield _counted(
            "plans_finished",
            "Plans ended, by result (succeeded, failed: a node failed or timed out, aborted).",
            label="result",
            counts=stats.plans_finished,
            keys=("succeeded", "failed", "aborted"),
        )
        yield _counter("plans_dry_run", "Distinct plans a dry run logged.", stats.plans_dry_run)
        yield _counted(
            "nodes",
            "Nodes of plans by outcome (success, failed, timeout, aborted, superseded).",
            label="outcome",
            counts=stats.node_outcomes,
            keys=("success", "failed", "timeout", "aborted", "superseded"),
        )
        yield _counted(
            "carve_nodes",
            "Nodes of carve plans by outcome (success, failed: the agent rolled back, timeout, "
            "aborted).",
            label="outcome",
            counts=stats.carve_outcomes,
            keys=("success", "failed", "timeout", "aborted"),
        )
        yield _gauge(
            "nodes_in_flight",
            "Nodes MIG Manager is re-partitioning, as the in-flight budget counts them "
            "(quarantined nodes left out).",
            stats.nodes_in_flight,
        )
        yield _gauge(
            "nodes_quarantined",
            "Nodes MIG Manager left short of success past the deadline "
            "(label migslice.io/repartition-quarantine).",
            stats.nodes_quarantined,
        )
        yield _counter("errors", "Failed rounds and failed label writes.", stats.errors)
        pending = GaugeMetricFamily(
            "migslice_extender_pending_pods",
            "GPU pods of migslice-scheduler kube-scheduler marked Unschedulable, per MIG "
            "profile they ask for as an extended resource or through a ResourceClaim "
            "(exported by the repartition leader only, from its last round).",
            labels=("profile",),
        )
        oldest = GaugeMetricFamily(
            "migslice_extender_pending_max_age_seconds",
            "The longest such pod has been Unschedulable, per MIG profile (leader only; the last "
            "round's wait plus the time since, so rounds that fail do not stop it).",
            labels=("profile",),
        )
        for profile, (count, age) in sorted(stats.pending.items()):
            pending.add_metric((profile,), count)
            oldest.add_metric((profile,), stats.aged(age, stats.pending_as_of))
        yield from (pending, oldest)
        ages = GaugeMetricFamily(
            _REPARTITION + "open_step_age_seconds",
            "Seconds since the oldest node still open of the plan (mig-manager) or the carve "
            "(carve) was labelled or asked, as of the scrape, by its writer's stamp (a restart "
            "or a new leader does not reset it).",
            labels=("mode",),
        )
        for mode, age in sorted(stats.open_ages.items()):
            ages.add_metric((mode,), stats.aged(age, stats.open_as_of))
        yield ages
        leader_ages = GaugeMetricFamily(
            _REPARTITION + "open_step_leader_age_seconds",
            "The same age as this leader times it, from when it first saw the node's stamp on "
            "its own clock (a new leader starts it at 0): what its deadline counts.",
            labels=("mode",),
        )
        for mode, age in sorted(stats.open_leader_ages.items()):
            leader_ages.add_metric((mode,), stats.aged(age, stats.open_as_of))
        yield leader_ages
        yield _gauge("deadline_seconds", "--repartition-deadline-s.", stats.deadline_s)
        yield _gauge(
            "strand_guard",
            "1 while the planners' stranding rule is on: the 1g/2g compute the pods on "
            "device-plugin nodes hold covers the room beside their 3g instances (leader only).",
            strand_guard(stats.stranding),
        )
        yield _gauge(
            "complete_rule",
            "1 while the carve planner's full-compute rule is on: the room beside the 3g "
            "instances the pods on device-plugin nodes hold is at least twice the memory their "
            "4g instances take (leader only).",
            complete_rule(stats.stranding),
        )
        mix = GaugeMetricFamily(
            _REPARTITION + "strand_mix_slices",
            "The held mix the planners' stranding rules read: 1g/2g compute slices (fill), "
            "memory slices left next to 3g instances (need) and memory slices 4g instances "
            "take (wide), on device-plugin nodes.",
            labels=("part",),
        )
        mix.add_metric(("fill",), stats.stranding.fill)
        mix.add_metric(("need",), stats.stranding.need)
        mix.add_metric(("wide",), stats.stranding.wide)
        yield mix
        yield _gauge(
            "mig_manager_config_mismatch",
            "1 while the GPU Operator's MIG Manager reads another mig-parted ConfigMap than the "
            "controller writes (ClusterPolicy spec.migManager.config.name); nothing is planned.",
            stats.mig_manager_config_mismatch,
        )


class _ReadyCollector(Collector):
    def __init__(self, state: ExtenderState, max_blind_s: float) -> None:
        self._state = state
        self._max_blind_s = max_blind_s

    def collect(self) -> Iterator[GaugeMetricFamily]:
        ready, _ = self._state.readiness(self._max_blind_s)
        yield GaugeMetricFamily(
            "migslice_extender_ready",
            "1 while every cache has listed and follows the API server (/readyz answers 200).",
            value=1.0 if ready else 0.0,
        )


class _PoolCollector(Collector):
    """Per pool (GPU product): free memory slices, all of them, and the fragmentation index
    (``migslice.scheduling.fragmentation.FreeSpace``, as ``migslice status`` shows it: on a
    node both device APIs serve, the instances ResourceClaims of the DRA driver hold count
    held, :mod:`migslice.inventory.beside`)."""

    def __init__(self, state: ExtenderState) -> None:
        self._state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        index = self._state.index
        pools: dict[str, FreeSpace] = {}
        for name in index.node_names():
            prepared = index.get(name)
            model = None if prepared is None else prepared.state.model
            if prepared is None or model is None:
                continue
            state = prepared.state
            pool = state.facts.product or model.key
            claimed: Collection[Place] = ()
            if state.dra_beside and state.gpus:
                dra = index.dra_inputs(name, ())
                if dra is not None:
                    claimed = beside_claims(state, dra.pool, dra.allocated).held
            space = node_free_space(state, claimed)
            pools[pool] = pools.get(pool, NO_FREE_SPACE) + space
        families = (
            GaugeMetricFamily(
                "migslice_extender_pool_fragmentation",
                "1 - (largest free region per GPU, summed) / free memory slices, per GPU "
                "product (docs/status.md); 0: free space in one piece per GPU.",
                labels=("pool",),
            ),
            GaugeMetricFamily(
                "migslice_extender_pool_free_slices",
                "Memory slices no pod holds, per GPU product (GPUs with a known layout).",
                labels=("pool",),
            ),
            GaugeMetricFamily(
                "migslice_extender_pool_slices",
                "Memory slices of the GPUs with a known layout, per GPU product.",
                labels=("pool",),
            ),
        )
        for pool, space in sorted(pools.items()):
            families[0].add_metric((pool,), space.index)
            families[1].add_metric((pool,), space.free_slices)
            families[2].add_metric((pool,), space.total_slices)
        yield from families


class _RetryCollector(Collector):
    """The pods touched for kube-scheduler to try again (:mod:`extender.retries`); nothing
    outside a cluster."""

    def __init__(self, state: ExtenderState) -> None:
        self._state = state

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        retries = self._state.retries
        if retries is None:
            return
        touched = CounterMetricFamily(
            "migslice_extender_pods_touched",
            "Pods touched (annotation migslice.io/retry) for kube-scheduler to try them again, "
            "by reason (hold-ended: the large-job reserve's hold ended; caches-ready: filtered "
            "while the caches were blind).",
            labels=("reason",),
        )
        for reason, count in sorted(retries.touched.items()):
            touched.add_metric((reason,), count)
        yield touched
        yield CounterMetricFamily(
            "migslice_extender_pod_touch_failures",
            "Touches of pods the API refused or did not answer (each tried again 5 s later, "
            "five times at most): check the extender's pods patch RBAC and the admission "
            "policy migslice-extender-pod-keys.",
            value=retries.failures,
        )
        yield GaugeMetricFamily(
            "migslice_extender_pods_to_touch",
            "Pods this worker turned away that it will touch once the reason ends.",
            value=retries.waiting(),
        )


class _SteerCollector(Collector):
    """The DRA steer's rules and writes (docs/dra.md, "The steer"); nothing without a steer."""

    def __init__(self, state: ExtenderState) -> None:
        self._state = state

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        stats = self._state.steer
        if stats is None:
            return
        yield GaugeMetricFamily(
            "migslice_dra_steer_rules",
            "DeviceTaintRules the steer keeps (one per steered device of a DynamicMIG node).",
            value=stats.rules,
        )
        writes = CounterMetricFamily(
            "migslice_dra_steer_writes",
            "DeviceTaintRules the steer created and deleted.",
            labels=("op",),
        )
        writes.add_metric(("create",), stats.created)
        writes.add_metric(("delete",), stats.deleted)
        yield writes
        yield CounterMetricFamily(
            "migslice_dra_steer_failures",
            "Steer rule writes and rounds that failed (retried in the next round).",
            value=stats.failures,
        )
        yield CounterMetricFamily(
            "migslice_dra_steer_lifts",
            "Times the steer of a node was lifted for a pending pod of several devices.",
            value=stats.lifted,
        )
        yield GaugeMetricFamily(
            "migslice_dra_steer_capped_nodes",
            "DynamicMIG nodes left to first fit because the rules reached --dra-steer-max-rules.",
            value=stats.capped_nodes,
        )
        guard = stats.guard
        yield GaugeMetricFamily(
            "migslice_dra_strand_guard",
            "1 while placements that strand compute on DynamicMIG GPUs are avoided (the 1g/2g "
            "compute held covers the room next to the 3g instances held; docs/dra.md).",
            value=float(guard.on),
        )
        mix = GaugeMetricFamily(
            "migslice_dra_strand_mix_slices",
            "The held mix the stranding rules read: 1g/2g compute slices (fill), memory "
            "slices left next to 3g instances (need) and memory slices 4g instances take (wide).",
            labels=("part",),
        )
        mix.add_metric(("fill",), guard.fill)
        mix.add_metric(("need",), guard.need)
        mix.add_metric(("wide",), guard.wide)
        yield mix
        yield CounterMetricFamily(
            "migslice_dra_strand_guard_flips",
            "Times the stranding rule turned on or off (each derives the DynamicMIG nodes again).",
            value=guard.flips,
        )
        yield GaugeMetricFamily(
            "migslice_dra_complete_rule",
            "1 while the steer prefers placements that keep every compute slice of a DynamicMIG "
            "GPU usable by 2g-and-larger instances (the room next to the 3g instances held is "
            "at least twice the memory the 4g instances held take; docs/dra.md).",
            value=float(guard.complete),
        )
        yield CounterMetricFamily(
            "migslice_dra_complete_rule_flips",
            "Times the full-compute rule turned on or off (each steers every node again).",
            value=guard.complete_flips,
        )
        reserve = stats.reserve
        yield GaugeMetricFamily(
            "migslice_dra_large_reserve_enabled",
            "1 while the large-job reserve is on (--dra-large-reserve; docs/dra.md).",
            value=float(reserve.enabled),
        )
        yield GaugeMetricFamily(
            "migslice_dra_idle_gpus",
            "DynamicMIG GPUs no claim holds a device of (the large-job reserve's count).",
            value=reserve.idle,
        )
        yield GaugeMetricFamily(
            "migslice_dra_free_gpus",
            "Free DynamicMIG capacity in whole GPUs (free compute slices over 7 per GPU).",
            value=reserve.free,
        )
        yield GaugeMetricFamily(
            "migslice_dra_large_share",
            "The 7g and multi-GPU pods' part of the GPU compute arriving lately (decaying, half "
            "life 1 h), as this replica's filter calls saw it; 0 while the reserve is off.",
            value=reserve.share,
        )
        yield GaugeMetricFamily(
            "migslice_dra_large_reserve_gpus",
            "Idle DynamicMIG GPUs the large-job reserve keeps whole: the share times the free "
            "capacity in whole GPUs; 0 while the reserve is off.",
            value=reserve.share * reserve.free if reserve.enabled else 0.0,
        )
        yield CounterMetricFamily(
            "migslice_dra_large_reserve_held_back",
            "Filter calls for a smaller pod that the reserve left without a node (it waits).",
            value=reserve.held_back,
        )
        yield CounterMetricFamily(
            "migslice_dra_large_reserve_released",
            "Filter calls for a smaller pod the reserve would have held back, let past because "
            "the pod had been unschedulable its longest hold (--dra-large-reserve-max-hold).",
            value=reserve.released,
        )
        yield GaugeMetricFamily(
            "migslice_dra_large_reserve_max_hold_seconds",
            "The longest the reserve holds a smaller pod back (--dra-large-reserve-max-hold).",
            value=reserve.max_hold_s,
        )


_REPARTITION = "migslice_repartition_"


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    """A repartition gauge without labels (a bool reads 1 or 0)."""
    return GaugeMetricFamily(_REPARTITION + name, documentation, value=float(value))


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(_REPARTITION + name, documentation, value=value)


def _counted(
    name: str, documentation: str, *, label: str, counts: Mapping[str, int], keys: Sequence[str]
) -> CounterMetricFamily:
    """A repartition counter with one sample per key (0 for keys not seen yet)."""
    family = CounterMetricFamily(_REPARTITION + name, documentation, labels=(label,))
    for key in keys:
        family.add_metric((key,), counts.get(key, 0))
    return family
