"""The node agent's carve pass: do what ``migslice.io/carve`` asks, through NVML, and never
touch an instance in use. Loaded only with ``--carve`` on a node that is asked to carve (or
has a carve of its own to finish); the read-only agent never imports it.

One pass (:meth:`Carver.run_once`) reads the Node and acts on its two carve annotations:

* a request for a plan the journal (``migslice.io/carve-state``) does not know: the journal
  is written ``pending`` with the request's steps (before any change), then **forward**;
* a journal ``pending`` whose request still names its plan: **forward** (a restart resumes);
* a journal ``pending`` whose request is gone or names another plan (the controller gave up),
  or ``rolling-back``: **roll back**.

The journal this process last wrote is kept in memory while its carve is open: a Node that
lost it (deleted and made again mid-carve) or whose copy was edited or spoiled gets it written
back (a ``MigCarveJournal`` Warning); a closed one is written back too when the Node lost it
and the controller asks its plan again to resume. An unreadable journal no process remembers
is taken, with a request, as that request's with changes perhaps made (resumed); without one
it is said. So is a request marked ``resume`` that no journal here names (the Node made again
and this agent restarted since it began: NVML may hold part of it, which a plain request
would be refused for). A request this agent cannot read (another release's version, an edit
by hand) is said with a ``MigCarveRequest`` Warning and carves nothing; a carve of its own
still open is rolled back.

Forward, each step re-reading NVML first, so that a pass killed between any two NVML calls
is resumed by the next: check every instance to destroy is still idle, then per GPU destroy
each (checked again right before: a container may have started) and create each new one
(GPU instance at its placement, then its full compute instance), verify NVML's layout is the
plan's, restart the device plugin and wait until the node's allocatable shows the new
devices, publish ``migslice.io/gpu-layout``, journal ``success``.

Roll back (journal ``rolling-back`` first): destroy the instances the plan creates that exist
and may be destroyed, create again the ones it destroyed that are gone (same profile and
placement; a new UUID), restart the device plugin, publish, journal ``failed`` with the
reason, and a ``MigCarveFailed`` Warning Event.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Protocol

from agent.carve.checks import (
    CarveAbortError,
    MigReadError,
    MigWriteError,
    held_counts,
    instances,
    mismatch,
    unadvertised,
    why_not_destroy,
)
from agent.readings import GpuReading
from migslice.kube.transport import ApiError
from migslice.names import (
    CARVE_ANNOTATION,
    CARVE_STATE_ANNOTATION,
    MIG_TRANSITION_STATES,
    MODE_MIG_MANAGER,
)
from migslice.objects.carve_handshake import (
    CarveGpu,
    CarvePhase,
    CarveRequest,
    CarveStatus,
    Doomed,
    Slot,
    render_carve_status,
)
from migslice.objects.json import JsonObject
from migslice.objects.nodes import NodeFacts, node_facts_from_raw
from migslice.objects.times import condition_time, format_time

log = logging.getLogger(__name__)

REASON_FAILED = "MigCarveFailed"
REASON_JOURNAL = "MigCarveJournal"
REASON_REQUEST = "MigCarveRequest"
SETTLE_S = 20.0
"""Two of the kubelet's node status computations (``nodeStatusUpdateFrequency``, 10 s): a
plugin Ready this long has registered, and allocatable counts unchanged since are current."""


class MigDriver(Protocol):
    """The node's GPUs (:class:`agent.carve.nvml_writes.NvmlMig` over NVML)."""

    def read(self) -> tuple[GpuReading, ...]: ...

    def create(self, gpu: int, slot: Slot) -> None: ...

    def destroy(self, gpu: int, slot: Slot) -> None: ...


class CarveNode(Protocol):
    """This node in the API server (:class:`migslice.kube.carve_node.KubeCarveNode`)."""

    def read_node(self) -> JsonObject: ...

    def write_status(self, text: str) -> None: ...

    def pods_on_node(self) -> Sequence[JsonObject]: ...

    def restart_device_plugin(self) -> frozenset[str]: ...

    def device_plugin_ready_at(self, replaced: frozenset[str]) -> datetime.datetime | None: ...

    def record_warning(self, reason: str, message: str) -> None: ...


@dataclass
class Carver:
    """``session``: NVML init/shutdown around each pass; ``publish``: write the layout
    annotation now; ``advertise_timeout_s``: how long to wait for the device plugin."""

    node: CarveNode
    driver: MigDriver
    session: Callable[[], contextlib.AbstractContextManager[None]]
    publish: Callable[[], None]
    now: Callable[[], datetime.datetime]
    sleep: Callable[[float], None]
    advertise_timeout_s: float = 120.0
    poll_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    """Seconds, for the device plugin's timeout (what each poll's API calls take counts)."""
    node_name: str = "-"
    """The node's name, for the log (its lines name it, node=)."""
    _kept: CarveStatus | None = None
    """The journal as this process last wrote (or took up) it: while it is open, NVML may
    hold part of its change, whatever the Node's copy says now."""
    _said: set[str] = field(default_factory=set)

    @property
    def carving(self) -> bool:
        """Whether this process has a carve open (its journal not closed yet)."""
        return self._kept is not None and self._kept.phase.is_open

    def run_once(self) -> str:
        """One pass; what it did, in words (for the log and tests)."""
        raw = self.node.read_node()
        facts = node_facts_from_raw(raw)
        request, journal = facts.carve_request, facts.carve_status
        unread_request = facts.unread_carve_request()
        kept = self._kept
        if kept is not None and journal != kept and _is_lost(kept, journal, request):
            journal = self._restore(kept, journal, _unreadable(facts))
        elif journal is None and _unreadable(facts):
            if request is None:
                return self._unknown(_unreadable(facts))
            journal = self._take_up(request, f"unreadable ({_unreadable(facts)})")
        elif request is not None and request.resume and _foreign(journal, request):
            journal = self._take_up(request, "missing: the controller asks to resume the carve")
        if journal is not None and journal.phase.is_open:
            self._kept = journal
            same = request is not None and request.plan_id == journal.plan_id
            if journal.phase == CarvePhase.PENDING and same:
                return self._forward(journal)
            if journal.phase == CarvePhase.ROLLING_BACK:
                return self._rollback(journal, journal.detail)
            if unread_request:
                self._unread_request(unread_request, f"plan {journal.plan_id} is rolled back")
                return self._rollback(journal, f"the request is unreadable ({unread_request})")
            return self._rollback(journal, "the controller withdrew the request")
        if unread_request:
            said = self._unread_request(unread_request, "nothing is carved")
            return f"waiting: {said}"
        if request is None or (journal is not None and journal.plan_id == request.plan_id):
            return "nothing to carve"
        status = CarveStatus(request.plan_id, CarvePhase.PENDING, "", self._at(), request.gpus)
        problem = self._refusal(facts)
        if problem == "wait":
            return "waiting: MIG Manager is working on the node"
        if problem:
            self._finish(status, CarvePhase.FAILED, problem)
            return f"refused: {problem}"
        self._write(status)
        return self._forward(status)

    def _restore(
        self, kept: CarveStatus, found: CarveStatus | None, unreadable: str
    ) -> CarveStatus:
        """The Node's journal is gone (the Node deleted and made again), unreadable or not the
        one this process wrote, while its carve is open: written back, and said so."""
        if found is None and unreadable:
            what = f"unreadable ({unreadable})"
        elif found is None:
            what = "missing (the Node deleted and made again?)"
        else:
            what = f"changed by another writer (it says plan {found.plan_id} {found.phase})"
        held = (
            "NVML may hold part of its change"
            if kept.phase.is_open
            else "its answer, which the controller asks for again"
        )
        self._warn(
            REASON_JOURNAL,
            f"the carve journal {CARVE_STATE_ANNOTATION} was {what} while plan {kept.plan_id} "
            f"was {kept.phase} ({held}): the agent wrote it back and goes on from it",
        )
        self._write(kept)
        return kept

    def _take_up(self, request: CarveRequest, what: str) -> CarveStatus:
        """An unreadable journal and a request, or a request to resume none here knows (an
        agent restarted since, the Node made again): the journal is taken to be the request's,
        with changes perhaps made and advertised, and resumed."""
        self._warn(
            REASON_JOURNAL,
            f"the carve journal {CARVE_STATE_ANNOTATION} is {what}: taken "
            f"as plan {request.plan_id}'s, which NVML may hold part of, and resumed",
        )
        status = CarveStatus(
            request.plan_id,
            CarvePhase.PENDING,
            "",
            self._at(),
            request.gpus,
            changed=True,
            advertised=True,
        )
        self._write(status)
        return status

    def _unknown(self, unreadable: str) -> str:
        said = (
            f"the carve journal {CARVE_STATE_ANNOTATION} is unreadable ({unreadable}) and no "
            "carve is asked: what a carve under way changed cannot be known; the agent "
            "publishes NVML's layout as it is (fix or remove the annotation)"
        )
        self._warn(REASON_JOURNAL, said)
        return f"waiting: {said}"

    def _unread_request(self, unreadable: str, outcome: str) -> str:
        """Say (once, with a Warning Event) that the controller's request cannot be read: a
        release of the controller that writes another version of it, or an edit by hand."""
        said = (
            f"the carve request {CARVE_ANNOTATION} is unreadable ({unreadable}): {outcome}; "
            "the controller withdraws it at its deadline"
        )
        self._warn(REASON_REQUEST, said)
        return said

    def _warn(self, reason: str, message: str) -> None:
        if message in self._said:
            return
        self._said.add(message)
        log.warning("node=%s %s", self.node_name, message)
        self.node.record_warning(reason, message)

    def _write(self, status: CarveStatus) -> None:
        self._kept = status
        self.node.write_status(render_carve_status(status))

    def _refusal(self, facts: NodeFacts) -> str:
        if facts.repartition_mode == MODE_MIG_MANAGER:
            return "the node is in mig-manager mode; carve requests are refused"
        if facts.mig_config_state in MIG_TRANSITION_STATES:
            return "wait"
        return ""

    # -- forward -------------------------------------------------------------------------------

    def _forward(self, journal: CarveStatus) -> str:
        try:
            with self.session():
                journal = self._carve(journal)
                readings = self.driver.read()
                problem = mismatch(journal.gpus, readings)
                if problem:
                    raise CarveAbortError(f"after carving, {problem}")
        except (CarveAbortError, MigWriteError, MigReadError) as error:
            return self._rollback(self._journal(journal), str(error))
        detail = self._advertise(self._journal(journal), readings)
        self._finish(journal, *(CarvePhase.FAILED, detail) if detail else (CarvePhase.SUCCESS, ""))
        return f"carved plan {journal.plan_id}" + (f"; {detail}" if detail else "")

    def _carve(self, journal: CarveStatus) -> CarveStatus:
        """Check, then destroy and create; the journal as it stands after (``changed``)."""
        plan = journal.gpus
        readings = self.driver.read()
        enabled = {gpu.index for gpu in readings if gpu.mig_enabled}
        for step in plan:
            if step.index not in enabled:
                raise CarveAbortError(f"GPU {step.index} is not a MIG GPU of this node")
        if not journal.changed:
            _check_creates_are_new(plan, readings)
        held = held_counts(self.node.pods_on_node())
        for step in plan:  # every instance to destroy is idle before anything changes
            for doomed in step.destroy:
                _check_doomed(step.index, doomed, readings)
                slot = Slot(doomed.start, doomed.profile)
                problem = why_not_destroy(step.index, slot, readings, held=held)
                if problem:
                    raise CarveAbortError(problem)
        if not journal.changed:  # said before the first change, so a roll back knows
            journal = replace(journal, changed=True, at=self._at())
            self._write(journal)
        for step in plan:
            for doomed in step.destroy:
                slot = Slot(doomed.start, doomed.profile)
                # A container may have started, or a pod been bound, since the check above.
                held = held_counts(self.node.pods_on_node())
                problem = why_not_destroy(step.index, slot, self.driver.read(), held=held)
                if problem:
                    raise CarveAbortError(problem)
                self.driver.destroy(step.index, slot)
            for slot in step.create:
                self.driver.create(step.index, slot)
        return journal

    # -- roll back -----------------------------------------------------------------------------

    def _rollback(self, journal: CarveStatus, reason: str) -> str:
        if not journal.changed:
            self._finish(journal, CarvePhase.FAILED, f"{reason}; nothing was changed")
            return f"refused plan {journal.plan_id}: {reason}; nothing was changed"
        log.warning(
            "node=%s carve plan=%s failed (%s); rolling back",
            self.node_name,
            journal.plan_id,
            reason,
        )
        rolling = replace(journal, phase=CarvePhase.ROLLING_BACK, detail=reason, at=self._at())
        self._write(rolling)
        notes: list[str] = []
        try:
            with self.session():
                readings = self._undo(journal, notes)
        except MigReadError as error:  # NVML cannot be read: no roll back now, said so
            detail = "; ".join(
                [f"{reason}; rolling back stopped: {error} (the GPUs as NVML left them)", *notes]
            )
            self._finish(rolling, CarvePhase.FAILED, detail)
            return f"stopped rolling back plan {journal.plan_id}: {detail}"
        advertised = self._advertise(self._journal(rolling), readings)
        notes += [advertised] if advertised else []
        detail = "; ".join([f"{reason}; rolled back", *notes])
        self._finish(rolling, CarvePhase.FAILED, detail)
        return f"rolled back plan {journal.plan_id}: {detail}"

    def _undo(self, journal: CarveStatus, notes: list[str]) -> tuple[GpuReading, ...]:
        """Destroy what the plan created (if it may be), create again what it destroyed;
        what NVML refuses goes into ``notes``. NVML's readings after. Before the device
        plugin was restarted for the plan no pod can hold an instance it created, so those
        are checked for processes alone."""
        reported = {gpu.index for gpu in self.driver.read() if gpu.mig_enabled}
        for step in journal.gpus:
            if step.index not in reported:
                notes.append(f"GPU {step.index}: not a MIG GPU NVML reports; left")
                continue
            for slot in step.create:
                held = held_counts(self.node.pods_on_node()) if journal.advertised else {}
                problem = why_not_destroy(step.index, slot, self.driver.read(), held=held)
                if problem:
                    notes.append(f"left {slot.profile}@{slot.start}: {problem}")
                    continue
                _noting(notes, step.index, partial(self.driver.destroy, step.index, slot))
            for doomed in step.destroy:
                slot = Slot(doomed.start, doomed.profile)
                reading = next((g for g in self.driver.read() if g.index == step.index), None)
                found = instances(reading).get(slot) if reading is not None else None
                if found is None or not found.uuid:
                    _noting(notes, step.index, partial(self.driver.create, step.index, slot))
        return self.driver.read()

    # -- the device plugin, the layout, the journal -----------------------------------------------

    def _advertise(self, journal: CarveStatus, readings: Sequence[GpuReading]) -> str:
        """Restart the device plugin and wait until a new plugin pod is Ready and the node's
        allocatable, as the kubelet reported it since, shows NVML's MIG devices; what still
        differs at the timeout ("" when they agree)."""
        if not journal.advertised:  # said before the restart, so a roll back knows
            self._write(replace(journal, advertised=True))
        try:
            replaced = self.node.restart_device_plugin()
        except ApiError as error:
            if _unanswered(error):
                raise  # the API server is away: the next pass goes on from the journal
            self.publish()
            return (
                f"the device plugin could not be restarted ({error}): check the agent's "
                "delete pods RBAC and --device-plugin-namespace/--device-plugin-selector"
            )
        log.info(
            "node=%s device plugin pods replaced: %d; waiting for allocatable",
            self.node_name,
            len(replaced),
        )
        deadline = self.clock() + self.advertise_timeout_s
        while True:
            try:
                problem = self._unadvertised(replaced, readings)
            except ApiError as error:
                # a look the API server does not answer is tried again within the wait: the
                # next pass would restart the plugin again and wait anew
                if not _unanswered(error) or self.clock() >= deadline:
                    raise
                log.info("node=%s device plugin not looked at (%s); again", self.node_name, error)
                self.sleep(self.poll_s)
                continue
            if not problem:
                self.publish()
                return ""
            if self.clock() >= deadline:
                self.publish()
                return (
                    f"the device plugin did not advertise the new devices within "
                    f"{self.advertise_timeout_s:.0f}s ({problem})"
                )
            self.sleep(self.poll_s)

    def _unadvertised(self, replaced: frozenset[str], readings: Sequence[GpuReading]) -> str:
        """Why the devices NVML has are not known to be advertised yet ("" when they are).
        Allocatable counts the kubelet reported before the new plugin registered are stale
        (a plan or a roll back that keeps each profile's count matches them at once): only a
        report since the new plugin pod became Ready counts, or, where none comes (the
        kubelet reports only changes), the counts once it has been Ready for
        :data:`SETTLE_S`."""
        ready_at = self.node.device_plugin_ready_at(replaced)
        if ready_at is None:
            return "no new device plugin pod is Ready on the node"
        raw = self.node.read_node()
        problem = unadvertised(node_facts_from_raw(raw), readings)
        if problem:
            return problem
        reported = condition_time(raw, "Ready", "lastHeartbeatTime")
        settled = self.now() - ready_at >= datetime.timedelta(seconds=SETTLE_S)
        # Stamps have whole seconds: a report in the plugin's own second may predate it.
        if (reported is None or reported <= ready_at) and not settled:
            return "the kubelet has not reported allocatable since the new device plugin started"
        return ""

    def _journal(self, journal: CarveStatus) -> CarveStatus:
        """The journal as last written (``changed`` may have been written since)."""
        kept = self._kept
        return kept if kept is not None and kept.plan_id == journal.plan_id else journal

    def _finish(self, journal: CarveStatus, phase: CarvePhase, detail: str) -> None:
        done = replace(journal, phase=phase, detail=detail, at=self._at())
        self._write(done)
        if phase == CarvePhase.FAILED:
            message = f"carve {journal.plan_id} failed: {detail}"
            log.warning("node=%s %s", self.node_name, message)
            self.node.record_warning(REASON_FAILED, message)
        else:
            log.info("node=%s carve plan=%s done", self.node_name, journal.plan_id)

    def _at(self) -> str:
        return format_time(self.now())


def _unanswered(error: ApiError) -> bool:
    """Whether the API server did not answer the request (away, timed out, shedding load, or
    failing inside), rather than refusing it."""
    return error.status in (0, 408, 429) or error.status >= 500


def _is_lost(kept: CarveStatus, found: CarveStatus | None, request: CarveRequest | None) -> bool:
    """Whether the journal this process keeps is to be written back over the Node's
    (``found``): while its carve is open, always; once closed, when the Node has none and the
    request asks that plan again (to resume: the answer was lost with the Node)."""
    if kept.phase.is_open:
        return True
    return found is None and request is not None and request.plan_id == kept.plan_id


def _foreign(journal: CarveStatus | None, request: CarveRequest) -> bool:
    """Whether the Node's journal is none, or a closed one of another plan (an open one is
    finished or rolled back first)."""
    if journal is None:
        return True
    return journal.plan_id != request.plan_id and not journal.phase.is_open


def _unreadable(facts: NodeFacts) -> str:
    """Why the Node's journal annotation could not be read ("" when absent or read)."""
    prefix = CARVE_STATE_ANNOTATION
    return next((p for p in facts.problems if p.startswith(prefix)), "")


def _check_creates_are_new(plan: Sequence[CarveGpu], readings: Sequence[GpuReading]) -> None:
    """Before the first change: no instance to create exists already (unless the plan destroys
    it first). A roll back destroys the plan's creates, and before the device plugin restart
    checks them for processes alone (no pod can hold what the plugin never listed): that holds
    only for instances the plan itself made."""
    for step in plan:
        reading = next(g for g in readings if g.index == step.index)
        found = instances(reading)
        doomed = {Slot(d.start, d.profile) for d in step.destroy}
        for slot in step.create:
            if slot in found and slot not in doomed:
                raise CarveAbortError(
                    f"GPU {step.index}: {slot.profile}@{slot.start} exists already; the plan "
                    "would create it"
                )


def _check_doomed(gpu: int, doomed: Doomed, readings: Sequence[GpuReading]) -> None:
    """The instance to destroy is still the planned one (same MIG device UUID)."""
    reading = next(g for g in readings if g.index == gpu)
    found = instances(reading).get(Slot(doomed.start, doomed.profile))
    if found is not None and found.uuid and doomed.uuid and found.uuid != doomed.uuid:
        where = f"GPU {gpu}: {doomed.profile}@{doomed.start}"
        raise CarveAbortError(f"{where} is {found.uuid}, not {doomed.uuid} as planned")


def _noting(notes: list[str], gpu: int, change: Callable[[], None]) -> None:
    """A rollback step: what NVML refuses is noted, and the rollback goes on."""
    try:
        change()
    except MigWriteError as error:
        notes.append(f"GPU {gpu}: {error}")
