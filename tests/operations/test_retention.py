"""Retention (operations/retention.py) on the real store: the hot queries' compound
indexes exist, the pass deletes only what is older than each setting (a dry run counts
and changes nothing), in chunks, with each run's items, steps and findings, and leaves
the TTL indexes saying the configured days; quota notices are kept by the end of their
period, so none is sent twice in it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.config import RetentionConfig
from cheeto_like.models import (
    AuditFinding,
    AuditRun,
    History,
    QuotaNotice,
    SyncRun,
    SyncRunItem,
    SyncStep,
)
from cheeto_like.models.fields import utcnow
from cheeto_like.models.quota import FOREVER, notice_key
from cheeto_like.models.sync import SyncItem
from cheeto_like.operations import retention
from cheeto_like.operations.retention import DAY, RULES, apply_index, prune, ttl_index
from cheeto_like.store import Store
from tests.factories import insert_audit_run, insert_sync_run

SETTINGS = RetentionConfig(sync_runs_days=90, audit_runs_days=365, quota_notices_days=400,
                           task_results_days=7, history_days=None)
TASKMETA = "celery_taskmeta"


def keys(info: dict) -> tuple[str, ...]:
    """An index's field names (the embedded store reports every direction as 1)."""
    return tuple(dict(info["key"]))


async def index_keys(store: Store, collection: str) -> set[tuple[str, ...]]:
    return {keys(i) async for i in await store.database[collection].list_indexes()}


@pytest.fixture
async def clean(db: Store) -> AsyncIterator[Store]:
    """No TTL index before or after (on the embedded store one deletes on every read,
    which would take this module's old test documents from under the next test)."""
    for rule in RULES:
        await apply_index(db, rule, None)
    await db.database[TASKMETA].delete_many({})
    yield db
    for rule in RULES:
        await apply_index(db, rule, None)
    await db.database[TASKMETA].delete_many({})


async def test_the_hot_queries_have_fitting_compound_indexes(store: Store) -> None:
    runs = await index_keys(store, "sync_runs")
    # the last run and the budget's window; the runs pages; the digest's window
    assert {("target", "site", "started_at"), ("site", "started_at"),
            ("finished_at",), ("status",)} <= runs
    ledger = await index_keys(store, "usage_records")
    assert {("site", "end_epoch"), ("site", "user", "end_epoch"),
            ("site", "account", "end_epoch")} <= ledger
    assert ("run",) in await index_keys(store, "sync_items")
    assert ("run",) in await index_keys(store, "audit_findings")
    assert ("scope", "started_ms") in await index_keys(store, "audit_runs")


def _item(n: int) -> SyncItem:
    return SyncItem(batch="add associations", command=f"add user u{n}", outcome="ok")


async def _world(now: datetime) -> dict[str, str]:
    """Old and recent documents of every rule; returns the ids the pass must keep."""
    old_run = await insert_sync_run(
        SyncRun(target="slurm", site="farm", status="ok", started_at=now - timedelta(days=91)),
        [_item(0), _item(1)])
    await SyncStep(id=f"{old_run.id}:0", run=old_run.id, index=0, outcome="ok").insert()
    new_run = await insert_sync_run(
        SyncRun(target="slurm", site="farm", status="ok", started_at=now - timedelta(days=89)),
        [_item(0)])
    finding = {"key": "k", "severity": "high", "kind": "expired", "site": "farm",
               "object": "carl", "detail": "d", "fix": "f", "status": "new"}
    old_audit = await insert_audit_run(
        AuditRun(scope="*", started_at=now - timedelta(days=366)), [finding], [finding])
    new_audit = await insert_audit_run(
        AuditRun(scope="*", started_at=now - timedelta(days=300)), [finding])

    def notice(subject: str, start: datetime, end: datetime | None) -> QuotaNotice:
        return QuotaNotice(key=notice_key("farm", "user", subject, "cpu", 90, start),
                           site="farm", kind="user", subject=subject, resource="cpu",
                           threshold=90, period_start=start, period_end=end, percent=95.0)

    long_ago = now - timedelta(days=900)
    await notice("ended", long_ago, now - timedelta(days=401)).insert()  # goes
    # sent 900 days ago, but its period ended 10 days ago: kept, so not re-sent in it
    await notice("recent", long_ago, now - timedelta(days=10)).insert()
    await notice("forever", datetime(1970, 1, 1, tzinfo=UTC), FOREVER).insert()  # "none"
    await notice("legacy", long_ago, None).insert()  # from before period_end: kept
    meta = [{"_id": "old-task", "status": "SUCCESS", "date_done": now - timedelta(days=8)},
            {"_id": "new-task", "status": "SUCCESS", "date_done": now - timedelta(days=6)}]
    history = History(op="create_user", author="t", timestamp=now - timedelta(days=5000))
    await history.insert()
    return {"old_run": old_run.id, "new_run": new_run.id, "old_audit": old_audit.id,
            "new_audit": new_audit.id, "history": history.id, "meta": meta}  # type: ignore[dict-item]


async def test_a_dry_run_counts_and_the_pass_deletes_only_what_is_past_each_setting(
        clean: Store) -> None:
    db = clean
    now = utcnow()
    ids = await _world(now)
    await db.database[TASKMETA].insert_many(ids["meta"])  # type: ignore[arg-type]
    expected = {"sync_runs": 1, "sync_items": 2, "audit_runs": 1, "audit_findings": 2,
                "quota_notices": 1, TASKMETA: 1}

    dry = await prune(db, SETTINGS, dry_run=True, now=now)
    assert dry.deleted == expected and "history" not in dry.deleted  # kept: no setting
    assert await SyncRun.find_all().count() == 2 and await QuotaNotice.count() == 4
    assert await SyncRunItem.find_all().count() == 3
    assert all(seconds is None for seconds in dry.indexes.values())  # no index changed
    for rule in RULES:
        found = await ttl_index(db, rule)
        assert found is None or "expireAfterSeconds" not in found

    done = await prune(db, SETTINGS, now=now)
    # the items and findings go with their runs (counted there), steps too
    assert {k: v for k, v in done.deleted.items() if v or k in expected} == {
        **expected, "sync_steps": 1}
    assert [r.id for r in await SyncRun.find_all().to_list()] == [ids["new_run"]]
    assert {i.run for i in await SyncRunItem.find_all().to_list()} == {ids["new_run"]}
    assert await SyncStep.find_all().count() == 0  # the old run's step went with it
    assert [r.id for r in await AuditRun.find_all().to_list()] == [ids["new_audit"]]
    assert {f.run for f in await AuditFinding.find_all().to_list()} == {ids["new_audit"]}
    assert sorted(n.subject for n in await QuotaNotice.find_all().to_list()) == [
        "forever", "legacy", "recent"]
    assert [d["_id"] async for d in db.database[TASKMETA].find({})] == ["new-task"]
    assert await History.get(ids["history"]) is not None
    # the TTL indexes say the configured days (and History has none)
    assert done.indexes == {"sync_runs": 90 * DAY, "sync_items": 90 * DAY,
                            "audit_runs": 365 * DAY, "audit_findings": 365 * DAY,
                            "quota_notices": 400 * DAY, TASKMETA: 7 * DAY, "history": None}
    for rule in RULES:
        found = await ttl_index(db, rule)
        if rule.setting == "history_days":
            assert found is None or "expireAfterSeconds" not in found
        else:
            assert found is not None and keys(found) == (rule.field,)
            assert found["expireAfterSeconds"] == getattr(SETTINGS, rule.setting) * DAY
    again = await prune(db, SETTINGS, now=now)
    assert sum(again.deleted.values()) == 0


async def test_deletes_go_in_chunks_and_a_new_setting_moves_the_ttl(
        clean: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    db = clean
    now = utcnow()
    monkeypatch.setattr(retention, "CHUNK", 3)
    for n in range(8):
        await insert_sync_run(SyncRun(target="ldap", site="farm", status="ok",
                                      started_at=now - timedelta(days=40 + n)), [_item(n)])
    keep = await insert_sync_run(SyncRun(target="ldap", site="farm", status="ok",
                                         started_at=now - timedelta(days=20)))
    shorter = SETTINGS.model_copy(update={"sync_runs_days": 30})
    done = await prune(db, shorter, now=now)
    assert done.deleted["sync_runs"] == 8 and done.deleted["sync_items"] == 8  # cascaded
    assert [r.id for r in await SyncRun.find_all().to_list()] == [keep.id]
    assert await SyncRunItem.find_all().count() == 0
    runs_rule = next(r for r in RULES if r.collection == "sync_runs")
    assert (await ttl_index(db, runs_rule))["expireAfterSeconds"] == 30 * DAY
    off = shorter.model_copy(update={"sync_runs_days": None})
    assert (await prune(db, off, now=now)).indexes["sync_runs"] is None
    found = await ttl_index(db, runs_rule)
    assert found is not None and "expireAfterSeconds" not in found  # a plain index again
    assert [r.id for r in await SyncRun.find_all().to_list()] == [keep.id]


async def test_the_cli_dry_run_changes_nothing(clean: Store, cli) -> None:  # type: ignore[no-untyped-def]
    old = await insert_sync_run(SyncRun(target="slurm", site="farm", status="ok",
                                        started_at=utcnow() - timedelta(days=200)))
    r = await cli("db", "prune-retention", "--dry-run", "--json")
    assert r.code == 0, r.stderr
    data = r.json()
    assert data["dry_run"] is True and data["deleted"]["sync_runs"] == 1
    assert await SyncRun.get(old.id) is not None
    r = await cli("db", "prune-retention")
    assert r.code == 0, r.stderr
    assert "deleted" in r.stderr and await SyncRun.get(old.id) is None
