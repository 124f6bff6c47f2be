"""The steer loop: keeps migslice's DeviceTaintRules equal to the steer of every DynamicMIG node
(:mod:`migslice.scheduling.dra_steer`), so kube-scheduler's first fit lands on the placement
migslice prefers. A thread in the extender process.

Each round (every ``interval_s``, and 20 ms after any change): the nodes whose state changed
since the last round (all, the first time and every ``resync_s``) get their steer again from the
extender's index; every ``lift_interval_s`` the pending pods are listed, and a profile whose
steer keeps a pod of several devices (or of one pinned to a GPU) off a node where it would fit
is lifted there; so, on every node, are the profiles a pod's claims may take where migslice leaves
them to kube-scheduler (:func:`migslice.scheduling.demand.left_to_scheduler`) and it has found
no node for the pod. Then the rules that are no longer wanted are deleted first, and the missing
ones created (a window between the two has fewer taints, never more). A follower, a blind
cache or a failed write changes nothing else: a stale steer costs packing, never an allocation
(``NoSchedule`` keeps only new claims off; claims already allocated keep their devices).

Every replica also keeps the cluster's stranding rule (:class:`extender.state.StrandGuard`,
:func:`migslice.mig.stranding.strand_guard`) from the held mix of the nodes that changed: when
it flips, the DynamicMIG nodes are derived again under it (their scores) and steered again.

Ports: :class:`SteerApi` (``migslice.kube.device_taints.KubeSteerApi`` in a cluster).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from extender.state import ReserveStats, SteerStats, StrandGuard
from migslice.inventory import ClusterIndex, NodeState
from migslice.kube.informer import Backoff
from migslice.kube.transport import KubeError
from migslice.mig.stranding import NO_MIX, FillerMix, complete_rule, strand_guard
from migslice.objects.device_taint_rules import steer_rule, steer_rule_name
from migslice.objects.dra_pool import DraMode
from migslice.objects.pods import scheduling_gates, unschedulable_since
from migslice.scheduling import PreparedNode, demand_of
from migslice.scheduling.demand import left_to_scheduler, with_claims
from migslice.scheduling.dra_placement import dra_requests
from migslice.scheduling.dra_steer import Steer, lifted, steer_of, steered_profiles

log = logging.getLogger(__name__)

RawObject = dict[str, Any]


SETTLE_S = 0.02
"""How long a woken steer loop waits for the rest of one change's events."""
MAX_RULES = 4096
"""The most steer rules kept at once. kube-scheduler's tracker applies every DeviceTaintRule to
each ResourceSlice it syncs, so its work per slice grows with the rules in the cluster (at
20,000 rules and 8,000 slices its first sync after a restart takes minutes; docs/dra.md)."""
STEER_RETRY_MAX_S = 30.0
"""The longest a rule whose write failed waits to be tried again: its wait starts at the loop's
``interval_s`` and doubles with each failure in a row (an API server that is away or sheds load
is not sent every missing rule again at each round, which any change in the cluster runs)."""


class SteerApi(Protocol):
    def create_rule(self, body: Mapping[str, object]) -> bool: ...

    def delete_rule(self, name: str) -> bool: ...

    def list_pending_pods(self) -> list[RawObject]: ...


@dataclass(frozen=True, slots=True)
class Wanted:
    """One rule the steer wants: its pool, device and the profile it steers."""

    pool: str
    device: str
    profile: str


class SteerLoop:
    """See the module docstring. ``may_write``: whether this process writes (the leader, or
    every replica when none is elected: ``--dra-steer-lease`` elects one where several run);
    ``blindness``: the caches' problems (none: they follow the API server)."""

    def __init__(
        self,
        index: ClusterIndex[PreparedNode],
        api: SteerApi,
        *,
        may_write: Callable[[], bool] = lambda: True,
        blindness: Callable[[], list[str]] = list,
        interval_s: float = 0.5,
        lift_interval_s: float = 10.0,
        resync_s: float = 60.0,
        max_rules: int = MAX_RULES,
        clock: Callable[[], float] = time.monotonic,
        guard: StrandGuard | None = None,
        reserve: ReserveStats | None = None,
        steer: bool = True,
    ) -> None:
        self._index = index
        self._steering = steer
        self._api = api
        self._may_write = may_write
        self._blindness = blindness
        self._interval_s = interval_s
        self._lift_interval_s = lift_interval_s
        self._resync_s = resync_s
        self._max_rules = max_rules
        self._clock = clock
        self.stats = SteerStats(
            guard=StrandGuard() if guard is None else guard,
            reserve=ReserveStats() if reserve is None else reserve,
        )
        self.guard = self.stats.guard
        self._lock = threading.Lock()
        self._dirty: set[str] | None = None  # None: every node
        self._wanted: dict[str, dict[str, Wanted]] = {}
        self._held: dict[str, int] = {}
        self._lift: dict[str, frozenset[str]] = {}
        self._next_lift = 0.0
        self._next_resync = 0.0
        self._mix: dict[str, FillerMix] = {}
        self._mix_total = NO_MIX
        self._mix_dirty: set[str] | None = None
        self._kept: dict[str, _Kept] = {}
        """Per node, its last steer and the rules it wants, with what they were computed from
        (the node's derived state, by identity; the lift and both rules): a resync or a lift
        review over unchanged nodes reads them instead of steering every node again."""
        self._retry: dict[str, tuple[int, float]] = {}
        """Per rule whose last write failed: the failures in a row, and when it is tried again."""
        self._retry_backoff = Backoff(
            initial_s=interval_s, max_s=max(interval_s, STEER_RETRY_MAX_S)
        )
        self._capacity: dict[str, tuple[int, float]] = {}
        self._capacity_total: tuple[int, float] = (0, 0.0)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        index.subscribe(self._changed)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dra-steer", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _changed(self, name: str | None) -> None:
        with self._lock:
            if name is None:
                self._dirty = None
                self._mix_dirty = None
            else:
                if self._dirty is not None:
                    self._dirty.add(name)
                if self._mix_dirty is not None:
                    self._mix_dirty.add(name)
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval_s)
            # A change wakes the loop at once: the next claim on the node may come within
            # milliseconds, and until the rules follow it sees the steer of the state before.
            # A short settle gathers the events of one allocation into one round.
            self._stop.wait(SETTLE_S)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.round()
            except Exception as error:  # the loop must outlive any one failure
                self.stats.failures += 1
                log.warning("DRA steer round failed (%s); again in %.1fs", error, self._interval_s)
                self._changed(None)
                self._stop.wait(self._interval_s)

    def round(self) -> tuple[int, int]:
        """One round (see the module docstring); (rules deleted, rules created). With
        ``steer=False`` (``--no-dra-steer``) it wants no rule: the steer rules a steering
        extender left are deleted, and the devices they kept off are first fit's again."""
        if not self._steering:
            if not self._may_write() or self._blindness():
                return (0, 0)
            self._wanted, self._held = {}, {}
            return self._apply()
        self.update_guard()
        if not self._may_write():
            # A new leader starts from every node. Not through _changed: its wake would run
            # the next round 20 ms later, a follower's loop would spin (about 40 rounds a
            # second), and each would add up every node's held mix again.
            with self._lock:
                self._dirty = None
            self.stats.capped_nodes = self.stats.rules = 0  # the leader's, not a follower's
            return (0, 0)
        problems = self._blindness()
        if problems:
            log.info("DRA steer waits: %s", "; ".join(problems))
            return (0, 0)
        now = self._clock()
        if now >= self._next_resync:
            self._next_resync = now + self._resync_s
            self._changed(None)
        if now >= self._next_lift:
            self._next_lift = now + self._lift_interval_s
            self._review_lifts()
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        names = self._index.node_names() if dirty is None else sorted(dirty)
        if dirty is None:
            self._wanted, self._held = {}, {}
            known = set(names)
            self._kept = {n: kept for n, kept in self._kept.items() if n in known}
        for name in names:
            self._wanted.pop(name, None)
            self._held.pop(name, None)
            found = self._steer(name)
            if found:
                self._wanted[name] = found
        return self._apply()

    def update_guard(self) -> bool:
        """Add up the held mix of the nodes changed since the last call and set the
        stranding rule from it; when it flips, derive the DynamicMIG nodes again under it.
        Whether it flipped."""
        with self._lock:
            dirty, self._mix_dirty = self._mix_dirty, set()
        if dirty is None:
            self._mix, self._mix_total = {}, NO_MIX
            self._capacity, self._capacity_total = {}, (0, 0.0)
            dirty = set(self._index.node_names())
        total = self._mix_total
        for name in dirty:
            node = self._index.get(name)
            mix = NO_MIX if node is None else node.filler_mix
            total = total - self._mix.pop(name, NO_MIX) + mix
            if mix != NO_MIX:
                self._mix[name] = mix
        self._mix_total = total
        self._add_capacity(dirty)
        guard = self.guard
        guard.fill, guard.need, guard.wide = total.fill, total.need, total.wide
        complete = complete_rule(total, was_on=guard.complete)
        if complete != guard.complete:
            guard.complete = complete
            guard.complete_flips += 1
            _flipped(
                "full-compute rule",
                complete,
                f"room next to 3g held {total.need}, 4g held {total.wide}",
            )
            with self._lock:
                self._dirty = None  # every node is steered again under it
        on = strand_guard(total, was_on=guard.on)
        if on == guard.on:
            return False
        guard.on = on
        guard.flips += 1
        _flipped(
            "stranding rule",
            on,
            f"1g/2g compute held {total.fill}, room next to 3g held {total.need}",
        )
        dynamic = []
        for name in self._index.node_names():
            node = self._index.get(name)
            dra = None if node is None else node.state.dra
            if dra is not None and dra.mode is DraMode.DYNAMIC:
                dynamic.append(name)
        self._index.derive(self._index.refresh(dynamic))
        return True

    def _add_capacity(self, dirty: set[str]) -> None:
        """The large-job reserve's sums (:class:`ReserveStats`) after ``dirty`` changed; kept
        with the reserve off too (/metrics shows the idle GPUs it would keep from)."""
        idle, free = self._capacity_total
        for name in dirty:
            node = self._index.get(name)
            now = (0, 0.0) if node is None else node.dra_capacity
            was = self._capacity.pop(name, (0, 0.0))
            idle, free = idle - was[0] + now[0], free - was[1] + now[1]
            if now != (0, 0.0):
                self._capacity[name] = now
        self._capacity_total = (idle, free)
        self.stats.reserve.idle, self.stats.reserve.free = idle, max(0.0, free)

    def _steer(self, name: str) -> dict[str, Wanted]:
        state = self._dynamic_state(name)
        if state is None or state.facts.steer_off:
            self._kept.pop(name, None)
            return {}
        assert state.dra is not None
        self._held[name] = len(state.dra.held)
        return self._steer_of(name, state, self._lift.get(name, frozenset()))[1]

    def _dynamic_state(self, name: str) -> NodeState | None:
        """The node's state as the index derived it, when it is a DynamicMIG node whose
        claims are known."""
        node = self._index.get(name)
        state = None if node is None else node.state
        view = None if state is None else state.dra
        if view is None or view.use is None or view.mode is not DraMode.DYNAMIC:
            return None
        return state

    def _steer_of(
        self, name: str, state: NodeState, lift: frozenset[str]
    ) -> tuple[Steer, dict[str, Wanted]]:
        """The node's steer and the rules it wants, computed again only when the node's
        state, its lift or a rule changed."""
        asked = (lift, self.guard.on, self.guard.complete)
        kept = self._kept.get(name)
        if kept is not None and kept.state is state and kept.asked == asked:
            return kept.steer, kept.wanted
        view = state.dra
        assert view is not None and view.use is not None
        pool = view.pool
        steer = steer_of(
            pool, view.use, lift=lift, strand_guard=self.guard.on, complete=self.guard.complete
        )
        wanted: dict[str, Wanted] = {}
        if steer.taints:
            by_device = {
                d.name(gpu.minor): d.profile for gpu in pool.gpus for d in gpu.devices if d.profile
            }
            wanted = {
                steer_rule_name(pool.node, device): Wanted(pool.node, device, by_device[device])
                for device in steer.taints
            }
        self._kept[name] = _Kept(state, asked, steer, wanted)
        return steer, wanted

    def _apply(self) -> tuple[int, int]:
        # Nodes in use first (the most held first), then idle ones by name, up to the cap.
        order = sorted(self._wanted, key=lambda n: (-self._held.get(n, 0), n))
        wanted: dict[str, Wanted] = {}
        capped = 0
        for name in order:
            rules = self._wanted[name]
            if len(wanted) + len(rules) > self._max_rules:
                capped += 1
                continue
            wanted.update(rules)
        if capped != self.stats.capped_nodes and capped:
            log.warning(
                "DRA steer: %d nodes left to first fit, over --dra-steer-max-rules %d",
                capped,
                self._max_rules,
            )
        self.stats.capped_nodes = capped
        present = self._index.steer_rules()
        # A rule under a steer name that is not the steer's own as written (its effect, key or
        # device edited by hand) is replaced: deleted, then created as the steer writes it. An
        # exact rule selects the device its name says, so it is the one wanted of that name.
        edited = set(self._index.edited_steer_rules() & wanted.keys())
        deletes = set(present) - set(wanted) | edited
        writes = deletes | set(wanted) - set(present)
        # a rule whose write failed waits its backoff, whatever woke the loop
        now = self._clock()
        self._retry = {rule: due for rule, due in self._retry.items() if rule in writes}
        deleted = created = failed = 0
        last = ""
        for rule in sorted(deletes):
            if not self._may_write():
                return self._lost_lease(deleted, created, failed)
            if not self._due(rule, now):
                edited.discard(rule)  # still there: not created again this round
                continue
            try:
                self._api.delete_rule(rule)
                deleted += 1
                self._retry.pop(rule, None)
            except KubeError as error:
                failed, last = failed + 1, f"delete {rule}: {error}"
                self._failed(rule, now)
                edited.discard(rule)  # still there: not created again this round
        for rule in sorted(set(wanted) - (set(present) - edited)):
            if not self._due(rule, now):
                continue
            if not self._may_write():
                return self._lost_lease(deleted, created, failed)
            w = wanted[rule]
            try:
                if self._api.create_rule(steer_rule(w.pool, w.device, w.profile)):
                    created += 1
                self._retry.pop(rule, None)
            except KubeError as error:
                failed, last = failed + 1, f"create {rule}: {error}"
                self._failed(rule, now)
        if failed:  # each again after its backoff, not at once: a write refused for good
            # (RBAC, an admission policy) or an API server that sheds load must not spin
            # the loop nor be sent every rule at each round
            self.stats.failures += failed
            log.warning(
                "DRA steer: %d rule writes failed, again in %.1fs (%s)",
                failed,
                min(at for _, at in self._retry.values()) - now,
                last,
            )
        self.stats.rules = len(wanted)
        self.stats.created += created
        self.stats.deleted += deleted
        if deleted or created:
            log.info(
                "DRA steer: %d rules deleted, %d created (%d wanted)",
                deleted,
                created,
                len(wanted),
            )
        return (deleted, created)

    def _lost_lease(self, deleted: int, created: int, failed: int) -> tuple[int, int]:
        """Stop a round whose writer lost the Lease between two writes (a round may write
        thousands of rules, another replica writes from now on); the next round it leads
        starts from every node."""
        log.info("DRA steer: Lease lost during a round; %d deleted, %d created", deleted, created)
        self.stats.created += created
        self.stats.deleted += deleted
        self.stats.failures += failed
        with self._lock:
            self._dirty = None
        return (deleted, created)

    def _due(self, rule: str, now: float) -> bool:
        """Whether ``rule`` may be written now: its last write did not fail, or its backoff
        has passed."""
        retry = self._retry.get(rule)
        return retry is None or retry[1] <= now

    def _failed(self, rule: str, now: float) -> None:
        failures = self._retry.get(rule, (0, now))[0] + 1
        self._retry[rule] = (failures, now + self._retry_backoff.delay_s(failures))

    def _review_lifts(self) -> None:
        demands = []
        left: set[str] | None = set()  # None: every profile
        for raw in self._api.list_pending_pods():
            if scheduling_gates(raw):
                continue  # not tried by kube-scheduler until its gates go (Kueue's may stay long)
            # Claims or extended resources alike: a pod asking nvidia.com/mig-<profile> is
            # served on a DRA node through its class's extendedResourceName (KEP-5004).
            demand = with_claims(demand_of(raw), raw, self._index.claim, self._index.classes)
            several = sum(unit.count for unit in demand.units) >= 2
            if several or any(unit.select is not None for unit in demand.units):
                demands.append(demand)
            elif left is not None and unschedulable_since(raw) is not None:
                # Claims left to kube-scheduler (not read, not predicted, or tolerating taints):
                # whether the steer keeps them off cannot be told, so once kube-scheduler has
                # found no node for the pod, the profiles they may take are not steered.
                asked = left_to_scheduler(raw, self._index.claim, self._index.classes)
                left = None if asked is None else left | asked
        lift: dict[str, frozenset[str]] = {}
        if demands or left is None or left:
            for name in self._index.node_names():
                state = self._dynamic_state(name)
                if state is None:
                    continue
                assert state.dra is not None and state.dra.use is not None
                requests = [r for d in demands if (r := dra_requests(state, d.units))]
                if not requests and left == set():
                    continue
                steer, _ = self._steer_of(name, state, frozenset())
                found = lifted(state.dra.pool, state.dra.use, steer, requests)
                steered = steered_profiles(state.dra.pool, steer)
                found |= steered if left is None else steered & left
                if found:
                    lift[name] = found
        changed = set(lift) ^ set(self._lift) | {n for n in lift if self._lift.get(n) != lift[n]}
        if changed:
            names = ", ".join(sorted(changed))
            log.info("DRA steer lifted on %s for pods of several devices or pinned to a GPU", names)
            self.stats.lifted += len(changed)
        self._lift = lift
        with self._lock:
            if self._dirty is not None:
                self._dirty |= changed


@dataclass(frozen=True, slots=True)
class _Kept:
    """A node's steer and wanted rules, and what they were computed from."""

    state: NodeState
    asked: tuple[frozenset[str], bool, bool]
    steer: Steer
    wanted: dict[str, Wanted]


def _flipped(rule: str, on: bool, read: str) -> None:
    log.info("DRA steer: %s %s (%s)", rule, "on" if on else "off", read)
