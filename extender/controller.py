"""The repartition controller loop: a thread in the extender process, active only as leader.

Each round (every ``interval_s``): renew the Lease (followers stop here; a leader's every
write asks again, and a round ends at its first write past the renew deadline:
:mod:`extender.leading`), read the mig-parted
ConfigMap and the plan record in its annotation, list the pending pods, take node states
from the extender's cache (nodes of the plan in progress are read fresh from the API server,
so the re-check before applying and the outcome after it never act on a stale cache), and
let :func:`migslice.repartition.decide` say the next step. A step is performed in order:
record (with the merged mig-parted file for ``APPLY``, in one write guarded by
resourceVersion), node labels, Events. Steps follow each other in the same round until one
says wait, or until a node write of one is refused (decided again next round). In dry-run
mode the first non-wait step is logged, and nothing is written.

Ports: :class:`RepartitionApi` (``migslice.kube.KubeRepartitionApi`` in a cluster) and
:class:`Elector` (``migslice.kube.LeaderElector``).
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from extender.carve_requests import shows, write_carve_requests
from extender.leading import LeaderWrites, NotLeadingError
from extender.mig_manager import MigManagerGuard
from extender.pending_stats import open_ages, pending_by_profile
from extender.settings import ExtenderSettings, controller_settings
from extender.state import RepartitionStats
from migslice.inventory import ClusterIndex, MigConfigs, NodeState, resolve_node
from migslice.kube.informer import collection_paused
from migslice.kube.transport import ApiError
from migslice.mig.migparted import render_mig_parted
from migslice.names import (
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    MIG_STATE_PENDING,
    MIG_TRANSITION_STATES,
    TOUCH_ANNOTATION,
)
from migslice.objects import node_facts_from_raw, pod_facts_from_raw
from migslice.objects.json import JsonObject
from migslice.repartition import (
    FAILED,
    REASON_FAILED,
    STEPS_PER_ROUND,
    TIMEOUT,
    CarveMemo,
    CarveWrite,
    ControllerSettings,
    MigConfigFile,
    PendingPod,
    RepartitionRecord,
    SetLabel,
    Step,
    StepKind,
    apply_step,
    decide,
    held_mix,
    pending_pods,
    read_config_map,
    render_record,
)
from migslice.repartition.carve.branch import stray_requests
from migslice.repartition.migmanager.closing import roll_back
from migslice.repartition.modes import dra_exclusion
from migslice.repartition.record import still_served
from migslice.repartition.record.local_time import LocalTimes
from migslice.scheduling import PreparedNode
from migslice.scheduling.demand import PodDemand, demand_of, with_claims

log = logging.getLogger(__name__)

RawObject = dict[str, Any]


class RepartitionApi(Protocol):
    def read_config_map(self) -> RawObject | None: ...

    def update_config_map(
        self, mutate: Callable[[RawObject], RawObject | None]
    ) -> RawObject | None: ...

    def list_pending_pods(self, scheduler_name: str) -> list[RawObject]: ...

    def read_node(self, name: str) -> RawObject | None: ...

    def list_pods_on_node(self, name: str) -> list[RawObject]: ...

    def set_node_labels(self, name: str, labels: Mapping[str, str | None]) -> None: ...

    def set_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> None: ...

    def record_event(
        self, node: str, reason: str, message: str, *, warning: bool = False
    ) -> None: ...

    def touch_pod(self, pod_key: str, annotations: Mapping[str, str], uid: str = "") -> bool: ...

    def mark_quarantine(self, node: str, note: str | None) -> None: ...


class Elector(Protocol):
    def try_acquire_or_renew(self) -> bool: ...

    @property
    def is_leader(self) -> bool:
        """Whether this replica leads now (false from its renew deadline on)."""
        ...

    def release(self) -> None: ...


class RepartitionController:
    """Rounds of observe-decide-act; :meth:`run_once` is one round (tests call it directly)."""

    def __init__(
        self,
        api: RepartitionApi,
        elector: Elector,
        index: ClusterIndex[PreparedNode],
        settings: ExtenderSettings,
        stats: RepartitionStats | None = None,
        clock: Callable[[], float] = time.time,
        guard: MigManagerGuard | None = None,
        blindness: Callable[[], list[str]] = list,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = LeaderWrites(api, lambda: elector.is_leader)
        self._guard = guard
        self._elector = elector
        self._index = index
        self._settings = settings.repartition
        self._key = settings.mig_config_key
        self._decide_settings = controller_settings(settings.repartition)
        self.stats = stats or RepartitionStats(dry_run=settings.repartition.dry_run)
        self.stats.clock = clock  # the waits it exports grow on the same clock
        self._clock = clock
        self._monotonic = monotonic
        self._local_times = LocalTimes()  # open plans timed on this leader's own clock
        self._blindness = blindness
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_said = ""
        # (pod, config) of the record's served pods this replica has tried to touch while it
        # leads: one try each; the record says which pods, so any leader touches them
        self._touched: set[tuple[str, str]] = set()
        # Nodes whose refused roll back this replica has reported (the record keeps the
        # roll back itself, for whichever replica leads): one Warning each, not one a round.
        self._refused: set[str] = set()
        self._carve_memo = CarveMemo()

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="repartition", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._elector.release()

    def is_leader(self) -> bool:
        """Whether this replica leads now: what the steer and the DRA node warnings ask before
        they write (the stats say it as of the last round)."""
        return self._elector.is_leader

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as error:  # the loop must outlive any one failure
                self.stats.errors += 1
                log.warning(
                    "repartition round failed (%s); retrying in %.0fs",
                    error,
                    self._settings.interval_s,
                    exc_info=not isinstance(error, ApiError),  # a traceback: our own error
                )
            self._stop.wait(self._settings.interval_s)

    # -- one round ---------------------------------------------------------------------------------

    def _demand(self, raw_pod: JsonObject) -> PodDemand:
        """The pod's extended resources and its ResourceClaims' asks, from the caches."""
        return with_claims(demand_of(raw_pod), raw_pod, self._index.claim, self._index.classes)

    def run_once(self) -> list[Step]:
        """One round; the steps performed (or, in dry-run mode, the one that would be)."""
        leader = self._elector.try_acquire_or_renew()
        self.stats.is_leader = leader
        self.stats.deadline_s = self._settings.deadline_s
        if not leader:
            self.stats.follower()
            self._touched.clear()
            return []
        performed: list[Step] = []
        try:
            self._lead(performed)
        except NotLeadingError as error:
            self.stats.is_leader = False
            self.stats.follower()
            self._touched.clear()
            log.warning(
                "repartition round stopped: %s; the plan record keeps its step for whichever "
                "replica leads",
                error,
            )
        return performed

    def _lead(self, performed: list[Step]) -> None:
        """The leader's round; the steps performed are added to ``performed``."""
        blind = self._blindness()
        if blind:
            self._say(f"not deciding while the caches are blind: {'; '.join(blind)}")
            return
        now = self._clock()
        raw_pods = self._api.list_pending_pods(self._settings.scheduler_name)
        when = datetime.datetime.fromtimestamp(now, datetime.UTC)
        pending = pending_pods(raw_pods, when, self._settings.scheduler_name)
        # the gauges count pods asking through ResourceClaims too (no planner serves them:
        # neither path re-shapes a DRA node's GPUs)
        waiting = pending_pods(raw_pods, when, self._settings.scheduler_name, read=self._demand)
        self.stats.pending, self.stats.pending_as_of = pending_by_profile(waiting), now
        file = read_config_map(self._api.read_config_map(), self._key)
        if file.record is not None:
            self._touch_served(file.record, raw_pods, now)
        if self._guard is not None and not self._guard.allows_planning():
            return  # MIG Manager would not apply what we write (extender.mig_manager)
        if file.record is None:
            self._say(
                f"plan record unreadable ({file.problem}); nothing is re-partitioned until it "
                f"is read: {file.record_fix}",
                logging.WARNING,
            )
            return
        if file.problem:
            self._say(f"mig-parted ConfigMap: {file.problem}; MIG Manager nodes wait")
        self._retry_restores(file)
        self._withdraw_strays(file.record)
        for _ in range(STEPS_PER_ROUND):
            record = file.record
            assert record is not None
            nodes = self._node_states(record, file.configs)
            self.stats.stranding = held_mix(nodes)
            # Deadlines and waits of open plans run on this leader's clock, from when it
            # first saw each stamp (migslice.repartition.record.local_time); what is written
            # back keeps the stamps as their writers wrote them.
            local = self._local_times.localize(record, now, self._monotonic())
            step = decide_paused(
                local,
                nodes,
                pending,
                file_configs=file.names,
                now=now,
                settings=self._decide_settings,
                carve_memo=self._carve_memo,
            )
            self._count_in_flight(step.record, nodes)
            # the stuck alert reads both: the waits as this leader's deadline counts them,
            # and the writers' stamps, so that a restart or a new leader does not make a node
            # reconfiguring for an hour read as just begun
            self.stats.open_leader_ages = open_ages(step.record, now)
            step = replace(step, record=self._local_times.restore(step.record, record))
            self.stats.open_ages, self.stats.open_as_of = open_ages(step.record, now), now
            if step.kind == StepKind.WAIT:
                self._mark(step)
                self._say(step.reason + about(step), level=logging.DEBUG)
                break
            if self._settings.dry_run:
                self._dry_run(step)
                performed.append(step)
                break
            stored, refused = self._perform(step, file)
            if stored is None:
                break
            performed.append(step)
            if refused:
                # a node write the API server refused is decided again next round, not in
                # this one: deciding at once would write the record and try it again, up to
                # STEPS_PER_ROUND times a round
                break
            file = read_config_map(stored, self._key)
            if file.record is None:
                break

    def _node_states(self, record: RepartitionRecord, configs: MigConfigs) -> list[NodeState]:
        states: dict[str, NodeState] = {}
        for name in self._index.node_names():
            # the index's derived state, kept until the node changes: the carve memo knows
            # an unchanged node by that object
            node = self._index.get(name)
            if node is not None:
                states[name] = node.state
        open_nodes = [s.node for s in record.plan.open_nodes] if record.plan else []
        open_nodes += [s.node for s in record.carve.open_nodes] if record.carve else []
        for name in open_nodes:
            fresh = self._fresh_state(name, configs)
            if fresh is None:
                states.pop(name, None)
            else:
                states[name] = fresh
        return [states[name] for name in sorted(states)]

    def _fresh_state(self, name: str, configs: MigConfigs) -> NodeState | None:
        raw = self._api.read_node(name)
        if raw is None:
            return None
        found = [pod_facts_from_raw(p) for p in self._api.list_pods_on_node(name)]
        pods = [p for p in found if p is not None]
        # its ResourceSlices and claims from the cache: a node that became a DRA node since it
        # was planned is read as one (never labelled nor carved)
        dra = self._index.dra_inputs(name, pods)
        return resolve_node(node_facts_from_raw(raw), pods, configs, dra=dra)

    def _perform(self, step: Step, file: MigConfigFile) -> tuple[RawObject | None, bool]:
        """Write the step's record, then its node writes and Events: the stored ConfigMap
        (None when not written), and whether a node write was refused."""
        record_text = render_record(step.record)
        removed: list[str] = []

        def mutate(current: RawObject) -> RawObject | None:
            update = apply_step(
                current,
                key=self._key,
                expected_record=file.record_text,
                record_text=record_text,
                configs=step.configs,  # START writes its configs, APPLY again (harmless)
                referenced=step.referenced,
            )
            if update.raw is None:
                log.info("%s; deciding again next round", update.problem)
                return None
            removed[:] = update.removed
            return update.raw

        stored = self._api.update_config_map(mutate)
        if stored is None:
            return None, False
        log.info("repartition %s: %s%s", step.kind, step.reason, about(step))
        if removed:
            log.info("mig-parted configs no node uses any more removed: %s", ", ".join(removed))
        refused = False
        for label in step.labels:
            refused |= not self._label(label)
        for clear in step.clears:
            try:
                self._api.set_node_labels(clear.node, {MIG_CONFIG_STATE_LABEL: None})
                log.warning(
                    "node=%s %s removed: its %s label is gone, no MIG Manager run would end it",
                    clear.node,
                    MIG_CONFIG_STATE_LABEL,
                    MIG_CONFIG_LABEL,
                )
            except NotLeadingError:
                raise
            except Exception as error:
                self.stats.errors += 1
                refused = True
                log.warning(
                    "node=%s %s not removed (%s); remove it by hand: kubectl label node %s %s-",
                    clear.node,
                    MIG_CONFIG_STATE_LABEL,
                    error,
                    clear.node,
                    MIG_CONFIG_STATE_LABEL,
                )
        if not write_carve_requests(self._api, step.carve_writes, step.reason):
            self.stats.errors += 1
            refused = True
        self._mark(step)
        for event in step.events:
            self._api.record_event(event.node, event.reason, event.message, warning=event.warning)
        self._count(step)
        return stored, refused

    def _label(self, label: SetLabel) -> bool:
        """Write one ``nvidia.com/mig.config`` label; False when the API server refused it. A
        roll back it refuses is said once; the record (``restores``, written before the
        patch) keeps it, and each round tries it again while the node still has the plan's
        config."""
        labels: dict[str, str | None] = {MIG_CONFIG_LABEL: label.config_name}
        if label.mark_pending:
            labels[MIG_CONFIG_STATE_LABEL] = MIG_STATE_PENDING
        try:
            self._api.set_node_labels(label.node, labels)
            log.info("node=%s labelled %s=%s", label.node, MIG_CONFIG_LABEL, label.config_name)
            self._refused.discard(label.node)
            return True
        except NotLeadingError:
            raise
        except Exception as error:
            self.stats.errors += 1
            if label.replaces is None:
                log.warning(
                    "node=%s not labelled (%s); next round decides again", label.node, error
                )
                return False
            first = label.node not in self._refused
            self._refused.add(label.node)
            said = (
                f"label {MIG_CONFIG_LABEL} not set back from {label.replaces} to "
                f"{label.config_name} ({error}); tried again every round (the repartition "
                f"record keeps it), or by hand: kubectl label node {label.node} "
                f"{MIG_CONFIG_LABEL}={label.config_name} --overwrite"
            )
            log.warning("node=%s %s", label.node, said)
            if first:
                self._api.record_event(label.node, REASON_FAILED, said, warning=True)
            return False

    def _retry_restores(self, file: MigConfigFile) -> None:
        """Roll backs the record still holds, tried again while the cached node's label is
        still the plan's config, the file still has the config to set back and the node is
        no DRA node (someone else's label since wins; the decision drops those, a node gone
        and one that turned DRA from the record)."""
        record = file.record
        for restore in record.restores if record is not None else ():
            facts = self._index.node_facts(restore.node)
            if facts is None or facts.mig_config != restore.replaces:
                self._refused.discard(restore.node)
                continue
            state = self._index.state_of(restore.node)
            if state is not None and dra_exclusion(state) is not None:
                continue  # NVIDIA's DRA driver owns it now: the round drops the roll back
            if file.names is not None and restore.config_name not in file.names:
                continue
            self._label(roll_back(restore.node, restore.config_name, restore.replaces, facts))

    def _withdraw_strays(self, record: RepartitionRecord) -> None:
        """Carve requests the cached nodes carry that the record holds no asked, open step of
        (their removal refused, or a restart before it), withdrawn again each round (none in
        dry-run mode: it writes nothing)."""
        if self._settings.dry_run:
            return
        cached = (self._index.node_facts(name) for name in self._index.node_names())
        strays = stray_requests(record, (facts for facts in cached if facts is not None))
        if strays:
            writes = [CarveWrite(node, None) for node in strays]
            if not write_carve_requests(self._api, writes, "(the plan record holds it no more)"):
                self.stats.errors += 1

    def _mark(self, step: Step) -> None:
        """Set or remove quarantine labels and annotations; a failure is decided again."""
        for mark in step.marks:
            try:
                self._api.mark_quarantine(mark.node, mark.note)
                what = "marked quarantined" if mark.note is not None else "quarantine mark removed"
                log.log(
                    logging.WARNING if mark.note else logging.INFO, "node=%s %s", mark.node, what
                )
            except NotLeadingError:
                raise
            except Exception as error:
                self.stats.errors += 1
                log.warning(
                    "node=%s quarantine mark not written (%s); next round again", mark.node, error
                )

    def _count(self, step: Step) -> None:
        """Count the step's outcomes."""
        stats = self.stats
        if step.kind == StepKind.START:
            stats.plans_started += 1
        for outcome in step.outcomes:
            stats.node_outcomes[outcome.outcome] = stats.node_outcomes.get(outcome.outcome, 0) + 1
            level = logging.WARNING if outcome.outcome in (FAILED, TIMEOUT) else logging.INFO
            log.log(
                level, "node=%s re-partition %s: %s", outcome.node, outcome.outcome, outcome.detail
            )
        for carved in step.carve_outcomes:
            name = str(carved.outcome)
            stats.carve_outcomes[name] = stats.carve_outcomes.get(name, 0) + 1
            level = logging.WARNING if carved.outcome in (FAILED, TIMEOUT) else logging.INFO
            log.log(level, "node=%s carve %s: %s", carved.node, name, carved.detail)
        if step.result is not None:
            result = str(step.result)
            stats.plans_finished[result] = stats.plans_finished.get(result, 0) + 1

    def _touch_served(
        self, record: RepartitionRecord, raw_pods: Sequence[RawObject], now: float
    ) -> None:
        """Touch the pods the record's recent successes served (``served``, written with the
        success, so whichever replica leads does it) once this extender's cache shows the node
        in its new config: kube-scheduler retries a pod the extender rejected only on a later
        cluster event, and the pod's own update is one that comes at the right time.

        Only pods still pending (``raw_pods``, by uid) are touched, never a bound one; a pod
        whose annotation already names the config was touched (by this replica or an earlier
        leader) and is left alone; each other is tried once while this replica leads."""
        pending = {_pod_key(pod): pod for pod in raw_pods}
        due: set[tuple[str, str]] = set()
        for served in still_served(record.served, now):
            facts = self._index.node_facts(served.node)
            if facts is None or not shows(facts, served.config):
                continue
            for pod in served.pods:
                raw = pending.get(pod)
                if raw is None or _annotation(raw, TOUCH_ANNOTATION) == served.config:
                    continue  # bound, gone or already touched
                due.add((pod, served.config))
                if (pod, served.config) in self._touched:
                    continue
                self._touched.add((pod, served.config))
                uid = str((raw.get("metadata") or {}).get("uid") or "")
                try:
                    if self._api.touch_pod(pod, {TOUCH_ANNOTATION: served.config}, uid=uid):
                        log.info(
                            "pod=%s touched after node=%s became %s",
                            pod,
                            served.node,
                            served.config,
                        )
                except NotLeadingError:
                    raise
                except Exception as error:
                    self.stats.errors += 1
                    log.warning(
                        "pod=%s not touched (%s); kube-scheduler retries it later", pod, error
                    )
        self._touched &= due  # what is no longer due is forgotten: bounded by the record

    def _count_in_flight(self, record: RepartitionRecord, nodes: Sequence[NodeState]) -> None:
        """In flight: the plan's labelled open nodes, any other node MIG Manager works on and
        the carve plan's asked nodes, but not the quarantined ones (what the budget counts)."""
        plan, carve = record.plan, record.carve
        quarantined = {q.node for q in record.quarantine}
        busy = {
            n.name
            for n in nodes
            if n.facts.mig_config_state in MIG_TRANSITION_STATES and n.name not in quarantined
        }
        if plan is not None:
            busy |= {s.node for s in plan.open_nodes if s.applied_at is not None}
        if carve is not None and carve.applied_at is not None:
            busy |= {s.node for s in carve.open_nodes}
        self.stats.nodes_in_flight = len(busy)
        self.stats.nodes_quarantined = len(quarantined)

    def _dry_run(self, step: Step) -> None:
        if step.kind == StepKind.START and step.carve_plan is not None:
            said = f"dry run: would carve ({step.reason}){about(step)}"
            if said != self._last_said:
                self.stats.plans_dry_run += 1
                log.info("%s", said)
                self._last_said = said
            return
        if step.kind == StepKind.START and step.plan is not None:
            configs = {c.config_name: c.entries for c in step.plan.changes}
            labels = ", ".join(
                f"{c.node} {MIG_CONFIG_LABEL}={c.config_name}" for c in step.plan.changes
            )
            said = f"dry run: would re-partition ({step.reason}); labels {labels}{about(step)}"
            if said != self._last_said:
                self.stats.plans_dry_run += 1
                log.info("%s; mig-parted:\n%s", said, render_mig_parted(configs))
                self._last_said = said
            return
        self._say(f"dry run: would {step.kind}: {step.reason}{about(step)}")

    def _say(self, message: str, level: int = logging.INFO) -> None:
        """Log a round's conclusion once, not every round while it stays the same."""
        self.stats.last_round = message
        if message != self._last_said:
            log.log(level, "%s", message)
            self._last_said = message


def about(step: Step) -> str:
    """`` (node=... pod=...)``: every node a step changes or waits on and every pod it serves,
    as a log line names them (docs/operate.md, "Logs"); "" when it is about none."""
    nodes: list[str] = [label.node for label in step.labels]
    nodes += [clear.node for clear in step.clears]
    nodes += [event.node for event in step.events]
    nodes += [mark.node for mark in step.marks]
    nodes += [write.node for write in step.carve_writes]
    pods: list[str] = []
    changes: list[Any] = [
        *(step.plan.changes if step.plan else ()),
        *(step.carve_plan.changes if step.carve_plan else ()),
    ]
    for change in changes:
        nodes.append(change.node)
        pods += change.serves
    finished: list[Any] = [*step.outcomes, *step.carve_outcomes]
    for done in finished:
        nodes.append(done.node)
        pods += done.serves
    if not nodes:  # a step that waits: on the nodes still open
        record = step.record
        open_steps: list[Any] = [
            *(record.plan.open_nodes if record.plan else ()),
            *(record.carve.open_nodes if record.carve else ()),
        ]
        for open_step in open_steps:
            nodes.append(open_step.node)
            pods += open_step.serves
    named = [f"node={n}" for n in dict.fromkeys(nodes)] + [f"pod={p}" for p in dict.fromkeys(pods)]
    return f" ({' '.join(named)})" if named else ""


def _pod_key(pod: RawObject) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace') or ''}/{metadata.get('name') or ''}"


def _annotation(pod: RawObject, key: str) -> str | None:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(key)
    return value if isinstance(value, str) else None


def decide_paused(
    record: RepartitionRecord,
    nodes: Sequence[NodeState],
    pending: Sequence[PendingPod],
    *,
    file_configs: Collection[str] | None,
    now: float,
    settings: ControllerSettings,
    carve_memo: CarveMemo | None = None,
) -> Step:
    """:func:`decide` with Python's cyclic collector held off while it runs. A carve-mode
    decision over thousands of nodes makes hundreds of thousands of short-lived objects that
    reference counting frees; each time they crossed the collector's thresholds it walked the
    whole heap, the index of every node included (at 5,000 nodes 0.45 s a walk, one or two a
    decision: bench/latency plan_scale), stalling the worker's requests meanwhile."""
    with collection_paused():
        return decide(
            record,
            nodes,
            pending,
            file_configs=file_configs,
            now=now,
            settings=settings,
            carve_memo=carve_memo,
        )
