"""``find_users`` with every filter, globally and at a site (site-effective status and
access, sticky-group membership), AND vs OR, limit, and unknown names.

Every test here only reads the one population built for the module.
"""

from __future__ import annotations

import pytest

from cheeto_like.errors import InvalidInput, NotFound
from cheeto_like.models import User
from cheeto_like.operations.group_membership import AddGroupMember, AddGroupSponsor
from cheeto_like.operations.site import AddStickyGroup
from cheeto_like.operations.user import AddUserAccess, SetUserStatus
from cheeto_like.operations.user_site import AddSiteUser
from cheeto_like.queries.user import find_users

from ..conftest import seed_access_status, wipe
from ..factories import AUTHOR, make_group, make_site, make_user


def names(users: list[User]) -> list[str]:
    return [u.name for u in users]


# -- the population ----------------------------------------------------------------------


@pytest.fixture(scope="module")
async def population(store):
    """farm: alice (active, login-ssh+slurm; inactive at farm), bob (inactive; slurm at farm),
    carol (admin, active, sudo). hive: alice. dave is on no site. Groups: lab (alice member
    at farm, bob sponsor at farm), all (sticky at farm), bees (dave member at hive)."""
    db = store
    await wipe()
    await seed_access_status()
    await make_site(db, "farm")
    await make_site(db, "hive")
    await make_user(db, "alice", site="farm", access=["login-ssh", "slurm"])
    await AddSiteUser.run(db, AUTHOR, user="alice", site="hive")
    await make_user(db, "bob", site="farm", status="inactive")
    await make_user(db, "carol", site="farm", type="admin", access=["sudo"])
    await make_user(db, "dave", access=["slurm"])
    await SetUserStatus.run(db, AUTHOR, name="alice", status="inactive", site="farm",
                            reason="r")
    await AddUserAccess.run(db, AUTHOR, name="bob", access=["slurm"], site="farm")
    await make_group(db, "lab")
    await make_group(db, "all")
    await make_group(db, "bees")
    await AddGroupMember.run(db, AUTHOR, group="lab", user="alice", site="farm")
    await AddGroupSponsor.run(db, AUTHOR, group="lab", user="bob", site="farm")
    await AddStickyGroup.run(db, AUTHOR, site="farm", group="all")
    await AddGroupMember.run(db, AUTHOR, group="bees", user="dave", site="hive")
    return db


async def test_find_users_without_filters_returns_everyone_by_name(population):
    assert names(await find_users()) == ["alice", "bob", "carol", "dave"]


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"status": "active"}, ["alice", "carol", "dave"]),
    ({"status": "inactive"}, ["bob"]),
    ({"status": "disabled"}, []),
    ({"access": "slurm"}, ["alice", "dave"]),
    ({"access": "login-ssh"}, ["alice"]),
    ({"type": "admin"}, ["carol"]),
    ({"type": "system"}, []),
    ({"group": "lab"}, ["alice"]),
    ({"group": "all"}, ["alice", "bob", "carol"]),
    ({"group": "bees"}, ["dave"]),
    ({"status": "active", "access": "slurm"}, ["alice", "dave"]),
    ({"status": "active", "type": "admin"}, ["carol"]),
    ({"status": "inactive", "type": "admin", "operator": "OR"}, ["bob", "carol"]),
    ({"access": "sudo", "group": "lab", "operator": "OR"}, ["alice", "carol"]),
    ({"access": "sudo", "group": "lab"}, []),
])
async def test_find_users_global_filters(population, kwargs, expected):
    assert names(await find_users(**kwargs)) == expected


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, ["alice", "bob", "carol"]),
    ({"status": "active"}, ["carol"]),
    ({"status": "inactive"}, ["alice", "bob"]),
    ({"access": "slurm"}, ["alice", "bob"]),
    ({"access": "sudo"}, ["carol"]),
    ({"type": "admin"}, ["carol"]),
    ({"group": "lab"}, ["alice"]),
    ({"group": "all"}, ["alice", "bob", "carol"]),
    ({"group": "bees"}, []),
    ({"status": "inactive", "access": "slurm"}, ["alice", "bob"]),
    ({"status": "active", "group": "lab"}, []),
    ({"status": "active", "group": "lab", "operator": "OR"}, ["alice", "carol"]),
])
async def test_find_users_at_a_site_uses_site_effective_values(population, kwargs, expected):
    assert names(await find_users(site="farm", **kwargs)) == expected


async def test_find_users_at_another_site(population):
    assert names(await find_users(site="hive")) == ["alice"]
    assert names(await find_users(site="hive", status="active")) == ["alice"]
    assert names(await find_users(site="hive", group="bees")) == []


async def test_find_users_limit(population):
    assert names(await find_users(limit=2)) == ["alice", "bob"]
    assert names(await find_users(site="farm", limit=1)) == ["alice"]
    assert names(await find_users(status="active", limit=1)) == ["alice"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"status": "retired"}, "unknown status 'retired'"),
    ({"access": "teleport"}, "unknown access type teleport"),
    ({"group": "ghost"}, "group 'ghost' does not exist"),
    ({"site": "nope"}, "site 'nope' does not exist"),
])
async def test_find_users_unknown_names_are_not_found(population, kwargs, message):
    with pytest.raises(NotFound, match=message):
        await find_users(**kwargs)


async def test_find_users_bad_operator(population):
    with pytest.raises(InvalidInput, match="AND or OR"):
        await find_users(status="active", operator="XOR")  # type: ignore[arg-type]


# -- page_users: the list route's page, cut by the store -------------------------------------


@pytest.mark.parametrize("kwargs", [
    {}, {"status": "active"}, {"access": "slurm"}, {"group": "lab"},
    {"site": "farm"}, {"site": "farm", "status": "inactive"}, {"site": "farm", "group": "all"},
    {"site": "farm", "access": "slurm", "type": "user"}, {"site": "hive"},
])
async def test_page_users_is_a_slice_of_find_users_with_its_total(population, kwargs):
    from cheeto_like.queries.user import page_users

    everyone = names(await find_users(**kwargs))
    for offset in range(len(everyone) + 2):
        found, total = await page_users(limit=2, offset=offset, **kwargs)
        assert names(found) == everyone[offset:offset + 2]
        assert total == len(everyone)


async def test_page_users_refuses_what_find_users_refuses(population):
    from cheeto_like.queries.user import page_users

    with pytest.raises(NotFound, match="site 'nope' does not exist"):
        await page_users(limit=10, site="nope")
    with pytest.raises(NotFound, match="group 'ghost' does not exist"):
        await page_users(limit=10, group="ghost")
    with pytest.raises(InvalidInput):
        await page_users(limit=0)


@pytest.mark.parametrize("kwargs", [{}, {"site": "farm"}, {"member": "alice"},
                                    {"site": "farm", "member": "alice"}, {"type": "user"}])
async def test_page_groups_is_a_slice_of_list_groups(population, kwargs):
    from cheeto_like.queries.group import list_groups, page_groups

    every = [g.name for g in await list_groups(**kwargs)]
    for offset in range(len(every) + 1):
        rows, total = await page_groups(limit=1, offset=offset, **kwargs)
        assert [r["name"] for r in rows] == every[offset:offset + 1] and total == len(every)
    rows, total = await page_groups(limit=10, among=["lab", "ghost"], **kwargs)
    assert [r["name"] for r in rows] == [n for n in every if n == "lab"]
    assert total == len(rows)
