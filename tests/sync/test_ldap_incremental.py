"""Incremental LDAP runs against a real slapd (issue 18): a whole-site run leaves one mark
per site instead of a stamp per record; an incremental run with nothing changed reads a
constant number of store commands, nothing from the directory and writes nothing; and
each kind of change (a user's fields, a membership added or removed, a site access, a
user taken off the site or deleted, a storage or a group gone, a change made outside the
operations) is found and written by the next incremental run, which then settles.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from pymongo import monitoring

from cheeto_like.adapters.ldap import Directory
from cheeto_like.config import MongoConfig
from cheeto_like.models import GroupMembership, Storage, User, UserSiteInfo
from cheeto_like.operations.group_membership import AddGroupMember, RemoveGroupMember
from cheeto_like.operations.user import AddUserAccess, SetUserShell
from cheeto_like.operations.user_site import RemoveSiteUser
from cheeto_like.store import Store
from cheeto_like.sync.ldap import run as sync
from cheeto_like.sync.ldap.mark import ms, read_mark
from tests.factories import AUTHOR, make_group, make_user
from tests.queries.test_query_count import listening
from tests.services.ldap import Slapd
from tests.sync.ldap_lab import Lab, populate

DATA = {"users", "groups", "storages", "user_site_info", "group_membership", "ssh_keys",
        "ldap_marks", "ldap_mark_versions", "names", "history"}
WRITES = {"insert", "update", "delete", "findAndModify"}


class Recorder(monitoring.CommandListener):
    """Every store command: (name, collection)."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, str]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        name = event.command_name
        self.commands.append((name, str(event.command.get(name, ""))))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def reads(self) -> list[tuple[str, str]]:
        return [c for c in self.commands if c[0] in {"find", "aggregate", "getMore", "count"}]

    def data_writes(self) -> list[tuple[str, str]]:
        return [c for c in self.commands if c[0] in WRITES and c[1] in DATA]


@asynccontextmanager
async def recording(store: Store, config: MongoConfig) -> AsyncIterator[Recorder]:
    """Bind the models to a second client that records its commands (as
    tests/queries/test_query_count.py does), then back to the module's store."""
    async with listening(store, config, Recorder()) as recorder:
        yield recorder


class CountingDirectory(Directory):
    """The real adapter, counting the searches a run makes."""

    searches = 0

    async def search(self, *args: Any, **kwargs: Any) -> Any:
        self.searches += 1
        return await super().search(*args, **kwargs)


@pytest.fixture
async def lab(db, slapd: Slapd) -> Lab:
    lab = Lab(db, slapd)
    await lab.make_sites()
    return lab


async def quiet_run(lab: Lab, mongo_config: MongoConfig) -> tuple[sync.Report, Recorder, int]:
    async with CountingDirectory(lab.config) as directory:
        async with recording(lab.store, mongo_config) as recorder:
            report = await sync.run(lab.store, lab.config, lab.site,
                                    scope=sync.scope_for(lab.config, kinds=frozenset(
                                        {"users", "groups", "automounts", "prune"})),
                                    author=AUTHOR, directory=directory)
        return report, recorder, directory.searches


async def test_a_whole_site_run_writes_one_mark_not_a_stamp_per_record(lab: Lab):
    n = await populate(lab)
    report = await lab.sync()
    assert report.ok and report.watermark_writes == 2  # the site's document + its tokens
    assert report.watermarked >= len(report.plan.focus.users) + 10  # records the mark covers
    assert not [u.name for u in await User.find({}).to_list() if lab.site in u.ldap.synced]
    mark = await read_mark(lab.site)
    assert mark is not None and not mark.pending
    assert {n["alice"], n["bob"], n["root"], n["svc"]} == mark.roster("users")
    assert {n["lab"], n["all"], "sudo-users"} <= mark.roster("groups")
    assert f"auto.home/{n['alice']}" in mark.roster("automounts")
    for user in ("alice", "bob", "root", "svc"):
        assert not await sync.needs_sync("user", n[user], lab.site)
    await SetUserShell.run(lab.store, AUTHOR, name=n["bob"], shell="/bin/zsh")
    assert await sync.needs_sync("user", n["bob"], lab.site)
    assert not await sync.needs_sync("user", n["alice"], lab.site)


async def test_nothing_changed_reads_a_constant_number_of_commands_and_writes_nothing(
        lab: Lab, mongo_config: MongoConfig):
    await populate(lab)
    await lab.sync()
    before = lab.dump()
    report, small, searches = await quiet_run(lab, mongo_config)
    assert report.ok and report.unchanged and report.plan.is_empty and report.writes == {}
    assert searches == 0  # not one entry read from the directory
    assert small.data_writes() == []
    assert not [c for c in small.reads() if c[1] == "ldap_mark_versions"]  # tokens unread
    assert lab.dump() == before
    # ten times the users: the same commands
    for i in range(12):
        await make_user(lab.store, lab.name(f"more{i}x"), site=lab.site, access=["login-ssh"])
        await AddGroupMember.run(lab.store, AUTHOR, group=lab.name("lab"),
                                 user=lab.name(f"more{i}x"), site=lab.site)
    assert (await lab.sync()).ok
    before = lab.dump()
    report, large, searches = await quiet_run(lab, mongo_config)
    assert report.unchanged and report.writes == {} and searches == 0
    assert large.data_writes() == []
    assert len(small.reads()) == len(large.reads()) > 0, (small.reads(), large.reads())
    assert lab.dump() == before


async def expect(lab: Lab, changes: list[tuple[str, str]], *, most_users: int = 3) -> None:
    """One incremental run writes exactly ``changes`` (op, label), compares no more than a
    few users, and the run after it has nothing to read."""
    report = await lab.sync()
    assert report.ok and report.by_name, report.failed
    assert sorted((c.op, c.label) for c in report.plan.changes) == sorted(changes), \
        report.plan.as_dict()
    assert len(report.plan.focus.users | report.plan.focus.member_users) <= most_users
    again = await lab.sync()
    assert again.plan.is_empty and again.unchanged, again.plan.as_dict()


async def test_every_kind_of_change_is_found_by_an_incremental_run(lab: Lab):
    n = await populate(lab)
    await lab.sync()
    site = lab.site
    labg = n["lab"]

    # a user's own fields
    await SetUserShell.run(lab.store, AUTHOR, name=n["alice"], shell="/bin/zsh")
    await expect(lab, [("modify", f"user {n['alice']}")])
    assert lab.entry(lab.user_dn(n["alice"]))["loginShell"] == ["/bin/zsh"]  # type: ignore[index]

    # a membership added, then removed
    await AddGroupMember.run(lab.store, AUTHOR, group=labg, user=n["root"], site=site)
    await expect(lab, [("modify", f"group {labg}")])
    assert n["root"] in lab.members(labg)
    await RemoveGroupMember.run(lab.store, AUTHOR, group=labg, user=n["root"], site=site)
    await expect(lab, [("modify", f"group {labg}")])
    assert n["root"] not in lab.members(labg)

    # an access granted at the site only (to bob, inactive there: recorded, exported
    # nowhere, queries.access_policy; to alice, active: her sudo-users membership)
    await AddUserAccess.run(lab.store, AUTHOR, name=n["bob"], access=["sudo"], site=site)
    await expect(lab, [])
    await AddUserAccess.run(lab.store, AUTHOR, name=n["alice"], access=["sudo"], site=site)
    await expect(lab, [("modify", "group sudo-users")])
    assert lab.members("sudo-users") == [n["alice"]]

    # a new user on the site: the entry, their personal group and their groups
    carol = lab.name("carol")
    await make_user(lab.store, carol, site=site, access=["login-ssh"])
    await expect(lab, [("add", f"user {carol}"), ("add", f"group {carol}"),
                       ("modify", f"group {n['all']}"), ("modify", "group active-users"),
                       ("modify", "group login-ssh-users")])
    assert carol in lab.members(n["all"]) and carol in lab.members("login-ssh-users")

    # a user taken off the site leaves every group there (the global entry stays)
    await RemoveSiteUser.run(lab.store, AUTHOR, user=carol, site=site)
    await expect(lab, [("delete", f"group {carol}"), ("modify", f"group {n['all']}"),
                       ("modify", "group active-users"), ("modify", "group login-ssh-users")])
    assert carol not in lab.members(n["all"]) and carol not in lab.members("login-ssh-users")
    assert lab.entry(lab.user_dn(carol)) is not None


async def test_deletions_outside_the_operations_are_found_too(lab: Lab):
    """Records deleted or changed by a raw write (no operation, no generation bump, no
    dirty mark) still reach the directory: the counts and latest times move, and the
    mark's rosters say what is gone."""
    n = await populate(lab)
    dave = lab.name("dave")
    await make_user(lab.store, dave, site=lab.site, access=["login-ssh"])
    await AddGroupMember.run(lab.store, AUTHOR, group=n["lab"], user=dave, site=lab.site)
    await lab.sync()
    assert dave in lab.members(n["lab"])

    # a storage removed: its automount key goes
    share = await Storage.find_one({"site": lab.site, "category": "share"})
    assert share is not None
    await share.delete()
    await expect(lab, [("delete", f"automount auto.share/data+raw{lab.k}")], most_users=0)

    # a site record deleted by hand: dave leaves the site's groups
    usi = await UserSiteInfo.find_one({"user": dave, "site": lab.site})
    assert usi is not None
    await usi.delete()
    await expect(lab, [("delete", f"group {dave}"), ("modify", f"group {n['lab']}"),
                       ("modify", f"group {n['all']}"), ("modify", "group active-users"),
                       ("modify", "group login-ssh-users")])
    assert dave not in lab.members(n["lab"]) and dave not in lab.members(n["all"])

    # a group no longer used at the site (its edges and storage gone): its entry goes
    for edge in await GroupMembership.find({"group": n["lab"], "site": lab.site}).to_list():
        await edge.delete()
    storage = await Storage.find_one({"site": lab.site, "group": n["lab"]})
    assert storage is not None
    await storage.delete()
    await expect(lab, [("delete", f"group {n['lab']}"),
                       ("delete", f"automount auto.group/{n['lab']}")], most_users=0)
    assert lab.entry(lab.group_dn(n["lab"])) is None

    # a user deleted from the store: the entry is pruned and their memberships dropped
    erin = lab.name("erin")
    await make_user(lab.store, erin, site=lab.site, access=["login-ssh"])
    await lab.sync()
    assert erin in lab.members("login-ssh-users")
    await User.get_pymongo_collection().delete_one({"name": erin})
    await UserSiteInfo.get_pymongo_collection().delete_many({"user": erin})
    await expect(lab, [("delete", f"user {erin}"), ("delete", f"group {erin}"),
                       ("modify", f"group {n['all']}"), ("modify", "group active-users"),
                       ("modify", "group login-ssh-users")])
    assert lab.entry(lab.user_dn(erin)) is None
    assert erin not in lab.members("login-ssh-users")


async def test_a_failed_record_is_retried_alone(lab: Lab):
    n = await populate(lab)
    await lab.sync()
    zoe = lab.name("zoe")  # homeDirectory is IA5 (ASCII): slapd refuses this one
    await make_user(lab.store, zoe, site=lab.site)
    await User.get_pymongo_collection().update_one(
        {"name": zoe}, {"$set": {"home_directory": "/home/zoë"}})
    first = await lab.sync()
    assert [i.targets for i in first.failed] == [[f"user {zoe}"]]
    mark = await read_mark(lab.site)
    assert mark is not None and f"user:{zoe}" in mark.pending
    second = await lab.sync()  # still failing, and nothing else is compared
    assert [i.targets for i in second.failed] == [[f"user {zoe}"]]
    assert second.plan.focus.users == {zoe}
    await User.get_pymongo_collection().update_one(
        {"name": zoe}, {"$set": {"home_directory": f"/home/{zoe}"}})
    third = await lab.sync()
    assert third.ok and ("add", f"user {zoe}") in [(c.op, c.label) for c in third.plan.changes]
    assert not await sync.needs_sync("user", zoe, lab.site)
    assert (await lab.sync()).unchanged
    assert n["alice"] in lab.members("login-ssh-users")


async def test_a_new_group_with_a_storage_only_is_added(lab: Lab):
    """A group that enters the site without being marked dirty (an old group, newly
    referenced by a storage) is new to the mark's roster, so it is added."""
    n = await populate(lab)
    old = lab.name("oldgrp")
    await make_group(lab.store, old)
    await lab.sync()
    assert lab.entry(lab.group_dn(old)) is None
    from tests.sync.ldap_lab import add_mount

    await add_mount(lab, old, "group", n["alice"], old, "auto.group", "/group", options=())
    await expect(lab, [("add", f"group {old}"), ("add", f"automount auto.group/{old}")],
                 most_users=0)
    assert lab.entry(lab.group_dn(old)) is not None


class EditingDirectory(Directory):
    """The real adapter; the first search runs an edit in the store, as another admin
    would while the run is reading the directory (after it read the store)."""

    def __init__(self, *args: Any, edit: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.edit = edit

    async def search(self, *args: Any, **kwargs: Any) -> Any:
        if self.edit is not None:
            edit, self.edit = self.edit, None
            await edit()
        return await super().search(*args, **kwargs)


async def test_an_edit_made_during_a_run_stays_dirty_for_the_next(lab: Lab):
    n = await populate(lab)
    await lab.sync()
    await SetUserShell.run(lab.store, AUTHOR, name=n["alice"], shell="/bin/zsh")

    async def edit() -> None:
        await SetUserShell.run(lab.store, AUTHOR, name=n["bob"], shell="/bin/sh")

    async with EditingDirectory(lab.config, edit=edit) as directory:
        report = await sync.run(lab.store, lab.config, lab.site, scope=sync.scope_for(
            lab.config, kinds=frozenset({"users", "groups", "automounts", "prune"})),
            author=AUTHOR, directory=directory)
    assert report.ok and report.by_name
    assert [c.label for c in report.plan.changes] == [f"user {n['alice']}"]
    assert await sync.needs_sync("user", n["bob"], lab.site)  # changed after the read
    assert not await sync.needs_sync("user", n["alice"], lab.site)
    await expect(lab, [("modify", f"user {n['bob']}")])
    assert lab.entry(lab.user_dn(n["bob"]))["loginShell"] == ["/bin/sh"]  # type: ignore[index]


# -- versions, not clocks (issue 24) -----------------------------------------------------------


async def fail_point(mode: Any, **data: Any) -> int:
    """The store's ``failCommand`` fail point; returns how often it fired before."""
    admin = User.get_pymongo_collection().database.client.admin
    reply = await admin.command("configureFailPoint", "failCommand", mode=mode, data=data)
    return int(reply.get("count", 0))


async def test_a_write_committed_during_a_run_is_synced_by_the_next(lab: Lab):
    """The write's transaction stamps the record while the run is under way and commits
    late (its commit held by the fail point): the run's read did not see it, and the
    version it commits differs from the one the run recorded, so the next run writes it
    whatever the times say. (On a replica set the run's reads do not wait for the
    transaction; on the embedded store they queue behind it: either way the run read
    the record before the write.)"""
    n = await populate(lab)
    await lab.sync()
    await SetUserShell.run(lab.store, AUTHOR, name=n["alice"], shell="/bin/zsh")
    writes: list[asyncio.Task[Any]] = []

    async def edit() -> None:  # the run has read the store; now another admin writes
        await fail_point({"times": 1}, failCommands=["commitTransaction"],
                         blockConnection=True, blockTimeMS=1500)
        writes.append(asyncio.create_task(
            SetUserShell.run(lab.store, AUTHOR, name=n["bob"], shell="/bin/sh")))
        await asyncio.sleep(0.2)  # let it reach its commit (the assertions hold either way)

    try:
        async with EditingDirectory(lab.config, edit=edit) as directory:
            report = await sync.run(lab.store, lab.config, lab.site, scope=sync.scope_for(
                lab.config, kinds=frozenset({"users", "groups", "automounts", "prune"})),
                author=AUTHOR, directory=directory)
        await asyncio.gather(*writes)
    finally:
        fired = await fail_point("off")
    assert fired == 1  # the write's commit was held
    assert report.ok and [c.label for c in report.plan.changes] == [f"user {n['alice']}"]
    assert await sync.needs_sync("user", n["bob"], lab.site)
    await expect(lab, [("modify", f"user {n['bob']}")])
    assert lab.entry(lab.user_dn(n["bob"]))["loginShell"] == ["/bin/sh"]  # type: ignore[index]


async def test_a_writer_whose_clock_is_behind_is_synced(lab: Lab):
    """A record written after the last run by a writer whose clock is 30 s behind (its
    ``modified_at`` and ``updated_at`` older than the run, no generation bump) moves its
    version, and so the fingerprint's version sum and the record's token: the next
    incremental run writes it (issue 18's times skipped it until ``--full``)."""
    n = await populate(lab)
    await lab.sync()
    users = User.get_pymongo_collection()
    raw = await users.find_one({"name": n["bob"]})
    assert raw is not None
    behind = raw["ldap"]["modified_at"] - timedelta(seconds=30)
    raw["shell"] = "/bin/ksh"
    raw["updated_at"] = behind
    raw["ldap"]["modified_at"] = behind
    raw["ldap"]["version"] += 1  # what the writer's before-save hook does
    await users.replace_one({"_id": raw["_id"]}, raw)
    back = await users.find_one({"name": n["bob"]})
    assert back is not None and back["ldap"]["modified_at"] == behind  # really back-dated
    mark = await read_mark(lab.site)
    assert mark is not None and ms(behind) < mark.through_ms
    await expect(lab, [("modify", f"user {n['bob']}")], most_users=1)
    assert lab.entry(lab.user_dn(n["bob"]))["loginShell"] == ["/bin/ksh"]  # type: ignore[index]


async def test_a_user_deleted_and_made_again_under_the_same_name_is_rewritten(lab: Lab):
    """Same name, same count: the new record's first version is not the old one's, so
    the mark's token for that name no longer matches."""
    n = await populate(lab)
    await lab.sync()
    old = await User.find_one({"name": n["bob"]})
    assert old is not None
    await User.get_pymongo_collection().delete_one({"name": n["bob"]})
    fields = old.model_dump(exclude={"id", "ldap", "revision_id", "created_at", "updated_at"})
    await User(**{**fields, "shell": "/usr/bin/zsh"}).insert()  # a new record, by the hooks
    new = await User.find_one({"name": n["bob"]})
    assert new is not None and new.ldap.version != old.ldap.version
    report = await lab.sync()
    assert report.ok and report.by_name
    assert ("modify", f"user {n['bob']}") in [(c.op, c.label) for c in report.plan.changes]
    assert lab.entry(lab.user_dn(n["bob"]))["loginShell"] == ["/usr/bin/zsh"]  # type: ignore[index]
    assert (await lab.sync()).unchanged


async def test_a_partial_run_stamps_the_version_it_read(lab: Lab):
    """``sync-user`` stamps ``ldap.synced_version.<site>`` with the version it read; an
    edit after that leaves the record dirty with no second write."""
    n = await populate(lab)
    await lab.sync()
    await SetUserShell.run(lab.store, AUTHOR, name=n["alice"], shell="/bin/zsh")
    report = await lab.sync(only_users=frozenset({n["alice"]}))
    assert report.ok and report.watermarked >= 1
    alice = await User.find_one({"name": n["alice"]})
    assert alice is not None and alice.ldap.synced_version[lab.site] == alice.ldap.version
    assert lab.site in alice.ldap.synced  # the time, for display
    assert not await sync.needs_sync("user", n["alice"], lab.site)
    await SetUserShell.run(lab.store, AUTHOR, name=n["alice"], shell="/bin/bash")
    assert await sync.needs_sync("user", n["alice"], lab.site)
