"""``migslice demo`` end to end: the real servers over HTTPS, on the bundled cluster."""

from __future__ import annotations

import io
from pathlib import Path

import yaml

from migslice.demo.scenario import run


def test_the_demo_walks_admission_quota_scheduling_and_a_repartition(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run(out, tmp_path) == 0
    text = out.getvalue()
    assert "admitted as embed-" in text and "nvidia.com/mig-1g.10gb: 1" in text
    assert 'tenant "payments" would use 6 compute slices' in text
    assert "allows 4 (spec.quota.computeSlices)" in text
    assert "no 7g.80gb instance in node's MIG layout" in text
    assert "plan: node a100-small -> config migslice-a100-small-" in text
    assert "device plugin now offers 1g.10gb x7, 7g.80gb x1" in text
    assert text.count("bound to ") == 6
    assert "claim migslice-gpu from ResourceClaimTemplate migslice-mig-1g.10gb" in text
    assert "charged by the webhook (1g.10gb, reservation" in text
    assert "allocator (first fit): detect-" in text and "-> gpu-0-mig-1g10gb-19-0" in text
    assert 'namespace "sandbox" belongs to no TenantPolicy' in text

    objects = list(yaml.safe_load_all((tmp_path / "cluster.yaml").read_text()))
    pretrain = next(o for o in objects if o["metadata"].get("name", "").startswith("pretrain-"))
    assert pretrain["spec"]["nodeName"] == "a100-small"
    node = next(o for o in objects if o["metadata"]["name"] == "a100-small")
    assert node["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
    assert node["status"]["allocatable"]["nvidia.com/mig-7g.80gb"] == "1"
    assert not (tmp_path / "cluster.tmp").exists()
    detect = next(o for o in objects if o["metadata"].get("name", "").startswith("detect-"))
    assert detect["spec"]["nodeName"] == "a100-dra"
    (claim,) = [o for o in objects if o["kind"] == "ResourceClaim"]
    assert claim["metadata"]["annotations"]["migslice.io/tenant"] == "vision"
