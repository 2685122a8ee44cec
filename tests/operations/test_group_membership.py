"""Membership roles on (user, group, site) edges: each role is added and removed on its
own, roles accumulate on one edge, the last removal deletes the edge, both directions are
idempotent, access/status groups are refused, and both sides are marked LDAP-dirty."""

from __future__ import annotations

import pytest

from cheeto_like.errors import InvalidInput, NotFound
from cheeto_like.models import Group, GroupMembership
from cheeto_like.operations.group_membership import (
    AddGroupMember,
    AddGroupSlurmer,
    AddGroupSponsor,
    AddGroupSudoer,
    RemoveGroupMember,
    RemoveGroupSlurmer,
    RemoveGroupSponsor,
    RemoveGroupSudoer,
)

from ..factories import AUTHOR, history, make_group, make_site, make_user, reload_user, snapshot

PAIRS = [(AddGroupMember, RemoveGroupMember, "member"),
         (AddGroupSponsor, RemoveGroupSponsor, "sponsor"),
         (AddGroupSudoer, RemoveGroupSudoer, "sudoer"),
         (AddGroupSlurmer, RemoveGroupSlurmer, "slurmer")]


@pytest.fixture
async def lab(db):
    await make_site(db, "farm")
    await make_site(db, "hive")
    await make_user(db, "alice", site="farm")
    await make_group(db, "lab")
    return db


async def edges() -> dict[tuple[str, str, str], list[str]]:
    return {(e.user, e.group, e.site): e.roles for e in await GroupMembership.find_all().to_list()}


def kw(**overrides: str) -> dict[str, str]:
    return {"group": "lab", "user": "alice", "site": "farm", **overrides}


@pytest.mark.parametrize(("add", "remove", "role"), PAIRS, ids=[p[2] for p in PAIRS])
async def test_add_and_remove_each_role(lab, add, remove, role):
    await add.run(lab, AUTHOR, **kw())
    assert await edges() == {("alice", "lab", "farm"): [role]}
    await remove.run(lab, AUTHOR, **kw())
    assert await edges() == {}
    assert [r.changes for r in await history(add.op_name)] == [
        {**kw(), "role": role, "changed": True}]
    assert [r.changes for r in await history(remove.op_name)] == [
        {**kw(), "role": role, "changed": True}]


async def test_roles_accumulate_on_one_edge(lab):
    for add, _, _ in reversed(PAIRS):
        await add.run(lab, AUTHOR, **kw())
    assert await edges() == {("alice", "lab", "farm"): ["member", "slurmer", "sponsor",
                                                         "sudoer"]}
    assert await GroupMembership.count() == 1


async def test_removing_one_role_keeps_the_others(lab):
    await AddGroupMember.run(lab, AUTHOR, **kw())
    await AddGroupSponsor.run(lab, AUTHOR, **kw())
    await RemoveGroupMember.run(lab, AUTHOR, **kw())
    assert await edges() == {("alice", "lab", "farm"): ["sponsor"]}
    await RemoveGroupSponsor.run(lab, AUTHOR, **kw())
    assert await GroupMembership.count() == 0


async def test_edges_are_per_site(lab):
    await AddGroupMember.run(lab, AUTHOR, **kw())
    await AddGroupSponsor.run(lab, AUTHOR, **kw(site="hive"))
    assert await edges() == {("alice", "lab", "farm"): ["member"],
                             ("alice", "lab", "hive"): ["sponsor"]}


async def test_the_user_need_not_be_on_the_site(lab):
    await AddGroupMember.run(lab, AUTHOR, **kw(site="hive"))
    assert ("alice", "lab", "hive") in await edges()


async def test_add_is_idempotent(lab):
    await AddGroupMember.run(lab, AUTHOR, **kw())
    await AddGroupMember.run(lab, AUTHOR, **kw())
    assert await edges() == {("alice", "lab", "farm"): ["member"]}
    assert [r.changes["changed"] for r in await history("add_group_member")] == [True, False]


async def test_remove_is_idempotent(lab):
    await AddGroupSponsor.run(lab, AUTHOR, **kw())
    await RemoveGroupMember.run(lab, AUTHOR, **kw())
    await RemoveGroupMember.run(lab, AUTHOR, **kw(site="hive"))
    assert await edges() == {("alice", "lab", "farm"): ["sponsor"]}
    assert [r.changes["changed"] for r in await history("remove_group_member")] == [False, False]


async def test_membership_change_marks_user_and_group_dirty(lab):
    user_before = (await reload_user("alice")).ldap.modified_at
    group_before = (await Group.find_one(Group.name == "lab")).ldap.modified_at
    await AddGroupMember.run(lab, AUTHOR, **kw())
    assert (await reload_user("alice")).ldap.modified_at > user_before
    assert (await Group.find_one(Group.name == "lab")).ldap.modified_at > group_before


async def test_a_no_op_does_not_mark_anything_dirty(lab):
    await AddGroupMember.run(lab, AUTHOR, **kw())
    user_before = (await reload_user("alice")).ldap.modified_at
    await AddGroupMember.run(lab, AUTHOR, **kw())
    assert (await reload_user("alice")).ldap.modified_at == user_before


@pytest.mark.parametrize("group", ["sudo-users", "active-users"])
@pytest.mark.parametrize("op", [AddGroupMember, RemoveGroupSponsor])
async def test_access_and_status_groups_are_refused(lab, group, op):
    before = await snapshot()
    with pytest.raises(InvalidInput, match="group; use `ng user"):
        await op.run(lab, AUTHOR, **kw(group=group))
    assert await snapshot() == before


@pytest.mark.parametrize(("overrides", "message"), [
    ({"group": "ghost"}, "group 'ghost'"), ({"user": "ghost"}, "user 'ghost'"),
    ({"site": "nope"}, "site 'nope'")])
async def test_unknown_group_user_or_site(lab, overrides, message):
    with pytest.raises(NotFound, match=message):
        await AddGroupMember.run(lab, AUTHOR, **kw(**overrides))
    assert await GroupMembership.count() == 0
    assert await history("add_group_member") == []


async def test_personal_group_membership_edges_are_allowed(lab):
    await make_user(lab, "bob")
    await AddGroupMember.run(lab, AUTHOR, **kw(group="bob"))
    assert ("alice", "bob", "farm") in await edges()
