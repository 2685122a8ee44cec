"""A user's presence on a site and the per-site state on that record: AddSiteUser inherits
status and access (no override), per-site status overrides (a redundant one is stored as
None, reset clears status and expiry), copy-on-write access overrides (the site's last
access cannot be removed), and the two site-status maintenance operations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.errors import AlreadyExists, Conflict, NotFound
from cheeto_like.models import GroupMembership
from cheeto_like.operations.group_membership import AddGroupMember
from cheeto_like.operations.user import (
    AddUserAccess,
    ClearOffboardingSiteStatuses,
    ClearRedundantSiteStatuses,
    RemoveUserAccess,
    SetUserStatus,
)
from cheeto_like.operations.user_site import AddSiteUser, RemoveSiteUser
from cheeto_like.queries.user import effective_access, effective_status, find_site_info

from ..factories import (
    AUTHOR,
    history,
    make_group,
    make_site,
    make_user,
    reload_user,
    site_info,
    snapshot,
)


@pytest.fixture
async def farm(db):
    """Sites farm and hive; alice (active, login-ssh + slurm) is on farm."""
    await make_site(db, "farm")
    await make_site(db, "hive")
    await make_user(db, "alice", site="farm", access=["login-ssh", "slurm"])
    return db


async def set_status(db, **kwargs):
    kwargs.setdefault("reason", "test")
    return await SetUserStatus.run(db, AUTHOR, name="alice", **kwargs)


# -- AddSiteUser / RemoveSiteUser ----------------------------------------------------------


async def test_add_site_user_inherits_status_and_access(farm):
    usi = await site_info("alice", "farm")
    assert (usi.status, usi.access, usi.expires_at) == (None, [], None)
    [row] = await history("add_site_user")
    assert row.changes == {"user": "alice", "site": "farm"}


async def test_add_site_user_does_not_revive_an_inactive_user(db):
    await make_site(db, "farm")
    await make_user(db, "bob", status="inactive")
    await AddSiteUser.run(db, AUTHOR, user="bob", site="farm")
    bob = await reload_user("bob")
    assert effective_status(bob, await site_info("bob", "farm")) == "inactive"


async def test_add_site_user_marks_the_user_dirty(db):
    await make_site(db, "farm")
    await make_user(db, "bob")
    before = (await reload_user("bob")).ldap.modified_at
    await AddSiteUser.run(db, AUTHOR, user="bob", site="farm")
    assert (await reload_user("bob")).ldap.modified_at > before


@pytest.mark.parametrize(("user", "site", "error", "message"), [
    ("alice", "farm", AlreadyExists, "already on site 'farm'"),
    ("ghost", "farm", NotFound, "user 'ghost'"),
    ("alice", "nope", NotFound, "site 'nope'"),
])
async def test_add_site_user_refusals(farm, user, site, error, message):
    before = await snapshot()
    with pytest.raises(error, match=message):
        await AddSiteUser.run(farm, AUTHOR, user=user, site=site)
    assert await snapshot() == before


async def test_remove_site_user_keeps_memberships(farm):
    await make_group(farm, "lab")
    await AddGroupMember.run(farm, AUTHOR, group="lab", user="alice", site="farm")
    await RemoveSiteUser.run(farm, AUTHOR, user="alice", site="farm")
    assert await find_site_info("alice", "farm") is None
    assert await GroupMembership.find(GroupMembership.user == "alice").count() == 1
    [row] = await history("remove_site_user")
    assert row.changes == {"user": "alice", "site": "farm"}


async def test_remove_site_user_not_on_site(farm):
    with pytest.raises(NotFound, match="not on site 'hive'"):
        await RemoveSiteUser.run(farm, AUTHOR, user="alice", site="hive")
    with pytest.raises(NotFound, match="site 'nope'"):
        await RemoveSiteUser.run(farm, AUTHOR, user="alice", site="nope")
    assert await history("remove_site_user") == []


# -- per-site status -------------------------------------------------------------------------


async def test_divergent_site_status_is_kept(farm):
    await set_status(farm, status="inactive", site="farm", reason="paused")
    assert (await site_info("alice", "farm")).status == "inactive"
    user = await reload_user("alice")
    assert user.status == "active"
    assert user.comments == ["status=inactive, scope=farm, reason=paused"]
    [row] = await history("set_user_status")
    assert row.changes == {"user": "alice", "site": "farm", "status": "inactive",
                           "reset": False, "previous": None, "stored": "inactive",
                           "reason": "paused"}


async def test_site_status_equal_to_global_is_stored_as_none(farm):
    await set_status(farm, status="inactive", site="farm")
    await set_status(farm, status="active", site="farm")
    assert (await site_info("alice", "farm")).status is None
    rows = await history("set_user_status")
    assert (rows[-1].changes["previous"], rows[-1].changes["stored"]) == ("inactive", None)


async def test_site_status_follows_later_global_changes_when_redundant(farm):
    await set_status(farm, status="active", site="farm")
    await set_status(farm, status="disabled")
    alice = await reload_user("alice")
    assert effective_status(alice, await site_info("alice", "farm")) == "disabled"


async def test_reset_clears_site_status_and_expiry(farm):
    await set_status(farm, status="offboarding", site="farm")
    usi = await site_info("alice", "farm")
    usi.expires_at = datetime.now(UTC) + timedelta(days=7)
    await usi.save()
    await set_status(farm, reset=True, site="farm", reason="back")
    usi = await site_info("alice", "farm")
    assert (usi.status, usi.expires_at) == (None, None)
    assert (await reload_user("alice")).comments[-1] == "status=reset, scope=farm, reason=back"


async def test_site_offboarding_to_active_clears_the_site_expiry(farm):
    await set_status(farm, status="offboarding", site="farm")
    usi = await site_info("alice", "farm")
    usi.expires_at = datetime.now(UTC) + timedelta(days=7)
    await usi.save()
    await set_status(farm, status="active", site="farm")
    usi = await site_info("alice", "farm")
    assert (usi.status, usi.expires_at) == (None, None)


async def test_site_status_marks_the_user_dirty(farm):
    before = (await reload_user("alice")).ldap.modified_at
    await set_status(farm, status="inactive", site="farm")
    assert (await reload_user("alice")).ldap.modified_at > before


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"status": "inactive", "site": "hive"}, "'alice' is not on site 'hive'"),
    ({"reset": True, "site": "hive"}, "'alice' is not on site 'hive'"),
    ({"status": "inactive", "site": "nope"}, "site 'nope' does not exist"),
])
async def test_site_status_for_a_user_not_on_the_site_writes_nothing(farm, kwargs, message):
    before = await snapshot()
    with pytest.raises(NotFound, match=message):
        await set_status(farm, **kwargs)
    assert await snapshot() == before
    assert (await reload_user("alice")).comments == []


# -- per-site access -------------------------------------------------------------------------


async def test_first_site_grant_copies_the_global_list(farm):
    await AddUserAccess.run(farm, AUTHOR, name="alice", access=["sudo"], site="farm")
    assert (await site_info("alice", "farm")).access == ["login-ssh", "slurm", "sudo"]
    alice = await reload_user("alice")
    assert alice.access == ["login-ssh", "slurm"]
    assert effective_access(alice, await site_info("alice", "farm")) == [
        "login-ssh", "slurm", "sudo"]
    [row] = await history("add_user_access")
    assert row.changes == {"user": "alice", "site": "farm", "access": ["sudo"],
                           "added": ["sudo"]}


async def test_later_site_grants_extend_the_override(farm):
    await AddUserAccess.run(farm, AUTHOR, name="alice", access=["sudo"], site="farm")
    await AddUserAccess.run(farm, AUTHOR, name="alice", access=["ondemand", "sudo"],
                            site="farm")
    assert (await site_info("alice", "farm")).access == [
        "login-ssh", "slurm", "sudo", "ondemand"]


async def test_site_override_no_longer_follows_the_global_list(farm):
    await AddUserAccess.run(farm, AUTHOR, name="alice", access=["sudo"], site="farm")
    await RemoveUserAccess.run(farm, AUTHOR, name="alice", access=["slurm"])
    alice = await reload_user("alice")
    assert alice.access == ["login-ssh"]
    assert effective_access(alice, await site_info("alice", "farm")) == [
        "login-ssh", "slurm", "sudo"]


async def test_site_removal_copies_the_global_list_minus_the_removed(farm):
    await RemoveUserAccess.run(farm, AUTHOR, name="alice", access=["slurm"], site="farm")
    assert (await site_info("alice", "farm")).access == ["login-ssh"]
    assert (await reload_user("alice")).access == ["login-ssh", "slurm"]
    [row] = await history("remove_user_access")
    assert row.changes["removed"] == ["slurm"]


async def test_site_removal_of_access_not_held_changes_nothing(farm):
    await RemoveUserAccess.run(farm, AUTHOR, name="alice", access=["sudo"], site="farm")
    assert (await site_info("alice", "farm")).access == []
    [row] = await history("remove_user_access")
    assert row.changes["removed"] == []


async def test_removing_the_sites_last_access_is_refused(farm):
    await RemoveUserAccess.run(farm, AUTHOR, name="alice", access=["slurm"], site="farm")
    before = await snapshot()
    with pytest.raises(Conflict, match="no access at farm"):
        await RemoveUserAccess.run(farm, AUTHOR, name="alice", access=["login-ssh"],
                                   site="farm")
    assert await snapshot() == before
    assert (await site_info("alice", "farm")).access == ["login-ssh"]


async def test_removing_every_inherited_access_at_a_site_is_refused(farm):
    with pytest.raises(Conflict):
        await RemoveUserAccess.run(farm, AUTHOR, name="alice", access=["login-ssh", "slurm"],
                                   site="farm")
    assert (await site_info("alice", "farm")).access == []


async def test_site_access_change_marks_the_user_dirty(farm):
    before = (await reload_user("alice")).ldap.modified_at
    await AddUserAccess.run(farm, AUTHOR, name="alice", access=["sudo"], site="farm")
    assert (await reload_user("alice")).ldap.modified_at > before


@pytest.mark.parametrize("op", [AddUserAccess, RemoveUserAccess])
async def test_site_access_for_a_user_not_on_the_site(farm, op):
    with pytest.raises(NotFound, match="not on site 'hive'"):
        await op.run(farm, AUTHOR, name="alice", access=["slurm"], site="hive")
    assert await history(op.op_name) == []


# -- maintenance -----------------------------------------------------------------------------


async def test_clear_redundant_site_statuses(farm):
    await make_user(farm, "bob", site="farm")
    await AddSiteUser.run(farm, AUTHOR, user="alice", site="hive")
    for user, site, status in (("alice", "farm", "active"), ("alice", "hive", "inactive"),
                               ("bob", "farm", "disabled")):
        usi = await site_info(user, site)
        usi.status = status  # written directly: the operations never store redundant ones
        await usi.save()
    cleared = await ClearRedundantSiteStatuses.run(farm, AUTHOR)
    assert cleared == [("alice", "farm", "active")]
    assert (await site_info("alice", "farm")).status is None
    assert (await site_info("alice", "hive")).status == "inactive"
    assert (await site_info("bob", "farm")).status == "disabled"
    [row] = await history("clear_redundant_site_statuses")
    assert row.changes == {"cleared": ["alice@farm=active"]}


async def test_clear_offboarding_site_statuses(farm):
    await make_user(farm, "bob", site="farm")
    await AddSiteUser.run(farm, AUTHOR, user="alice", site="hive")
    await set_status(farm, status="inactive", site="farm")
    await set_status(farm, status="disabled", site="hive")
    await SetUserStatus.run(farm, AUTHOR, name="bob", status="inactive", site="farm",
                            reason="r")
    await set_status(farm, status="offboarding")
    cleared = await ClearOffboardingSiteStatuses.run(farm, AUTHOR)
    assert cleared == 2
    assert (await site_info("alice", "farm")).status is None
    assert (await site_info("alice", "hive")).status is None
    assert (await site_info("bob", "farm")).status == "inactive"
    [row] = await history("clear_offboarding_site_statuses")
    assert row.changes == {"cleared": 2}
