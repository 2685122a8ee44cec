"""Site-wide reads past MongoDB's 16 MiB reply document (issue 24).

A site-wide ``$group`` pushing one value per document grows with the site: users with
their LDAP fields reach 17.7 MiB at 50k, 25k RSA-4096 keys 22 MiB, and MongoDB (and the
embedded store, which enforces the limit with mongod's code) refuses such a reply. The
site here has the bytes of that scale in few documents (2,400 users with 7 KiB names and
8 KiB keys, bulk-inserted as bench/exports.py does), so the naive one-document read is
refused; the LDAP desired state, the puppet-legacy export and the root-keys export must
still complete with every user, and no reply document may come near the limit.
"""

from __future__ import annotations

import base64
from typing import Any

import bson
import pytest
from pymongo import monitoring
from pymongo.errors import OperationFailure

from cheeto_like.config import LDAPConfig, MongoConfig
from cheeto_like.models import Group, GroupMembership, SshKey, User, UserSiteInfo, base
from cheeto_like.models.base import columns, grouped, grouped_columns, in_id_range
from cheeto_like.queries.exports import root_key_blocks
from cheeto_like.queries.puppet_legacy import site_to_puppet_legacy
from cheeto_like.store import Store
from cheeto_like.sync.ldap.desired import desired_state

from ..factories import make_site
from .test_query_count import listening

USERS = 2400
NAME_BYTES = 7000
KEY_BYTES = 8000
LIMIT = 16 * 1024 * 1024
USER_FIELDS = ("name", "email", "uid", "gid", "fullname", "home_directory", "status",
               "access", "expires_at")


def big_key(n: int) -> str:
    """A well-formed ssh-rsa line with a ~``KEY_BYTES`` blob, different for every ``n``."""
    kind = b"ssh-rsa"
    modulus = n.to_bytes(4, "big") * (KEY_BYTES * 3 // 4 // 4)
    blob = (len(kind).to_bytes(4, "big") + kind + (3).to_bytes(4, "big") + b"\x01\x00\x01"
            + len(modulus).to_bytes(4, "big") + modulus)
    return f"ssh-rsa {base64.b64encode(blob).decode()} k{n}"


def name_of(n: int) -> str:
    return f"s{n:05d}"


async def bulk(model: Any, docs: list[Any]) -> None:
    """Insert in chunks, running the one hook ``insert()`` would (bench/_common.py)."""
    collection = model.get_pymongo_collection()
    for start in range(0, len(docs), 400):
        chunk = docs[start:start + 400]
        for doc in chunk:
            if hasattr(doc, "refresh_ldap_fingerprint"):
                doc.refresh_ldap_fingerprint()
        await collection.insert_many([d.model_dump(by_alias=True) for d in chunk])


@pytest.fixture(scope="module")
async def big_site(store: Store) -> Store:
    from ..conftest import seed_access_status, wipe

    await wipe()
    await seed_access_status()
    await make_site(store, "farm")
    names = [name_of(n) for n in range(USERS)]
    padding = "x" * NAME_BYTES
    await bulk(User, [User(
        name=n, email=f"{n}@example.org", uid=2_000_000 + k, gid=2_000_000 + k,
        fullname=f"Scale {padding} {n}", home_directory=f"/home/{n}", status="active",
        type="admin", access=["login-ssh", "root-ssh"]) for k, n in enumerate(names)])
    await bulk(Group, [Group(name=n, gid=2_000_000 + k, type="user")
                       for k, n in enumerate(names)])
    await bulk(UserSiteInfo, [UserSiteInfo(user=n, site="farm") for n in names])
    await bulk(SshKey, [SshKey(user=n, key=big_key(k)) for k, n in enumerate(names)])
    return store


class Replies(monitoring.CommandListener):
    """The size of every document in every read reply, and the commands."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self.largest = 0
        self.refused: list[int] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.commands.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        cursor = event.reply.get("cursor")
        if isinstance(cursor, dict):
            for doc in cursor.get("firstBatch", cursor.get("nextBatch", [])):
                self.largest = max(self.largest, len(bson.encode(doc)))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self.refused.append(int(event.failure.get("code") or 0))


async def replies_of(store: Store, config: MongoConfig, query: Any) -> tuple[Any, Replies]:
    async with listening(store, config, Replies()) as replies:
        result = await query()
    return result, replies


def bounded(replies: Replies) -> None:
    """Every reply document well under 16 MiB, and none refused."""
    assert replies.largest < base.PART_BYTES * 2 < LIMIT, replies.largest
    assert replies.refused == []


async def test_the_naive_one_document_read_is_refused(big_site: Store) -> None:
    """The site crosses the limit: the single ``$group`` of every user's fields (what
    ``columns`` sent before) is refused with BSONObjectTooLarge, and so is the keys'."""
    for model, fields in ((User, USER_FIELDS), (SshKey, ("user", "key"))):
        pushes = {f"v{i}": {"$push": f"${f}"} for i, f in enumerate(fields)}
        with pytest.raises(OperationFailure) as refused:
            cursor = await model.get_pymongo_collection().aggregate(
                [{"$match": {}}, {"$group": {"_id": None, **pushes}}])
            await cursor.to_list()
        assert refused.value.code == 10334


async def test_columns_read_every_document_in_bounded_parts(big_site: Store,
                                                            mongo_config: MongoConfig) -> None:
    found, replies = await replies_of(big_site, mongo_config,
                                      lambda: columns(User, {}, *USER_FIELDS))
    assert sorted(r["name"] for r in found) == [name_of(n) for n in range(USERS)]
    assert all(r["fullname"].endswith(r["name"]) for r in found)
    assert sum(len(bson.encode(r)) for r in found) > LIMIT  # one document would not fit
    bounded(replies)
    assert replies.commands.count("aggregate") >= 1 + 1 + 5  # probe, count, >= 5 parts
    keys, replies = await replies_of(big_site, mongo_config,
                                     lambda: grouped(SshKey, {}, "user", "key"))
    assert sorted(keys) == [name_of(n) for n in range(USERS)]
    assert all(values == [big_key(int(user[1:]))] for user, values in keys.items())
    bounded(replies)
    by_user, replies = await replies_of(  # one group per user: small documents anyway
        big_site, mongo_config, lambda: grouped_columns(SshKey, {}, "user", "key"))
    assert all(keys == ([big_key(int(user[1:]))],) for user, keys in by_user.items())
    assert len(by_user) == USERS
    bounded(replies)


async def test_a_part_refused_as_too_large_is_split(big_site: Store,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    mongo_config: MongoConfig) -> None:
    """Planned parts far too large (as with ids that do not spread evenly): the store
    refuses them, each is halved and read again, and nothing is lost or doubled."""
    monkeypatch.setattr(base, "PART_BYTES", 64 * 1024 * 1024)
    found, replies = await replies_of(big_site, mongo_config,
                                      lambda: columns(SshKey, {}, "user", "key"))
    assert sorted(r["user"] for r in found) == [name_of(n) for n in range(USERS)]
    assert all(r["key"] == big_key(int(r["user"][1:])) for r in found)
    assert replies.refused == [10334]  # the one planned part; its halves fit
    assert replies.largest < LIMIT + 16 * 1024
    # ids that would not spread (one half as large again): after MAX_SPLITS, a find
    monkeypatch.setattr(base, "MAX_SPLITS", 0)
    found, replies = await replies_of(big_site, mongo_config,
                                      lambda: columns(SshKey, {}, "user", "key"))
    assert sorted(r["user"] for r in found) == [name_of(n) for n in range(USERS)]
    assert replies.refused == [10334]  # the planned part; its halves are found
    assert replies.commands.count("find") >= 2


async def test_ids_outside_the_hex_ranges_are_read_too(big_site: Store,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A match larger than the probe, with ids no hex range covers (an int) and ids past
    ``f…``: the count shows the ranges missed one, and a streamed find reads them all."""
    monkeypatch.setattr(base, "PROBE_ROWS", 4)
    collection = GroupMembership.get_pymongo_collection()
    docs = [{"_id": f"{k:x}" * 8, "user": f"u{k}", "group": "g", "site": "ids"}
            for k in range(16)]
    docs += [{"_id": 7, "user": "int", "group": "g", "site": "ids"},
             {"_id": "zz", "user": "zz", "group": "g", "site": "ids"}]
    await collection.insert_many(docs)
    try:
        found = await columns(GroupMembership, {"site": "ids"}, "user")
        assert sorted(r["user"] for r in found) == sorted(d["user"] for d in docs)
        monkeypatch.setattr(base, "PART_BYTES", 64)  # many parts: every string id once
        await collection.delete_one({"_id": 7})
        found = await columns(GroupMembership, {"site": "ids"}, "user")
        assert sorted(r["user"] for r in found) == sorted(d["user"] for d in docs
                                                          if d["_id"] != 7)
    finally:
        await collection.delete_many({"site": "ids"})


def test_id_ranges_tile_every_string() -> None:
    assert in_id_range({"site": "farm"}, 0, base.ID_SPAN) == {"site": "farm"}
    assert in_id_range({}, 0, 16) == {"_id": {"$lt": "00000010"}}
    assert in_id_range({}, 16, base.ID_SPAN) == {"_id": {"$gte": "00000010"}}
    assert in_id_range({"_id": {"$in": ["a"]}}, 1, 2) == {"$and": [
        {"_id": {"$in": ["a"]}}, {"_id": {"$gte": "00000001", "$lt": "00000002"}}]}


async def test_ldap_desired_state_of_the_whole_site(big_site: Store,
                                                    mongo_config: MongoConfig) -> None:
    config = LDAPConfig(servers=["ldap://ldap.example.org"], searchbase="dc=example,dc=org",
                        user_base="ou=people,dc=example,dc=org")
    desired, replies = await replies_of(big_site, mongo_config,
                                        lambda: desired_state("farm", config))
    assert len(desired.users) == USERS
    entry = desired.users[name_of(7)]
    (key,) = entry.attrs["sshPublicKey"]
    assert key.endswith(big_key(7))
    bounded(replies)


async def test_puppet_legacy_export_of_the_whole_site(big_site: Store,
                                                      mongo_config: MongoConfig) -> None:
    export, replies = await replies_of(big_site, mongo_config,
                                       lambda: site_to_puppet_legacy("farm"))
    assert len(export["user"]) == USERS
    assert export["user"][name_of(3)]["fullname"].endswith(name_of(3))
    bounded(replies)


async def test_root_keys_export_of_the_whole_site(big_site: Store,
                                                  mongo_config: MongoConfig) -> None:
    blocks, replies = await replies_of(big_site, mongo_config, lambda: root_key_blocks("farm"))
    assert [b.name for b in blocks] == [name_of(n) for n in range(USERS)]
    assert blocks[5].entries == (f'environment="REMOTE_SSH_USER={name_of(5)}" {big_key(5)}',)
    bounded(replies)
