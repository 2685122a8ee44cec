"""Users and groups never share a name: the name registry (``models/names.py``) holds it in
the store, under races, not only in each operation's pre-check."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from cheeto_like.errors import AlreadyExists
from cheeto_like.models import Group, History, User
from cheeto_like.models.names import NameClaim, backfill_claims, ensure_registry, expected_claims
from cheeto_like.operations.group import CreateGroup, CreateLabGroup, RenameGroup
from cheeto_like.operations.user import CreateUser, RenameUser
from tests.factories import AUTHOR, make_group, make_user, next_uid


async def claims() -> dict[str, str]:
    return {c.name: c.kind for c in await NameClaim.find_all().to_list()}


async def test_creates_and_renames_keep_the_registry_in_step(db):
    await make_user(db, "alice")
    await make_group(db, "lab1")
    await CreateLabGroup.run(db, AUTHOR, name="lab2")
    assert {"alice": "user", "lab1": "group", "lab2": "group"}.items() <= (await claims()).items()
    await RenameUser.run(db, AUTHOR, name="alice", new_name="alicia")
    await RenameGroup.run(db, AUTHOR, name="lab1", new_name="lab9")
    got = await claims()
    assert got["alicia"] == "user" and got["lab9"] == "group"
    assert "alice" not in got and "lab1" not in got
    # Every user and group name has its row (the seeded access groups were backfilled).
    await backfill_claims(db.database)
    assert await claims() == await expected_claims(db.database)


async def test_the_store_refuses_a_clash_the_pre_check_cannot_see(db):
    """Stand in for the race: the user's documents are gone from the pre-check's view, but
    the claim row (committed by the "other" transaction) still holds the name."""
    await make_user(db, "carol")
    await User.get_pymongo_collection().delete_many({"name": "carol"})
    await Group.get_pymongo_collection().delete_many({"name": "carol"})
    before = await History.count()
    with pytest.raises(AlreadyExists, match=r"user or group.* already exists"):
        await CreateGroup.run(db, AUTHOR, name="carol", gid=next_uid())
    with pytest.raises(AlreadyExists):
        await CreateUser.run(db, AUTHOR, name="carol", email="c@example.org", uid=next_uid(),
                             fullname="Carol C")
    assert await Group.find_one(Group.name == "carol") is None
    assert await History.count() == before


async def test_rename_onto_a_claimed_name_is_refused(db):
    await make_user(db, "dave")
    await make_group(db, "grp")
    await NameClaim(name="taken", kind="group").insert()  # another writer's claim
    with pytest.raises(AlreadyExists):
        await RenameUser.run(db, AUTHOR, name="dave", new_name="taken")
    with pytest.raises(AlreadyExists):
        await RenameGroup.run(db, AUTHOR, name="grp", new_name="taken")
    assert await User.find_one(User.name == "dave") is not None
    assert (await claims())["dave"] == "user"


async def test_backfill_for_a_store_from_before_the_registry(db):
    await make_user(db, "erin")
    await NameClaim.get_pymongo_collection().delete_many({})
    added = await ensure_registry(db.database)
    assert "erin" in added and "sudo-users" in added
    assert await claims() == await expected_claims(db.database)
    assert await ensure_registry(db.database) == []  # in use: nothing to do


async def test_concurrent_creators_in_process(db):
    """Users and groups of one name, all at once: exactly one wins."""
    async def as_user(i: int) -> object:
        return await CreateUser.run(db, AUTHOR, name="race", email="r@example.org",
                                    uid=next_uid(), fullname=f"Racer {i}")

    async def as_group(i: int) -> object:
        return await CreateGroup.run(db, AUTHOR, name="race", gid=next_uid())

    results = await asyncio.gather(*(f(i) for i in range(6) for f in (as_user, as_group)),
                                   return_exceptions=True)
    assert sum(not isinstance(r, BaseException) for r in results) == 1
    assert all(isinstance(r, AlreadyExists) for r in results if isinstance(r, BaseException))
    assert (await claims())["race"] in ("user", "group")


async def test_concurrent_cli_processes(db, cli_config):
    """Separate processes (each its own client and transaction) race for one name as a
    user and as a group: one exits 0, every other one exits 2 with one line."""
    async def run(*argv: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from cheeto_like.cli import console_main; console_main()",
            *argv, "--config", str(cli_config),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "COLUMNS": "200"})
        _, err = await proc.communicate()
        return proc.returncode or 0, err.decode()

    commands = []
    for i in range(3):
        commands.append(run("ng", "user", "new", "generic", "-u", "dup", "--email",
                            "d@example.org", "--fullname", f"Dup {i}", "--uid",
                            str(next_uid())))
        commands.append(run("ng", "group", "new", "generic", "-g", "dup", "--gid",
                            str(next_uid())))
    results = await asyncio.gather(*commands)
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2, 2, 2, 2, 2], results
    for code, err in results:
        if code == 2:
            lines = [line for line in err.splitlines() if line.strip()]
            assert len(lines) == 1 and "already exists" in lines[0], err
    assert (await claims())["dup"] in ("user", "group")
    assert await User.find(User.name == "dup").count() + await Group.find(
        {"name": "dup", "type": {"$ne": "user"}}).count() == 1
