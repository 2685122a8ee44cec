"""The read path's joins are batched: the number of store commands a query issues does not
grow with the number of users, memberships or sites' populations.

Commands are counted with a pymongo ``CommandListener`` on a second client to the same
database; beanie is bound to that client while counting and re-bound to the module's store
afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC
from typing import Any

import pytest
from beanie import init_beanie
from pymongo import AsyncMongoClient, monitoring

from cheeto_like.config import MongoConfig
from cheeto_like.embedded import EmbeddedServer
from cheeto_like.models import ALL_MODELS
from cheeto_like.operations.group_membership import AddGroupMember
from cheeto_like.operations.site import AddStickyGroup
from cheeto_like.operations.user import AddUserAccess, SetUserStatus
from cheeto_like.queries.group import (
    group_members_at_site,
    list_groups,
    user_groups_at_site,
)
from cheeto_like.queries.user import find_redundant_site_statuses, find_users
from cheeto_like.store import Store

from ..factories import AUTHOR, make_group, make_site, make_user

READ_COMMANDS = {"find", "aggregate", "count", "distinct", "getMore"}


class CommandCounter(monitoring.CommandListener):
    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in READ_COMMANDS:
            self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@asynccontextmanager
async def listening[L: monitoring.CommandListener](store: Store, config: MongoConfig,
                                                   listener: L) -> AsyncIterator[L]:
    """Bind the models to a second client that reports its commands to ``listener``,
    then back to the module's store (other modules' read and write counters use this)."""
    uri = config.uri or EmbeddedServer(config.embedded).uri
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        uri, tz_aware=True, tzinfo=UTC, event_listeners=[listener])
    try:
        await init_beanie(database=client[store.database.name],
                          document_models=list(ALL_MODELS), skip_indexes=True)
        yield listener
    finally:
        await store.bind(create_indexes=False)
        await client.close()


@asynccontextmanager
async def counting(store: Store, config: MongoConfig) -> AsyncIterator[CommandCounter]:
    async with listening(store, config, CommandCounter()) as counter:
        yield counter


async def command_count(store: Store, config: MongoConfig,
                        query: Callable[[], Awaitable[Any]]) -> int:
    async with counting(store, config) as counter:
        await query()
    return len(counter.names)


async def add_people(store: Store, prefix: str, n: int) -> None:
    """``n`` users on farm with overrides, memberships and sticky membership."""
    for i in range(n):
        name = f"{prefix}{i}"
        await make_user(store, name, site="farm", access=["slurm"])
        await AddGroupMember.run(store, AUTHOR, group="lab", user=name, site="farm")
        if i % 2:
            await SetUserStatus.run(store, AUTHOR, name=name, status="inactive", site="farm",
                                    reason="r")
            await AddUserAccess.run(store, AUTHOR, name=name, access=["sudo"], site="farm")


QUERIES: dict[str, Callable[[], Awaitable[Any]]] = {
    "all users": lambda: find_users(),
    "global status+access+group": lambda: find_users(status="active", access="slurm",
                                                     group="lab"),
    "global OR with sticky group": lambda: find_users(status="inactive", group="all",
                                                      operator="OR"),
    "site filters": lambda: find_users(site="farm", status="inactive", access="sudo",
                                       group="lab", type="user"),
    "site sticky group": lambda: find_users(site="farm", group="all"),
    "roster": lambda: group_members_at_site("lab", "farm"),
    "sticky roster": lambda: group_members_at_site("all", "farm"),
    "user groups": lambda: user_groups_at_site("u0", "farm"),
    "list groups at site for member": lambda: list_groups(site="farm", member="u0"),
    "list groups for member anywhere": lambda: list_groups(member="u0"),
    "redundant site statuses": lambda: find_redundant_site_statuses(),
}


@pytest.fixture(scope="module")
async def grown(store: Store, mongo_config: MongoConfig) -> dict[str, tuple[int, int]]:
    """Command counts of every query with 3 users, then with 15."""
    from ..conftest import seed_access_status, wipe

    await wipe()
    await seed_access_status()
    await make_site(store, "farm")
    await make_group(store, "lab")
    await make_group(store, "all")
    await AddStickyGroup.run(store, AUTHOR, site="farm", group="all")
    await add_people(store, "u", 3)
    small = {label: await command_count(store, mongo_config, q) for label, q in QUERIES.items()}
    await add_people(store, "v", 12)
    large = {label: await command_count(store, mongo_config, q) for label, q in QUERIES.items()}
    return {label: (small[label], large[label]) for label in QUERIES}


@pytest.mark.parametrize("label", list(QUERIES))
async def test_query_count_does_not_grow_with_users(grown, label):
    small, large = grown[label]
    assert small > 0
    assert small == large, f"{label}: {small} commands with 3 users, {large} with 15"


async def test_counting_client_sees_the_same_data(grown, store, mongo_config):
    async with counting(store, mongo_config):
        assert len(await find_users(site="farm")) == 15
    assert len(await find_users(site="farm")) == 15  # re-bound to the module's store
