"""Group queries: effective members (member edges ∪ sticky population), the roster at a
site, a user's groups at a site (sticky membership only when on the site), and
``list_groups`` filters. Every test reads one population built for the module."""

from __future__ import annotations

import pytest

from cheeto_like.errors import NotFound
from cheeto_like.operations.group_membership import (
    AddGroupMember,
    AddGroupSlurmer,
    AddGroupSponsor,
    AddGroupSudoer,
)
from cheeto_like.operations.site import AddStickyGroup
from cheeto_like.queries.group import (
    effective_group_members,
    effective_user_groups,
    find_group_by_name,
    get_group,
    group_members_anywhere,
    group_members_at_site,
    list_groups,
    site_user_names,
    sticky_groups,
    user_groups_at_site,
)

from ..conftest import seed_access_status, wipe
from ..factories import AUTHOR, make_group, make_site, make_user


@pytest.fixture(scope="module")
async def world(store):
    """farm: alice, bob, carol on site. hive: dave on site; alice not on hive.
    lab: alice member+sudoer at farm, bob sponsor at farm, carol slurmer at farm,
         dave member at hive, erin member at farm (erin is on no site).
    all: sticky at farm. hivers: sticky at hive, plus alice member at farm."""
    await wipe()
    await seed_access_status()
    db = store
    await make_site(db, "farm")
    await make_site(db, "hive")
    for name in ("alice", "bob", "carol"):
        await make_user(db, name, site="farm")
    await make_user(db, "dave", site="hive")
    await make_user(db, "erin")
    for name in ("lab", "all", "hivers", "empty"):
        await make_group(db, name)
    await make_group(db, "sysgrp", type="system")
    await AddGroupMember.run(db, AUTHOR, group="lab", user="alice", site="farm")
    await AddGroupSudoer.run(db, AUTHOR, group="lab", user="alice", site="farm")
    await AddGroupSponsor.run(db, AUTHOR, group="lab", user="bob", site="farm")
    await AddGroupSlurmer.run(db, AUTHOR, group="lab", user="carol", site="farm")
    await AddGroupMember.run(db, AUTHOR, group="lab", user="dave", site="hive")
    await AddGroupMember.run(db, AUTHOR, group="lab", user="erin", site="farm")
    await AddStickyGroup.run(db, AUTHOR, site="farm", group="all")
    await AddStickyGroup.run(db, AUTHOR, site="hive", group="hivers")
    await AddGroupMember.run(db, AUTHOR, group="hivers", user="alice", site="farm")
    return db


async def test_find_and_get_group(world):
    assert (await find_group_by_name("lab")).type == "group"
    assert (await find_group_by_name("sudo-users")).shorthand == "sudo"
    assert await find_group_by_name("ghost") is None
    with pytest.raises(NotFound, match="group 'ghost' does not exist"):
        await get_group("ghost")


async def test_site_user_names(world):
    assert await site_user_names("farm") == ["alice", "bob", "carol"]
    assert await site_user_names("nowhere") == []


async def test_sticky_groups(world):
    assert await sticky_groups("farm") == ["all"]
    assert await sticky_groups("hive") == ["hivers"]
    assert await sticky_groups("nowhere") == []


@pytest.mark.parametrize(("group", "site", "members"), [
    ("lab", "farm", ["alice", "erin"]),  # member edges only: no sponsor/slurmer
    ("lab", "hive", ["dave"]),
    ("all", "farm", ["alice", "bob", "carol"]),
    ("all", "hive", []),
    ("hivers", "hive", ["dave"]),
    ("hivers", "farm", ["alice"]),
    ("empty", "farm", []),
])
async def test_effective_group_members(world, group, site, members):
    assert await effective_group_members(group, site) == members


async def test_group_members_anywhere(world):
    assert await group_members_anywhere("lab") == {"alice", "dave", "erin"}
    assert await group_members_anywhere("hivers") == {"alice", "dave"}
    assert await group_members_anywhere("all") == {"alice", "bob", "carol"}
    assert await group_members_anywhere("empty") == set()


async def test_roster_at_a_site(world):
    roster = await group_members_at_site("lab", "farm")
    assert roster.as_dict() == {"members": ["alice", "erin"], "sponsors": ["bob"],
                                "sudoers": ["alice"], "slurmers": ["carol"]}
    sticky = await group_members_at_site("all", "farm")
    assert sticky.as_dict() == {"members": ["alice", "bob", "carol"], "sponsors": [],
                                "sudoers": [], "slurmers": []}


async def test_user_groups_at_site_with_roles(world):
    rows = await user_groups_at_site("alice", "farm")
    assert [(r.group.name, r.roles) for r in rows] == [
        ("all", ("sticky-member",)), ("hivers", ("member",)), ("lab", ("member", "sudoer"))]


async def test_sticky_membership_needs_the_user_on_the_site(world):
    # alice is not on hive: hivers' sticky membership does not reach her there
    assert await user_groups_at_site("alice", "hive") == []
    # erin is on no site: her lab edge at farm counts, farm's sticky group does not
    rows = await user_groups_at_site("erin", "farm")
    assert [(r.group.name, r.roles) for r in rows] == [("lab", ("member",))]


async def test_effective_user_groups_are_member_or_sticky_member(world):
    assert [g.name for g in await effective_user_groups("alice", "farm")] == [
        "all", "hivers", "lab"]
    assert [g.name for g in await effective_user_groups("bob", "farm")] == ["all"]
    assert [g.name for g in await effective_user_groups("carol", "farm")] == ["all"]
    assert [g.name for g in await effective_user_groups("dave", "hive")] == ["hivers", "lab"]


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"type": "system"}, ["sysgrp"]),
    ({"type": "user"}, ["alice", "bob", "carol", "dave", "erin"]),
    ({"type": "access"}, ["compute-ssh-users", "login-ssh-users", "ondemand-users",
                          "root-ssh-users", "slurm-users", "sudo-users"]),
    ({"site": "farm"}, ["all", "hivers", "lab"]),
    ({"site": "hive"}, ["hivers", "lab"]),
    ({"member": "alice"}, ["all", "hivers", "lab"]),
    ({"member": "bob"}, ["all"]),
    ({"member": "erin"}, ["lab"]),
    ({"member": "alice", "site": "hive"}, []),
    ({"member": "dave", "site": "hive"}, ["hivers", "lab"]),
    ({"member": "bob", "site": "farm", "type": "group"}, ["all"]),
    ({"site": "farm", "type": "system"}, []),
])
async def test_list_groups_filters(world, kwargs, expected):
    assert [g.name for g in await list_groups(**kwargs)] == expected


async def test_list_groups_unfiltered_is_every_group_by_name(world):
    names = [g.name for g in await list_groups()]
    assert names == sorted(names) and len(names) == 5 + 5 + 10


async def test_list_groups_unknown_site(world):
    with pytest.raises(NotFound, match="site 'nope'"):
        await list_groups(site="nope")
