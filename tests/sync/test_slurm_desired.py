"""The Slurm desired state read from grouped columns (no model per document) agrees with
``eligibility()``, the per-user verdict ``slurm why`` gives, on every rule: site record,
status and access overrides, expiries of either record, and roles that are not roster
roles. Also: an allocation that expires later still counts, one that expired does not.
"""

from __future__ import annotations

from datetime import timedelta

from cheeto_like.models.fields import utcnow
from cheeto_like.operations import slurm as slurm_ops
from cheeto_like.operations.group_membership import AddGroupMember, AddGroupSponsor
from cheeto_like.operations.user import AddUserAccess, SetUserStatus
from cheeto_like.queries.user import find_site_info, get_user
from cheeto_like.sync.slurm.desired import desired_state, eligibility
from tests.factories import AUTHOR, make_group, make_site, make_user, site_info

SITE, LAB = "dz", "dzlab"


async def test_desired_associations_follow_every_eligibility_rule(db):
    now = utcnow()
    await make_site(db, SITE)
    await make_group(db, LAB)
    await slurm_ops.CreateSlurmPartition.run(db, AUTHOR, site=SITE, name="gpu")
    await slurm_ops.ProvisionSlurmAllocation.run(
        db, AUTHOR, site=SITE, group=LAB, partition="gpu", group_limits={"cpus": 8})
    qos = f"{LAB}-gpu-qos"
    await slurm_ops.AddQOSAllocation.run(db, AUTHOR, site=SITE, qos=qos, bucket="group_limits",
                                         tres={"cpus": 4, "mem": "1G"},
                                         expires_at=now + timedelta(days=3))
    await slurm_ops.AddQOSAllocation.run(db, AUTHOR, site=SITE, qos=qos, bucket="group_limits",
                                         tres={"cpus": 100}, expires_at=now - timedelta(days=1))

    slurm = ["login-ssh", "slurm"]
    users = {  # name -> eligible?
        "dzok": True, "dzlater": True, "dzgone": False, "dzsitegone": False,
        "dzsiteaccess": True, "dznoaccess": False, "dzsiteoff": False, "dzsponsor": False,
    }
    await make_user(db, "dzok", site=SITE, access=slurm)
    await make_user(db, "dzlater", site=SITE, access=slurm, expires_at=now + timedelta(days=9))
    await make_user(db, "dzgone", site=SITE, access=slurm, expires_at=now - timedelta(days=1))
    await make_user(db, "dzsitegone", site=SITE, access=slurm)
    record = await site_info("dzsitegone", SITE)  # the site record expired
    record.expires_at = now - timedelta(hours=1)
    await record.save()
    await make_user(db, "dzsiteaccess", site=SITE, access=["login-ssh"])
    await AddUserAccess.run(db, AUTHOR, name="dzsiteaccess", access=["slurm"], site=SITE)
    await make_user(db, "dznoaccess", site=SITE, access=["login-ssh"])
    await make_user(db, "dzsiteoff", site=SITE, access=slurm)
    await SetUserStatus.run(db, AUTHOR, name="dzsiteoff", status="inactive", site=SITE,
                              reason="left the site")
    await make_user(db, "dzsponsor", site=SITE, access=slurm)
    for name in users:
        if name == "dzsponsor":
            await AddGroupSponsor.run(db, AUTHOR, group=LAB, user=name, site=SITE)
        else:
            await AddGroupMember.run(db, AUTHOR, group=LAB, user=name, site=SITE)

    desired = await desired_state(SITE, now=now)
    associated = {key.user for key in desired.associations}
    assert associated == {name for name, ok in users.items() if ok}
    for name in users:  # the per-user verdict says the same (sponsors: not a roster role)
        verdict = eligibility(await get_user(name), await find_site_info(name, SITE), now)
        assert verdict.eligible == (users[name] or name == "dzsponsor"), (
            name, verdict.reasons())
    assert dict(desired.qos[qos].group) == {"cpu": 12, "mem": 1024}
    assert desired.qos[qos].flags == frozenset({"DenyOnLimit"})
    assert all(state.qos == frozenset({qos}) and state.default_qos == qos
               for state in desired.associations.values())
    # the builder's (user, account) pairs describe exactly its rows (the plan uses them)
    assert desired.built_pairs is not None and desired.built_pairs[0] is desired.associations
    assert desired.user_account_pairs() == {(k.user, k.account) for k in desired.associations}
    assert desired.users() == associated
