"""How many store commands one simple operation sends, counted by a pymongo
``CommandListener`` on this module's own client against the real store: the write path's
cost is mostly round trips (bench/ops.py), so one more shows here before it shows there.

Each operation reads what it checks in one command (``queries.together``), and its
transaction ends with one command carrying its held-back inserts, LDAP version bumps,
generation marks and History row (``Store.write_together``: a client
``bulkWrite`` where the store has it, the embedded store and MongoDB 8.0), then the
commit. Counting stops at the first ``commitTransaction``: the compaction that follows
now and then (``generations.after_commit``) is not the operation's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import monitoring

from cheeto_like.config import MongoConfig
from cheeto_like.errors import AlreadyExists, InvalidInput, NotFound
from cheeto_like.models import Group, GroupMembership, History, NameClaim, User, UserSiteInfo
from cheeto_like.models.generation import collection as marks
from cheeto_like.operations.group_membership import (
    AddGroupMember,
    AddGroupSponsor,
    RemoveGroupMember,
    RemoveGroupSponsor,
)
from cheeto_like.operations.user import CreateSystemUser, CreateUser
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


async def test_create_user_sends_one_read_one_tail_and_the_commit(db):
    """The status and access groups are read in one command; name, uid and gid clashes
    are left to the unique indexes (no pre-check reads), and the three inserts go in
    the tail."""
    sent = await commands_of(CreateUser.run(db, AUTHOR, name="alice", uid=70001,
                                            email="alice@example.org", fullname="Alice",
                                            access=["login-ssh"]))
    assert sent == ["aggregate", *tail(db, "insert", "insert", "insert", "insert", "insert"),
                    "commitTransaction"]
    assert await NameClaim.find({"name": "alice"}).count() == 1
    assert await Group.find({"name": "alice", "gid": 70001}).count() == 1
    assert await History.find({"op": "create_user"}).count() == 1


async def test_add_site_user_sends_one_read_one_tail_and_the_commit(db):
    """The user and the site in one read; the membership row and the LDAP bump in the
    tail (a second membership is the unique index's to refuse)."""
    await make_site(db, "farm")
    await make_user(db, "alice", uid=70002)
    before = await ldap_version(User, "alice")
    sent = await commands_of(AddSiteUser.run(db, AUTHOR, user="alice", site="farm"))
    assert sent == ["aggregate", *tail(db, "insert", "update", "insert", "insert"),
                    "commitTransaction"]
    assert await UserSiteInfo.find({"user": "alice", "site": "farm"}).count() == 1
    assert await ldap_version(User, "alice") == before + 1


async def test_add_group_member_sends_one_read_one_tail_and_the_commit(db):
    await make_site(db, "farm")
    await make_user(db, "alice", uid=70003)
    await make_group(db, "lab", gid=80003)
    user_before = await ldap_version(User, "alice")
    group_before = await ldap_version(Group, "lab")
    marks_before = await marks().count_documents({})
    sent = await commands_of(AddGroupMember.run(db, AUTHOR, group="lab", user="alice",
                                                site="farm"))
    assert sent == ["aggregate", *tail(db, "insert", "update", "update", "insert", "insert"),
                    "commitTransaction"]
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
    assert sent == ["aggregate", "insert", "update", "update", "insert", "insert",
                    "commitTransaction"]
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


async def test_a_second_site_membership_is_explained_and_writes_nothing(db):
    """AddSiteUser leaves a second membership to the unique index (user, site), then
    says what the index refused, after the transaction."""
    await make_site(db, "farm")
    await make_user(db, "alice", uid=70007)
    await AddSiteUser.run(db, AUTHOR, user="alice", site="farm")
    history = await History.find_all().count()
    version = await ldap_version(User, "alice")
    with pytest.raises(AlreadyExists, match=r"user 'alice' is already on site 'farm'"):
        await AddSiteUser.run(db, AUTHOR, user="alice", site="farm")
    assert await History.find_all().count() == history
    assert await ldap_version(User, "alice") == version
    assert await UserSiteInfo.find({"user": "alice"}).count() == 1


async def test_the_one_read_still_refuses_what_is_missing_before_any_write(db):
    await make_site(db, "farm")
    await make_user(db, "alice", uid=70008)
    await make_group(db, "lab", gid=80008)
    history = await History.find_all().count()
    with pytest.raises(NotFound, match=r"user 'nobody' does not exist"):
        await AddSiteUser.run(db, AUTHOR, user="nobody", site="farm")
    with pytest.raises(NotFound, match=r"site 'nowhere' does not exist"):
        await AddSiteUser.run(db, AUTHOR, user="alice", site="nowhere")
    with pytest.raises(NotFound, match=r"group 'nolab' does not exist"):
        await AddGroupMember.run(db, AUTHOR, group="nolab", user="nobody", site="nowhere")
    with pytest.raises(NotFound, match=r"user 'nobody' does not exist"):
        await AddGroupMember.run(db, AUTHOR, group="lab", user="nobody", site="nowhere")
    with pytest.raises(NotFound, match=r"site 'nowhere' does not exist"):
        await AddGroupMember.run(db, AUTHOR, group="lab", user="alice", site="nowhere")
    status = await Group.find_one({"type": "status"})
    assert status is not None
    with pytest.raises(InvalidInput, match=rf"'{status.name}' is an status group"):
        await AddGroupMember.run(db, AUTHOR, group=status.name, user="alice", site="farm")
    with pytest.raises(NotFound, match=r"unknown status 'gone'"):
        await CreateUser.run(db, AUTHOR, name="bob", uid=70009, email="b@example.org",
                             fullname="Bob", status="gone")
    with pytest.raises(NotFound, match=r"unknown access type warp"):
        await CreateUser.run(db, AUTHOR, name="bob", uid=70009, email="b@example.org",
                             fullname="Bob", access=["login-ssh", "warp"])
    assert await History.find_all().count() == history
    assert await UserSiteInfo.find({"user": "alice"}).count() == 0
    assert await GroupMembership.find({"user": "alice"}).count() == 0
    assert await NameClaim.find({"name": "bob"}).count() == 0


async def test_a_second_role_and_a_repeat_change_the_one_edge(db):
    await make_site(db, "farm")
    await make_user(db, "alice", uid=70010)
    await make_group(db, "lab", gid=80010)
    await AddGroupMember.run(db, AUTHOR, group="lab", user="alice", site="farm")
    version = await ldap_version(User, "alice")
    again = await AddGroupMember.run(db, AUTHOR, group="lab", user="alice", site="farm")
    assert again.roles == ["member"]
    assert await ldap_version(User, "alice") == version  # nothing changed: no bump
    await AddGroupSponsor.run(db, AUTHOR, group="lab", user="alice", site="farm")
    edges = await GroupMembership.find({"user": "alice", "group": "lab"}).to_list()
    assert [e.roles for e in edges] == [["member", "sponsor"]]
    await RemoveGroupMember.run(db, AUTHOR, group="lab", user="alice", site="farm")
    await RemoveGroupSponsor.run(db, AUTHOR, group="lab", user="alice", site="farm")
    assert await GroupMembership.find({"user": "alice"}).count() == 0


async def test_within_another_operation_the_rows_are_written_at_once(db):
    """Run ``within`` a parent, CreateUser and AddSiteUser write now (the parent may
    read the rows back in its transaction), not in the tail."""
    await make_site(db, "farm")
    user, _group = await CreateSystemUser.run(db, AUTHOR, name="svc")
    assert user.type == "system"
    await AddSiteUser.run(db, AUTHOR, user="svc", site="farm")
    assert await UserSiteInfo.find({"user": "svc", "site": "farm"}).count() == 1
