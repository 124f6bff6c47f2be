"""Mode B: nos's partitioner controller (B5), its batching windows and one plan at a time.

As ``internal/controllers/gpupartitioner/partitioner_controller.go`` and
``pkg/util/batcher.go`` of nebuly-ai/nos: a pod that becomes pending joins the current batch
(the first one opens it); the batch is processed ``batch_idle_s`` (10 s) after the last pod
joined or ``batch_timeout_s`` (60 s) after it opened, whichever comes first. Processing plans
for every pod pending at that moment (:meth:`migslice.sim.nos.NosPlacer.reshape`) and
applies the plan to all its nodes at once; while any node has not reported it, no pod joins a
batch. When the last node is done, the pods still pending form a new batch (nos requeues
them within 10 s).

Each node of the plan is handled by the same stand-in as migslice's (its agent deletes and
creates instances and restarts the device plugin, so the whole node takes no new pod for
``t_reconf_s``).
"""

from __future__ import annotations

from collections import defaultdict

from migslice.sim.controller import ReconfiguringRun
from migslice.sim.nos import NosPlacer
from migslice.sim.placement import LayoutChange


class NosBatching:
    def __init__(
        self, run: ReconfiguringRun, planner: NosPlacer, idle_s: float, *, timeout_s: float
    ) -> None:
        self.run = run
        self.planner = planner
        self.idle_s = idle_s
        self.timeout_s = timeout_s
        self.opened: float | None = None
        self.last_joined = 0.0
        self.in_flight = 0
        self.plans = 0

    def pending(self, now: float) -> None:
        """A pod became pending: it joins the batch unless a plan is in flight."""
        if self.in_flight:
            return
        if self.opened is None:
            self.opened = now
            self.run.at(now + self.idle_s, self.tick)
        self.last_joined = now

    def tick(self, now: float) -> None:
        """The batcher's timers: process the batch, or wait for its next deadline."""
        if self.opened is None or self.in_flight:
            return
        deadline = min(self.last_joined + self.idle_s, self.opened + self.timeout_s)
        if now < deadline:
            self.run.at(deadline, self.tick)
            return
        self.opened = None
        pods = [pod for pod, _ in self.run.waiting()]
        if not pods:
            return
        self.plans += 1
        by_node: dict[int, list[LayoutChange]] = defaultdict(list)
        for change in self.planner.reshape(pods):
            by_node[change.node.position].append(change)
        self.in_flight = len(by_node)
        served = self.planner.served
        for position, changes in sorted(by_node.items()):
            node = self.run.cluster.nodes[position]
            config = f"nos-plan-{self.plans}"
            self.run.reconfigure(
                node, changes, config, done=self.node_done, serves=served.get(position, ())
            )

    def node_done(self, now: float) -> None:
        self.in_flight -= 1
        if not self.in_flight and self.run.waiting():
            self.pending(now)
