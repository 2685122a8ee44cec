"""``migrate from-cheeto`` in bounded chunks (issue 24.5): the check reads outside any
transaction, the new rows go in short per-chunk transactions under a 2 s
``transactionLifetimeLimitSeconds`` (``setParameter``), an interrupted import is visible
(``db status``, ``db check``, the import itself; outward syncs refuse to start) and is
finished by the same command, to the same end state with one History row; a clash
created between two chunks stops the run and is listed by the next one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cheeto_like import progress
from cheeto_like.errors import Busy, Conflict
from cheeto_like.migrate.from_cheeto import map_reference
from cheeto_like.migrate.source import read_dump
from cheeto_like.migrate.writer import OP_NAME, write_import
from cheeto_like.models import History, User
from cheeto_like.queries.imports import COLLECTION, unfinished_import
from cheeto_like.store import Store
from cheeto_like.sync.lease import lease
from tests.cli.test_db_backup import all_documents
from tests.migrate.reference_dump import ReferenceDump, build, ldap_info, ref, stamps
from tests.test_backup_chunks import StopAfter, sync_client

from ..factories import AUTHOR, transaction_lifetime

EXTRA_USERS = 120  # x4 documents (user, personal group, site info, membership), + names
CHUNK = 25


def bigger(extra: int = EXTRA_USERS) -> ReferenceDump:
    """The reference dump with ``extra`` more lab members: several chunks' worth."""
    d = build()
    for n in range(extra):
        name, uid = f"user{n:03d}", 50_000 + n
        d.add("users", f"u:{name}", {
            "name": name, "email": f"{name}@example.edu", "uid": uid, "gid": uid,
            "fullname": f"User {n}", "surname": None, "shell": "/usr/bin/bash",
            "type": "user", "status": ref("groups", d.oid("s:active")), "password": None,
            "access": [ref("groups", d.oid("a:login-ssh"))], "comments": [],
            "home_directory": f"/home/{name}", "iam": None, "ldap": ldap_info(d.site),
            "expires_at": None, "provisioned_at": None, **stamps()})
        d.add("groups", f"g:{name}", {"_class_id": "Group", "name": name, "gid": uid,
                                      "type": "user", "ldap": ldap_info(d.site), **stamps()})
        d.add("user_site_info", f"usi:{name}", {
            "user": ref("users", d.oid(f"u:{name}")), "site": ref("sites", d.oid("site")),
            "status": None, "access": [], **stamps()})
        d.add("group_membership", f"gm:{name}", {
            "user": ref("users", d.oid(f"u:{name}")), "group": ref("groups", d.oid("g:lab")),
            "site": ref("sites", d.oid("site")), "roles": ["member"], "expires_at": None,
            **stamps()})
    return d


@pytest.fixture
async def short_transactions(empty_db: Store) -> AsyncIterator[Store]:
    """An empty store whose transactions live at most 2 s (60 again after), and no
    import record left over."""
    await empty_db.database[COLLECTION].delete_many({})
    try:
        async with transaction_lifetime(empty_db, 2):
            yield empty_db
    finally:
        await empty_db.database[COLLECTION].delete_many({})


async def data_state(store: Store) -> dict[str, list[dict[str, Any]]]:
    """Every imported row as stored; History without the import's own row."""
    out = await all_documents(store.database)
    out["history"] = [h for h in out.get("history", []) if h["op"] != OP_NAME]
    return out


async def wipe_all(store: Store) -> None:
    for name in await store.database.list_collection_names():
        await store.database[name].delete_many({})


def source_of(directory: Path) -> str:
    return f"dump {directory}"


async def test_a_big_import_writes_in_chunks_under_a_2s_transaction_limit(
        short_transactions, cli, tmp_path):
    dump = bigger()
    directory = dump.write(tmp_path / "big")
    r = await cli("migrate", "from-cheeto", "--dump", str(directory), "--chunk-size",
                  str(CHUNK), "--json")
    assert r.code == 0, r.stderr
    report = r.json()
    new = sum(c["new"] for c in report["collections"])
    assert new > 5 * CHUNK and report["written"] is True
    assert report["chunks"] == -(-new // CHUNK) and report["interrupted"] is None
    assert await User.find({}).count() == 3 + EXTRA_USERS
    [row] = await History.find({"op": OP_NAME}).to_list()
    assert row.changes["imported"]["users"] == 3 + EXTRA_USERS
    assert row.changes["chunks"] == report["chunks"] and row.changes["runs"] == 1
    assert row.changes["present"] == 0
    assert await short_transactions.database[COLLECTION].find_one({}) is None

    before = await all_documents(short_transactions.database)
    again = await cli("migrate", "from-cheeto", "--dump", str(directory), "--chunk-size",
                      str(CHUNK), "--json")
    assert again.code == 0, again.stderr
    assert again.json()["written"] is False and again.json()["chunks"] == 0
    assert all(c["new"] == 0 for c in again.json()["collections"])
    assert await all_documents(short_transactions.database) == before


async def test_an_interrupted_import_is_reported_and_finished_by_a_rerun(
        short_transactions, cli, tmp_path):
    store = short_transactions
    directory = bigger().write(tmp_path / "big")
    mapping = map_reference(read_dump(directory))
    source = source_of(directory)

    # the end state of an import that was never interrupted
    await write_import(store, mapping, author=AUTHOR, source=source, chunk=CHUNK)
    expected = await data_state(store)
    [clean] = await History.find({"op": OP_NAME}).to_list()
    await wipe_all(store)

    with progress.reporting(StopAfter(limit=3 * CHUNK)), pytest.raises(KeyboardInterrupt):
        await write_import(store, mapping, author=AUTHOR, source=source, chunk=CHUNK)
    record = await unfinished_import(store, OP_NAME)
    assert record is not None and record["source"] == source
    assert sum(record["written"].values()) == 3 * CHUNK
    assert await History.find({"op": OP_NAME}).count() == 0

    # everyone who looks is told, and how to finish it
    status = await cli("db", "status", "--json")
    assert "run the same command again" in status.json()["unfinished_import"]
    check = await cli("db", "check", "--json")
    assert check.code == 1 and check.json()["ok"] is False
    [imports] = [c for c in check.json()["checks"] if c["check"] == "imports"]
    assert imports["status"] == "problem" and "interrupted after 75 of" in imports["detail"]
    dry = await cli("migrate", "from-cheeto", "--dump", str(directory), "--dry-run")
    assert dry.code == 0 and "was interrupted" in dry.stderr, dry.stderr[-3000:]
    # half an import never reaches another system: the outward syncs do not start
    with pytest.raises(Busy, match="part of an import"):
        async with lease(store, "ldap", "farm"):
            pass
    assert await store.database["sync_leases"].count_documents({}) == 0
    # another source waits until this one is finished
    other = build().write(tmp_path / "other")
    with pytest.raises(Conflict, match="this run imports from"):
        await write_import(store, map_reference(read_dump(other)), author=AUTHOR,
                           source=source_of(other), chunk=CHUNK)

    # killed again, after its last chunk but before its History row
    total = sum(c["new"] for c in (await write_import_plan_counts(store, mapping)))
    with progress.reporting(StopAfter(limit=total)), pytest.raises(KeyboardInterrupt):
        await write_import(store, mapping, author=AUTHOR, source=source, chunk=CHUNK)
    assert await History.find({"op": OP_NAME}).count() == 0
    assert await unfinished_import(store, OP_NAME) is not None

    r = await cli("migrate", "from-cheeto", "--dump", str(directory), "--chunk-size",
                  str(CHUNK))
    assert r.code == 0, r.stderr
    assert "finished the interrupted import" in r.stderr
    assert await unfinished_import(store, OP_NAME) is None
    assert await data_state(store) == expected
    [row] = await History.find({"op": OP_NAME}).to_list()
    assert row.changes["imported"] == clean.changes["imported"]
    assert row.changes["present"] == 0 and row.changes["runs"] == 3
    async with lease(store, "ldap", "farm"):  # syncs run again
        pass

    again = await cli("migrate", "from-cheeto", "--dump", str(directory), "--json")
    assert again.code == 0 and again.json()["written"] is False
    assert await History.find({"op": OP_NAME}).count() == 1


async def write_import_plan_counts(store: Store, mapping: Any) -> list[dict[str, Any]]:
    from cheeto_like.migrate.writer import plan_import

    return (await plan_import(store, mapping)).counts()


async def test_a_clash_made_between_two_chunks_stops_the_run_and_is_listed_next(
        short_transactions, cli, tmp_path, mongo_config):
    store = short_transactions
    directory = bigger().write(tmp_path / "big")
    mapping = map_reference(read_dump(directory))
    other = sync_client(mongo_config)
    users = other[store.database.name]["users"]
    squatter = {"_id": "f" * 32, "name": "squatter", "uid": 50_119, "gid": 50_119}

    def squat() -> None:  # another process creates a user with a uid the import plans
        if users.find_one({"_id": squatter["_id"]}) is None:
            users.insert_one(dict(squatter))

    try:
        with progress.reporting(StopAfter(on_advance=squat)), pytest.raises(
                Conflict, match="was taken while importing"):
            await write_import(store, mapping, author=AUTHOR, source=source_of(directory),
                               chunk=CHUNK)
        assert await unfinished_import(store, OP_NAME) is not None
        r = await cli("migrate", "from-cheeto", "--dump", str(directory))
        assert r.code == 2
        assert "uid 50119 is already taken" in r.stderr and "was interrupted" in r.stderr
        assert await History.find({"op": OP_NAME}).count() == 0

        users.delete_one({"_id": squatter["_id"]})
        r = await cli("migrate", "from-cheeto", "--dump", str(directory))
        assert r.code == 0, r.stderr
        assert await User.find({}).count() == 3 + EXTRA_USERS
        assert await unfinished_import(store, OP_NAME) is None
        assert await History.find({"op": OP_NAME}).count() == 1
    finally:
        other.close()
