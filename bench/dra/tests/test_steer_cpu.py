"""``bench.dra.steer_cpu``: its cluster is DynamicMIG nodes the extender steers, with a waiting
claim of two devices its lift review reads, and a quick run writes its section."""

from __future__ import annotations

import json
from pathlib import Path

from bench.dra.steer_cpu import WAITING_CLAIM, cluster, main, waiting_pod
from migslice.objects.dra_pool import DraMode
from migslice.scheduling.demand import demand_of, with_claims


def test_the_cluster_is_dynamic_mig_nodes_and_the_waiting_pod_asks_two_devices() -> None:
    index = cluster(3, 8, 2)
    for name in index.node_names():
        node = index.get(name)
        assert node is not None and node.state.dra is not None
        assert node.state.dra.mode is DraMode.DYNAMIC and len(node.state.dra.held) == 16
    pod = waiting_pod()
    demand = with_claims(demand_of(pod), pod, index.claim, index.classes)
    assert sum(unit.count for unit in demand.units) == 2
    assert index.claim(f"team-a/{WAITING_CLAIM}") is not None


def test_a_quick_run_writes_its_section(tmp_path: Path) -> None:
    assert main(["--nodes", "4", "--rounds", "1", "--out", str(tmp_path)]) == 0
    run = json.loads((tmp_path / "report.json").read_text())["steer_cpu"]["run"]
    assert run["nodes"] == 4 and run["rules"] > 0 and run["capped_nodes"] == 0
    assert "| resync | every minute" in (tmp_path / "report.md").read_text()
