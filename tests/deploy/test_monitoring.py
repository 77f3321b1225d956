"""Monitoring files: alert rules, scrape config, adapter rules and dashboard parse, and
every metric and label they query is one the server declares (app/metrics.py).

The same names are checked against a running server's /metrics in test_live_server.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from app.metrics import Metrics
from tests.deploy import promql
from tests.deploy.manifests import MONITORING, ROOT

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package `prometheus`); YAML checks still run"
)
# Series Prometheus itself writes for every target.
PROMETHEUS_SERIES = {"up": frozenset()}
SEVERITIES = {"page", "ticket"}


def declared_series() -> dict[str, frozenset[str]]:
    """Series name -> label names, for every metric app.metrics.Metrics declares (the GPU ones too)."""
    metrics = Metrics()
    metrics.declare_gpu()
    out: dict[str, frozenset[str]] = {}
    for spec in metrics.specs:
        labels = frozenset(spec.labels)
        for name in promql.sample_names(spec.name, spec.kind):
            out[name] = labels | {"le"} if name.endswith("_bucket") else labels
    return out


def target_labels() -> set[str]:
    """Labels Prometheus attaches to every scraped series: job, instance, and relabel targets."""
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    labels = {"job", "instance"}
    for job in config["scrape_configs"]:
        for relabel in job.get("relabel_configs", []):
            target = relabel.get("target_label", "")
            if target and not target.startswith("__"):
                labels.add(target)
    return labels


EXPRESSIONS = promql.all_expressions()


@pytest.mark.parametrize("where", sorted(EXPRESSIONS))
def test_expression_parses_and_queries_declared_metrics_and_labels(where: str) -> None:
    declared = {**declared_series(), **PROMETHEUS_SERIES}
    allowed_extra = target_labels()
    found = promql.selectors(EXPRESSIONS[where], where)
    assert found, f"{where}: queries no metric"
    for selector in found:
        assert selector.name in declared, f"{where}: {selector.name} is not exported by the server"
        unknown = selector.labels - declared[selector.name] - allowed_extra
        assert not unknown, f"{where}: {selector.name} has no label(s) {sorted(unknown)}"


def test_hpa_metric_is_served_by_the_adapter() -> None:
    exposed = promql.adapter_exposed_names()
    for where, name in promql.hpa_metric_names().items():
        assert name in exposed, f"{where}: prometheus-adapter.yaml serves no {name}"


def test_adapter_resources_map_to_scraped_labels() -> None:
    config = yaml.safe_load((MONITORING / "prometheus-adapter.yaml").read_text())
    for rule in config["rules"]:
        overrides = rule["resources"]["overrides"]
        assert set(overrides) <= target_labels(), "the scrape config must add the labels the adapter maps"
        assert {v["resource"] for v in overrides.values()} == {"namespace", "pod"}


def test_alert_rules_are_complete_and_linked_to_the_runbook() -> None:
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    operations = (ROOT / "docs" / "operations.md").read_text()
    # GitHub anchors: the heading text lower-cased, spaces to dashes, punctuation dropped.
    anchors = {
        re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in operations.splitlines()
        if line.startswith("#")
    }
    names = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            names.append(rule["alert"])
            assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
            for key in ("summary", "description", "runbook"):
                assert rule["annotations"].get(key), f"{rule['alert']} lacks {key}"
            page, _, anchor = rule["annotations"]["runbook"].partition("#")
            assert page == "docs/operations.md" and anchor in anchors, (
                f"{rule['alert']}: no section #{anchor}"
            )
    assert len(names) == len(set(names)), "duplicate alert names"


def test_alerts_cover_what_operators_must_hear_about() -> None:
    used = {
        s.name for where, expr in promql.alert_expressions().items() for s in promql.selectors(expr, where)
    }
    must = {  # the reference design's "What to alert on" (seed 001), and ours
        "oasr_request_duration_seconds_count",  # error rate
        "oasr_time_to_first_partial_seconds_bucket",  # p99 time to first partial
        "oasr_audio_seconds_total",  # falling behind real time (RTFx)
        "oasr_request_duration_seconds_sum",
        "oasr_stream_realtime_factor_bucket",  # live streams falling behind
        "oasr_engine_kv_blocks_used",  # KV pool about to truncate streams
        "oasr_engine_kv_blocks_capacity",
        "oasr_engine_kv_exhausted_total",  # already truncating them
        "oasr_engine_step_failures_total",  # wedged engine
        "oasr_events_deferred_total",  # clients cannot keep up
        "oasr_engine_metric_samples_dropped_total",  # the metrics themselves are lying
        "oasr_engine_heartbeat_timestamp_seconds",  # engine stuck (readiness goes with it)
        "up",
    }
    assert must <= used, f"no alert on {sorted(must - used)}"


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    result = subprocess.run(
        [PROMTOOL, "check", "rules", str(MONITORING / "alerts.yml")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_alerts_fire_on_synthetic_series() -> None:
    """promtool's rule unit tests: each alert fires on a series that should page, not on a healthy one."""
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "alerts_test.yml"], cwd=MONITORING, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_checks_the_scrape_config(tmp_path: Path) -> None:
    # Debian builds Prometheus without Kubernetes service discovery; swap it for an empty
    # static target list so promtool still checks everything else (relabel regexes, rule files).
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    for job in config["scrape_configs"]:
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["static_configs"] = [{"targets": []}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    shutil.copy(MONITORING / "alerts.yml", tmp_path / "alerts.yml")
    result = subprocess.run(
        [PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_scrape_config_keeps_only_oasr_pods_and_labels_them() -> None:
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    assert config["rule_files"] == ["alerts.yml"]
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "oasr")
    keep = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
    assert any(r["source_labels"] == ["__meta_kubernetes_pod_label_app_kubernetes_io_name"] for r in keep)
    assert {"namespace", "pod"} <= target_labels()


def test_dashboard_layout_is_valid() -> None:
    board = promql.dashboard()
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, f"{panel['title']} is wider than the grid"
        here = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not here & cells, f"{panel['title']} overlaps another panel"
        cells |= here
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", (
                "panels must follow the data source variable"
            )
    assert {v["name"] for v in board["templating"]["list"]} >= {"datasource", "job", "instance"}


def test_every_exported_metric_is_documented_in_operations() -> None:
    from app.metrics import METRIC_NAMES

    text = (ROOT / "docs" / "operations.md").read_text()
    documented = set(re.findall(r"^\| `(oasr_\w+)` \|", text, flags=re.MULTILINE))
    missing = set(METRIC_NAMES) - documented
    assert not missing, f"add a row to docs/operations.md#metrics for {sorted(missing)}"
    assert not documented - set(METRIC_NAMES), "docs/operations.md lists metrics the server does not export"
