"""`cheeto ng usage …` and `cheeto ng quota …`: output streams, exit codes, the CSV that
Python's csv module reads with the documented columns, and bad input as one line."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from ruamel.yaml import YAML

from cheeto_like.models import GpuFactor, History, Quota, UsageRecord
from cheeto_like.models.fields import utcnow
from cheeto_like.operations.usage import ingest
from cheeto_like.queries.usage import factor_table

from ..factories import make_group, make_site, make_user
from ..operations.test_usage import job


@pytest.fixture
async def farm(db):
    await make_site(db, "farm")
    await make_user(db, "alice")
    await make_group(db, "lab")
    start = utcnow().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    await ingest(db, "farm", [
        job("1", "alice", "lab", start=start + timedelta(minutes=1), minutes=60),
        job("2", "alice", "lab", partition="gpu", start=start + timedelta(minutes=2),
            minutes=30, tres="cpu=2,gres/gpu:a100=2"),
        job("3", "bob", "other", start=start + timedelta(minutes=3), minutes=6)],
        await factor_table("farm"))
    return db


@pytest.fixture
def priced_config(cli_config, tmp_path):
    yaml = YAML(typ="safe")
    data = yaml.load(cli_config.read_text())
    data["usage"] = {"currency": "EUR", "rates": {"farm": {
        "gpu": {"cpu_hour": 0.1, "gpu_hour": 2.0}, "*": {"cpu_hour": 0.05}}}}
    path = tmp_path / "priced.yaml"
    buffer = io.StringIO()
    yaml.dump(data, buffer)
    path.write_text(buffer.getvalue())
    return path


CSV_COLUMNS = ["site", "start", "end", "user", "jobs", "cpu_minutes", "gpu_minutes",
               "cpu_hours", "gpu_hours"]


async def test_report_csv_opens_in_the_csv_module_with_the_documented_columns(cli, farm):
    r = await cli("ng", "usage", "report", "-s", "farm", "--by", "user", "--csv")
    assert r.code == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert list(rows[0]) == CSV_COLUMNS
    assert [(row["user"], row["jobs"], row["cpu_minutes"], row["gpu_minutes"]) for row in rows
            ] == [("alice", "2", "180.0", "60.0"), ("bob", "1", "12.0", "0.0")]
    assert rows[0]["site"] == "farm"
    datetime.fromisoformat(rows[0]["start"])


async def test_report_with_a_rate_card_adds_cost(cli, farm, priced_config):
    r = await cli("ng", "usage", "report", "-s", "farm", "--by", "partition", "--csv",
                  config=priced_config)
    assert r.code == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert list(rows[0])[-1] == "cost"
    # cpu partition: 132 cpu-min at 0.05/h; gpu: 60 cpu-min at 0.1 + 60 gpu-min at 2.0
    assert {row["partition"]: float(row["cost"]) for row in rows} == {"cpu": 0.11, "gpu": 2.1}
    r = await cli("ng", "usage", "report", "-s", "farm", "--json", config=priced_config)
    data = r.json()
    assert data["currency"] == "EUR" and data["total"]["cost"] == 2.21
    r = await cli("ng", "usage", "report", "-s", "farm", "--json", "--no-cost",
                  config=priced_config)
    assert "cost" not in r.json()["total"]


async def test_report_human_output_goes_to_stderr(cli, farm):
    r = await cli("ng", "usage", "report", "-s", "farm", "--account", "lab", "--by", "gpu-type")
    assert r.code == 0 and r.stdout == ""
    assert "a100" in r.stderr


@pytest.mark.parametrize(("argv", "message"), [
    (["ng", "usage", "report", "-s", "nowhere"], "nowhere"),
    (["ng", "usage", "report", "-s", "farm", "--start", "2026-01-01"], "go together"),
    (["ng", "usage", "report", "-s", "farm", "--start", "2026-02-01", "--end", "2026-01-01"],
     "after"),
    (["ng", "quota", "set", "-s", "farm", "--user", "alice", "--cpu", "lots"], "--cpu"),
    (["ng", "quota", "set", "-s", "farm", "--cpu", "10h"], "--user or --account"),
    (["ng", "quota", "set", "-s", "farm", "--user", "ghost", "--cpu", "10h"], "ghost"),
    (["ng", "quota", "adjust", "-s", "farm", "--user", "alice", "--cpu", "-1h"], "--reason"),
    (["ng", "quota", "gpu-factor", "set", "-s", "farm", "--type", "a100", "--factor", "-1"],
     "factor"),
    (["ng", "usage", "prune", "--before", "+1d", "--force"], "future"),
    (["ng", "usage", "collect", "-s", "farm", "--since", "+1d"], "window is empty"),
    (["ng", "usage", "collect", "-s", "nowhere"], "nowhere"),
    (["ng", "quota", "defaults", "set", "-s", "farm", "--period", "explicit"], "explicit"),
])
async def test_bad_input_is_one_line_exit_2_and_writes_nothing(cli, farm, argv, message):
    before = await History.count()
    r = await cli(*argv)
    assert r.code == 2, r.stderr
    assert len(r.error_lines) == 1 and message in r.stderr
    assert "Traceback" not in r.stderr
    assert await History.count() == before and await Quota.count() == 0


async def test_quota_set_adjust_show(cli, farm):
    r = await cli("ng", "quota", "set", "-s", "farm", "--user", "alice", "--cpu", "10h",
                  "--gpu", "unlimited", "--period", "monthly")
    assert r.code == 0, r.stderr
    r = await cli("ng", "quota", "adjust", "-s", "farm", "--user", "alice", "--cpu", "-20m",
                  "--reason", "node failure on job 1")
    assert r.code == 0, r.stderr
    r = await cli("ng", "quota", "show", "-s", "farm", "--user", "alice", "--json",
                  "--squeue", "/nonexistent/squeue")
    assert r.code == 0, r.stderr
    data = r.json()
    assert data["preallocated_known"] is False and "not found" in data["preallocated_note"]
    [alice] = data["subjects"]
    assert alice["cpu_minutes"] == {"used": 160.0, "preallocated": 0.0, "quota": 600.0,
                                    "carried_over": 0.0, "percent": 26.7, "source": "own"}
    assert alice["gpu_minutes"]["quota"] is None and alice["gpu_minutes"]["percent"] is None
    r = await cli("ng", "quota", "show", "-s", "farm", "--no-squeue")
    assert r.code == 0 and r.stdout == ""
    assert "alice" in r.stderr and "bob" in r.stderr and "preallocated is 0" in r.stderr


async def test_defaults_and_gpu_factors(cli, farm):
    r = await cli("ng", "quota", "defaults", "set", "-s", "farm", "--user-cpu", "600m",
                  "--account-gpu", "100h", "--period", "quarterly", "--carry-over")
    assert r.code == 0, r.stderr
    r = await cli("ng", "quota", "defaults", "show", "-s", "farm", "--json")
    data = r.json()
    assert (data["user_cpu_minutes"], data["account_gpu_minutes"], data["period"],
            data["carry_over"]) == (600.0, 6000.0, "quarterly", True)
    r = await cli("ng", "quota", "gpu-factor", "set", "-s", "farm", "--type", "a100",
                  "--factor", "2")
    assert r.code == 0, r.stderr
    r = await cli("ng", "quota", "gpu-factor", "list", "-s", "farm", "--json")
    [row] = r.json()
    assert (row["type"], row["factor"], row["current"]) == ("a100", 2.0, True)
    assert await GpuFactor.count() == 1


async def test_prune_asks_without_a_terminal_and_dry_run_counts(cli, farm):
    cut = (utcnow() + timedelta(seconds=0)).isoformat()
    r = await cli("ng", "usage", "prune", "--before", cut, "-s", "farm")
    assert r.code == 2 and "not confirmed" in r.stderr
    r = await cli("ng", "usage", "prune", "--before", cut, "--dry-run")
    assert r.code == 0 and "would delete" in r.stderr
    assert await UsageRecord.count() == 3
    early = datetime(2000, 1, 1, tzinfo=UTC).isoformat()
    r = await cli("ng", "usage", "prune", "--before", early, "--force")
    assert r.code == 0 and "deleted 0" in r.stderr


async def test_prune_refuses_to_refund_quota_in_force_unless_told(cli, farm):
    r = await cli("ng", "quota", "defaults", "set", "-s", "farm", "--user-cpu", "10h",
                  "--period", "monthly")
    assert r.code == 0, r.stderr
    cut = utcnow().isoformat()
    for extra in (["--force"], ["--dry-run"], []):  # refused before any question
        r = await cli("ng", "usage", "prune", "--before", cut, "-s", "farm", *extra)
        assert r.code == 2 and len(r.error_lines) == 1, r.stderr
        assert "3 at site farm, period from" in r.stderr and "--refund-quota" in r.stderr
    assert await UsageRecord.count() == 3
    assert await History.find({"op": "prune_usage"}).count() == 0
    r = await cli("ng", "usage", "prune", "--before", cut, "--dry-run", "--refund-quota")
    assert r.code == 0 and "would delete 3" in r.stderr and "refunding quota: 3" in r.stderr
    r = await cli("ng", "usage", "prune", "--before", cut, "-s", "farm", "--refund-quota")
    assert r.code == 2 and "not confirmed" in r.stderr  # still asks first
    r = await cli("ng", "usage", "prune", "--before", cut, "-s", "farm", "--refund-quota",
                  "--force")
    assert r.code == 0 and "deleted 3" in r.stderr and "refunding quota" in r.stderr
    assert await UsageRecord.count() == 0
    [row] = await History.find({"op": "prune_usage"}).to_list()
    assert (row.changes["refunded"], row.changes["refund_quota"]) == (3, True)


async def test_a_gpu_only_quota_shows_the_cpu_default_it_follows(cli, farm):
    r = await cli("ng", "quota", "defaults", "set", "-s", "farm", "--user-cpu", "10h")
    assert r.code == 0, r.stderr
    r = await cli("ng", "quota", "set", "-s", "farm", "-u", "alice", "--gpu", "1m")
    assert r.code == 0, r.stderr
    assert "CPU 600 min (10.00 h) (site default), GPU 1 min" in r.stderr
    r = await cli("ng", "quota", "defaults", "set", "-s", "farm", "--user-cpu", "20h")
    assert r.code == 0, r.stderr
    r = await cli("ng", "quota", "show", "-s", "farm", "-u", "alice", "--no-squeue", "--json")
    [alice] = r.json()["subjects"]
    assert alice["source"] == "own"
    assert (alice["cpu_minutes"]["quota"], alice["cpu_minutes"]["source"]) == (1200.0,
                                                                               "default")
    assert (alice["gpu_minutes"]["quota"], alice["gpu_minutes"]["source"]) == (1.0, "own")
    r = await cli("ng", "quota", "show", "-s", "farm", "-u", "alice", "--no-squeue")
    assert r.code == 0 and "1200.0 (default)" in r.stderr
    r = await cli("ng", "quota", "set", "-s", "farm", "-u", "alice", "--cpu", "unlimited")
    assert r.code == 0 and "CPU unlimited," in r.stderr and "site default), GPU" not in r.stderr
    r = await cli("ng", "quota", "show", "-s", "farm", "-u", "alice", "--no-squeue", "--json")
    [alice] = r.json()["subjects"]
    assert alice["cpu_minutes"]["quota"] is None and alice["cpu_minutes"]["source"] == "own"


async def test_quota_notify_dry_run_lists_what_is_due(cli, farm):
    r = await cli("ng", "quota", "set", "-s", "farm", "--user", "alice", "--cpu", "2h")
    assert r.code == 0, r.stderr
    r = await cli("ng", "quota", "notify", "-s", "farm", "--dry-run", "--json")
    assert r.code == 0, r.stderr
    assert [(d["name"], d["resource"], d["threshold"]) for d in r.json()["due"]] == [
        ("alice", "cpu", 100)]
    r = await cli("ng", "quota", "notify", "-s", "farm")  # no mail section: one line, 2
    assert r.code == 2 and "mail section" in r.stderr and len(r.error_lines) == 1


async def test_summary_lists_accounts_fullest_first_with_quota_and_percent(cli, farm):
    await make_group(farm, "quiet")
    for argv in (["--account", "lab", "--cpu", "4h", "--gpu", "1h"],
                 ["--account", "quiet", "--cpu", "10h"]):
        r = await cli("ng", "quota", "set", "-s", "farm", *argv, "--period", "monthly")
        assert r.code == 0, r.stderr
    r = await cli("ng", "usage", "summary", "-s", "farm", "--csv")
    assert r.code == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert list(rows[0]) == ["site", "account", "source", "period", "cpu_used_h",
                             "cpu_quota_h", "cpu_percent", "gpu_used_h", "gpu_quota_h",
                             "gpu_percent", "blocked"]
    assert [(row["account"], row["cpu_used_h"], row["cpu_quota_h"], row["cpu_percent"],
             row["gpu_percent"], row["blocked"]) for row in rows] == [
        ("lab", "3.0", "4.0", "75.0", "100.0", "True"),  # out of GPU minutes: held
        ("quiet", "0.0", "10.0", "0.0", "", "False"),
        ("other", "0.2", "", "", "", "False")]  # no quota: last
    r = await cli("ng", "usage", "summary", "-s", "farm", "--json")
    assert r.code == 0 and r.json()["accounts"][0]["account"] == "lab"
    r = await cli("ng", "usage", "summary", "-s", "farm")
    assert r.code == 0 and r.stdout == "" and "fullest first" in r.stderr
    r = await cli("ng", "usage", "summary", "-s", "nowhere")
    assert r.code == 2 and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("by", "expected"), [
    ("user", {"alice": 2, "bob": 1}),
    ("account", {"lab": 2, "other": 1}),
    ("partition", {"cpu": 2, "gpu": 1}),
    ("gpu-type", {"a100": 1}),  # jobs without GPUs have no GPU type row
    ("day", "first-of-month"),
])
async def test_report_by_each_grouping(cli, farm, by, expected):
    r = await cli("ng", "usage", "report", "-s", "farm", "--by", by, "--json")
    assert r.code == 0, r.stderr
    data = r.json()
    assert data["by"] == by and data["period"] == "monthly"
    if expected == "first-of-month":
        expected = {f"{utcnow():%Y-%m}-01": 3}
    assert {row[by]: row["jobs"] for row in data["rows"]} == expected
    assert data["total"]["jobs"] == sum(expected.values())  # gpu-type: the GPU jobs


async def test_report_periods_windows_and_one_subject(cli, farm):
    for period in ("monthly", "quarterly", "yearly", "none"):
        r = await cli("ng", "usage", "report", "-s", "farm", "--period", period, "--json")
        assert r.code == 0, r.stderr
        assert r.json()["period"] == period and r.json()["total"]["jobs"] == 3
    r = await cli("ng", "usage", "report", "-s", "farm", "--period", "quarterly",
                  "--user", "alice", "--json")
    data = r.json()
    assert (data["user"], data["total"]["jobs"], data["total"]["cpu_minutes"]) == (
        "alice", 2, 180.0)
    r = await cli("ng", "usage", "report", "-s", "farm", "--account", "other", "--yaml")
    assert r.code == 0 and r.yaml()["total"]["jobs"] == 1
    # an explicit window that ends before the jobs: nothing
    r = await cli("ng", "usage", "report", "-s", "farm", "--start", "2001-01-01",
                  "--end", "2001-02-01", "--json")
    assert r.code == 0 and r.json()["period"] == "explicit" and r.json()["rows"] == []
    assert r.json()["total"]["jobs"] == 0
