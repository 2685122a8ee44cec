"""Class batches in bounded chunks (issue 24.5): ``ng user new class`` writes a batch
of accounts in short transactions under a batch record, so a big batch never holds one
transaction past ``transactionLifetimeLimitSeconds`` (2 s here, ``setParameter``), and
stays all-or-nothing as the admin sees it: the accounts are inactive until the last
chunks activate them, the passwords file is written only at the end, an interrupted
batch is reported (``db status``, ``db check``) and finished by running the same
command again, which gives every account a new password."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cheeto_like import progress
from cheeto_like.constants import CLASS_USER_BAND
from cheeto_like.credentials import generate_password, hash_password, verify_password
from cheeto_like.errors import AlreadyExists, Conflict
from cheeto_like.models import GroupMembership, History, Storage, User
from cheeto_like.operations.class_users import (
    ClassBatchArgs,
    CreateClassChunk,
    CreateClassUsers,
    TakeOverClassBatch,
)
from cheeto_like.operations.user import RenameUser
from cheeto_like.queries.class_batches import COLLECTION, unfinished_class_batch
from cheeto_like.store import Store

from ..factories import (
    AUTHOR,
    home_defaults,
    make_group,
    make_site,
    make_user,
    transaction_lifetime,
)

SOON = datetime.now(UTC) + timedelta(days=120)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def farm(db: Store) -> AsyncIterator[Store]:
    """A site with home defaults and a course group, under a 2 s transaction limit
    (60 again after). Batch records are bookkeeping the ``db`` fixture does not wipe."""
    await db.database[COLLECTION].delete_many({})
    await make_site(db, "farm")
    await home_defaults(db)
    await make_group(db, "cs101", gid=70_000)
    async with transaction_lifetime(db, 2):
        yield db


class StopAfterChunks:
    """A progress reporter that interrupts a batch (as a Ctrl-C or a kill would) once
    ``chunks`` chunk transactions have committed; ``on_chunk`` runs after each."""

    def __init__(self, chunks: int | None, on_chunk: Any = None) -> None:
        self.chunks, self.on_chunk, self.seen, self.counting = chunks, on_chunk, 0, False

    def begin(self, total: int | None, label: str) -> None:
        self.counting = label == "class accounts"

    def advance(self, n: int = 1) -> None:
        if not self.counting:
            return  # hashing
        self.seen += 1
        if self.on_chunk is not None:
            self.on_chunk(self.seen)
        if self.chunks is not None and self.seen >= self.chunks:
            raise KeyboardInterrupt


async def batch(store: Store, prefix: str, count: int, chunk: int, **kwargs: Any):
    kwargs.setdefault("email", "ta@example.org")
    kwargs.setdefault("expires_at", SOON)
    return await CreateClassUsers.run(store, AUTHOR, site="farm", prefix=prefix, count=count,
                                      chunk_size=chunk, **kwargs)


async def interrupted(store: Store, prefix: str, count: int, chunk: int, after: int,
                      **kwargs: Any) -> dict[str, Any]:
    with progress.reporting(StopAfterChunks(after)), pytest.raises(KeyboardInterrupt):
        await batch(store, prefix, count, chunk, **kwargs)
    spec = ClassBatchArgs(site="farm", prefix=prefix, count=count, email="ta@example.org",
                          expires_at=SOON)
    record = await unfinished_class_batch(store, spec.batch_id())
    assert record is not None
    return record


async def test_a_batch_is_written_in_chunks_under_a_2s_transaction_limit(farm):
    created = await batch(farm, "cs101", 24, 3, group="cs101")
    names = [f"cs101-{i:02d}" for i in range(1, 25)]
    assert [u.name for u, _ in created] == names
    users = {u.name: u for u in await User.find({"type": "class"}).to_list()}
    assert sorted(users) == names
    start = CLASS_USER_BAND.start
    assert [users[n].uid for n in names] == list(range(start, start + 24))
    for name, password in ((u.name, p) for u, p in created):
        assert users[name].status == "active" and users[name].expires_at is not None
        assert verify_password(password, users[name].password)
    assert len({p for _, p in created}) == 24
    assert await GroupMembership.find({"group": "cs101"}).count() == 24
    assert await Storage.find({"category": "home"}).count() == 24
    [row] = await History.find({"op": "create_class_users"}).to_list()
    assert row.changes["users"] == names and row.changes["base_uid"] == start
    assert (row.changes["chunks"], row.changes["runs"]) == (8, 1)
    assert row.changes["passwords_replaced"] == 0
    assert row.changes["home_mechanism"] == "automount:home"
    # the chunks wrote no History rows of their own, and the record is gone
    assert await History.find({"op": {"$in": ["create_class_users_chunk", "create_user",
                                              "activate_class_users_chunk"]}}).count() == 0
    assert await farm.database[COLLECTION].count_documents({}) == 0


class FewHashes(CreateClassUsers):
    """A batch whose accounts take their (password, hash) from a few real pairs in turn:
    yescrypt (0.1-0.3 s a hash, before any transaction) is not what is measured here."""

    @classmethod
    async def prepare(cls, args: Any) -> list[tuple[str, str]]:
        pairs = [(f"pw-{i}-{generate_password()}", "") for i in range(6)]
        pairs = [(p, hash_password(p)) for p, _ in pairs]
        return [pairs[i % len(pairs)] for i in range(args.count)]


async def test_a_batch_of_300_commits_in_chunks_under_a_2s_transaction_limit(farm):
    created = await FewHashes.run(farm, AUTHOR, site="farm", prefix="big", count=300,
                                  email="ta@example.org", expires_at=SOON, chunk_size=5)
    users = {u["name"]: u for u in await User.get_pymongo_collection().find(
        {"type": "class"}, {"name": 1, "uid": 1, "status": 1, "password": 1}).to_list()}
    names = [f"big-{i:03d}" for i in range(1, 301)]
    assert sorted(users) == names == [u.name for u, _ in created]
    start = CLASS_USER_BAND.start
    assert [users[n]["uid"] for n in names] == list(range(start, start + 300))
    assert {u["status"] for u in users.values()} == {"active"}
    assert [users[u.name]["password"] for u, _ in created] == [u.password for u, _ in created]
    for user, password in created[:6]:
        assert verify_password(password, users[user.name]["password"])
    [row] = await History.find({"op": "create_class_users"}).to_list()
    assert (row.changes["count"], row.changes["chunks"], row.changes["runs"]) == (300, 60, 1)
    assert await Storage.find({"category": "home"}).count() == 300
    assert await farm.database[COLLECTION].count_documents({}) == 0


async def test_an_interrupted_batch_is_inactive_and_a_rerun_finishes_it(farm):
    record = await interrupted(farm, "cs", 10, 3, after=2)
    assert (record["created"], record["count"], record["runs"]) == (6, 10, 1)
    made = await User.find({"type": "class"}).to_list()
    assert len(made) == 6 and {u.status for u in made} == {"inactive"}
    assert await History.find({"op": "create_class_users"}).count() == 0

    created = await batch(farm, "cs", 10, 3)
    assert (created.replaced, created.runs) == (6, 2)
    users = {u.name: u for u in await User.find({"type": "class"}).to_list()}
    assert len(users) == 10 and {u.status for u in users.values()} == {"active"}
    for user, password in created:
        assert verify_password(password, users[user.name].password)
    [row] = await History.find({"op": "create_class_users"}).to_list()
    assert (row.changes["runs"], row.changes["passwords_replaced"]) == (2, 6)
    assert row.changes["chunks"] == 4  # 2 before the interruption, 2 after
    assert await farm.database[COLLECTION].count_documents({}) == 0


async def test_an_interruption_while_activating_is_finished_too(farm):
    # 4 create chunks, then the interruption after the first activation chunk
    record = await interrupted(farm, "ac", 8, 2, after=5)
    assert (record["created"], record["activated"]) == (8, 2)
    created = await batch(farm, "ac", 8, 4)  # another chunk size is fine
    assert created.replaced == 8
    users = {u.name: u for u in await User.find({"type": "class"}).to_list()}
    assert {u.status for u in users.values()} == {"active"}
    for user, password in created:
        assert verify_password(password, users[user.name].password)


async def test_an_older_run_stops_once_another_took_the_batch_over(farm):
    record = await interrupted(farm, "to", 6, 2, after=1)
    spec = ClassBatchArgs(site="farm", prefix="to", count=6, email="ta@example.org",
                          expires_at=SOON)
    await TakeOverClassBatch.run(farm, AUTHOR, skip_history=True, spec=spec,
                                 batch=spec.batch_id(), run="newer")
    with pytest.raises(Conflict, match="another run of this class batch took it over"):
        await CreateClassChunk.run(farm, AUTHOR, skip_history=True, spec=spec,
                                   batch=spec.batch_id(), run=record["holder"], start=2,
                                   stop=4, hashes=["$y$unused"] * 2)
    assert await User.find({"type": "class"}).count() == 2


async def test_a_rerun_with_other_options_is_refused(farm):
    await interrupted(farm, "op", 4, 2, after=1)
    before = await User.find({"type": "class"}).count()
    with pytest.raises(Conflict, match="give the same options"):
        await batch(farm, "op", 4, 2, group="cs101")
    assert await User.find({"type": "class"}).count() == before


async def test_a_rerun_with_another_count_names_the_unfinished_batch(farm):
    await interrupted(farm, "ct", 4, 2, after=1)
    with pytest.raises(AlreadyExists, match=r"already taken: ct-1, ct-2.*was interrupted "
                                            r"after 2 of 4 accounts.*--count 4"):
        await batch(farm, "ct", 2, 2)


async def test_another_batch_keeps_clear_of_an_unfinished_batchs_uids(farm):
    record = await interrupted(farm, "aa", 6, 2, after=1)
    created = await batch(farm, "bb", 2, 2)
    assert [u.uid for u, _ in created] == [record["first_uid"] + 6, record["first_uid"] + 7]
    finished = await batch(farm, "aa", 6, 2)
    assert [u.uid for u, _ in finished] == list(range(record["first_uid"],
                                                      record["first_uid"] + 6))


async def test_a_later_chunk_that_fails_leaves_the_batch_to_finish(farm):
    """Someone takes a name of the batch while it is unfinished: the run stops at that
    chunk with the reason and how to finish; once the clash is moved away, the same
    command finishes the batch."""
    await interrupted(farm, "late", 6, 2, after=2)
    await make_user(farm, "late-5")
    with pytest.raises(AlreadyExists, match="user 'late-5' already exists") as caught:
        await batch(farm, "late", 6, 2)
    assert "was interrupted after 4 of 6 accounts" in str(caught.value)
    assert "run the same `ng user new class` command again" in str(caught.value)
    assert await User.find({"type": "class"}).count() == 4
    await RenameUser.run(farm, AUTHOR, name="late-5", new_name="squatter")
    created = await batch(farm, "late", 6, 2)
    assert (created.replaced, created.runs, len(created)) == (4, 3, 6)


# -- the command, killed for real ---------------------------------------------------------


def read_until_done(fd: int, label: str, units: int) -> bool:
    """Read a terminal's output until its bar ``label`` shows ``units`` done (True), or
    the program closes it (False)."""
    seen = b""
    pattern = re.compile(re.escape(label).encode() + rb"\D*?(\d+)/(\d+)")
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the program ended
            return False
        if not chunk:
            return False
        seen = (seen + chunk)[-4096:]
        plain = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", seen)
        if any(int(m[1]) >= units for m in pattern.finditer(plain)):
            return True


async def test_a_killed_command_leaves_no_file_is_reported_and_is_finished(
        farm, cli, cli_config, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    path = out / "cs.txt"
    argv = ["ng", "user", "new", "class", "-s", "farm", "--prefix", "cs", "--count", "16",
            "--chunk-size", "2", "--expires-at", "+30d", "--file", str(path)]
    entry = "from cheeto_like.cli import console_main; console_main()"
    # stderr on a pty, so the command draws its bar: killed once it shows 4 units done
    master, slave = os.openpty()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", entry, *argv, "--config", str(cli_config), cwd=ROOT,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=slave)
    finally:
        os.close(slave)
    try:
        drawn = await asyncio.to_thread(read_until_done, master, "class accounts", 4)
        assert drawn, "the batch ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        os.close(master)
    records = farm.database[COLLECTION]
    assert list(out.iterdir()) == []  # no passwords file, not even an empty one
    record = await records.find_one({})
    assert record is not None and record["count"] == 16 and record["created"] >= 2
    made = await User.find({"type": "class"}).to_list()
    assert made and {u.status for u in made} <= {"inactive", "active"}
    assert await History.find({"op": "create_class_users"}).count() == 0

    status = await cli("db", "status", "--json")
    [line] = status.json()["unfinished_class_batches"]
    assert "run the same `ng user new class` command again" in line
    check = await cli("db", "check", "--json")
    assert check.code == 1 and check.json()["ok"] is False
    [row] = [c for c in check.json()["checks"] if c["check"] == "class batches"]
    assert row["status"] == "problem" and "was interrupted after" in row["detail"]

    again = await cli(*argv)
    assert again.code == 0, again.stderr
    assert "got new passwords" in again.stderr and "void" in again.stderr
    assert "created 16 class account(s)" in again.stderr
    lines = path.read_text().splitlines()
    assert [line.split()[0] for line in lines] == [f"cs-{i:02d}" for i in range(1, 17)]
    users = {u.name: u for u in await User.find({"type": "class"}).to_list()}
    for name, password in (line.split() for line in lines):
        assert users[name].status == "active"
        assert verify_password(password, users[name].password)
    assert await records.count_documents({}) == 0
    assert sorted(p.name for p in out.iterdir()) == ["cs.txt"]
    status = await cli("db", "status", "--json")
    assert "unfinished_class_batches" not in status.json()
