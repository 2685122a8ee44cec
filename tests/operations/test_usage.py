"""The usage ledger on the real store: upsert by key (a re-collect writes nothing, a
requeued job is replaced, not doubled), GPU factors at the job's start, pruning, and the
aggregated reports."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.adapters.sacct import SacctJob, parse_line
from cheeto_like.errors import InvalidInput, NotFound
from cheeto_like.models import GpuFactor, History, UsageRecord
from cheeto_like.models.fields import utcnow
from cheeto_like.models.quota import period_window, previous_window
from cheeto_like.operations.quota import SetGpuFactor, SetQuota, SetQuotaDefaults
from cheeto_like.operations.usage import PruneUsage, ingest, prune, prune_usage
from cheeto_like.queries.usage import Rate, factor_table, usage_report

from ..factories import AUTHOR, history, make_site

DAY = datetime(2026, 11, 20, tzinfo=UTC)


def job(job_id: str, user: str = "alice", account: str = "lab", *, partition: str = "cpu",
        start: datetime = DAY, minutes: int = 30, tres: str = "cpu=2,mem=100M,node=1",
        state: str = "COMPLETED") -> SacctJob:
    end = start + timedelta(minutes=minutes)
    return parse_line(f"{job_id}|farm|{user}|{account}|{partition}|normal|{state}|"
                      f"{start:%Y-%m-%dT%H:%M:%S}|{end:%Y-%m-%dT%H:%M:%S}|{minutes * 60}|{tres}")


@pytest.fixture
async def farm(db):
    await make_site(db, "farm")
    return db


async def records() -> list[UsageRecord]:
    return await UsageRecord.find({}).sort("job_id").to_list()


async def test_ingest_writes_one_charged_record_per_job(farm):
    jobs = [job("1"), job("2_3", "bob", tres="cpu=4,gres/gpu=1"), job("4+1", minutes=60)]
    counts = await ingest(farm, "farm", jobs, await factor_table("farm"))
    assert (counts.seen, counts.inserted, counts.replaced, counts.unchanged) == (3, 3, 0, 0)
    rows = {r.job_id: r for r in await records()}
    assert set(rows) == {"1", "2_3", "4+1"}
    assert rows["1"].cpu_minutes == 60.0 and rows["1"].gpu_minutes == 0
    assert rows["2_3"].cpu_minutes == 120.0 and rows["2_3"].gpu_minutes == 30.0
    assert rows["2_3"].gpus[0].type == "untyped"
    assert rows["4+1"].key == "farm/farm/4+1" and rows["4+1"].day == "2026-11-20"
    assert rows["1"].end_epoch == int((DAY + timedelta(minutes=30)).timestamp())


async def test_a_second_ingest_of_the_same_window_writes_nothing(farm):
    jobs = [job(str(i)) for i in range(1, 51)]
    await ingest(farm, "farm", jobs, await factor_table("farm"))
    before = {r.id: r.updated_at for r in await records()}
    again = await ingest(farm, "farm", jobs, await factor_table("farm"))
    assert (again.inserted, again.replaced, again.unchanged) == (0, 0, 50)
    assert {r.id: r.updated_at for r in await records()} == before


async def test_a_requeued_job_is_replaced_in_place_not_doubled(farm):
    await ingest(farm, "farm", [job("7", minutes=10)], await factor_table("farm"))
    first = (await records())[0]
    counts = await ingest(farm, "farm", [job("7", start=DAY + timedelta(hours=2), minutes=40)],
                          await factor_table("farm"))
    assert (counts.inserted, counts.replaced) == (0, 1)
    [again] = await records()
    assert again.id == first.id and again.cpu_minutes == 80.0
    assert again.start == DAY + timedelta(hours=2)


async def test_the_same_job_id_on_two_clusters_or_sites_is_two_records(farm):
    await make_site(farm, "barn")
    await ingest(farm, "farm", [job("9")], await factor_table("farm"))
    await ingest(farm, "barn", [job("9")], await factor_table("barn"))
    assert sorted(r.key for r in await records()) == ["barn/farm/9", "farm/farm/9"]


async def test_typed_gpu_factors_apply_by_the_job_start(farm):
    soon = utcnow() + timedelta(seconds=1)
    await SetGpuFactor.run(farm, AUTHOR, site="farm", gpu_type="a100", factor=2.0,
                           effective_from=soon)
    await SetGpuFactor.run(farm, AUTHOR, site="farm", gpu_type="default", factor=0.5,
                           effective_from=soon)
    later = soon + timedelta(hours=1)
    jobs = [job("1", start=later, tres="cpu=1,gres/gpu:a100=2,gres/gpu:t4=1,gres/gpu=3"),
            job("2", start=soon - timedelta(days=1), tres="cpu=1,gres/gpu:a100=2")]
    await ingest(farm, "farm", jobs, await factor_table("farm"))
    rows = {r.job_id: r for r in await records()}
    assert [(g.type, g.factor, g.minutes) for g in rows["1"].gpus] == [
        ("a100", 2.0, 120.0), ("t4", 0.5, 15.0)]
    assert rows["1"].gpu_minutes == 135.0
    assert rows["2"].gpu_minutes == 60.0  # started before the factors: 1.0


async def test_gpu_factors_only_move_forward_and_every_version_is_in_history(farm):
    with pytest.raises(InvalidInput, match="in the past"):
        await SetGpuFactor.run(farm, AUTHOR, site="farm", gpu_type="a100", factor=2,
                               effective_from=utcnow() - timedelta(days=1))
    first = utcnow() + timedelta(days=1)
    await SetGpuFactor.run(farm, AUTHOR, site="farm", gpu_type="a100", factor=2,
                           effective_from=first)
    with pytest.raises(InvalidInput, match="only move forward"):
        await SetGpuFactor.run(farm, AUTHOR, site="farm", gpu_type="a100", factor=3,
                               effective_from=first)
    with pytest.raises(InvalidInput):
        await SetGpuFactor.run(farm, AUTHOR, site="farm", gpu_type="a 100", factor=3)
    with pytest.raises(NotFound):
        await SetGpuFactor.run(farm, AUTHOR, site="nowhere", gpu_type="a100", factor=3)
    assert await GpuFactor.count() == 1
    [row] = await history("set_gpu_factor")
    assert row.changes["gpu_type"] == "a100" and row.changes["factor"] == 2


async def test_prune_dry_run_counts_without_deleting_or_history(farm):
    old, new = DAY - timedelta(days=100), DAY
    await ingest(farm, "farm", [job("1", start=old), job("2", start=new)],
                 await factor_table("farm"))
    cut = DAY - timedelta(days=30)
    assert await prune(farm, AUTHOR, before=cut, site="farm", dry_run=True) == 1
    assert await UsageRecord.count() == 2 and await history("prune_usage") == []
    assert await prune(farm, AUTHOR, before=cut, site="farm", dry_run=False) == 1
    assert [r.job_id for r in await records()] == ["2"]
    [row] = await history("prune_usage")
    assert row.changes["deleted"] == 1


async def test_prune_refuses_a_future_cut_and_an_unknown_site_writing_nothing(farm):
    await ingest(farm, "farm", [job("1")], await factor_table("farm"))
    with pytest.raises(InvalidInput, match="future"):
        await PruneUsage.run(farm, AUTHOR, before=utcnow() + timedelta(days=1))
    with pytest.raises(NotFound):
        await PruneUsage.run(farm, AUTHOR, before=DAY, site="nowhere")
    assert await UsageRecord.count() == 1
    assert await History.find({"op": "prune_usage"}).count() == 0


# -- pruning refuses to refund quota still in force (issue 26, item 8) ----------------------


async def quota_farm(store) -> tuple[datetime, datetime]:
    """alice, bob and lab at farm; returns (now, the previous month's start)."""
    from ..factories import make_group, make_user

    await make_user(store, "alice")
    await make_user(store, "bob")
    await make_group(store, "lab")
    now = utcnow()
    this_month = period_window("monthly", now)
    previous = previous_window("monthly", this_month)
    assert previous is not None
    return now, previous[0]


async def test_prune_refuses_records_in_a_quota_period_in_force(farm):
    now, _ = await quota_farm(farm)
    start = now - timedelta(days=30)
    await ingest(farm, "farm", [job("1", "alice", start=now - timedelta(days=90)),
                                job("2", "alice", start=now - timedelta(days=10)),
                                job("3", "bob", start=now - timedelta(days=10))],
                 await factor_table("farm"))
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=1000.0,
                       period="explicit", start=start, end=now + timedelta(days=30))
    cut = now - timedelta(days=1)
    for dry_run in (True, False):
        with pytest.raises(InvalidInput) as refused:
            await prune(farm, AUTHOR, before=cut, site="farm", dry_run=dry_run)
        line = str(refused.value)
        assert "\n" not in line and "--refund-quota" in line
        assert f"1 at site farm, period from {start:%Y-%m-%d}" in line  # bob has no quota
    assert await UsageRecord.count() == 3 and await history("prune_usage") == []
    # a cut before the period deletes what no quota reads any more
    assert await prune(farm, AUTHOR, before=start, site="farm", dry_run=False) == 1
    dry = await prune_usage(farm, AUTHOR, before=cut, site="farm", dry_run=True,
                            refund_quota=True)
    assert (dry.deleted, dry.refunded) == (2, 1) and await UsageRecord.count() == 2
    assert await prune(farm, AUTHOR, before=cut, site="farm", dry_run=False,
                       refund_quota=True) == 2
    assert await UsageRecord.count() == 0
    first, second = await history("prune_usage")
    assert (first.changes["refunded"], first.changes["refund_quota"]) == (0, False)
    assert (second.changes["deleted"], second.changes["refunded"],
            second.changes["refund_quota"]) == (2, 1, True)


async def test_prune_reads_the_defaults_carry_over_and_limits(farm):
    now, previous = await quota_farm(farm)
    await ingest(farm, "farm", [job("1", "alice", start=previous - timedelta(days=2)),
                                job("2", "alice", start=previous + timedelta(days=1)),
                                job("3", "bob", start=previous + timedelta(days=1)),
                                job("4", "bob", "other", start=previous + timedelta(days=1))],
                 await factor_table("farm"))
    this_month = period_window("monthly", now)[0]
    # a period without any limit refunds nothing
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", period="none")
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=None,
                       gpu_minutes=None, period="monthly", carry_over=True)
    assert await prune(farm, AUTHOR, before=this_month, site="farm", dry_run=True) == 4
    # a default over all time covers everyone without a quota of their own: bob's
    # records, not alice's (her own quota is unlimited)
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", user_gpu_minutes=60.0)
    with pytest.raises(InvalidInput, match="2 at site farm, period none, all time"):
        await prune(farm, AUTHOR, before=this_month, site="farm", dry_run=True)
    # an account default counts each record once, whoever else reads it
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", account_cpu_minutes=6000.0)
    with pytest.raises(InvalidInput, match="4 at site farm, period none, all time"):
        await prune(farm, AUTHOR, before=this_month, site="farm", dry_run=True)
    # alice's carry-over reads last month: her record in it, not the one before
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", user_gpu_minutes=None,
                               account_cpu_minutes=None)
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=600.0)
    with pytest.raises(InvalidInput, match=f"1 at site farm, period from {previous:%Y-%m-%d}"):
        await prune(farm, AUTHOR, before=this_month, site="farm", dry_run=True)
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", carry_over=False)
    assert await prune(farm, AUTHOR, before=this_month, site="farm", dry_run=False) == 4


async def test_prune_of_every_site_names_each_site_in_one_line(farm):
    now, _ = await quota_farm(farm)
    await make_site(farm, "lab2")
    await ingest(farm, "farm", [job("1", start=now - timedelta(days=3))],
                 await factor_table("farm"))
    await ingest(farm, "lab2", [job("1", start=now - timedelta(days=3))],
                 await factor_table("lab2"))
    for site in ("farm", "lab2"):
        await SetQuotaDefaults.run(farm, AUTHOR, site=site, user_cpu_minutes=10.0)
    with pytest.raises(InvalidInput) as refused:
        await prune(farm, AUTHOR, before=now - timedelta(hours=1), site=None, dry_run=False)
    assert "1 at site farm, period none, all time; 1 at site lab2, period none" in str(
        refused.value)
    assert await UsageRecord.count() == 2


async def test_a_quota_following_the_defaults_protects_what_they_limit(farm):
    now, _ = await quota_farm(farm)
    await ingest(farm, "farm", [job("1", "alice", start=now - timedelta(days=3))],
                 await factor_table("farm"))
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", gpu_minutes=None)
    cut = now - timedelta(hours=1)
    assert await prune(farm, AUTHOR, before=cut, site="farm", dry_run=True) == 1
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", user_cpu_minutes=10.0)
    with pytest.raises(InvalidInput, match="1 at site farm"):
        await prune(farm, AUTHOR, before=cut, site="farm", dry_run=True)


async def seed_report(store) -> None:
    jobs = [job("1", "alice", "lab", minutes=60),  # cpu 120
            job("2", "alice", "lab", partition="gpu", minutes=60,
                tres="cpu=1,gres/gpu:a100=2"),  # cpu 60, gpu 120
            job("3", "bob", "lab", start=DAY + timedelta(days=1), minutes=30),  # cpu 60
            job("4", "carol", "other", partition="gpu", minutes=30,
                tres="cpu=2,gres/gpu=1"),  # cpu 60, gpu 30 untyped
            job("5", "alice", "lab", start=DAY + timedelta(days=40))]  # outside the window
    await ingest(store, "farm", jobs, await factor_table("farm"))


WINDOW = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))


async def test_report_by_user_sums_in_the_window(farm):
    await seed_report(farm)
    report = await usage_report("farm", *WINDOW, by="user")
    assert report.queries == 1
    assert [(r["user"], r["jobs"], r["cpu_minutes"], r["gpu_minutes"]) for r in report.table()
            ] == [("alice", 2, 180.0, 120.0), ("bob", 1, 60.0, 0.0), ("carol", 1, 60.0, 30.0)]
    assert (report.total.jobs, report.total.cpu_minutes) == (4, 300.0)


@pytest.mark.parametrize(("by", "expected"), [
    ("account", [("lab", 3), ("other", 1)]),
    ("partition", [("cpu", 2), ("gpu", 2)]),
    ("day", [("2026-11-20", 3), ("2026-11-21", 1)]),
    ("gpu-type", [("a100", 1), ("untyped", 1)]),
    (None, [("total", 4)]),
])
async def test_report_groupings(farm, by, expected):
    await seed_report(farm)
    report = await usage_report("farm", *WINDOW, by=by)
    column = report.columns()[0]
    assert [(r[column], r["jobs"]) for r in report.table()] == expected


async def test_report_of_one_account_and_by_gpu_type_minutes(farm):
    await seed_report(farm)
    report = await usage_report("farm", *WINDOW, by="gpu-type")
    assert {r["gpu-type"]: r["gpu_minutes"] for r in report.table()} == {
        "a100": 120.0, "untyped": 30.0}
    lab = await usage_report("farm", *WINDOW, account="lab")
    assert lab.total.jobs == 3 and lab.total.cpu_minutes == 240.0
    alice = await usage_report("farm", *WINDOW, user="alice", by="partition")
    assert [(r["partition"], r["cpu_minutes"]) for r in alice.table()] == [
        ("cpu", 120.0), ("gpu", 60.0)]


async def test_a_rate_card_prices_each_partition(farm):
    await seed_report(farm)
    rates = {"cpu": Rate(cpu_hour=1.0), "gpu": Rate(cpu_hour=0.5, gpu_hour=10.0)}
    report = await usage_report("farm", *WINDOW, by="user", rates=rates)
    assert report.queries == 3  # by partition, then one per partition (cpu, gpu)
    costs = {r["user"]: r["cost"] for r in report.table()}
    # alice: 2 cpu-h in cpu (2.0) + 1 cpu-h and 2 gpu-h in gpu (0.5 + 20)
    assert costs == {"alice": 22.5, "bob": 1.0, "carol": 0.5 + 5.0}
    partial = await usage_report("farm", *WINDOW, rates={"gpu": Rate(gpu_hour=1)})
    assert partial.total.unpriced_partitions == {"cpu"}
