"""The offboarding policy's effect on a real slapd (issue 28 item 4): the reap changes
records only; the next LDAP sync removes the reaped user's keys and group membership
values (a group left empty leaves the site), and refuses to go past ``--max-deletions``
(they are removals), writing nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.config.offboarding import OffboardingConfig, SiteOffboarding
from cheeto_like.errors import GuardTripped
from cheeto_like.operations.group_membership import AddGroupMember
from cheeto_like.operations.iam import reap_offboarded_users
from cheeto_like.operations.user import AddUserSshKey
from tests.factories import AUTHOR, ED25519_KEY, make_group, make_user, reload_user
from tests.services.ldap import Slapd
from tests.sync.ldap_lab import Lab


async def test_reap_policy_reaches_ldap_under_the_cap(db, slapd: Slapd):
    lab = Lab(db, slapd)
    await lab.make_sites()
    ann, grp = lab.name("ann"), lab.name("grp")
    await make_user(db, ann, site=lab.site, access=["login-ssh"], status="active")
    await AddUserSshKey.run(db, AUTHOR, name=ann, key=ED25519_KEY)
    await make_group(db, grp)
    await AddGroupMember.run(db, AUTHOR, group=grp, user=ann, site=lab.site)
    assert (await lab.sync()).ok
    assert lab.entry(lab.user_dn(ann)).get("sshPublicKey")  # type: ignore[union-attr]
    assert ann in lab.members(grp)

    user = await reload_user(ann)
    user.status, user.expires_at = "offboarding", datetime.now(UTC) - timedelta(hours=1)
    await user.save()
    policy = OffboardingConfig(sites={lab.site: SiteOffboarding(ssh_keys="remove",
                                                                memberships="remove")})
    before = lab.dump()
    report = await reap_offboarded_users(db, AUTHOR, offboarding=policy)
    assert report.users == [ann]
    assert lab.dump() == before  # the reap wrote records only

    with pytest.raises(GuardTripped):  # the removals count against the cap
        await lab.sync(max_deletions=0)
    assert lab.dump() == before
    assert (await lab.sync()).ok
    assert not lab.entry(lab.user_dn(ann)).get("sshPublicKey")  # type: ignore[union-attr]
    group = lab.entry(lab.group_dn(grp))  # its last member gone: gone from the site
    assert group is None or ann not in group.get("memberUid", [])
