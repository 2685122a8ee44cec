"""Big jobs in bounded chunks (issue 24): `db dump` reads outside a transaction and is
consistent, `db restore` loads aside in chunks and switches, resumes after an
interruption, and readers see the old data or the new; `ng usage prune` deletes in
chunks. The store's transaction lifetime limit is set to 2 s (``setParameter``) for the
runs, so a job that held one transaction over whole collections would be cut short."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import DuplicateKeyError

from cheeto_like import backup, progress
from cheeto_like.config import MongoConfig
from cheeto_like.embedded import EmbeddedServer
from cheeto_like.errors import Conflict
from cheeto_like.models import History, UsageRecord, User
from cheeto_like.operations.usage import ingest, prune
from cheeto_like.queries.usage import factor_table
from cheeto_like.store import Store
from tests.cli.test_db_backup import all_documents, config_for, drop
from tests.exports.test_golden import seed
from tests.operations.test_usage import DAY, job

from .factories import AUTHOR, transaction_lifetime

LEDGER_ROWS = 240
CHUNK = 25


@pytest.fixture
async def short_transactions(db: Store) -> AsyncIterator[Store]:
    """A 2 s ``transactionLifetimeLimitSeconds`` on the test store, 60 again after."""
    async with transaction_lifetime(db, 2):
        yield db


async def seeded_with_ledger(store: Store, rows: int = LEDGER_ROWS) -> None:
    await seed(store)
    old = DAY - timedelta(days=100)
    jobs = [job(str(n), start=old if n % 4 else DAY) for n in range(1, rows + 1)]
    await ingest(store, "farm", jobs, await factor_table("farm"))


async def live_documents(database: Any) -> dict[str, list[dict[str, Any]]]:
    """What readers see: every collection but a restore's own."""
    return {name: docs for name, docs in (await all_documents(database)).items()
            if not backup.is_bookkeeping(name)}


class StopAfter:
    """A progress reporter that interrupts the work once ``limit`` units are done, as a
    Ctrl-C (or a kill) would between two chunks; ``on_advance`` runs at each unit."""

    def __init__(self, limit: int | None = None, on_advance: Any = None) -> None:
        self.limit, self.on_advance, self.done = limit, on_advance, 0

    def begin(self, total: int | None, label: str) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        if n <= 0:
            return
        self.done += n
        if self.on_advance is not None:
            self.on_advance()
        if self.limit is not None and self.done >= self.limit:
            raise KeyboardInterrupt


async def test_dump_and_restore_in_chunks_under_a_short_transaction_limit(
        short_transactions, cli, cli_config, tmp_path):
    db = short_transactions
    await seeded_with_ledger(db)
    archive = tmp_path / "big.tar.gz"
    r = await cli("db", "dump", "-o", str(archive), "--chunk-size", str(CHUNK))
    assert r.code == 0, r.stderr
    assert "consistent:" in r.stderr and "no operation committed" in r.stderr
    parsed = backup.read_archive(archive)
    assert len(parsed.collections["usage_records"]) == LEDGER_ROWS

    target_db = f"{db.database.name}_chunks"[:63]
    target = config_for(cli_config, target_db, tmp_path)
    await drop(db, target_db)
    r = await cli("db", "restore", str(archive), "--chunk-size", str(CHUNK), config=target)
    assert r.code == 0, r.stderr
    source = await all_documents(db.database)
    restored = await all_documents(db.client[target_db])
    assert restored == source
    names = await db.client[target_db].list_collection_names()
    assert not [n for n in names if backup.STAGING in n]  # no staging, no record left
    assert await db.client[target_db][backup.RESTORES].find_one({}) is None
    # the new collections carry the models' indexes: a second "alice" is refused
    r = await cli("db", "check", "--json", config=target)
    assert r.code == 0 and r.json()["ok"] is True
    users = db.client[target_db]["users"]
    alice = await users.find_one({"name": "alice"})
    with pytest.raises(DuplicateKeyError):
        await users.insert_one(dict(alice, _id="e" * 32))
    await drop(db, target_db)


async def archive_of(store: Store, path: Path) -> backup.Archive:
    with path.open("wb") as fh:
        await backup.dump(store, fh, chunk=CHUNK)
    return backup.read_archive(path)


async def test_an_interrupted_restore_keeps_the_old_data_and_resumes(
        short_transactions, tmp_path):
    db = short_transactions
    await seeded_with_ledger(db)
    new = await archive_of(db, tmp_path / "new.tar.gz")
    # The live data differs from the archive: one more user, fewer ledger rows.
    await User.get_pymongo_collection().insert_one(
        {**(await User.get_pymongo_collection().find_one({"name": "bob"})),
         "_id": "d" * 32, "name": "bobby", "uid": 2999})
    await UsageRecord.get_pymongo_collection().delete_many({"job_id": {"$in": ["1", "2"]}})
    old = await live_documents(db.database)

    with progress.reporting(StopAfter(limit=3 * CHUNK)), pytest.raises(KeyboardInterrupt):
        await backup.restore(db, new, force=True, chunk=CHUNK)
    # Interrupted while loading aside: readers see the old data, untouched.
    assert await live_documents(db.database) == old
    record = await db.database[backup.RESTORES].find_one({"_id": backup.RECORD_ID})
    assert record["state"] == "loading" and record["digest"] == new.digest
    assert sum(record["loaded"].values()) >= 3 * CHUNK
    staging = [n for n in await db.database.list_collection_names() if backup.STAGING in n]
    assert staging

    result = await backup.restore(db, new, force=True, chunk=CHUNK)
    assert result.resumed and "resumed" in result.notes[0]
    after = await live_documents(db.database)
    assert after == {name: docs for name, docs in new.collections.items() if docs}
    assert await db.database[backup.RESTORES].find_one({}) is None
    assert not [n for n in await db.database.list_collection_names() if backup.STAGING in n]


async def test_an_unfinished_restore_of_another_archive_starts_over(
        short_transactions, tmp_path):
    db = short_transactions
    await seeded_with_ledger(db, rows=60)
    first = await archive_of(db, tmp_path / "first.tar.gz")
    await User.get_pymongo_collection().delete_one({"name": "bob"})
    second = await archive_of(db, tmp_path / "second.tar.gz")
    assert first.digest != second.digest
    with progress.reporting(StopAfter(limit=CHUNK)), pytest.raises(KeyboardInterrupt):
        await backup.restore(db, first, force=True, chunk=CHUNK)
    result = await backup.restore(db, second, force=True, chunk=CHUNK)
    assert not result.resumed and "another archive" in result.notes[0]
    assert await User.find_one(User.name == "bob") is None
    assert not [n for n in await db.database.list_collection_names() if backup.STAGING in n]


async def test_an_interrupted_switch_is_finished_by_the_next_run(short_transactions,
                                                                   tmp_path):
    """A kill between two collections' switches: the next restore switches the rest
    first, so no database stays half old, half new."""
    db = short_transactions
    await seeded_with_ledger(db, rows=40)
    archive = await archive_of(db, tmp_path / "a.tar.gz")
    await User.get_pymongo_collection().delete_one({"name": "bob"})

    real = backup.replace_collection
    switched: list[str] = []

    async def one_then_stop(store: Store, source: str, target: str) -> None:
        if switched:
            raise KeyboardInterrupt
        await real(store, source, target)
        switched.append(target)

    backup.replace_collection = one_then_stop  # type: ignore[assignment]
    try:
        with pytest.raises(KeyboardInterrupt):
            await backup.restore(db, archive, force=True, chunk=CHUNK)
    finally:
        backup.replace_collection = real  # type: ignore[assignment]
    record = await db.database[backup.RESTORES].find_one({"_id": backup.RECORD_ID})
    assert record["state"] == "switching" and len(switched) == 1

    result = await backup.restore(db, archive, force=True, chunk=CHUNK)
    assert "finished the switch" in result.notes[0]
    assert await User.find_one(User.name == "bob") is not None
    assert await live_documents(db.database) == {
        name: docs for name, docs in archive.collections.items() if docs}


def sync_client(mongo_config: MongoConfig) -> MongoClient[dict[str, Any]]:
    """A second, synchronous client of the test store: another process's writes."""
    if not mongo_config.is_embedded:
        assert mongo_config.uri is not None
        return MongoClient(mongo_config.uri)
    server = EmbeddedServer(mongo_config.embedded)
    return MongoClient(server.uri, **server.client_options())


class Writer(StopAfter):
    """Inserts a History row (as a committing operation would) at each of the first
    ``times`` progress units of the dump (one per collection read)."""

    def __init__(self, history: Any, times: int) -> None:
        super().__init__()
        self.history, self.times = history, times

    def advance(self, n: int = 1) -> None:
        if self.times > 0:
            self.times -= 1
            self.history.insert_one(History(op="noise", author=AUTHOR, changes={}).model_dump(
                by_alias=True))


async def test_a_dump_refuses_data_that_keeps_changing_and_retries_once_it_settles(
        db, mongo_config):
    await seed(db)
    other = sync_client(mongo_config)
    try:
        history = other[db.database.name]["history"]
        with progress.reporting(Writer(history, 10**6)), pytest.raises(
                Conflict, match="changed during each of 3 dump attempts"):
            await backup.spool(db, chunk=CHUNK)
        with progress.reporting(Writer(history, 2)):  # during the first attempt only
            out = await backup.spool(db, chunk=CHUNK)
    finally:
        other.close()
    try:
        assert out.consistency == "checked"
        assert out.counts["history"] == await History.get_pymongo_collection(
        ).count_documents({})
    finally:
        out.close()


async def test_prune_deletes_in_chunks_under_a_short_transaction_limit(short_transactions):
    db = short_transactions
    await seeded_with_ledger(db)
    old_rows = sum(1 for n in range(1, LEDGER_ROWS + 1) if n % 4)
    cut = DAY - timedelta(days=30)
    assert await prune(db, AUTHOR, before=cut, site="farm", dry_run=True) == old_rows
    assert await UsageRecord.count() == LEDGER_ROWS
    assert await History.find({"op": "prune_usage"}).count() == 0
    assert await prune(db, AUTHOR, before=cut, site="farm", dry_run=False,
                       chunk=CHUNK) == old_rows
    assert await UsageRecord.count() == LEDGER_ROWS - old_rows
    assert await UsageRecord.find({"end_epoch": {"$lt": int(cut.timestamp())}}).count() == 0
    [row] = await History.find({"op": "prune_usage"}).to_list()
    assert row.changes["deleted"] == old_rows
    assert row.changes["chunks"] == -(-old_rows // CHUNK)
    # a rerun (as after an interruption) finds nothing left and says so
    assert await prune(db, AUTHOR, before=cut, site="farm", dry_run=False, chunk=CHUNK) == 0
