"""`ng quota … --budget`, `ng quota defaults set --account-budget`, `ng quota adjust
--budget`, `ng usage rate set|list` and the money columns of `ng quota show` and `ng usage
summary` (issue 28 item 5): one currency per site, another is one line and exit 2."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from ruamel.yaml import YAML

from cheeto_like.models import Quota, QuotaAdjustment, UsageRate
from cheeto_like.models.fields import utcnow
from cheeto_like.models.usage import RateTable
from cheeto_like.operations.usage import ingest
from cheeto_like.queries.usage import factor_table

from ..factories import make_group, make_site, make_user
from ..operations.test_usage import job


@pytest.fixture
def eur(cli_config, tmp_path):
    """The module's config with usage.currency EUR and a '*' rate of 1.00 per CPU-hour."""
    yaml = YAML(typ="safe")
    data = yaml.load(cli_config.read_text())
    data["usage"] = {"currency": "EUR", "rates": {"farm": {"*": {"cpu_hour": 1.0}}}}
    path = tmp_path / "eur.yaml"
    buffer = io.StringIO()
    yaml.dump(data, buffer)
    path.write_text(buffer.getvalue())
    return path


@pytest.fixture
async def farm(db):
    await make_site(db, "farm")
    await make_user(db, "alice")
    await make_group(db, "lab")
    start = utcnow() - timedelta(hours=3)
    await ingest(db, "farm", [job("1", "alice", "lab", start=start, minutes=90)],  # 3.00
                 await factor_table("farm"), rates=RateTable.build([], seed={"*": (1.0, 0)}))
    return db


async def test_a_budget_in_the_sites_currency_and_another_refused_in_one_line(cli, farm, eur):
    r = await cli("ng", "quota", "set", "-s", "farm", "--account", "lab", "--budget",
                  "10EUR", config=eur)
    assert r.code == 0, r.stderr
    assert "budget 10.00 EUR" in r.stderr
    assert (await Quota.find_one({"account": "lab"})).budget == 10.0
    r = await cli("ng", "quota", "set", "-s", "farm", "--account", "lab", "--budget",
                  "500USD", config=eur)
    assert r.code == 2 and len(r.error_lines) == 1
    assert "'500USD' is in USD, but this site charges in EUR" in r.stderr
    assert (await Quota.find_one({"account": "lab"})).budget == 10.0
    r = await cli("ng", "quota", "adjust", "-s", "farm", "--account", "lab", "--budget",
                  "+1.5EUR", "--reason", "storage", config=eur)
    assert r.code == 0, r.stderr
    assert (await QuotaAdjustment.find_one({})).money == 1.5
    r = await cli("ng", "quota", "show", "-s", "farm", "--account", "lab", "--no-squeue",
                  "--json", config=eur)
    assert r.code == 0, r.stderr
    data = r.json()
    [row] = data["subjects"]
    assert data["currency"] == "EUR"
    assert (row["budget"]["used"], row["budget"]["quota"], row["budget"]["percent"]) == (
        4.5, 10.0, 45.0)
    r = await cli("ng", "quota", "show", "-s", "farm", "--account", "lab", "--no-squeue",
                  config=eur)
    assert r.code == 0 and "budget EUR" in r.stderr and "45.0" in r.stderr


async def test_defaults_budgets_and_the_summarys_money_columns(cli, farm, eur):
    r = await cli("ng", "quota", "defaults", "set", "-s", "farm", "--account-budget", "4",
                  "--user-budget", "unlimited", config=eur)
    assert r.code == 0, r.stderr
    assert "accounts CPU unlimited GPU unlimited budget 4.00 EUR" in r.stderr
    r = await cli("ng", "quota", "defaults", "show", "-s", "farm", "--json", config=eur)
    assert (r.json()["account_budget"], r.json()["currency"]) == (4.0, "EUR")
    r = await cli("ng", "usage", "summary", "-s", "farm", "--csv", config=eur)
    assert r.code == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert list(rows[0]) == ["site", "account", "source", "period", "cpu_used_h",
                             "cpu_quota_h", "cpu_percent", "gpu_used_h", "gpu_quota_h",
                             "gpu_percent", "cost", "budget", "budget_percent", "blocked"]
    assert [(row["account"], row["cost"], row["budget"], row["budget_percent"],
             row["blocked"]) for row in rows] == [("lab", "3.0", "4.0", "75.0", "False")]
    r = await cli("ng", "usage", "summary", "-s", "farm", config=eur)
    assert r.code == 0 and "cost and budget in EUR" in r.stderr
    r = await cli("ng", "quota", "defaults", "set", "-s", "farm", "--account-budget",
                  "4GBP", config=eur)
    assert r.code == 2 and len(r.error_lines) == 1 and "--account-budget" in r.stderr


async def test_without_rates_or_budgets_the_summary_has_no_money_columns(cli, farm):
    r = await cli("ng", "usage", "summary", "-s", "farm", "--json")
    assert r.code == 0, r.stderr
    assert "cost" not in r.json()["accounts"][0] and r.json()["currency"] is None


async def test_rates_are_set_forward_in_time_and_listed_with_the_configs(cli, farm, eur):
    r = await cli("ng", "usage", "rate", "set", "-s", "farm", "--partition", "gpu",
                  "--cpu-hour", "0.01", "--gpu-hour", "0.5", config=eur)
    assert r.code == 0, r.stderr
    assert "0.01 EUR per CPU-hour, 0.5 EUR per GPU-hour" in r.stderr
    r = await cli("ng", "usage", "rate", "set", "-s", "farm", "--partition", "gpu",
                  "--cpu-hour", "1", "--gpu-hour", "1", "--from", "2020-01-01", config=eur)
    assert r.code == 2 and "--from is in the past" in r.stderr and len(r.error_lines) == 1
    assert await UsageRate.count() == 1
    r = await cli("ng", "usage", "rate", "list", "-s", "farm", "--json", config=eur)
    assert r.code == 0, r.stderr
    assert [(x["partition"], x["source"]) for x in r.json()] == [("*", "config"),
                                                                 ("gpu", "store")]
