"""LDAP removals against a real slapd: dropped ``memberUid``/``member`` and
``sshPublicKey`` values count like deleted entries, for the per-run cap and for the
site's rolling 24-hour budget; an applying run holds the site's lease.
"""

from __future__ import annotations

import pytest

from cheeto_like.errors import Busy, GuardTripped
from cheeto_like.models import SshKey, SyncRun
from cheeto_like.operations.group_membership import AddGroupMember, RemoveGroupMember
from cheeto_like.operations.user import AddUserSshKey, RemoveUserSshKey
from cheeto_like.sync.lease import lease
from tests.factories import AUTHOR, make_group, make_user
from tests.services.ldap import Slapd
from tests.sync.ldap_lab import EVERYTHING, Lab, ed25519_key


@pytest.fixture
async def lab(db, slapd: Slapd) -> Lab:
    lab = Lab(db, slapd, max_deletions_per_day=8)
    await lab.make_sites()
    return lab


async def with_members(lab: Lab, count: int) -> tuple[str, list[str]]:
    group = lab.name("crew")
    await make_group(lab.store, group)
    users = []
    for i in range(count):
        name = lab.name(f"m{i}x")
        await make_user(lab.store, name, site=lab.site, access=["login-ssh"])
        await AddGroupMember.run(lab.store, AUTHOR, group=group, user=name, site=lab.site)
        users.append(name)
    return group, users


async def run(lab: Lab, **kw):
    from cheeto_like.sync.ldap import run as sync

    return await sync.run(lab.store, lab.config, lab.site,
                          scope=sync.scope_for(lab.config, kinds=EVERYTHING),
                          author=AUTHOR, **kw)


async def latest(lab: Lab) -> SyncRun:
    return await SyncRun.find({"target": "ldap", "site": lab.site}).sort(
        -SyncRun.started_at).first_or_none()


async def test_member_value_removals_count_for_the_cap_and_the_daily_budget(lab: Lab):
    group, users = await with_members(lab, 6)
    assert (await run(lab)).ok
    assert lab.members(group) == sorted(users)

    for name in users[:3]:
        await RemoveGroupMember.run(lab.store, AUTHOR, group=group, user=name, site=lab.site)
    dry = await run(lab, dry_run=True, max_deletions=50)
    assert dry.plan.deletions == []  # no entry goes away ...
    removed = sorted(r.split(": ", 1)[1] for r in dry.plan.removals)
    assert removed == sorted([f"memberUid={u}" for u in users[:3]]
                             + [f"member={lab.user_dn(u)}" for u in users[:3]])  # ... 6 values

    # the per-run cap counts them: refused before any write
    with pytest.raises(GuardTripped, match="removes 6 LDAP entries or member/key values"):
        await run(lab, max_deletions=5)
    assert lab.members(group) == sorted(users)
    assert (await latest(lab)).status == "aborted"

    first = await run(lab, max_deletions=50)
    assert first.ok and lab.members(group) == sorted(users[3:])
    assert (await latest(lab)).counts["removed"] == 6

    # 2 of the budget of 8 remain: 4 more removals are refused, nothing written
    await RemoveGroupMember.run(lab.store, AUTHOR, group=group, user=users[3], site=lab.site)
    await RemoveGroupMember.run(lab.store, AUTHOR, group=group, user=users[4], site=lab.site)
    with pytest.raises(GuardTripped) as trip:
        await run(lab)
    assert ("removes 4 LDAP entries or member/key values but only 2 of" in trip.value.message
            and "(6 removed in the last 24 h)" in trip.value.message
            and "--allow-deletions 4" in trip.value.message)
    assert lab.members(group) == sorted(users[3:])
    # the reviewed override goes ahead and counts too
    assert (await run(lab, allow_deletions=4)).ok
    assert lab.members(group) == [users[5]]
    assert (await latest(lab)).extra["budget"] == {"per_day": 8, "used": 6, "left": 2}


async def test_a_dropped_ssh_key_is_a_removal(lab: Lab):
    name = lab.name("keyed")
    await make_user(lab.store, name, site=lab.site, access=["login-ssh"],
                    ssh_key=ed25519_key(1, "one"))
    await AddUserSshKey.run(lab.store, AUTHOR, name=name, key=ed25519_key(2, "two"))
    assert (await run(lab)).ok
    assert len(lab.entry(lab.user_dn(name))["sshPublicKey"]) == 2
    key = await SshKey.find_one({"user": name, "key": ed25519_key(2, "two")})
    await RemoveUserSshKey.run(lab.store, AUTHOR, name=name, key_id=key.id)
    dry = await run(lab, dry_run=True)
    assert len(dry.plan.removals) == 1 and "sshPublicKey=" in dry.plan.removals[0]
    with pytest.raises(GuardTripped):
        await run(lab, max_deletions=0)
    assert len(lab.entry(lab.user_dn(name))["sshPublicKey"]) == 2
    assert (await run(lab)).ok
    assert len(lab.entry(lab.user_dn(name))["sshPublicKey"]) == 1
    assert (await latest(lab)).counts["removed"] == 1


async def test_an_applying_run_needs_the_lease_a_dry_run_does_not(lab: Lab):
    await with_members(lab, 1)
    async with lease(lab.store, "ldap", lab.site):
        with pytest.raises(Busy, match=f"another ldap sync for {lab.site} is running"):
            await run(lab)
        assert (await run(lab, dry_run=True)).plan.writes > 0
    assert (await run(lab)).ok
