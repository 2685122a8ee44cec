"""Budgets in money on the real store (issue 28 item 5): rate versions, a job's cost at its
start on its record, money used (ledger cost + money adjustments) against a budget, the
defaults' budgets followed, and the Slurm block a spent budget makes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.config.usage import UsageConfig
from cheeto_like.config.usage import UsageRate as ConfigRate
from cheeto_like.errors import InvalidInput
from cheeto_like.models import History, Quota, UsageRate, UsageRecord
from cheeto_like.models.fields import utcnow
from cheeto_like.models.quota import parse_money
from cheeto_like.models.usage import RateTable, fingerprint, price
from cheeto_like.operations.quota import (
    AdjustUsage,
    SetGpuFactor,
    SetQuota,
    SetQuotaDefaults,
    SetUsageRate,
)
from cheeto_like.operations.usage import ingest, record_content
from cheeto_like.queries.quota import platform_summary, quota_status
from cheeto_like.queries.usage import config_seed, factor_table, rate_table
from cheeto_like.sync.slurm.quota import blocks_from, quota_blocks

from ..factories import AUTHOR, make_group, make_site, make_user
from .test_usage import job

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@pytest.fixture
async def farm(db):
    await make_site(db, "farm")
    await make_user(db, "alice")
    await make_group(db, "lab")
    return db


def test_money_is_read_in_the_sites_currency_and_another_is_one_clear_line():
    assert parse_money("500USD", "USD") == 500.0
    assert parse_money("12.5 usd", "USD") == 12.5
    assert parse_money("500", "USD") == 500.0
    assert parse_money("unlimited", "USD") is None
    assert parse_money("-50USD", "USD", signed=True) == -50.0
    with pytest.raises(ValueError, match="'500EUR' is in EUR, but this site charges in USD"):
        parse_money("500EUR", "USD")
    with pytest.raises(ValueError, match="cannot read amount"):
        parse_money("-5USD", "USD")  # a budget is not signed
    with pytest.raises(ValueError, match="cannot read amount"):
        parse_money("lots", "USD")


def test_the_rate_table_looks_up_the_partition_then_star_at_a_time():
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    table = RateTable.build([("gpu", t0, 0.02, 1.0), ("gpu", t0 + timedelta(days=30), 0.04, 2.0)],
                            seed={"*": (0.01, 0.5)})
    assert table.rate("gpu", t0 - timedelta(days=1)) == (0.01, 0.5)  # before gpu's first
    assert table.rate("gpu", t0 + timedelta(days=1)) == (0.02, 1.0)
    assert table.rate("gpu", t0 + timedelta(days=31)) == (0.04, 2.0)
    assert table.rate("cpu", t0) == (0.01, 0.5)
    assert table.in_force(t0 + timedelta(days=1)) == {"*": (0.01, 0.5), "gpu": (0.02, 1.0)}
    assert not RateTable.build([]) and RateTable.build([]).rate("cpu", t0) is None
    # 120 CPU-minutes and 60 GPU-minutes at 0.01 and 0.5 per hour
    assert price(120, 60, (0.01, 0.5)) == 0.52
    assert price(120, 60, None) is None


async def test_rates_only_move_forward_and_every_version_is_in_history(farm):
    first = await SetUsageRate.run(farm, AUTHOR, site="farm", partition="gpu", cpu_hour=0.01,
                                   gpu_hour=0.5)
    later = first.effective_from + timedelta(days=3)
    await SetUsageRate.run(farm, AUTHOR, site="farm", partition="gpu", cpu_hour=0.02,
                           gpu_hour=0.75, effective_from=later)
    with pytest.raises(InvalidInput, match="rates only move forward"):
        await SetUsageRate.run(farm, AUTHOR, site="farm", partition="gpu", cpu_hour=1,
                               gpu_hour=1, effective_from=later)
    with pytest.raises(InvalidInput, match="--from is in the past"):
        await SetUsageRate.run(farm, AUTHOR, site="farm", partition="*", cpu_hour=1,
                               gpu_hour=1, effective_from=utcnow() - timedelta(days=1))
    with pytest.raises(InvalidInput, match="partition"):
        await SetUsageRate.run(farm, AUTHOR, site="farm", partition="bad name", cpu_hour=1,
                               gpu_hour=1)
    assert await UsageRate.count() == 2
    rows = await History.find({"op": "set_usage_rate"}).to_list()
    assert [r.changes["previous"] for r in rows] == [None, [0.01, 0.5]]
    table = await rate_table("farm")
    assert table.rate("gpu", later - timedelta(hours=1)) == (0.01, 0.5)
    assert table.rate("gpu", later) == (0.02, 0.75)


async def test_a_jobs_cost_is_priced_at_its_start_and_never_rewritten_by_a_later_rate(farm):
    start = datetime(2026, 11, 20, tzinfo=UTC)
    # stored rate versions (as SetUsageRate leaves them, written earlier)
    await UsageRate(site="farm", partition="gpu", cpu_hour=0.1, gpu_hour=3.0,
                    effective_from=start - timedelta(days=10)).insert()
    await UsageRate(site="farm", partition="gpu", cpu_hour=1.0, gpu_hour=30.0,
                    effective_from=start + timedelta(days=1)).insert()
    seed = config_seed(UsageConfig(rates={"farm": {"*": ConfigRate(cpu_hour=0.5)}}), "farm")
    rates = await rate_table("farm", seed)
    factors = await factor_table("farm")
    jobs = [job("1", partition="gpu", start=start, minutes=60,
                tres="cpu=2,gres/gpu=1,gres/gpu:a100=1,node=1"),
            job("2", partition="cpu", start=start, minutes=60),
            job("3", partition="gpu", start=start + timedelta(days=2), minutes=60)]
    await ingest(farm, "farm", jobs, factors, rates=rates)
    costs = {r.job_id: r.cost for r in await UsageRecord.find({}).to_list()}
    # 2 CPU-hours x 0.1 + 1 GPU-hour x 3.0; 2 CPU-hours at the seed's 0.5; the later rate
    assert costs == {"1": 3.2, "2": 1.0, "3": 2.0}
    # a re-collect with the same rates writes nothing
    again = await ingest(farm, "farm", jobs, factors, rates=rates)
    assert again.unchanged == 3
    # without any rate a record has no cost, and its fingerprint is as before money
    content = record_content("farm", jobs[1], factors)
    assert "cost" not in content
    assert fingerprint(content) == fingerprint(record_content("farm", jobs[1], factors,
                                                              RateTable.build([])))


async def charge(store, job_id: str, cost_minutes: int, *, user: str = "alice",
                 account: str = "lab", start: datetime | None = None) -> None:
    """A job of 2 CPUs for ``cost_minutes`` priced at 1.0 per CPU-hour: cost/30 money."""
    start = start or utcnow() - timedelta(hours=3)
    await ingest(store, "farm", [job(job_id, user, account, start=start,
                                     minutes=cost_minutes)],
                 await factor_table("farm"), rates=RateTable.build([], seed={"*": (1.0, 0)}))


async def test_money_used_is_the_ledgers_cost_plus_money_adjustments_against_the_budget(farm):
    quota = await SetQuota.run(farm, AUTHOR, site="farm", account="lab", budget=10.0)
    assert (quota.budget, quota.follows("budget")) == (10.0, False)
    assert quota.follows("cpu")  # the minutes still follow the defaults
    await charge(farm, "1", 90)  # 3 CPU-hours: 3.0
    await AdjustUsage.run(farm, AUTHOR, site="farm", account="lab", money=4.5,
                          reason="storage bill")
    [status] = await quota_status("farm", utcnow(), account="lab")
    assert (status.budget.used, status.budget.quota, status.budget.percent) == (7.5, 10.0, 75.0)
    assert (status.budget.source, status.cpu.quota) == ("own", None)
    await AdjustUsage.run(farm, AUTHOR, site="farm", account="lab", money=-50.0,
                          reason="credit")
    [status] = await quota_status("farm", utcnow(), account="lab")
    assert status.budget.used == 0.0  # floored at zero
    [row] = await History.find({"op": "adjust_usage"}).limit(1).to_list()
    assert row.changes["money"] == 4.5
    with pytest.raises(InvalidInput, match="--budget must be between"):
        await SetQuota.run(farm, AUTHOR, site="farm", account="lab", budget=-1.0)


async def test_a_budget_sits_beside_minutes_and_the_defaults_budget_is_followed(farm):
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", account_budget=5.0,
                               user_budget=100.0)
    await SetQuota.run(farm, AUTHOR, site="farm", account="lab", cpu_minutes=10_000.0)
    await charge(farm, "1", 180)  # 6.0 of money, 360 CPU-minutes
    [status] = await quota_status("farm", utcnow(), account="lab")
    assert (status.cpu.percent, status.budget.quota, status.budget.source) == (3.6, 5.0,
                                                                                "default")
    assert status.budget.percent == 120.0
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", account_budget=50.0)
    [status] = await quota_status("farm", utcnow(), account="lab")
    assert status.budget.quota == 50.0  # followed, never copied
    stored = await Quota.find_one({"account": "lab"})
    assert stored.budget is None and "budget" in stored.follows_defaults


async def test_a_spent_budget_blocks_cpu_and_gpu_and_the_summary_shows_it(farm):
    await SetQuota.run(farm, AUTHOR, site="farm", account="lab", budget=5.0)
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", budget=1000.0)
    await charge(farm, "1", 150)  # 5.0: the whole budget
    blocks = await quota_blocks("farm", utcnow(), accounts=["lab"], users=["alice"])
    assert dict(blocks.accounts) == {"lab": (("cpu", 0), ("gres/gpu", 0))}
    assert blocks.users == {}
    assert "budget 5.00 of 5.00" in blocks.notes[("account", "lab")]
    [row] = await platform_summary("farm", utcnow(), ["lab"])
    assert (row.cost, row.budget, row.budget_percent, row.blocked) == (5.0, 5.0, 100.0, True)
    # pure: a budget below 100 % blocks nothing
    statuses = await quota_status("farm", utcnow(), user="alice")
    assert blocks_from(statuses).users == {}


async def test_a_gpu_factor_counts_in_the_cost_through_the_gpu_minutes(farm):
    start = utcnow() + timedelta(seconds=5)
    await SetGpuFactor.run(farm, AUTHOR, site="farm", gpu_type="a100", factor=2.0,
                           effective_from=start)
    rates = RateTable.build([], seed={"*": (0.0, 1.0)})
    later = start + timedelta(minutes=1)
    await ingest(farm, "farm", [job("1", start=later, minutes=60,
                                    tres="cpu=1,gres/gpu=1,gres/gpu:a100=1,node=1")],
                 await factor_table("farm"), rates=rates)
    [record] = await UsageRecord.find({}).to_list()
    assert (record.gpu_minutes, record.cost) == (120.0, 2.0)  # 1 GPU-hour x 2 x 1.0


async def test_the_report_counts_stored_costs_and_prices_only_the_rest(farm):
    """Records priced at their start keep their cost in ``ng usage report``; records from
    before any rate are priced with the config's card, as before; a query per part."""
    from cheeto_like.queries.usage import Rate, usage_report

    start = utcnow() - timedelta(hours=5)
    factors = await factor_table("farm")
    await ingest(farm, "farm", [job("1", start=start, minutes=60)], factors)  # unpriced
    await ingest(farm, "farm", [job("2", start=start, minutes=60),
                                job("3", "bob", start=start, minutes=30)], factors,
                 rates=RateTable.build([], seed={"*": (10.0, 0.0)}))  # 20.00 and 10.00
    end = utcnow() + timedelta(hours=1)
    report = await usage_report("farm", start, end, by="user",
                                rates={"*": Rate(cpu_hour=1.0)}, stored_costs=True)
    # alice: 20.00 stored + 2 CPU-hours at the card's 1.00; bob: 10.00 stored
    assert {r["user"]: r["cost"] for r in report.table()} == {"alice": 22.0, "bob": 10.0}
    assert report.total.cost == 32.0 and report.queries == 4  # 2 + 2 priced
    nothing = await usage_report("farm", start, end, rates={}, stored_costs=True)
    assert nothing.total.cost == 30.0 and nothing.total.unpriced_partitions == {"cpu"}
