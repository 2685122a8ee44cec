"""Running quota totals (issue 31) on the real store: every ledger write moves them by
the difference it makes, quota status read from them equals the status summed from the
ledger, and ``rebuild-totals`` repairs what went around them."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.models import QuotaTotal, QuotaTotalsMark, UsageRecord
from cheeto_like.models.base import rows
from cheeto_like.models.quota_totals import ALL, total_id
from cheeto_like.operations.quota import AdjustUsage, SetQuota, SetQuotaDefaults
from cheeto_like.operations.quota_totals import LEDGER_FIELDS, ledger_sums, rebuild, stored_sums
from cheeto_like.operations.usage import (
    build_record,
    fingerprint,
    ingest,
    ledger_doc,
    prune_usage,
    record_content,
)
from cheeto_like.queries import quota as quota_queries
from cheeto_like.queries.quota import quota_status
from cheeto_like.queries.quota_totals import split_window
from cheeto_like.queries.usage import factor_table

from ..factories import AUTHOR, make_group, make_site, make_user
from .test_usage import job

NOW = datetime(2026, 11, 25, 12, tzinfo=UTC)
USERS = ("alice", "bob", "carol")
ACCOUNTS = ("lab", "lab2")


@pytest.fixture
async def farm(db):
    await make_site(db, "farm")
    await make_site(db, "pond")
    for name in USERS:
        await make_user(db, name)
    for name in ACCOUNTS:
        await make_group(db, name)
    return db


async def ledger_view(site: str) -> dict:
    """The totals a fresh read of the ledger gives."""
    return ledger_sums(site, await rows(UsageRecord, {"site": site}, *LEDGER_FIELDS))


async def assert_totals_match(site: str) -> None:
    assert await stored_sums(site) == await ledger_view(site)


async def statuses(site: str, *, totals: bool) -> list[dict]:
    """Every status of ``site``, read from the totals or (``totals=False``) summed from
    the ledger as before issue 31."""
    real = quota_queries._UsageCache.of

    async def forced(name: str) -> quota_queries._UsageCache:
        return quota_queries._UsageCache(name, totals)

    quota_queries._UsageCache.of = forced  # type: ignore[method-assign]
    try:
        found = await quota_status(site, NOW, also=[("user", u) for u in USERS]
                                   + [("account", a) for a in ACCOUNTS])
    finally:
        quota_queries._UsageCache.of = real  # type: ignore[method-assign]
    return [json.loads(json.dumps(s.as_dict(), default=str)) for s in found]


def test_the_fast_ledger_document_is_the_validated_one(store):
    factors_now = datetime(2026, 1, 1, tzinfo=UTC)
    from cheeto_like.models.usage import FactorTable, RateTable, charge_gpus
    factors = FactorTable.build([("a100", factors_now, 2.0)])
    rates = RateTable.build([], {"*": (0.5, 3.0)})
    for sacct in (job("1"), job("2_3", "bob", tres="cpu=4,gres/gpu:a100=2,gres/gpu=2"),
                  job("4+1", minutes=61, tres="cpu=1,gres/gpu=1")):
        for card in (None, rates):
            content = record_content("farm", sacct, factors, card)
            assert content["gpus"] == [g.model_dump() for g in charge_gpus(
                sacct.tres.gpus, sacct.elapsed_s, sacct.start, factors)]
            fast = ledger_doc(f"farm/farm/{sacct.job_id}", content, fingerprint(content),
                              NOW)
            slow = build_record("farm", sacct, factors, rates=card)
            for volatile in ("_id", "created_at", "updated_at"):
                fast.pop(volatile), slow.pop(volatile)
            assert fast == slow


def test_a_window_is_whole_months_plus_the_partial_ends():
    assert split_window((datetime(1970, 1, 1, tzinfo=UTC),
                         datetime(9999, 12, 31, tzinfo=UTC))) == ([ALL], [])
    q3 = (datetime(2026, 7, 1, tzinfo=UTC), datetime(2026, 10, 1, tzinfo=UTC))
    assert split_window(q3) == (["2026-07", "2026-08", "2026-09"], [])
    odd = (datetime(2026, 7, 15, tzinfo=UTC), datetime(2026, 10, 3, tzinfo=UTC))
    assert split_window(odd) == (["2026-08", "2026-09"], [
        (odd[0], datetime(2026, 8, 1, tzinfo=UTC)), (datetime(2026, 10, 1, tzinfo=UTC), odd[1])])
    short = (datetime(2026, 7, 15, tzinfo=UTC), datetime(2026, 7, 20, tzinfo=UTC))
    assert split_window(short) == ([], [short])
    year_end = (datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 2, 1, tzinfo=UTC))
    assert split_window(year_end) == (["2026-12", "2027-01"], [])


async def test_collect_recollect_and_a_changed_record_move_the_totals_by_the_difference(farm):
    factors = await factor_table("farm")
    day = datetime(2026, 11, 10, tzinfo=UTC)
    await ingest(farm, "farm", [job("1", start=day, minutes=60),
                                job("2", "bob", start=day, minutes=30)], factors)
    assert await QuotaTotalsMark.find({"site": "farm"}).count() == 1  # a new site: built
    alice = await QuotaTotal.get(total_id("farm", "user", "alice", "2026-11"))
    assert (alice.cpu, alice.jobs) == (120 * 10_000, 1)
    again = await ingest(farm, "farm", [job("1", start=day, minutes=60)], factors)
    assert again.unchanged == 1
    assert (await QuotaTotal.get(alice.id)).cpu == 120 * 10_000  # not doubled
    # requeued: longer, and it now ends in December
    await ingest(farm, "farm", [job("1", start=datetime(2026, 11, 30, 23, tzinfo=UTC),
                                    minutes=120)], factors)
    assert (await QuotaTotal.get(alice.id)).jobs == 0
    december = await QuotaTotal.get(total_id("farm", "user", "alice", "2026-12"))
    assert (december.cpu, december.jobs) == (240 * 10_000, 1)
    every = await QuotaTotal.get(total_id("farm", "account", "lab", ALL))
    assert (every.cpu, every.jobs) == ((240 + 60) * 10_000, 2)
    await assert_totals_match("farm")


async def test_a_site_with_a_ledger_from_before_the_totals_reads_the_ledger_until_rebuilt(farm):
    factors = await factor_table("farm")
    day = datetime(2026, 11, 10, tzinfo=UTC)
    collection = UsageRecord.get_pymongo_collection()
    await collection.insert_many([build_record("farm", job(str(n), start=day, minutes=60),
                                               factors) for n in range(3)])
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=1000.0,
                       period="monthly")
    await ingest(farm, "farm", [job("9", start=day, minutes=60)], factors)
    assert await QuotaTotalsMark.find({}).count() == 0  # its ledger predates them
    [status] = await quota_status("farm", NOW, user="alice")
    assert status.cpu.used == 4 * 120.0  # summed from the ledger
    report = await rebuild(farm, "farm", dry_run=True)
    assert report.fixes and await QuotaTotalsMark.find({}).count() == 0
    report = await rebuild(farm, "farm")
    assert {(f.kind, f.name, f.bucket) for f in report.fixes} == {
        ("user", "alice", "2026-11"), ("user", "alice", ALL),
        ("account", "lab", "2026-11"), ("account", "lab", ALL)}
    assert await QuotaTotalsMark.find({}).count() == 1
    [status] = await quota_status("farm", NOW, user="alice")
    assert status.cpu.used == 4 * 120.0  # now from the totals
    await assert_totals_match("farm")
    assert not (await rebuild(farm, "farm")).fixes  # a second run changes nothing


async def test_corrupted_totals_are_found_and_rebuilt(farm, cli):
    factors = await factor_table("farm")
    day = datetime(2026, 11, 10, tzinfo=UTC)
    await ingest(farm, "farm", [job("1", start=day, minutes=60),
                                job("2", "bob", "lab2", start=day, minutes=30)], factors)
    before = await statuses("farm", totals=True)
    totals = QuotaTotal.get_pymongo_collection()
    await totals.update_one({"_id": total_id("farm", "user", "alice", "2026-11")},
                            {"$inc": {"cpu": 5_000_000}})
    await totals.delete_one({"_id": total_id("farm", "account", "lab2", ALL)})
    await totals.insert_one({"_id": total_id("farm", "user", "ghost", ALL), "site": "farm",
                             "kind": "user", "user": "ghost", "account": None,
                             "bucket": ALL, "site_bucket": f"farm/{ALL}", "cpu": 7,
                             "gpu": 0, "money": 0, "jobs": 1})
    assert await statuses("farm", totals=True) != before
    r = await cli("ng", "quota", "rebuild-totals", "-s", "farm", "--dry-run", "--json")
    assert r.code == 0, r.stderr
    found = json.loads(r.stdout)
    assert {(c["kind"], c["name"], c["bucket"]) for c in found["changes"]} == {
        ("user", "alice", "2026-11"), ("account", "lab2", ALL), ("user", "ghost", ALL)}
    assert found["dry_run"] and await stored_sums("farm") != await ledger_view("farm")
    r = await cli("ng", "quota", "rebuild-totals", "-s", "farm")
    assert r.code == 0, r.stderr
    assert "corrected 3" in r.stderr
    await assert_totals_match("farm")
    assert await statuses("farm", totals=True) == before
    r = await cli("ng", "quota", "rebuild-totals", "-s", "nowhere")
    assert r.code == 2 and "nowhere" in r.stderr


async def test_a_renamed_subject_keeps_its_totals_and_its_old_name_starts_afresh(farm):
    factors = await factor_table("farm")
    day = datetime(2026, 11, 10, tzinfo=UTC)
    await ingest(farm, "farm", [job("1", "carol", start=day, minutes=60)], factors)
    # what a rename's cascade does to every user reference (models/references.py)
    for model in (UsageRecord, QuotaTotal):
        await model.get_pymongo_collection().update_many({"user": "carol"},
                                                         {"$set": {"user": "dora"}})
    await ingest(farm, "farm", [job("2", "carol", start=day, minutes=30),
                                job("3", "dora", start=day, minutes=10)], factors)
    await assert_totals_match("farm")
    used = {s["name"]: s["cpu_minutes"]["used"] for s in await statuses("farm", totals=True)
            if s["kind"] == "user"}
    assert (used["dora"], used["carol"]) == (140.0, 60.0)


async def test_totals_equal_the_ledger_after_any_sequence_of_charges(farm):
    """Property-style: random collects, re-collects (changed or not), prunes with
    --refund-quota and adjustments, at two sites; after each step the stored totals of
    each site equal a fresh aggregation of its ledger, and every quota status read from
    them equals the one summed from the ledger."""
    rng = random.Random(31)
    factors = await factor_table("farm")
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", user_cpu_minutes=500.0,
                               account_cpu_minutes=2000.0, period="monthly",
                               carry_over=True)
    await SetQuota.run(farm, AUTHOR, site="farm", user="bob", cpu_minutes=300.0,
                       period="explicit", start=datetime(2026, 9, 17, tzinfo=UTC),
                       end=datetime(2026, 12, 3, tzinfo=UTC))
    await SetQuota.run(farm, AUTHOR, site="farm", account="lab2", gpu_minutes=90.0,
                       period="quarterly")
    await SetQuota.run(farm, AUTHOR, site="farm", user="carol", cpu_minutes=100.0)
    known: dict[str, list] = {"farm": [], "pond": []}

    def random_job(n: int):
        start = datetime(2026, 8, 1, tzinfo=UTC) + timedelta(minutes=rng.randrange(170_000))
        tres = rng.choice(("cpu=1", "cpu=4,gres/gpu=1", "cpu=2,gres/gpu:a100=2,gres/gpu=2"))
        return job(str(n), rng.choice(USERS), rng.choice(ACCOUNTS), start=start,
                   minutes=rng.randrange(1, 600), tres=tres)

    next_id = 1
    seen = {"pruned": 0, "recollected": 0}
    for step in range(40):
        site = rng.choice(("farm", "farm", "pond"))
        action = rng.choice(("collect", "collect", "recollect", "prune", "adjust"))
        if action == "collect":
            jobs = [random_job(next_id + i) for i in range(rng.randrange(1, 30))]
            next_id += len(jobs)
            known[site].extend(jobs)
            await ingest(farm, site, jobs, factors, chunk=rng.choice((3, 7, 2000)))
        elif action == "recollect" and known[site]:
            seen["recollected"] += 1
            again = rng.sample(known[site], min(len(known[site]), 10))
            changed = [job(j.job_id, j.user, rng.choice(ACCOUNTS), start=j.start,
                           minutes=rng.randrange(1, 600)) if rng.random() < 0.5 else j
                       for j in again]
            await ingest(farm, site, changed, factors, chunk=4)
        elif action == "prune":
            cut = datetime(2026, 8, 1, tzinfo=UTC) + timedelta(days=rng.randrange(0, 90))
            done = await prune_usage(farm, AUTHOR, before=cut, site=site, dry_run=False,
                                     refund_quota=True, chunk=rng.choice((2, 50)))
            seen["pruned"] += done.deleted
        elif action == "adjust":
            await AdjustUsage.run(farm, AUTHOR, site="farm", user=rng.choice(USERS),
                                  cpu_minutes=float(rng.randrange(-200, 200) or 1),
                                  reason=f"step {step}",
                                  at=NOW - timedelta(days=rng.randrange(0, 60)))
        for name in ("farm", "pond"):
            await assert_totals_match(name)
        assert await statuses("farm", totals=True) == await statuses("farm", totals=False)
    assert await UsageRecord.find({}).count() > 0
    assert seen["pruned"] > 0 and seen["recollected"] > 0
    assert await QuotaTotalsMark.find({}).count() == 2  # both read from their totals
