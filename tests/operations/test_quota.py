"""Quotas on the real store: set (defaults on create, keep what is not given), remove,
site defaults, signed adjustments, and the status (used, preallocated, percent,
carry-over) in a fixed number of queries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.adapters.squeue import RunningJob
from cheeto_like.errors import InvalidInput, NotFound
from cheeto_like.models import History, Quota, QuotaAdjustment, QuotaDefaults
from cheeto_like.models.usage import FactorTable
from cheeto_like.operations.quota import AdjustUsage, RemoveQuota, SetQuota, SetQuotaDefaults
from cheeto_like.operations.usage import ingest
from cheeto_like.queries.quota import quota_status, reservations
from cheeto_like.queries.usage import factor_table

from ..factories import AUTHOR, history, make_group, make_site, make_user
from .test_usage import job

NOW = datetime(2026, 11, 25, 12, tzinfo=UTC)


@pytest.fixture
async def farm(db):
    await make_site(db, "farm")
    await make_user(db, "alice")
    await make_user(db, "bob")
    await make_group(db, "lab")
    return db


async def test_set_quota_creates_from_the_defaults_and_keeps_what_is_not_given(farm):
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", user_cpu_minutes=600.0,
                               user_gpu_minutes=60.0, period="monthly")
    quota = await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=1200.0)
    assert (quota.cpu_minutes, quota.gpu_minutes, quota.period) == (1200.0, 60.0, "monthly")
    again = await SetQuota.run(farm, AUTHOR, site="farm", user="alice", gpu_minutes=None)
    assert (again.cpu_minutes, again.gpu_minutes) == (1200.0, None)  # None: unlimited
    assert await Quota.count() == 1
    rows = await history("set_quota")
    assert [r.changes["created"] for r in rows] == [True, False]
    assert rows[1].changes["before"] == {"gpu_minutes": "60.0"}


async def test_an_account_quota_with_an_explicit_period(farm):
    start, end = datetime(2026, 9, 1, tzinfo=UTC), datetime(2027, 6, 1, tzinfo=UTC)
    quota = await SetQuota.run(farm, AUTHOR, site="farm", account="lab", cpu_minutes=10.0,
                               period="explicit", start=start, end=end)
    assert (quota.account, quota.period_start, quota.period_end) == ("lab", start, end)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"user": "alice", "account": "lab"}, "exactly one"),
    ({}, "exactly one"),
    ({"user": "nobody"}, "nobody"),
    ({"account": "nolab"}, "nolab"),
    ({"user": "alice", "period": "explicit"}, "explicit period needs"),
    ({"user": "alice", "carry_over": True}, "carry-over needs a repeating period"),
    ({"user": "alice", "cpu_minutes": -5.0}, "between 0"),
    ({"user": "alice", "start": NOW}, "--start/--end"),
])
async def test_bad_quotas_are_refused_and_write_nothing(farm, kwargs, message):
    with pytest.raises((InvalidInput, NotFound), match=message):
        await SetQuota.run(farm, AUTHOR, site="farm", **kwargs)
    assert await Quota.count() == 0
    assert await History.find({"op": "set_quota"}).count() == 0


async def test_remove_quota_falls_back_to_defaults(farm):
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=5.0)
    await RemoveQuota.run(farm, AUTHOR, site="farm", user="alice")
    assert await Quota.count() == 0
    with pytest.raises(NotFound):
        await RemoveQuota.run(farm, AUTHOR, site="farm", user="alice")


async def test_defaults_need_something_to_set(farm):
    with pytest.raises(InvalidInput, match="nothing to set"):
        await SetQuotaDefaults.run(farm, AUTHOR, site="farm")
    assert await QuotaDefaults.count() == 0


async def test_adjustments_need_an_amount_and_a_reason(farm):
    with pytest.raises(InvalidInput, match="non-zero"):
        await AdjustUsage.run(farm, AUTHOR, site="farm", user="alice", reason="x")
    with pytest.raises(InvalidInput):
        await AdjustUsage.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=-5.0,
                              reason="")
    assert await QuotaAdjustment.count() == 0


async def seed(store) -> None:
    day = datetime(2026, 11, 10, tzinfo=UTC)
    await ingest(store, "farm", [
        job("1", "alice", "lab", start=day, minutes=60),  # 120 cpu-min
        job("2", "alice", "lab", start=day, minutes=30, tres="cpu=1,gres/gpu:a100=1"),
        job("3", "bob", "lab", start=day, minutes=60),  # 120
        job("4", "alice", "lab", start=datetime(2026, 10, 10, tzinfo=UTC), minutes=60),
    ], await factor_table("farm"))


async def test_status_of_a_user_counts_the_period_and_adjustments(farm):
    await seed(farm)
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=300.0,
                       gpu_minutes=60.0, period="monthly")
    await AdjustUsage.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=-50.0,
                          reason="refund for a node failure", at=NOW)
    [status] = await quota_status("farm", NOW, user="alice")
    assert (status.source, status.start) == ("own", datetime(2026, 11, 1, tzinfo=UTC))
    assert status.cpu.used == 150.0 - 50.0  # October's job is another period
    assert status.cpu.percent == pytest.approx(33.3)
    assert (status.gpu.used, status.gpu.percent) == (30.0, 50.0)
    [row] = await history("adjust_usage")
    assert row.changes["reason"] == "refund for a node failure"


async def test_credits_never_make_usage_negative(farm):
    await seed(farm)
    await AdjustUsage.run(farm, AUTHOR, site="farm", user="bob", cpu_minutes=-10000.0,
                          reason="goodwill", at=NOW)
    [status] = await quota_status("farm", NOW, user="bob")
    assert status.cpu.used == 0.0 and status.source == "none" and status.cpu.quota is None


async def test_carry_over_adds_last_periods_unused_quota(farm):
    await seed(farm)
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=200.0,
                       period="monthly", carry_over=True)
    [status] = await quota_status("farm", NOW, user="alice")
    assert status.cpu.carried == 80.0  # October: 120 of 200 used
    assert status.cpu.quota == 280.0


async def test_site_wide_status_lists_quotas_and_everyone_who_used_the_site(farm):
    await seed(farm)
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", user_cpu_minutes=100.0,
                               account_cpu_minutes=1000.0, period="monthly")
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=500.0)
    rows = {(s.kind, s.name): s for s in await quota_status("farm", NOW)}
    assert set(rows) == {("user", "alice"), ("user", "bob"), ("account", "lab")}
    assert (rows[("user", "bob")].source, rows[("user", "bob")].cpu.percent) == ("default", 120.0)
    assert rows[("account", "lab")].cpu.used == 270.0
    assert rows[("user", "alice")].cpu.quota == 500.0


async def test_running_jobs_reserve_cpus_and_gpus_times_their_limit(farm):
    jobs = [RunningJob("10", "alice", "lab", 4, 30.0, (("a100", 1),)),
            RunningJob("11", "alice", "lab", 1, None),  # no limit: nothing to reserve
            RunningJob("12", "bob", "lab", 2, 10.0)]
    factors = FactorTable.build([("a100", NOW - timedelta(days=1), 2.0)])
    reserved = reservations(jobs, factors, NOW)
    assert reserved.users == {"alice": (120.0, 60.0), "bob": (20.0, 0.0)}
    assert reserved.accounts == {"lab": (140.0, 60.0)}
    await SetQuota.run(farm, AUTHOR, site="farm", user="bob", cpu_minutes=40.0)
    [status] = await quota_status("farm", NOW, user="bob", reserved=reserved)
    assert (status.cpu.used, status.cpu.preallocated, status.cpu.percent) == (0.0, 20.0, 50.0)


async def test_renaming_a_user_carries_their_usage_and_quota_along(farm):
    from cheeto_like.models import UsageRecord
    from cheeto_like.operations.user import RenameUser

    await seed(farm)
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=300.0,
                       period="monthly")
    await AdjustUsage.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=-50.0,
                          reason="refund", at=NOW)
    await RenameUser.run(farm, AUTHOR, name="alice", new_name="alicia")
    assert await UsageRecord.find({"user": "alice"}).count() == 0
    [status] = await quota_status("farm", NOW, user="alicia")
    assert (status.cpu.used, status.cpu.quota) == (100.0, 300.0)
    await SetQuota.run(farm, AUTHOR, site="farm", user="alicia", cpu_minutes=400.0)
    assert [(q.user, q.cpu_minutes) for q in await Quota.find({}).to_list()] == [
        ("alicia", 400.0)]


# -- what a quota does not set follows the site's defaults (issue 26, item 9) ---------------


async def test_a_gpu_only_quota_keeps_following_the_default_cpu_quota(farm):
    await seed(farm)
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", user_cpu_minutes=100.0,
                               user_gpu_minutes=10.0, period="monthly")
    quota = await SetQuota.run(farm, AUTHOR, site="farm", user="alice", gpu_minutes=1.0)
    assert (quota.cpu_minutes, quota.gpu_minutes, quota.period) == (100.0, 1.0, "monthly")
    assert quota.follows_defaults == ["cpu", "budget", "period"]
    stored = await Quota.find_one({"user": "alice"})
    assert stored.cpu_minutes is None
    assert stored.follows_defaults == ["cpu", "budget", "period"]
    [row] = await history("set_quota")
    assert (row.changes["follows_defaults"], row.changes["cpu_minutes"]) == (
        ["cpu", "budget", "period"], 100.0)
    # the default changes later: alice's CPU quota (and period) follow, her GPU does not
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", user_cpu_minutes=300.0,
                               user_gpu_minutes=20.0)
    [status] = await quota_status("farm", NOW, user="alice")
    assert (status.source, status.cpu.quota, status.gpu.quota) == ("own", 300.0, 1.0)
    assert (status.cpu.source, status.gpu.source) == ("default", "own")
    assert status.cpu.as_dict()["source"] == "default"
    assert status.cpu.used == 150.0  # November only: the monthly period it follows
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", period="quarterly")
    [status] = await quota_status("farm", NOW, user="alice")
    assert (status.period, status.start) == ("quarterly", datetime(2026, 10, 1, tzinfo=UTC))
    assert status.cpu.used == 270.0  # October's job is in the quarter
    # the site drops its CPU default: alice's CPU is unlimited with it
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", user_cpu_minutes=None)
    [status] = await quota_status("farm", NOW, user="alice")
    assert status.cpu.quota is None and status.cpu.percent is None


async def test_setting_a_followed_value_pins_it_unlimited_too(farm):
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", user_cpu_minutes=100.0,
                               period="monthly")
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", gpu_minutes=1.0)
    pinned = await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=None)
    assert (pinned.cpu_minutes, pinned.follows_defaults) == (None, ["budget", "period"])
    rows = await history("set_quota")
    assert (rows[1].changes["pinned"], rows[1].changes["before"]) == (
        ["cpu"], {"cpu_minutes": "100.0"})
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", user_cpu_minutes=50.0)
    [status] = await quota_status("farm", NOW, user="alice")
    assert (status.cpu.quota, status.cpu.source) == (None, "own")  # unlimited, pinned
    # --carry-over alone pins the period followed until then, with carry-over
    again = await SetQuota.run(farm, AUTHOR, site="farm", user="alice", carry_over=True)
    assert (again.period, again.carry_over, again.follows_defaults) == ("monthly", True, ["budget"])
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", period="yearly")
    [status] = await quota_status("farm", NOW, user="alice")
    assert status.period == "monthly"


async def test_a_quota_made_before_any_defaults_follows_them_once_set(farm):
    await seed(farm)
    quota = await SetQuota.run(farm, AUTHOR, site="farm", user="alice", gpu_minutes=60.0)
    assert (quota.cpu_minutes, quota.period) == (None, "none")  # no defaults: unlimited
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", user_cpu_minutes=200.0,
                               account_cpu_minutes=5.0, period="monthly", carry_over=True)
    [status] = await quota_status("farm", NOW, user="alice")
    assert (status.cpu.quota, status.cpu.carried) == (200.0 + 80.0, 80.0)  # October: 120
    assert status.gpu.quota == 60.0 + 60.0  # the followed period carries GPU over too


async def test_a_quota_stored_before_follows_defaults_reads_as_pinned(farm):
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", user_cpu_minutes=100.0,
                               period="monthly")
    await Quota.get_pymongo_collection().insert_one({
        "_id": "old-quota", "site": "farm", "user": "alice", "account": None,
        "cpu_minutes": 42.0, "gpu_minutes": 7.0, "period": "yearly", "period_start": None,
        "period_end": None, "carry_over": False})
    quota = await Quota.find_one({"user": "alice"})
    assert quota.follows_defaults == [] and quota.resolved(None) is quota
    [status] = await quota_status("farm", NOW, user="alice")
    assert (status.cpu.quota, status.gpu.quota, status.period) == (42.0, 7.0, "yearly")
    assert (status.cpu.source, status.gpu.source) == ("own", "own")
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", gpu_minutes=8.0)
    [status] = await quota_status("farm", NOW, user="alice")
    assert (status.cpu.quota, status.gpu.quota) == (42.0, 8.0)


async def test_the_slurm_sync_blocks_on_a_followed_default(farm):
    from cheeto_like.sync.slurm.quota import limits_in_force, quota_blocks

    await seed(farm)  # alice: 150 CPU-minutes in November
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", gpu_minutes=600.0)
    assert (await quota_blocks("farm", NOW, users=["alice"])).users == {}
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", user_cpu_minutes=130.0,
                               period="monthly")
    blocks = await quota_blocks("farm", NOW, users=["alice", "bob"])
    assert blocks.users == {"alice": (("cpu", 0),)}  # bob: 120 of 130
    following = Quota(site="farm", user="alice", follows_defaults=["cpu", "gpu", "period"])
    assert not limits_in_force([following], None)
    assert limits_in_force([following], QuotaDefaults(site="farm", user_gpu_minutes=1.0))
