"""How many store commands one simple operation sends, counted by a pymongo
``CommandListener`` on this module's own client against the real store: the write path's
cost is mostly round trips (bench/ops.py), so one more shows here before it shows there.

Each operation's transaction ends with one command carrying its held-back LDAP version
bumps, generation marks and History row (``Store.write_together``: a client
``bulkWrite`` where the store has it, the embedded store and MongoDB 8.0), then the
commit. Counting stops at the first ``commitTransaction``: the compaction that follows
now and then (``generations.after_commit``) is not the operation's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import monitoring

from cheeto_like.config import MongoConfig
from cheeto_like.errors import AlreadyExists
from cheeto_like.models import Group, GroupMembership, History, NameClaim, User
from cheeto_like.models.generation import collection as marks
from cheeto_like.operations.group_membership import AddGroupMember
from cheeto_like.operations.user import CreateUser
from cheeto_like.operations.user_site import AddSiteUser
from cheeto_like.store import Store, Write, client_bulk_write_supported, connect

from ..conftest import module_database
from ..factories import AUTHOR, make_group, make_site, make_user


class Commands(monitoring.CommandListener):
    """The names of the commands started while ``recording``."""

    def __init__(self) -> None:
        self.recording = False
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.recording:
            self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def operation(self) -> list[str]:
        """The commands up to and including the first commit."""
        if "commitTransaction" not in self.names:
            return list(self.names)
        return self.names[:self.names.index("commitTransaction") + 1]


LISTENER = Commands()


@pytest.fixture(scope="module")
async def store(mongo_config: MongoConfig,
                request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """This module's database, on a client that carries the listener."""
    connected = await connect(mongo_config, database=module_database(request),
                              autostart=False, create_indexes=False, listeners=[LISTENER])
    await connected.drop_database()
    await connected.bind()
    try:
        yield connected
    finally:
        await connected.close()


async def commands_of(coro: Any) -> list[str]:
    LISTENER.names.clear()
    LISTENER.recording = True
    try:
        await coro
    finally:
        LISTENER.recording = False
    return LISTENER.operation()


def tail(store: Store, *per_collection: str) -> list[str]:
    """The end of an operation: one bulkWrite where the store has it, else one command
    per run of writes to one collection (``per_collection``)."""
    if client_bulk_write_supported(store.client):
        return ["bulkWrite"]
    return list(per_collection)


async def ldap_version(model: type[User] | type[Group], name: str) -> int:
    doc = await model.get_pymongo_collection().find_one({"name": name}, {"ldap": 1})
    assert doc is not None
    return int((doc.get("ldap") or {}).get("version") or 0)


async def test_create_user_sends_its_reads_three_inserts_one_tail_and_the_commit(db):
    """The status and access groups are read; name, uid and gid clashes are left to the
    unique indexes (no pre-check reads)."""
    sent = await commands_of(CreateUser.run(db, AUTHOR, name="alice", uid=70001,
                                            email="alice@example.org", fullname="Alice",
                                            access=["login-ssh"]))
    assert sent == ["find", "find", "insert", "insert", "insert",
                    *tail(db, "insert", "insert"), "commitTransaction"]
    assert await History.find({"op": "create_user"}).count() == 1


async def test_add_site_user_holds_back_the_ldap_bump_into_the_tail(db):
    await make_site(db, "farm")
    await make_user(db, "alice", uid=70002)
    before = await ldap_version(User, "alice")
    sent = await commands_of(AddSiteUser.run(db, AUTHOR, user="alice", site="farm"))
    assert sent == ["find", "find", "find", "insert",
                    *tail(db, "update", "insert", "insert"), "commitTransaction"]
    assert await ldap_version(User, "alice") == before + 1


async def test_add_group_member_sends_its_reads_one_insert_one_tail_and_the_commit(db):
    await make_site(db, "farm")
    await make_user(db, "alice", uid=70003)
    await make_group(db, "lab", gid=80003)
    user_before = await ldap_version(User, "alice")
    group_before = await ldap_version(Group, "lab")
    marks_before = await marks().count_documents({})
    sent = await commands_of(AddGroupMember.run(db, AUTHOR, group="lab", user="alice",
                                                site="farm"))
    assert sent == ["find", "find", "find", "find", "insert",
                    *tail(db, "update", "update", "insert", "insert"), "commitTransaction"]
    assert await ldap_version(User, "alice") == user_before + 1
    assert await ldap_version(Group, "lab") == group_before + 1
    assert await marks().count_documents({}) == marks_before + 1
    assert await GroupMembership.find({"user": "alice", "group": "lab"}).count() == 1


async def test_without_client_bulk_write_the_tail_goes_per_collection(db):
    """A store before MongoDB 8.0: the same writes, one command per run of writes to a
    collection, in the same transaction."""
    await make_site(db, "farm")
    await make_user(db, "alice", uid=70004)
    await make_group(db, "lab", gid=80004)
    before = await ldap_version(User, "alice")
    db._client_bulk = False
    try:
        sent = await commands_of(AddGroupMember.run(db, AUTHOR, group="lab", user="alice",
                                                    site="farm"))
    finally:
        db._client_bulk = None
    assert sent == ["find", "find", "find", "find", "insert", "update", "update", "insert",
                    "insert", "commitTransaction"]
    assert await ldap_version(User, "alice") == before + 1
    assert await History.find({"op": "add_group_member"}).count() == 1


async def test_a_clash_is_explained_after_the_transaction_and_writes_nothing(db):
    await make_user(db, "alice", uid=70005)
    await make_group(db, "lab", gid=80005)
    history = await History.find_all().count()
    with pytest.raises(AlreadyExists, match=r"uid 70005 is already used by user 'alice'"):
        await CreateUser.run(db, AUTHOR, name="bob", uid=70005, email="b@example.org",
                             fullname="Bob")
    with pytest.raises(AlreadyExists, match=r"a group named 'lab' already exists"):
        await CreateUser.run(db, AUTHOR, name="lab", uid=70006, email="l@example.org",
                             fullname="Lab")
    with pytest.raises(AlreadyExists, match=r"gid 80005 is already used by group 'lab'"):
        await CreateUser.run(db, AUTHOR, name="carol", uid=80005, email="c@example.org",
                             fullname="Carol")
    assert await History.find_all().count() == history
    assert await User.find({"name": {"$in": ["bob", "carol"]}}).count() == 0
    assert await NameClaim.find({"name": {"$in": ["bob", "carol"]}}).count() == 0


async def test_write_together_opens_joins_and_aborts_with_its_transaction(db):
    """The tail's command (on the embedded store a client bulkWrite sent to ``admin``,
    writing to this database): as a transaction's first command or after a read, across
    collections, rolled back whole by an abort and kept whole by a commit."""
    one, two = db.database["bulk_one"], db.database["bulk_two"]
    for read_first, commit in ((False, False), (True, False), (False, True)):
        async with db.client.start_session() as session:
            await session.start_transaction()
            if read_first:
                await one.find_one({}, session=session)
            LISTENER.names.clear()
            LISTENER.recording = True
            await db.write_together(session, [
                Write("bulk_one", {"_id": f"{read_first}-{commit}"}),
                Write("bulk_two", {"_id": f"{read_first}-{commit}"})])
            LISTENER.recording = False
            assert LISTENER.names == tail(db, "insert", "insert")
            if commit:
                await session.commit_transaction()
            else:
                await session.abort_transaction()
    assert [d["_id"] async for d in one.find({})] == ["False-True"]
    assert [d["_id"] async for d in two.find({})] == ["False-True"]
