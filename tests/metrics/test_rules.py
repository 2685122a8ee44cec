"""The shipped alert rules (deploy/prometheus/cheeto-rules.yml, issue 30): Prometheus's
own promtool checks them and runs their unit tests, every alert is tested both firing
and quiet, and every metric a rule names is one cheeto exports (``names.SPECS``), with
labels that family has. The example scrape config passes ``promtool check config``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from cheeto_like.metrics.names import all_exposed_names
from tests.metrics.promql import (
    PROMETHEUS_DIR,
    metric_names,
    run_promtool,
    selector_problems,
    unknown_names,
)

RULES = PROMETHEUS_DIR / "cheeto-rules.yml"
RULE_TESTS = PROMETHEUS_DIR / "cheeto-rules.test.yml"
SCRAPE_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
SEVERITIES = {"critical", "warning"}
# the issue's six alerts; more may follow, these may not go
REQUIRED = {"CheetoSyncStale", "CheetoSyncGuardTripped", "CheetoTaskFailing",
            "CheetoAPI5xx", "CheetoSignInSpray", "CheetoQuotaTableStale"}


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def alert_names() -> set[str]:
    return {rule["alert"] for rule in rules() if "alert" in rule}


def test_promtool_check_rules() -> None:
    result = run_promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    result = run_promtool("test", "rules", RULE_TESTS.name, cwd=PROMETHEUS_DIR)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_issues_alerts_are_there_in_group_cheeto() -> None:
    doc = yaml.safe_load(RULES.read_text())
    assert [group["name"] for group in doc["groups"]] == ["cheeto"]
    assert alert_names() >= REQUIRED


def test_every_alert_fires_in_a_test_and_stays_quiet_in_another() -> None:
    """An alert tested only firing could fire always; only quiet, never."""
    fired: set[str] = set()
    quiet: set[str] = set()
    doc = yaml.safe_load(RULE_TESTS.read_text())
    for case in doc["tests"]:
        for check in case.get("alert_rule_test", ()):
            expected = check.get("exp_alerts") or []
            (fired if expected else quiet).add(check["alertname"])
            for alert in expected:  # each expectation spells out what an operator reads
                assert set(alert["exp_annotations"]) == {"summary", "description"}, alert
                assert "severity" in alert["exp_labels"], alert
    assert alert_names() - fired == set(), "never tested firing"
    assert alert_names() - quiet == set(), "never tested quiet"


def test_every_alert_has_a_severity_and_says_what_to_do() -> None:
    for rule in rules():
        if "alert" not in rule:
            continue
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description"}, rule["alert"]
        assert annotations["summary"].strip() and len(annotations["description"]) > 80


def test_rules_name_only_exported_metrics_with_their_labels() -> None:
    exposed = all_exposed_names()
    assert exposed, "names.SPECS is empty"
    named: set[str] = set()
    for rule in rules():
        expr = rule["expr"]
        names = metric_names(expr)
        what = rule.get("alert") or rule.get("record")
        assert names or "up{" in expr, f"{what} names no cheeto metric"
        assert unknown_names(expr) == set(), f"{what} names metrics cheeto does not export"
        assert selector_problems(expr) == [], what
        named |= names
    assert named <= exposed


def test_the_name_check_catches_a_misspelt_metric() -> None:
    """The check above is only as good as its extraction: a typo must show."""
    expr = 'sum(rate(cheeto_api_request_total{status=~"5.."}[5m])) / on() cheeto_build_info'
    assert unknown_names(expr) == {"cheeto_api_request_total"}
    assert selector_problems('cheeto_api_requests_total{stauts="500"}') != []
    assert metric_names('cheeto_queue_messages{queue="cheeto_x"}') == {"cheeto_queue_messages"}


def test_the_example_scrape_config_passes_promtool(tmp_path: Path) -> None:
    """prometheus.yml as shipped, with its token file and rules beside it in a temporary
    directory (promtool checks that a credentials file exists)."""
    token = tmp_path / "cheeto-metrics.token"
    token.write_text("example-token\n")
    os.chmod(token, 0o600)
    text = SCRAPE_CONFIG.read_text()
    config = tmp_path / "prometheus.yml"
    config.write_text(text.replace("/etc/prometheus/cheeto-metrics.token", str(token)))
    (tmp_path / RULES.name).write_text(RULES.read_text())
    result = run_promtool("check", "config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = [job["job_name"] for job in yaml.safe_load(text)["scrape_configs"]]
    assert jobs == ["cheeto-api", "cheeto-hub-worker", "cheeto-beat", "cheeto-site-worker"]
    for job in yaml.safe_load(text)["scrape_configs"]:
        assert job["authorization"] == {
            "type": "Bearer", "credentials_file": "/etc/prometheus/cheeto-metrics.token"}
        for static in job["static_configs"]:
            assert "site" not in static.get("labels", {}), "would become exported_site"
