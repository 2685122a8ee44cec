"""What the site exports read (issue 18): a fixed number of store commands whatever the
site's size, and ``root-keys`` reading only the admins, their records at the site and the
holders' keys, never the site's other people. Documents are counted per collection from
the replies a pymongo ``CommandListener`` sees on a second client (``test_query_count``).
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import PurePosixPath
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymongo import monitoring

from cheeto_like.config import MongoConfig
from cheeto_like.models import SshKey, User, UserSiteInfo
from cheeto_like.models.storage import join_path
from cheeto_like.operations.user import AddUserAccess, AddUserSshKey, RemoveUserAccess
from cheeto_like.queries.exports import root_key_blocks, storage_export, sympa_emails
from cheeto_like.queries.puppet_legacy import site_to_puppet_legacy
from cheeto_like.queries.user import effective_access
from cheeto_like.store import Store

from ..factories import AUTHOR, make_site, make_user
from .test_query_count import listening

READ_COMMANDS = {"find", "aggregate", "count", "distinct", "getMore"}


def key_of(n: int) -> str:
    """A well-formed ed25519 public key, different for every ``n``."""
    kind = b"ssh-ed25519"
    blob = (len(kind).to_bytes(4, "big") + kind + (32).to_bytes(4, "big")
            + n.to_bytes(32, "big"))
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} k{n}"


class Reads(monitoring.CommandListener):
    """Read commands, and the documents each collection answered with."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self.documents: Counter[str] = Counter()
        self._collection: dict[int, str] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name not in READ_COMMANDS:
            return
        self.commands.append(event.command_name)
        target = event.command.get("collection") if event.command_name == "getMore" \
            else event.command.get(event.command_name)
        self._collection[event.request_id] = str(target)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        collection = self._collection.pop(event.request_id, None)
        cursor = event.reply.get("cursor") if collection is not None else None
        if cursor is not None:
            batch = cursor.get("firstBatch", cursor.get("nextBatch", []))
            # a ``models.base.columns`` answer is one group row pushing a value per
            # matched document (``v0``, ``v1``, …): count those documents
            self.documents[collection] += sum(len(row["v0"]) if "v0" in row else 1
                                              for row in batch)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._collection.pop(event.request_id, None)


@asynccontextmanager
async def reading(store: Store, config: MongoConfig) -> AsyncIterator[Reads]:
    async with listening(store, config, Reads()) as reads:
        yield reads


async def reads_of(store: Store, config: MongoConfig,
                   query: Callable[[], Awaitable[Any]]) -> tuple[Any, Reads]:
    async with reading(store, config) as reads:
        result = await query()
    return result, reads


async def expected_blocks(site: str | None) -> list[tuple[str, str, tuple[str, ...]]]:
    """root-keys the plain way (every model, ``effective_access``): what the projected
    query must still answer."""
    usis = {} if site is None else {
        u.user: u for u in await UserSiteInfo.find({"site": site}).to_list()}
    out = []
    for user in sorted(await User.find({}).to_list(), key=lambda u: u.name):
        if user.type != "admin":
            continue
        if site is not None and user.name not in usis:
            continue
        access = effective_access(user, usis.get(user.name)) if site else user.access
        keys = sorted(await SshKey.find({"user": user.name}).to_list(),
                      key=lambda k: k.created_at)
        if "root-ssh" in access and keys:
            out.append((user.name, user.email,
                        tuple(k.authorized_keys_entry() for k in keys)))
    return out


@pytest.fixture(scope="module")
async def site_with_admins(store: Store) -> Store:
    """farm with admins of every kind (see the names) and a few plain users."""
    from ..conftest import seed_access_status, wipe

    await wipe()
    await seed_access_status()
    await make_site(store, "farm")
    await make_site(store, "peak")
    admin = {"type": "admin"}
    await make_user(store, "holder", site="farm", access=["login-ssh", "root-ssh"], **admin)
    await make_user(store, "holder2", site="farm", access=["root-ssh"], **admin)
    await make_user(store, "dropped_here", site="farm", access=["login-ssh", "root-ssh"],
                    **admin)
    await RemoveUserAccess.run(store, AUTHOR, name="dropped_here", access=["root-ssh"],
                               site="farm")
    await make_user(store, "granted_here", site="farm", access=["login-ssh"], **admin)
    await AddUserAccess.run(store, AUTHOR, name="granted_here", access=["root-ssh"],
                            site="farm")
    await make_user(store, "elsewhere", site="peak", access=["root-ssh"], **admin)
    await make_user(store, "keyless", site="farm", access=["root-ssh"], **admin)
    await make_user(store, "plain_admin", site="farm", access=["login-ssh"], **admin)
    await make_user(store, "not_admin", site="farm", access=["root-ssh"])
    for n, name in enumerate(("holder", "holder2", "dropped_here", "granted_here",
                              "elsewhere", "plain_admin", "not_admin")):
        await AddUserSshKey.run(store, AUTHOR, name=name, key=key_of(n))
    await AddUserSshKey.run(store, AUTHOR, name="holder", key=key_of(99))  # a second key
    for i in range(3):
        await make_user(store, f"u{i}", site="farm", access=["login-ssh"])
    return store


def as_tuples(blocks: list[Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(b.name, b.email, b.entries) for b in blocks]


@pytest.mark.parametrize("site", ["farm", "peak", None])
async def test_root_keys_are_the_admins_with_effective_root_ssh(site_with_admins, site):
    found = as_tuples(await root_key_blocks(site))
    assert found == await expected_blocks(site)
    names = [name for name, _, _ in found]
    if site == "farm":
        assert names == ["granted_here", "holder", "holder2"]
        holder = found[1][2]
        assert holder == (f'environment="REMOTE_SSH_USER=holder" {key_of(0)}',
                          f'environment="REMOTE_SSH_USER=holder" {key_of(99)}')
    elif site == "peak":
        assert names == ["elsewhere"]
    else:
        assert names == ["dropped_here", "elsewhere", "holder", "holder2"]


async def test_root_keys_read_only_the_admins_and_the_holders_keys(site_with_admins,
                                                                   mongo_config):
    store = site_with_admins
    _, before = await reads_of(store, mongo_config, lambda: root_key_blocks("farm"))
    for i in range(3, 15):  # more people on the site: root-keys reads nothing more
        await make_user(store, f"u{i}", site="farm", access=["login-ssh", "root-ssh"])
        await AddUserSshKey.run(store, AUTHOR, name=f"u{i}", key=key_of(100 + i))
    blocks, after = await reads_of(store, mongo_config, lambda: root_key_blocks("farm"))
    assert [b.name for b in blocks] == ["granted_here", "holder", "holder2"]
    assert after.commands == before.commands
    assert len(after.commands) <= 4  # site, admins, their site records, the keys
    admins = await User.find({"type": "admin"}).count()
    farm_admins = await UserSiteInfo.find(
        {"site": "farm", "user": {"$in": [u.name for u in await User.find(
            {"type": "admin"}).to_list()]}}).count()
    assert after.documents == Counter({
        "users": admins,          # the admins (projected), not the site's 20 people
        "user_site_info": farm_admins,  # their records at farm only
        "ssh_keys": 4,            # holder's two keys, holder2's, granted_here's
        "sites": 1})
    assert after.documents == before.documents


async def test_root_keys_of_a_site_without_admins(db):
    await make_site(db, "farm")
    await make_user(db, "someone", site="farm", access=["root-ssh"])
    assert await root_key_blocks("farm") == []


EXPORTS: dict[str, Callable[[], Awaitable[Any]]] = {
    "puppet-legacy": lambda: site_to_puppet_legacy("farm"),
    "storage": lambda: storage_export("farm"),
    "sympa": lambda: sympa_emails("farm"),
    "root-keys": lambda: root_key_blocks("farm"),
}


async def test_export_command_counts_do_not_grow_with_the_site(site_with_admins,
                                                               mongo_config):
    store = site_with_admins
    small = {name: len((await reads_of(store, mongo_config, q))[1].commands)
             for name, q in EXPORTS.items()}
    for i in range(20, 32):
        await make_user(store, f"u{i}", site="farm", access=["login-ssh"])
    large = {name: len((await reads_of(store, mongo_config, q))[1].commands)
             for name, q in EXPORTS.items()}
    assert small == large
    assert all(n > 0 for n in small.values())


SEGMENT = st.sampled_from(["a", "home", ".", "..", "", ".hidden", "x.y", "b-c", "/"])
PATHISH = st.lists(SEGMENT, max_size=4).map("/".join)


@settings(max_examples=500, deadline=None)
@given(base=PATHISH.map(lambda p: "/" + p) | PATHISH, sub=PATHISH | PATHISH.map(lambda p: "/" + p))
def test_join_path_is_pathlib_join(base: str, sub: str) -> None:
    expected = str(PurePosixPath(base) / sub) if sub else str(PurePosixPath(base))
    assert join_path(base, sub) == expected
