"""Site operations: create (names, fqdns and aliases never collide), remove (cascade over
every site-linked collection, users and groups untouched), aliases and sticky groups."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cheeto_like.errors import AlreadyExists, Conflict, InvalidInput, NotFound
from cheeto_like.models import (
    AutomountMap,
    GpuFactor,
    Group,
    GroupMembership,
    HippoEvent,
    Quota,
    QuotaAdjustment,
    QuotaDefaults,
    QuotaNotice,
    Site,
    SlurmAccount,
    SlurmAllocation,
    SlurmAssociation,
    SlurmPartition,
    SlurmQOS,
    StaticMount,
    Storage,
    StorageVolume,
    UsageCursor,
    UsageRecord,
    User,
    UserSiteInfo,
)
from cheeto_like.operations.group_membership import AddGroupMember
from cheeto_like.operations.site import (
    AddSiteAlias,
    AddStickyGroup,
    CreateSite,
    RemoveSite,
    RemoveSiteAlias,
    RemoveStickyGroup,
)
from cheeto_like.queries.site import SITE_LINKED_MODELS, count_site_dependents

from ..factories import AUTHOR, history, make_group, make_site, make_user, snapshot


async def site(name: str) -> Site:
    found = await Site.find_one(Site.name == name)
    assert found is not None
    return found


# -- CreateSite ------------------------------------------------------------------------------


async def test_create_site(db):
    created = await CreateSite.run(db, AUTHOR, name="farm", fqdn="Farm.Example.org")
    stored = await site("farm")
    assert stored.id == created.id and stored.fqdn == "farm.example.org"
    [row] = await history("create_site")
    assert (row.author, row.changes) == (AUTHOR, {"site": "farm",
                                                  "fqdn": "farm.example.org"})


async def test_create_site_refuses_duplicate_name(db):
    await make_site(db, "farm")
    before = await snapshot()
    with pytest.raises(AlreadyExists, match="site 'farm' already exists"):
        await CreateSite.run(db, AUTHOR, name="farm", fqdn="other.example.org")
    assert await snapshot() == before


async def test_create_site_refuses_a_name_that_is_another_sites_alias_or_fqdn(db):
    await make_site(db, "hive")
    await AddSiteAlias.run(db, AUTHOR, site="hive", alias="farm")
    with pytest.raises(AlreadyExists, match="already names site 'hive'"):
        await CreateSite.run(db, AUTHOR, name="farm", fqdn="farm.example.org")
    with pytest.raises(AlreadyExists, match="already names site 'hive'"):
        await CreateSite.run(db, AUTHOR, name="peak", fqdn="hive.example.org")
    assert await Site.count() == 1
    assert len(await history("create_site")) == 1


@pytest.mark.parametrize(("name", "fqdn"), [("Farm", "farm.example.org"),
                                            ("farm_1", "farm.example.org"),
                                            ("farm", "not a host")])
async def test_create_site_refuses_bad_names(db, name, fqdn):
    with pytest.raises(InvalidInput):
        await CreateSite.run(db, AUTHOR, name=name, fqdn=fqdn)
    assert await Site.count() == 0 and await history() == []


# -- RemoveSite ------------------------------------------------------------------------------


async def populate(site_name: str) -> None:
    """One record of every site-linked kind at ``site_name``."""
    s = site_name
    await UserSiteInfo(user="alice", site=s).insert()
    await GroupMembership(user="alice", group="lab", site=s, roles=["member"]).insert()
    await SlurmAccount(group="lab", site=s, coordinators=["alice"]).insert()
    await SlurmPartition(name="high", site=s).insert()
    await SlurmQOS(name="lab-high", site=s).insert()
    await SlurmAllocation(site=s, qos="lab-high", bucket="group_limits").insert()
    await SlurmAssociation(site=s, account="lab", partition="high", qos=["lab-high"]).insert()
    await AutomountMap(name="home", site=s, prefix="/home").insert()
    await StorageVolume(name="home", site=s, backend="zfs", host="nas", host_path="/home").insert()
    await StaticMount(name="sw", site=s, fstype="cvmfs", spec="sw.org", mount_path="/sw").insert()
    await Storage(name="alice", site=s, category="home", owner="alice", group="alice",
                  volume="home").insert()
    await HippoEvent(hippo_id=1 if s == "farm" else 2, hippo_endpoint="https://hippo",
                     action="CreateAccount", site=s).insert()
    await populate_usage(s)


async def populate_usage(s: str) -> None:
    when = datetime(2026, 11, 1, tzinfo=UTC)
    await UsageRecord(key=f"{s}/c/1", site=s, cluster="c", job_id="1", user="alice",
                      account="lab", end=when, end_epoch=int(when.timestamp()),
                      day="2026-11-01", elapsed_s=60, cpus=1, cpu_minutes=1.0,
                      gpu_minutes=0.0, fingerprint="x").insert()
    await UsageCursor(site=s, cluster="c", until=when, last_run_at=when).insert()
    await GpuFactor(site=s, gpu_type="a100", factor=2.0, effective_from=when).insert()
    await Quota(site=s, user="alice", cpu_minutes=10.0).insert()
    await QuotaDefaults(site=s, user_cpu_minutes=5.0).insert()
    await QuotaAdjustment(site=s, user="alice", cpu_minutes=-1.0, reason="test", at=when,
                          at_epoch=int(when.timestamp())).insert()
    await QuotaNotice(key=f"{s}/user/alice/cpu/75/0", site=s, kind="user", subject="alice",
                      resource="cpu", threshold=75, period_start=when, percent=80.0).insert()


async def test_remove_site_cascades_and_counts(db):
    await make_site(db, "farm")
    await make_site(db, "hive")
    await make_user(db, "alice")
    await make_group(db, "lab")
    await populate("farm")
    await populate("hive")
    deleted = await RemoveSite.run(db, AUTHOR, name="farm")
    assert deleted == {label: 1 for label, _ in SITE_LINKED_MODELS}
    assert await Site.find_one(Site.name == "farm") is None
    assert await count_site_dependents("farm") == {label: 0 for label, _ in SITE_LINKED_MODELS}
    assert await count_site_dependents("hive") == {label: 1 for label, _ in SITE_LINKED_MODELS}
    assert await User.find_one(User.name == "alice") is not None
    assert await Group.find_one(Group.name == "lab") is not None
    [row] = await history("remove_site")
    assert row.changes == {"site": "farm", "fqdn": "farm.example.org", "aliases": [],
                           "deleted": deleted}


async def test_remove_bare_site_reports_zero_counts(db):
    await make_site(db, "farm")
    deleted = await RemoveSite.run(db, AUTHOR, name="farm")
    assert set(deleted.values()) == {0}
    assert await Site.count() == 0


async def test_remove_unknown_site_is_not_found(db):
    with pytest.raises(NotFound, match="site 'nope' does not exist"):
        await RemoveSite.run(db, AUTHOR, name="nope")
    assert await history() == []


# -- aliases ---------------------------------------------------------------------------------


async def test_add_alias_lowercases_and_is_idempotent(db):
    await make_site(db, "farm")
    await AddSiteAlias.run(db, AUTHOR, site="farm", alias="CaesFarm")
    await AddSiteAlias.run(db, AUTHOR, site="farm", alias="caesfarm")
    assert (await site("farm")).aliases == ["caesfarm"]
    assert [r.changes["changed"] for r in await history("add_site_alias")] == [True, False]


@pytest.mark.parametrize("alias", ["hive", "hive.example.org", "beehive"])
async def test_add_alias_refuses_another_sites_name_fqdn_or_alias(db, alias):
    await make_site(db, "farm")
    await make_site(db, "hive")
    await AddSiteAlias.run(db, AUTHOR, site="hive", alias="beehive")
    with pytest.raises(Conflict, match="already names site 'hive'"):
        await AddSiteAlias.run(db, AUTHOR, site="farm", alias=alias)
    assert (await site("farm")).aliases == []
    assert len(await history("add_site_alias")) == 1


async def test_add_alias_refuses_the_sites_own_name_or_fqdn(db):
    await make_site(db, "farm")
    for alias in ("farm", "farm.example.org"):
        with pytest.raises(InvalidInput, match="already the site's name or fqdn"):
            await AddSiteAlias.run(db, AUTHOR, site="farm", alias=alias)
    assert (await site("farm")).aliases == []


async def test_add_alias_to_unknown_site(db):
    with pytest.raises(NotFound):
        await AddSiteAlias.run(db, AUTHOR, site="nope", alias="x")


async def test_remove_alias_is_idempotent(db):
    await make_site(db, "farm")
    await AddSiteAlias.run(db, AUTHOR, site="farm", alias="one")
    await AddSiteAlias.run(db, AUTHOR, site="farm", alias="two")
    await RemoveSiteAlias.run(db, AUTHOR, site="farm", alias="one")
    await RemoveSiteAlias.run(db, AUTHOR, site="farm", alias="one")
    assert (await site("farm")).aliases == ["two"]
    assert [r.changes["changed"] for r in await history("remove_site_alias")] == [True, False]


# -- sticky groups ---------------------------------------------------------------------------


async def test_add_sticky_group_is_idempotent_and_marks_the_group_dirty(db):
    await make_site(db, "farm")
    await make_group(db, "all")
    before = (await Group.find_one(Group.name == "all")).ldap.modified_at
    await AddStickyGroup.run(db, AUTHOR, site="farm", group="all")
    await AddStickyGroup.run(db, AUTHOR, site="farm", group="all")
    assert (await site("farm")).group.sticky == ["all"]
    assert (await Group.find_one(Group.name == "all")).ldap.modified_at > before
    assert [r.changes for r in await history("add_sticky_group")] == [
        {"site": "farm", "group": "all", "changed": True},
        {"site": "farm", "group": "all", "changed": False}]


@pytest.mark.parametrize(("group", "message"), [("sudo-users", "access group"),
                                                ("active-users", "status group"),
                                                ("alice", "personal group")])
async def test_add_sticky_group_refuses_special_and_personal_groups(db, group, message):
    await make_site(db, "farm")
    await make_user(db, "alice")
    with pytest.raises(InvalidInput, match=message):
        await AddStickyGroup.run(db, AUTHOR, site="farm", group=group)
    assert (await site("farm")).group.sticky == []
    assert await history("add_sticky_group") == []


async def test_add_sticky_group_unknown_group_or_site(db):
    await make_site(db, "farm")
    await make_group(db, "all")
    with pytest.raises(NotFound, match="group 'nope'"):
        await AddStickyGroup.run(db, AUTHOR, site="farm", group="nope")
    with pytest.raises(NotFound, match="site 'nope'"):
        await AddStickyGroup.run(db, AUTHOR, site="nope", group="all")


async def test_remove_sticky_group_is_idempotent(db):
    await make_site(db, "farm")
    await make_group(db, "all")
    await make_group(db, "lab")
    await AddStickyGroup.run(db, AUTHOR, site="farm", group="all")
    await AddStickyGroup.run(db, AUTHOR, site="farm", group="lab")
    await RemoveStickyGroup.run(db, AUTHOR, site="farm", group="all")
    await RemoveStickyGroup.run(db, AUTHOR, site="farm", group="all")
    assert (await site("farm")).group.sticky == ["lab"]
    assert [r.changes["changed"] for r in await history("remove_sticky_group")] == [True, False]


async def test_sticky_group_membership_edges_are_independent(db):
    await make_site(db, "farm")
    await make_user(db, "alice", site="farm")
    await make_group(db, "all")
    await AddGroupMember.run(db, AUTHOR, group="all", user="alice", site="farm")
    await AddStickyGroup.run(db, AUTHOR, site="farm", group="all")
    await RemoveStickyGroup.run(db, AUTHOR, site="farm", group="all")
    assert await GroupMembership.find(GroupMembership.group == "all").count() == 1
