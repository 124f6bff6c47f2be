"""The chart's alerts and dashboard against what the servers export: every alert has a
promtool test that fires and one that does not (promtool runs them in
e2e/test_monitoring_e2e.py), and every metric a rule or a panel reads is on the webhook's or
the extender's /metrics, with the labels the query uses."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
import yaml

from extender.app import create_app as extender_app
from extender.metrics import ExtenderMetrics
from extender.retries import Retries
from extender.settings import ExtenderSettings
from extender.state import RepartitionStats, StaticCache, SteerStats, state_from_objects
from migslice.objects import parse_cluster_objects
from tests import paths
from tests.promql import exposition_labels, reads
from tests.status_cluster import representative_cluster
from webhook.app import create_app as webhook_app
from webhook.metrics import Metrics
from webhook.state import ClusterState

ROOT = paths.ROOT
MONITORING = ROOT / "charts" / "migslice" / "files" / "monitoring"
RULE_TESTS = ROOT / "tests" / "rules" / "alerts_test.yaml"
PROMETHEUS_OWN = frozenset({"time"})


def alerts() -> list[dict[str, str]]:
    return list(yaml.safe_load((MONITORING / "alerts.yaml").read_text())["rules"])


def queries() -> list[str]:
    found = [rule["expr"] for rule in alerts()]
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    found += [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    return found


def exported() -> dict[str, set[str]]:
    """Metric -> labels, from both servers' /metrics over the representative cluster, the
    repartition leader's and the DRA steer's stats filled in as a round leaves them, and the
    pods to touch as in a cluster."""
    objects = parse_cluster_objects(representative_cluster())
    settings = ExtenderSettings()
    state = state_from_objects(objects, settings)
    state.repartition = RepartitionStats(
        is_leader=True,
        pending={"3g.40gb": (2, 600.0)},
        open_ages={"mig-manager": 540.0, "carve": 0.0},
        open_leader_ages={"mig-manager": 300.0, "carve": 0.0},
        deadline_s=600.0,
        node_outcomes={"timeout": 1},
    )
    state.steer = SteerStats(rules=18, created=18)
    state.retries = Retries(lambda pod, annotations: True, lambda: True)
    text = extender_app(settings, state).test_client().get("/metrics").text
    webhook_state = ClusterState()
    webhook_state.load(objects)
    webhook_state.follow([StaticCache("pods")])
    text += webhook_app(state=webhook_state).test_client().get("/metrics").text
    found = exposition_labels(text)
    # Families that have no sample until something happens (a fence, a request): their
    # declared labels.
    for metric in (*vars(Metrics()).values(), *vars(ExtenderMetrics(state)).values()):
        labels = getattr(metric, "_labelnames", None)
        name = getattr(metric, "_name", None)
        if isinstance(name, str) and labels is not None:
            kind = getattr(metric, "_type", "")
            names = [name + "_total"] if kind == "counter" else [name]
            if kind == "histogram":
                names = [name + suffix for suffix in ("_bucket", "_sum", "_count")]
            for each in names:
                found.setdefault(each, set()).update(labels)
    return found


def test_every_alert_has_a_firing_and_a_silent_promtool_case() -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check["exp_alerts"] else silent).add(check["alertname"])
    names = {rule["alert"] for rule in alerts()}
    # An alert of several series that fires for one and not another is silent for that one.
    silent |= {"MigsliceCertificateExpiring"}
    assert names <= fired
    assert names <= silent


def test_every_metric_a_rule_or_panel_reads_is_exported_with_its_labels() -> None:
    metrics = exported()
    missing: list[str] = []
    for query in queries():
        found = reads(re.sub(r"__[A-Z_]+__", "1", query))
        for name, labels in found.metrics.items():
            if name in PROMETHEUS_OWN:
                continue
            if name not in metrics:
                missing.append(f"{name} (in {query!r})")
            elif labels - metrics[name]:
                missing.append(f"{name} labels {sorted(labels - metrics[name])}")
        used = set().union(*(metrics.get(n, set()) for n in found.metrics)) | {"le", "job"}
        if found.grouping - used:
            missing.append(f"grouping {sorted(found.grouping - used)} in {query!r}")
    assert not missing


def _anchors(markdown: str) -> set[str]:
    """The anchors a Markdown page has: GitHub's heading ids and explicit ``<a id>``."""
    found = set(re.findall(r'<a id="([^"]+)"', markdown))
    for heading in re.findall(r"^#+ (.+)$", markdown, flags=re.MULTILINE):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


def test_every_alerts_runbook_link_lands_on_its_section() -> None:
    broken = []
    for rule in alerts():
        page, _, anchor = rule["annotations"]["runbook"].partition("#")
        if anchor not in _anchors((ROOT / page).read_text()):
            broken.append(f"{rule['alert']}: {rule['annotations']['runbook']}")
    assert not broken


def test_admission_latency_buckets_reach_past_the_longest_webhook_timeout() -> None:
    """An answer slower than the last finite bucket reads as that bucket in
    histogram_quantile: the dashboard's p99 would sit at 1 s while admissions near the
    timeout (5 s by default, at most 30)."""
    from webhook.metrics import LATENCY_BUCKETS_S

    schema = json.loads((ROOT / "charts" / "migslice" / "values.schema.json").read_text())
    longest = schema["properties"]["webhook"]["properties"]["timeoutSeconds"]["maximum"]
    assert max(LATENCY_BUCKETS_S) >= longest


def test_extender_latency_buckets_reach_past_kube_schedulers_default_extender_timeout() -> None:
    """The chart's extenderTimeout is 2 s and may be raised; kube-scheduler's own default is
    5 s. Buckets that stopped at 2 s read every slower answer as 2 s in the p99 panel."""
    from extender.metrics import LATENCY_BUCKETS_S

    values = yaml.safe_load((ROOT / "charts" / "migslice" / "values.yaml").read_text())
    assert values["scheduler"]["extenderTimeout"] == "2s"
    assert max(LATENCY_BUCKETS_S) > 5.0


def test_a_monitoring_value_kube_apiserver_would_refuse_is_refused_by_the_schema_first() -> None:
    """Each of these rendered, and kube-apiserver refused the ServiceMonitor (its interval is
    a Prometheus duration, the CRD's pattern) or the dashboard's ConfigMap (its namespace, its
    label key and value) mid-install."""
    schema = json.loads((ROOT / "charts" / "migslice" / "values.schema.json").read_text())
    values = yaml.safe_load((ROOT / "charts" / "migslice" / "values.yaml").read_text())
    validator = jsonschema.Draft7Validator(schema)

    def given(part: str, key: str, value: object) -> dict[str, object]:
        metrics = {**values["metrics"], part: {**values["metrics"][part], key: value}}
        return {**values, "metrics": metrics}

    for part, key, good, bad in (
        (
            "serviceMonitor",
            "interval",
            ["30s", "1m30s", "1h", "500ms", "0", ""],
            ["foo", "30", "1.5m", "30 s", "-1s"],
        ),
        (
            "dashboard",
            "namespace",
            ["", "monitoring", "grafana-1"],
            ["Monitoring", "grafana_1", "-x", "a" * 64],
        ),
        (
            "dashboard",
            "label",
            ["grafana_dashboard", "grafana.com/dashboard", "A.b-c_d"],
            ["foo bar", "a/b/c", "-x", "x/"],
        ),
        ("dashboard", "labelValue", ["1", "", "yes_please", "a.b-c"], ["a b", "-1", "x" * 64]),
        (
            "serviceMonitor",
            "labels",
            [{"release": "prometheus"}, {"example.com/team": "gpu"}],
            [{"bad key": "x"}, {"release": "not ok"}],
        ),
        ("prometheusRule", "labels", [{"release": "prometheus"}], [{"a/b/c": "x"}, {"role": "-x"}]),
    ):
        for value in good:
            validator.validate(given(part, key, value))
        for value in bad:
            with pytest.raises(jsonschema.ValidationError) as refused:
                validator.validate(given(part, key, value))
            assert list(refused.value.absolute_path)[:3] == ["metrics", part, key], value


def panels() -> list[dict[str, Any]]:
    return list(json.loads((MONITORING / "dashboard.json").read_text())["panels"])


def test_a_panel_of_seconds_says_so_on_its_axis() -> None:
    """A panel that plots a ``_seconds`` metric as it is (a latency quantile, a wait) sets
    Grafana's unit ``s``: without it a 5 ms p99 reads as a bare ``0.005`` and a 20 min wait
    as ``1200``, numbers an operator takes for milliseconds or minutes."""
    unitless = []
    for panel in panels():
        exprs = [str(t["expr"]) for t in panel["targets"]]
        names = {n for e in exprs for n in reads(e).metrics if n != "time"}
        as_read = not any(re.search(r"[*/]|time\(\)", e) for e in exprs)
        if names and as_read and all(re.search(r"_seconds(_bucket)?$", n) for n in names):
            unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
            if unit != "s":
                unitless.append(str(panel["title"]))
    assert not unitless


SHOWN = {
    "admissions of pods and claims, by outcome": "migslice_webhook_requests_total",
    "extender calls by outcome (error, waiting for a claim, blind)": (
        "migslice_extender_requests_total"
    ),
    "device-plugin re-partitions and carves": "migslice_repartition_nodes_total",
    "DRA nodes by the state of their pool (incomplete, unknown: not placed on)": (
        "migslice_extender_dra_nodes"
    ),
    "the DRA steer's rules": "migslice_dra_steer_rules",
    "the DRA steer's rule writes": "migslice_dra_steer_writes_total",
    "the DRA steer's failures": "migslice_dra_steer_failures_total",
    "DynamicMIG nodes the steer left to first fit": "migslice_dra_steer_capped_nodes",
}
"""What an operator must see of each path on the dashboard, and the metric that shows it."""


def test_the_dashboard_shows_both_paths_and_both_servers_answers() -> None:
    """Each server's answers by outcome, and the device-plugin and the DRA path each: a DRA
    node whose pool is incomplete or unknown takes no pod, and a steer whose writes fail
    leaves DynamicMIG claims on stale rules, with nothing on the dashboard to say so."""
    read = {n for panel in panels() for t in panel["targets"] for n in reads(t["expr"]).metrics}
    metrics = exported()
    assert set(SHOWN.values()) <= set(metrics)
    assert sorted(what for what, metric in SHOWN.items() if metric not in read) == []


def test_a_panel_of_rates_per_second_says_so_in_its_title() -> None:
    """rate() reads per second; a panel that plots it as it is (not a quantile, not scaled
    to a minute) says so, as the per-minute and per-hour panels say theirs."""
    unsaid = []
    for panel in panels():
        for target in panel["targets"]:
            expr = str(target["expr"])
            per_second = "rate(" in expr and not re.search(r"histogram_quantile|\*", expr)
            if per_second and "per second" not in str(panel["title"]):
                unsaid.append(f"{panel['title']}: {expr}")
    assert not unsaid
