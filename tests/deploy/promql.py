"""Every metric selector the deployment files query, found by parsing their PromQL.

Sources: alert rules, the Grafana dashboard (panel targets and template variables), the
prometheus-adapter rules and the HorizontalPodAutoscaler. Parsing uses promql-parser
(the Rust PromQL parser), so a malformed expression fails here before it fails in Prometheus.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import promql_parser
import yaml

from tests.deploy.manifests import MONITORING, OVERLAYS, one, render

__all__ = [
    "Selector",
    "adapter_expressions",
    "alert_expressions",
    "all_expressions",
    "dashboard_expressions",
    "hpa_metric_names",
    "sample_names",
    "selectors",
]

# Grafana's interval macros and dashboard variables are not PromQL: give them values.
GRAFANA_MACRO = re.compile(r"\$__(rate_interval|interval|range)\b")
GRAFANA_VARIABLE = re.compile(r"\$\{?\w+\}?")
# prometheus-adapter's Go templates in metricsQuery.
ADAPTER_TEMPLATES = {
    "<<.Series>>": "",  # replaced by the rule's series name below
    "<<.LabelMatchers>>": 'namespace="default",pod=~"oasr-.*"',
    "<<.GroupBy>>": "pod",
}


@dataclass(frozen=True)
class Selector:
    """A metric selector: the series name and the label names it matches on."""

    name: str
    labels: frozenset[str]
    source: str


def selectors(expr: str, source: str) -> list[Selector]:
    """Every vector selector in a PromQL expression (raises ValueError when it does not parse)."""
    try:
        tree = promql_parser.parse(expr)
    except Exception as exc:
        raise ValueError(f"{source}: PromQL does not parse: {exc}\n{expr}") from exc
    found: list[Selector] = []
    _walk(tree, source, found)
    return found


def _walk(node: Any, source: str, found: list[Selector]) -> None:
    if isinstance(node, promql_parser.VectorSelector):
        labels = {m.name for m in node.matchers.matchers}
        for group in node.matchers.or_matchers:
            labels |= {m.name for m in group}
        name = node.name or next(m.value for m in node.matchers.matchers if m.name == "__name__")
        found.append(Selector(name, frozenset(labels - {"__name__"}), source))
        return
    if isinstance(node, promql_parser.MatrixSelector):
        _walk(node.vector_selector, source, found)
        return
    if isinstance(node, promql_parser.Call):
        for arg in node.args:
            _walk(arg, source, found)
        return
    if isinstance(node, promql_parser.BinaryExpr):
        _walk(node.lhs, source, found)
        _walk(node.rhs, source, found)
        return
    if isinstance(node, promql_parser.AggregateExpr):
        _walk(node.expr, source, found)
        if node.param is not None:
            _walk(node.param, source, found)
        return
    if isinstance(node, (promql_parser.ParenExpr, promql_parser.UnaryExpr, promql_parser.SubqueryExpr)):
        _walk(node.expr, source, found)
        return
    if isinstance(node, (promql_parser.NumberLiteral, promql_parser.StringLiteral)):
        return
    raise TypeError(f"{source}: unhandled PromQL node {type(node).__name__}")


def alert_expressions() -> dict[str, str]:
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    return {
        f"alerts.yml:{rule.get('alert') or rule.get('record')}": rule["expr"]
        for group in rules["groups"]
        for rule in group["rules"]
    }


def _grafana_to_promql(expr: str) -> str:
    return GRAFANA_VARIABLE.sub(".*", GRAFANA_MACRO.sub("5m", expr))


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return data


def dashboard_expressions() -> dict[str, str]:
    board = dashboard()
    out: dict[str, str] = {}
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            out[f"dashboard:{panel['title']}/{target['refId']}"] = _grafana_to_promql(target["expr"])
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query.strip())
        assert match, f"dashboard variable {variable['name']}: unsupported query {query}"
        out[f"dashboard:${variable['name']}"] = _grafana_to_promql(match.group(1))
    return out


def adapter_expressions() -> dict[str, str]:
    config = yaml.safe_load((MONITORING / "prometheus-adapter.yaml").read_text())
    out: dict[str, str] = {}
    for i, rule in enumerate(config["rules"]):
        out[f"prometheus-adapter.yaml:rules[{i}].seriesQuery"] = rule["seriesQuery"]
        series = selectors(rule["seriesQuery"], "adapter")[0].name
        query = rule["metricsQuery"]
        for template, value in {**ADAPTER_TEMPLATES, "<<.Series>>": series}.items():
            query = query.replace(template, value)
        out[f"prometheus-adapter.yaml:rules[{i}].metricsQuery"] = query
    return out


def adapter_exposed_names() -> set[str]:
    """Metric names the adapter serves to the custom metrics API (after `name.as`)."""
    config = yaml.safe_load((MONITORING / "prometheus-adapter.yaml").read_text())
    names = set()
    for rule in config["rules"]:
        series = selectors(rule["seriesQuery"], "adapter")[0].name
        naming = rule.get("name", {})
        names.add(re.sub(naming.get("matches", "^(.*)$"), naming.get("as", "$1").replace("$", "\\"), series))
    return names


def hpa_metric_names() -> dict[str, str]:
    out = {}
    for overlay in OVERLAYS:
        hpa = one(render(overlay), "HorizontalPodAutoscaler")
        for metric in hpa["spec"]["metrics"]:
            if metric["type"] == "Pods":
                out[f"hpa[{overlay}]:{metric['pods']['metric']['name']}"] = metric["pods"]["metric"]["name"]
    return out


def all_expressions() -> dict[str, str]:
    """PromQL by where it is written (`file:alert` / `dashboard:panel/ref` / ...)."""
    return {**alert_expressions(), **dashboard_expressions(), **adapter_expressions(), **hpa_metric_names()}


def sample_names(family: str, kind: str) -> set[str]:
    """Series names a metric family exposes, as PromQL sees them.

    prometheus_client names a counter family without '_total'; a histogram exposes
    _bucket/_count/_sum; both may add _created.
    """
    if kind == "counter":
        base = family.removesuffix("_total")
        return {f"{base}_total", f"{base}_created"}
    if kind in ("histogram", "gaugehistogram"):
        return {f"{family}_bucket", f"{family}_count", f"{family}_sum", f"{family}_created"}
    if kind == "summary":
        return {family, f"{family}_count", f"{family}_sum", f"{family}_created"}
    if kind == "info":
        return {f"{family}_info"}
    return {family}
