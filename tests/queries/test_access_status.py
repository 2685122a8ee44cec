"""Access and status groups addressed by shorthand: listing, requiring (with the seeding
hint when they are missing) and mapping shorthands to LDAP group names."""

from __future__ import annotations

import pytest

from cheeto_like.constants import ACCESS_TYPES, USER_STATUSES
from cheeto_like.errors import NotFound
from cheeto_like.queries.access_status import (
    access_groups,
    ldap_names,
    require_access,
    require_status,
    status_exists,
    status_groups,
)


async def test_access_and_status_groups_by_shorthand(db):
    access = await access_groups()
    assert sorted(access) == sorted(ACCESS_TYPES)
    assert access["sudo"].name == "sudo-users"
    status = await status_groups()
    assert sorted(status) == sorted(USER_STATUSES)
    assert status["active"].type == "status"


async def test_require_access_dedupes_in_order(db):
    assert await require_access(["slurm", "sudo", "slurm"]) == ["slurm", "sudo"]
    assert await require_access([]) == []


async def test_require_access_names_the_unknown_ones(db):
    with pytest.raises(NotFound, match="unknown access type teleport, warp"):
        await require_access(["slurm", "teleport", "warp"])


async def test_require_status(db):
    assert await require_status("offboarding") == "offboarding"
    with pytest.raises(NotFound, match="unknown status 'retired'"):
        await require_status("retired")


async def test_status_exists(db):
    assert await status_exists("active")
    assert not await status_exists("sudo")  # an access shorthand, not a status


async def test_missing_seed_points_at_the_seeding_command(empty_db):
    with pytest.raises(NotFound, match="known: none; run `cheeto ng group seed-access-status`"):
        await require_status("active")
    with pytest.raises(NotFound, match="seed-access-status"):
        await require_access(["slurm"])


async def test_ldap_names_skip_unknown_shorthands(db):
    groups = await access_groups()
    assert ldap_names(groups, ["sudo", "nope", "slurm"]) == ["sudo-users", "slurm-users"]
