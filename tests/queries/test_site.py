"""Site queries: lookup by name, fqdn or alias (case-insensitive), listing, and counting
the records that hang off a site."""

from __future__ import annotations

import pytest

from cheeto_like.errors import NotFound
from cheeto_like.models import GroupMembership, SlurmPartition, UserSiteInfo
from cheeto_like.operations.site import AddSiteAlias
from cheeto_like.queries.site import (
    SITE_LINKED_MODELS,
    count_site_dependents,
    find_site,
    find_site_by_name,
    get_site,
    list_sites,
)

from ..factories import AUTHOR, make_site


@pytest.fixture
async def sites(db):
    await make_site(db, "hive", fqdn="hive.cluster.example.org")
    await make_site(db, "farm", fqdn="farm.cluster.example.org")
    await AddSiteAlias.run(db, AUTHOR, site="farm", alias="caesfarm")
    return db


@pytest.mark.parametrize("value", ["farm", "FARM", " farm ", "farm.cluster.example.org",
                                   "Farm.Cluster.Example.ORG", "caesfarm", "CaesFarm"])
async def test_find_site_by_name_fqdn_or_alias_case_insensitively(sites, value):
    found = await find_site(value)
    assert found is not None and found.name == "farm"


async def test_find_site_misses(sites):
    assert await find_site("peak") is None
    assert await find_site("cluster.example.org") is None


async def test_find_site_by_name_is_exact(sites):
    assert (await find_site_by_name("farm")).name == "farm"
    assert await find_site_by_name("caesfarm") is None
    assert await find_site_by_name("farm.cluster.example.org") is None


async def test_get_site(sites):
    assert (await get_site("hive")).fqdn == "hive.cluster.example.org"
    # an alias or fqdn in any case resolves as the API's and the CLI's -s do (issue 28)
    assert (await get_site("CaesFarm")).name == "farm"
    with pytest.raises(NotFound, match="site 'peak' does not exist"):
        await get_site("peak")


async def test_list_sites_by_name(sites):
    assert [s.name for s in await list_sites()] == ["farm", "hive"]


async def test_count_site_dependents(sites):
    assert await count_site_dependents("farm") == {label: 0 for label, _ in SITE_LINKED_MODELS}
    await UserSiteInfo(user="alice", site="farm").insert()
    await UserSiteInfo(user="bob", site="farm").insert()
    await UserSiteInfo(user="bob", site="hive").insert()
    await GroupMembership(user="bob", group="lab", site="farm", roles=["member"]).insert()
    await SlurmPartition(name="high", site="farm").insert()
    counts = await count_site_dependents("farm")
    assert counts["user_site_info"] == 2
    assert counts["group_membership"] == 1
    assert counts["slurm_partitions"] == 1
    assert sum(counts.values()) == 4
    assert sum((await count_site_dependents("hive")).values()) == 1


def test_every_site_linked_model_has_a_site_field():
    labels = [label for label, _ in SITE_LINKED_MODELS]
    assert len(labels) == len(set(labels))
    for _, model in SITE_LINKED_MODELS:
        assert "site" in model.model_fields
