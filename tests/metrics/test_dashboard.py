"""The shipped Grafana dashboard (deploy/grafana/cheeto.json, issue 30): every query
names only metrics cheeto exports (``names.SPECS``) with labels they have, the panels
together cover every family, and every query is valid PromQL by Prometheus's own parser
(promtool, on a temporary rules file made of the dashboard's queries)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cheeto_like.metrics.names import SPECS
from tests.metrics.promql import (
    REPO,
    family_of,
    metric_names,
    run_promtool,
    selector_problems,
    unknown_names,
)

DASHBOARD = REPO / "deploy" / "grafana" / "cheeto.json"
ROWS = ["Processes", "Syncs", "Tasks", "API", "Quotas", "Store", "Usage"]
# what Grafana puts in place of its built-in interval variables, for promtool
GRAFANA_INTERVALS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, with those inside collapsed rows."""
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def targets(dashboard: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for panel in all_panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield panel, target


def as_promql(expr: str) -> str:
    """A panel's query with Grafana's variables replaced as Grafana would: intervals by
    a duration, a template variable (always inside a regex matcher here) by ``.*``."""
    for variable, duration in GRAFANA_INTERVALS.items():
        expr = expr.replace(variable, duration)
    return _VARIABLE.sub(".*", expr)


def test_the_dashboard_is_grafana_json_with_its_variables(dashboard: dict[str, Any]) -> None:
    assert dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("job", "site"):
        assert variables[name]["type"] == "query" and variables[name]["includeAll"]
        query = variables[name]["definition"]
        assert metric_names(query) and unknown_names(query) == set(), query
    assert [p["title"] for p in dashboard["panels"] if p["type"] == "row"] == ROWS


def test_panel_ids_are_unique_and_panels_do_not_overlap(dashboard: dict[str, Any]) -> None:
    panels = list(all_panels(dashboard["panels"]))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], int] = {}
    for panel in panels:
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24, panel["title"]
        for x in range(box["x"], box["x"] + box["w"]):
            for y in range(box["y"], box["y"] + box["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps panel {cells[(x, y)]}"
                cells[(x, y)] = panel["id"]


def test_every_query_names_exported_metrics_with_their_labels(
        dashboard: dict[str, Any]) -> None:
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    count = 0
    for panel, target in targets(dashboard):
        expr, where = target["expr"], f"{panel['title']} ({target['refId']})"
        assert metric_names(expr), f"{where} names no cheeto metric"
        assert unknown_names(expr) == set(), f"{where} names metrics cheeto does not export"
        assert selector_problems(expr) == [], where
        for braced, plain in _VARIABLE.findall(expr):
            name = braced or plain
            assert name in variables or f"${name}" in GRAFANA_INTERVALS, (where, name)
        assert panel["datasource"]["uid"] == target["datasource"]["uid"] == "${datasource}"
        count += 1
    assert count >= len(SPECS)


def test_the_panels_cover_every_family(dashboard: dict[str, Any]) -> None:
    shown = {family_of(name) for _, target in targets(dashboard)
             for name in metric_names(target["expr"])}
    assert set(SPECS) - shown == set(), "families no panel shows"


def test_every_query_is_promql_by_promtool(dashboard: dict[str, Any], tmp_path: Path) -> None:
    """promtool parses each query as a recording rule: a typo, a stray Grafana variable
    or a bad function call fails here, not on an operator's screen."""
    rules = [{"record": f"dashboard:panel_{panel['id']}_{target['refId']}",
              "expr": as_promql(target["expr"])} for panel, target in targets(dashboard)]
    variables = [v["definition"] for v in dashboard["templating"]["list"]
                 if v["type"] == "query"]
    for index, definition in enumerate(variables):  # label_values(SELECTOR, label)
        selector = re.fullmatch(r"label_values\((.*),\s*\w+\)", definition)
        assert selector, definition
        rules.append({"record": f"dashboard:variable_{index}", "expr": selector.group(1)})
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run_promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_promtool_catches_a_broken_query(tmp_path: Path) -> None:
    """The check above works: a query Grafana would show as an error fails promtool."""
    path = tmp_path / "broken.yml"
    broken = as_promql('sum by (site) (rate(cheeto_usage_lag_seconds{site=~"$site"}[5m])')
    path.write_text(yaml.safe_dump(
        {"groups": [{"name": "x", "rules": [{"record": "x:y", "expr": broken}]}]}))
    result = run_promtool("check", "rules", str(path))
    assert result.returncode != 0
