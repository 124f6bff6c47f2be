"""The carve journal (``migslice.io/carve-state``) lost or spoiled while NVML holds part of a
carve: the Node deleted and made again mid-carve, the annotation edited by hand or left
unreadable. The agent must still finish or roll the carve back, restart the device plugin
and say what happened (docs/repartition.md, "Crash safety")."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agent.carve.carver import Carver
from agent.service import AgentService
from agent.settings import AgentSettings
from harness.builders import make_node
from migslice.kube.transport import ApiError
from migslice.names import CARVE_ANNOTATION, CARVE_STATE_ANNOTATION
from migslice.objects import node_facts_from_raw
from migslice.objects.carve_handshake import CarvePhase, CarveRequest
from tests.carve_agent_harness import (
    MemoryNode,
    balanced,
    carver,
    layout,
    request,
    uuid_of,
)
from tests.fake_nvml import FakeNvmlLibrary, installed

BEFORE = [("1g.10gb", 0, True), ("1g.10gb", 1, True), ("3g.40gb", 4, True)]
AFTER = [("3g.40gb", 0, True), ("3g.40gb", 4, True)]


def merge_1g(library: FakeNvmlLibrary) -> CarveRequest:
    doomed = [("1g.10gb", s, uuid_of(library, 0, "1g.10gb", s)) for s in (0, 1)]
    return request("p", 0, doomed, [("3g.40gb", 0)], [("3g.40gb", 0), ("3g.40gb", 4)])


class Killed(BaseException):
    """The agent's process dies."""


def killed_at(
    call: str, library: FakeNvmlLibrary, node: MemoryNode, agent: Carver, asked: CarveRequest
) -> None:
    """``node`` asks ``asked`` and ``agent`` carves it until NVML's ``call``, where its
    process is killed (within ``installed(library)``)."""

    def kill(name: str) -> None:
        if name == call:
            raise Killed

    node.ask(asked)
    library.on_call = kill
    with pytest.raises(Killed):
        agent.run_once()
    library.on_call = None


class DeletableNode(MemoryNode):
    """A Node that can be deleted (the API answers 404) and made again (the kubelet registers
    it anew: no annotations; allocatable as the running device plugin still lists it)."""

    deleted = False

    def read_node(self) -> dict[str, Any]:
        if self.deleted:
            raise ApiError(404, f'nodes "{self.name}" not found')
        return super().read_node()

    def write_status(self, text: str) -> None:
        if self.deleted:
            raise ApiError(404, f'nodes "{self.name}" not found')
        super().write_status(text)

    def make_again(self) -> None:
        allocatable = dict(self.raw["status"]["allocatable"])
        self.raw = make_node(self.name, gpu_count=len(self.library.gpus), mig={})
        self.raw["metadata"]["annotations"] = {}
        self.raw["status"]["allocatable"] = allocatable
        self.deleted = False


class Api:
    """The API server's answer for the agent's GET of its Node."""

    def __init__(self, node: MemoryNode) -> None:
        self.node = node

    def get_json(self, path: str, query: object) -> dict[str, Any]:
        return self.node.read_node()


def test_a_node_made_again_mid_carve_is_rolled_back_by_the_agent_that_carved() -> None:
    """Measured before: the Node deleted after both 1g.10gb were destroyed and the 3g.40gb
    made; the agent's next write failed (404), and on the Node made again (no journal, no
    request) every pass said nothing to carve: NVML kept the half-advertised change, the
    device plugin still listed two destroyed 1g.10gb, and nothing said so."""
    library = balanced()
    node = DeletableNode(library)
    node.hold("running", "3g.40gb")

    def delete_node(call: str) -> None:
        if call == "nvmlGpuInstanceCreateComputeInstance":
            node.deleted = True

    service = AgentService(AgentSettings("gpu-a", carve=True), Api(node), None, None)  # type: ignore[arg-type]
    with installed(library):
        node.ask(merge_1g(library))
        service._carver = carver(node)
        library.on_call = delete_node
        with pytest.raises(ApiError):
            service.carve_pass()
        library.on_call = None
        assert layout(library) == AFTER  # made, never advertised
        node.make_again()
        said = service.carve_pass()
        assert service.carve_pass() is None  # closed: nothing more to do
    assert said is not None and "rolled back plan p" in said
    assert layout(library) == BEFORE
    assert node.status is not None and node.status.phase == CarvePhase.FAILED
    assert node.restarts == 1
    assert node_facts_from_raw(node.raw).allocatable == (
        ("nvidia.com/mig-1g.10gb", 2),
        ("nvidia.com/mig-3g.40gb", 1),
    )
    reasons = [reason for reason, _ in node.events]
    assert reasons == ["MigCarveJournal", "MigCarveFailed"]
    assert f"{CARVE_STATE_ANNOTATION} was missing" in node.events[0][1]


def test_a_journal_edited_by_hand_mid_carve_is_written_back() -> None:
    """Measured before: ``changed`` set back to false by hand while both 1g.10gb were gone;
    the withdrawn request then ended the carve "nothing was changed", with the 1g.10gb left
    destroyed and the device plugin never restarted."""
    library = balanced()
    node = MemoryNode(library)
    node.hold("running", "3g.40gb")

    agent = carver(node)
    with installed(library):
        killed_at(
            "nvmlDeviceCreateGpuInstanceWithPlacement", library, node, agent, merge_1g(library)
        )
        annotations = node.raw["metadata"]["annotations"]
        annotations[CARVE_STATE_ANNOTATION] = annotations[CARVE_STATE_ANNOTATION].replace(
            '"changed":true', '"changed":false'
        )
        node.ask(None)  # the controller's deadline passed
        said = agent.run_once()
    assert "rolled back" in said and "nothing was changed" not in said
    assert layout(library) == BEFORE
    assert node.restarts == 1
    assert "changed by another writer" in node.events[0][1]


def test_an_unreadable_journal_with_the_request_still_there_is_resumed_not_abandoned() -> None:
    """Measured before: killed between the 3g.40gb's GPU instance and its compute instance,
    the journal then spoiled by hand: the restarted agent took the request as new, refused it
    ("3g.40gb@0 exists already") and closed it "nothing was changed", leaving a GPU instance
    without compute instance, both 1g.10gb destroyed and the device plugin listing them."""
    library = balanced()
    node = MemoryNode(library)
    node.hold("running", "3g.40gb")

    with installed(library):
        killed_at(
            "nvmlGpuInstanceCreateComputeInstance", library, node, carver(node), merge_1g(library)
        )
        node.raw["metadata"]["annotations"][CARVE_STATE_ANNOTATION] = '{"version": "v1", "pl'
        said = carver(node).run_once()  # a new agent process
    assert said == "carved plan p"
    assert layout(library) == AFTER
    assert node.restarts == 1
    assert node_facts_from_raw(node.raw).allocatable == (("nvidia.com/mig-3g.40gb", 2),)
    assert node.events[0][0] == "MigCarveJournal"
    assert "is unreadable" in node.events[0][1]


def test_an_unreadable_journal_without_a_request_is_said_once() -> None:
    library = balanced()
    node = MemoryNode(library)
    node.raw["metadata"]["annotations"][CARVE_STATE_ANNOTATION] = "not json"
    service = AgentService(AgentSettings("gpu-a", carve=True), Api(node), None, None)  # type: ignore[arg-type]
    with installed(library):
        service._carver = carver(node)
        first = service.carve_pass()
        assert service.carve_pass() == first
    assert first is not None and "cannot be known" in first
    assert [reason for reason, _ in node.events] == ["MigCarveJournal"]
    assert layout(library) == BEFORE


def test_a_resumed_request_on_a_node_made_again_is_finished_from_nvml_by_a_new_agent() -> None:
    """Node made again and the agent restarted (its pod deleted with the Node): no journal
    anywhere, NVML holding both 1g.10gb destroyed and the 3g.40gb's GPU instance without its
    compute instance. The controller asks the plan again marked ``resume``. Measured before:
    the new agent took it as new, refused it ("3g.40gb@0 exists already ... nothing was
    changed") and left the half-made instance, the 1g.10gb gone and the device plugin
    listing them."""
    library = balanced()
    node = DeletableNode(library)
    node.hold("running", "3g.40gb")

    with installed(library):
        asked = merge_1g(library)
        killed_at("nvmlGpuInstanceCreateComputeInstance", library, node, carver(node), asked)
        node.make_again()  # no journal, no request
        node.ask(replace(asked, resume=True))
        said = carver(node).run_once()  # a new agent: nothing in memory
    assert "carved plan p" in said, said
    assert layout(library) == AFTER
    assert node.status is not None and node.status.phase == CarvePhase.SUCCESS
    assert node.restarts == 1
    assert [reason for reason, _ in node.events] == ["MigCarveJournal"]
    assert "resumed" in node.events[0][1]


def test_a_resumed_request_whose_carve_the_agent_finished_gets_its_answer_back() -> None:
    """The carve done and journalled ``success``, then the Node made again: the agent that
    carved writes its answer back for the resumed request, carving nothing again."""
    library = balanced()
    node = DeletableNode(library)
    node.hold("running", "3g.40gb")
    agent = carver(node)
    with installed(library):
        asked = merge_1g(library)
        node.ask(asked)
        assert "carved plan p" in agent.run_once()
        node.make_again()
        node.ask(replace(asked, resume=True))
        said = agent.run_once()
    assert said == "nothing to carve"
    assert node.status is not None and node.status.phase == CarvePhase.SUCCESS
    assert node.restarts == 1
    assert layout(library) == AFTER


NEWER_REQUEST = '{"version": "v2", "plan": "q", "steps": []}'
"""A carve request as a later release might write it (a rolling update, a helm rollback)."""


def test_a_request_this_agent_cannot_read_is_said_and_nothing_is_carved() -> None:
    """Measured before: a request of another version answered "nothing to carve" every pass,
    with no Event: the controller waited for its deadline and nothing said why."""
    library = balanced()
    node = MemoryNode(library)
    node.raw["metadata"]["annotations"][CARVE_ANNOTATION] = NEWER_REQUEST
    service = AgentService(AgentSettings("gpu-a", carve=True), Api(node), None, None)  # type: ignore[arg-type]
    with installed(library):
        service._carver = carver(node)
        first = service.carve_pass()  # as the agent's loop runs it
        assert service.carve_pass() == first
    assert first is not None and first.startswith("waiting: ") and "'v2'" in first
    assert [reason for reason, _ in node.events] == ["MigCarveRequest"]
    assert "version 'v2'" in node.events[0][1] and "nothing is carved" in node.events[0][1]
    assert node.status is None  # no journal: nothing was taken up
    assert layout(library) == BEFORE


def test_a_request_turned_unreadable_mid_carve_rolls_back_naming_why() -> None:
    """Measured before: the roll back said "the controller withdrew the request", which it
    had not: the request was still there, in a form this agent does not read."""
    library = balanced()
    node = MemoryNode(library)
    node.hold("running", "3g.40gb")

    agent = carver(node)
    with installed(library):
        killed_at(
            "nvmlDeviceCreateGpuInstanceWithPlacement", library, node, agent, merge_1g(library)
        )
        node.raw["metadata"]["annotations"][CARVE_ANNOTATION] = NEWER_REQUEST
        said = agent.run_once()
    assert "rolled back" in said
    assert layout(library) == BEFORE
    assert node.status is not None and node.status.phase == CarvePhase.FAILED
    assert "withdrew" not in node.status.detail and "'v2'" in node.status.detail
    assert "MigCarveRequest" in [reason for reason, _ in node.events]
