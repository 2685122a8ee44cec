"""``metrics.families``: families made from ``names.SPECS`` on first use, and refused
when a call site names something the table does not hold (a programming error).

These run in the test process without ``activate``: a family can be made and recorded
into this package's own registry, while the facade stays a no-op (``active()`` false).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from prometheus_client import generate_latest

from cheeto_like import metrics
from cheeto_like.metrics import families
from cheeto_like.metrics.names import SPECS


def test_a_family_is_made_once_and_labelled_as_its_spec():
    child = families.family("cheeto_sync_runs_total",
                            {"target": "ldap", "site": "farm", "mode": "apply", "outcome": "ok"})
    child.inc(2)
    assert families.metric("cheeto_sync_runs_total") is families.metric("cheeto_sync_runs_total")
    text = generate_latest(families.REGISTRY).decode()
    assert 'cheeto_sync_runs_total{mode="apply",outcome="ok",site="farm",target="ldap"}' in text
    assert "cheeto_sync_runs_total" in families.created()


def test_a_family_without_labels_is_the_metric_itself():
    found = families.family("cheeto_store_write_conflicts_total", {})
    assert found is families.metric("cheeto_store_write_conflicts_total")


def test_histograms_use_the_spec_buckets():
    families.family("cheeto_api_request_duration_seconds",
                    {"method": "GET", "route": "/healthz"}).observe(0.02)
    text = generate_latest(families.REGISTRY).decode()
    for bound in SPECS["cheeto_api_request_duration_seconds"].buckets:
        assert (f'cheeto_api_request_duration_seconds_bucket{{le="{float(bound)}",'
                'method="GET",route="/healthz"}') in text


def test_gauges_take_the_spec_multiprocess_mode():
    gauge = families.metric("cheeto_sync_drift_items")
    assert gauge._multiprocess_mode == SPECS["cheeto_sync_drift_items"].multiprocess_mode


@pytest.mark.parametrize(("name", "labels", "error"), [
    ("cheeto_nope_total", {}, "unknown metric family 'cheeto_nope_total'"),
    ("cheeto_task_runs_total", {"task": "x"}, "takes labels ['task', 'site', 'outcome']"),
    ("cheeto_task_runs_total", {"task": "x", "site": "s", "outcome": "ok", "user": "bob"},
     "takes labels"),
    ("cheeto_build_info", {"version": "1", "role": "api"}, "collected at scrape time"),
])
def test_unknown_names_other_labels_and_collected_families_are_refused(name, labels, error):
    with pytest.raises(ValueError, match=error.replace("[", r"\[").replace("]", r"\]")):
        families.family(name, labels)


def test_collected_rows_are_checked_against_the_spec():
    built = families.collected("cheeto_usage_lag_seconds", [({"site": "farm"}, 12.5)])
    assert [(s.labels, s.value) for s in built.samples] == [({"site": "farm"}, 12.5)]
    with pytest.raises(ValueError, match="takes labels"):
        families.collected("cheeto_usage_lag_seconds", [({"site": "farm", "user": "x"}, 1)])
    with pytest.raises(ValueError, match="histogram"):
        families.collected("cheeto_task_duration_seconds", [])
    counter = families.collected("cheeto_quota_submit_refusals_total",
                                 [({"site": "farm", "quota": "cpu"}, 3)])
    assert counter.samples[0].name == "cheeto_quota_submit_refusals_total"


def test_the_facade_records_nothing_until_activated():
    assert not metrics.active()
    metrics.inc("cheeto_nope_total")  # not even checked: a no-op costs one global read
    assert "cheeto_task_queue_seconds" not in families.created()
    metrics.observe("cheeto_task_queue_seconds", 1.0, task="x")
    assert "cheeto_task_queue_seconds" not in families.created()


def test_the_cli_never_imports_prometheus_client():
    """The facade is imported by recording modules the CLI loads: it must stay cheap."""
    code = ("import sys; from cheeto_like import metrics; "
            "metrics.inc('cheeto_task_runs_total', task='x', site='s', outcome='ok'); "
            "metrics.add_collector('all', lambda: []); "
            "print('prometheus_client' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.strip() == "False"
