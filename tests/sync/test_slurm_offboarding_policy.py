"""The offboarding policy's Slurm side on a real slurmdbd (issue 28 item 4): a reaped
user is in no roster, so the next applied Slurm sync deletes their associations (the
policy's ``slurm: remove``), under ``--max-deletions`` (past it: nothing written)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cheeto_like.adapters.sacctmgr import SAcctMgr
from cheeto_like.config.offboarding import OffboardingConfig, SiteOffboarding
from cheeto_like.errors import GuardTripped
from cheeto_like.models.fields import utcnow
from cheeto_like.operations.iam import reap_offboarded_users
from tests.factories import AUTHOR, reload_user
from tests.services.slurm import SlurmAccounting
from tests.sync.test_slurm_sync import Lab


@pytest.fixture
def runner(slurm_accounting: SlurmAccounting) -> SAcctMgr:
    return SAcctMgr(env=slurm_accounting.env, timeout=30)


async def test_reaped_users_lose_associations_under_the_cap(db, slurm_accounting, runner):
    lab = await Lab(db, slurm_accounting, runner).build(members=3)
    assert (await lab.sync()).ok
    leaving = lab.users[:2]
    for name in leaving:
        user = await reload_user(name)
        user.status, user.expires_at = "offboarding", utcnow() - timedelta(hours=1)
        await user.save()
    policy = OffboardingConfig(sites={lab.site: SiteOffboarding(memberships="remove")})
    dry = await reap_offboarded_users(db, AUTHOR, dry_run=True, offboarding=policy)
    assert {r["slurm"] for r in dry.policy} == {
        "associations deleted by the next applied Slurm sync (inactive)"}
    before = lab.assoc_rows()
    report = await reap_offboarded_users(db, AUTHOR, offboarding=policy)
    assert report.users == sorted(leaving)
    assert lab.assoc_rows() == before  # the reap wrote records only
    with pytest.raises(GuardTripped):
        await lab.sync(max_deletions=1)
    assert lab.assoc_rows() == before
    assert (await lab.sync()).ok
    assert {r[1] for r in lab.user_rows()} == {lab.users[2]}
    assert (await lab.sync()).plan.is_empty
