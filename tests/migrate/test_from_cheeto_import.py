"""``cheeto migrate from-cheeto`` end to end: a reference dump (and the same data served
by a MongoDB-speaking server) is imported field by field, a second run writes nothing,
a dry run writes nothing, and one refusal keeps the whole import out."""

from __future__ import annotations

from datetime import UTC, datetime

from bson import DBRef
from pymongo import AsyncMongoClient

from cheeto_like.migrate.from_cheeto import new_uuid
from cheeto_like.models import (
    AutomountMap,
    Group,
    GroupMembership,
    HippoEvent,
    History,
    NameClaim,
    Site,
    SlurmAccount,
    SlurmAllocation,
    SlurmAssociation,
    SlurmPartition,
    SlurmQOS,
    SshKey,
    StaticMount,
    Storage,
    StorageVolume,
    User,
    UserSiteInfo,
)
from tests.factories import ED25519_KEY, ED25519_KEY_2
from tests.migrate.reference_dump import HASH, T0, T1, build


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


async def _counts() -> dict[str, int]:
    return {m.get_settings().name: await m.find({}).count() for m in (
        Site, Group, User, SshKey, UserSiteInfo, GroupMembership, SlurmPartition, SlurmQOS,
        SlurmAllocation, SlurmAccount, SlurmAssociation, AutomountMap, StorageVolume,
        StaticMount, Storage, HippoEvent, History, NameClaim)}


async def check_every_field(dump) -> None:
    site = await Site.find_one({"name": "farm"})
    assert site.id == new_uuid("sites", dump.ids["site"])
    assert (site.fqdn, site.aliases) == ("farm.hpc.example.edu", ["caesfarm"])
    assert site.group.sticky == ["farm-everyone"]
    assert site.slurm.sticky == [] and site.slurm.default_account is None
    assert site.storage.model_dump() == {"default_home_volume": "homes",
                                         "default_home_quota": "20G",
                                         "home_automount_map": "auto.home",
                                         "home_static_mount": None}
    assert _utc(site.created_at) == T0 and _utc(site.updated_at) == T1

    groups = {g.name: g for g in await Group.find({}).to_list()}
    assert (groups["sudo-users"].type, groups["sudo-users"].shorthand) == ("access", "sudo")
    assert (groups["inactive-users"].type, groups["inactive-users"].shorthand,
            groups["inactive-users"].gid) == ("status", "inactive", 3_333_333_005)
    assert (groups["smithlab"].gid, groups["smithlab"].type) == (3_900_000_001, "group")
    assert (groups["bob"].gid, groups["bob"].type, groups["bob"].shorthand) == (41002, "user", None)

    users = {u.name: u for u in await User.find({}).to_list()}
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    assert (alice.email, alice.uid, alice.gid, alice.fullname, alice.surname, alice.shell,
            alice.type, alice.status, alice.access, alice.password, alice.home_directory,
            alice.comments) == ("alice@example.edu", 41001, 41001, "Alice Smith", None,
                                "/usr/bin/bash", "user", "active",
                                ["login-ssh", "slurm", "sudo"], HASH, "/home/alice", [])
    assert _utc(alice.provisioned_at) == T0 and alice.expires_at is None
    person = alice.iam.person
    assert (alice.iam.iam_status, _utc(alice.iam.iam_synced_at), person.iam_id,
            person.mothra_id, person.user_types, person.associations[0].dept_code) == (
        "present", T1, "1000123456", 41001, ["faculty"], "030")
    assert bob.surname == "de Vries" and bob.password is None and bob.iam is None
    assert (carol.status, carol.access, carol.comments) == ("inactive", ["login-ssh"],
                                                            ["imported from v1"])
    # the reference's LDAP watermarks are kept; the fingerprint is ours
    assert {k: _utc(v) for k, v in alice.ldap.synced.items()} == {"farm": T1}
    assert _utc(alice.ldap.modified_at) == T0
    assert alice.ldap.fingerprint == alice.ldap_fingerprint()

    keys = {(k.user, k.key) for k in await SshKey.find({}).to_list()}
    assert keys == {("alice", ED25519_KEY), ("bob", ED25519_KEY_2)}

    usi = {u.user: u for u in await UserSiteInfo.find({}).to_list()}
    assert {u.site for u in usi.values()} == {"farm"}
    assert (usi["carol"].status, usi["carol"].access) == ("active", ["login-ssh", "slurm"])
    assert (usi["alice"].status, usi["alice"].access) == (None, [])

    edges = {m.user: m for m in await GroupMembership.find({}).to_list()}
    assert {u: (m.group, m.site, m.roles) for u, m in edges.items()} == {
        "alice": ("smithlab", "farm", ["member", "sponsor"]),
        "bob": ("smithlab", "farm", ["member", "slurmer"]),
        "carol": ("smithlab", "farm", ["member", "sudoer"])}
    assert _utc(edges["carol"].expires_at) == T1 and edges["alice"].expires_at is None

    assert sorted(p.name for p in await SlurmPartition.find({}).to_list()) == ["high", "low"]
    qos = await SlurmQOS.find_one({"name": "smithlab-high-qos"})
    assert (qos.site, qos.priority, qos.flags) == ("farm", 10, ["DenyOnLimit", "NoDecay"])
    allocations = {a.bucket: a for a in await SlurmAllocation.find({}).to_list()}
    assert {b: (a.site, a.qos, a.tres.model_dump(), a.comment) for b, a in allocations.items()} == {
        "group_limits": ("farm", "smithlab-high-qos", {"cpus": 64, "gpus": 4, "mem": "512G"},
                         "group_limits grant"),
        "user_limits": ("farm", "smithlab-high-qos", {"cpus": 16, "gpus": None, "mem": "128G"},
                        "user_limits grant"),
        "job_limits": ("farm", "smithlab-high-qos", {"cpus": 8, "gpus": None, "mem": None},
                       "job_limits grant")}
    account = await SlurmAccount.find_one({"group": "smithlab"})
    assert (account.site, account.coordinators, account.limits.model_dump()) == (
        "farm", ["alice"], {"max_user_jobs": 10, "max_group_jobs": -1, "max_submit_jobs": 100,
                            "max_job_length": "7-00:00:00"})
    assocs = {(a.account, a.partition, tuple(a.qos), a.default_qos)
              for a in await SlurmAssociation.find({}).to_list()}
    assert assocs == {("smithlab", p, ("smithlab-high-qos",), "smithlab-high-qos")
                      for p in ("high", "low")}

    maps = {m.name: (m.site, m.prefix, m.options) for m in await AutomountMap.find({}).to_list()}
    assert maps == {"auto.home": ("farm", "/home", ["rw", "nfsvers=4.2"]),
                    "auto.group": ("farm", "/group", ["rw"])}
    volumes = {v.name: v for v in await StorageVolume.find({}).to_list()}
    homes, child, labs = volumes["homes"], volumes["alice-home"], volumes["labs"]
    assert (homes.backend, homes.zfs.dataset_name, homes.host, homes.host_path, homes.parent,
            homes.quota, homes.nfs_export.export_options, homes.nfs_export.export_ranges) == (
        "zfs", "tank/home", "nas1.example.edu", "/export/home", None, "1.5T",
        "rw,no_root_squash", ["10.0.0.0/16"])
    assert (child.parent, child.host_path, child.quota) == ("homes", "/export/home/alice", "20G")
    assert (labs.backend, labs.quobyte.volume_id, labs.quobyte.tenant, labs.zfs,
            _utc(labs.expires_at)) == ("quobyte", "vol-1", "caes", None,
                                       datetime(2030, 1, 1, tzinfo=UTC))
    mount = await StaticMount.find_one({"name": "cvmfs-soft"})
    assert (mount.fstype, mount.volume, mount.spec, mount.mount_path, mount.options) == (
        "cvmfs", None, "software.example.org", "/cvmfs/software.example.org", ["ro"])
    storages = {s.category: s for s in await Storage.find({}).to_list()}
    home, lab = storages["home"], storages["group"]
    assert (home.name, home.owner, home.group, home.volume, home.automount_map,
            home.mount_overrides.add_options, home.globus) == (
        "alice", "alice", "alice", "alice-home", "auto.home", ["nosuid"], False)
    assert (lab.name, lab.owner, lab.group, lab.volume, lab.subpath, lab.automount_map,
            lab.globus) == ("smithlab", "alice", "smithlab", "labs", "smithlab", "auto.group",
                            True)

    event = await HippoEvent.find_one({"hippo_id": 77})
    assert (event.site, event.target_user, event.target_groups, event.sponsor_username,
            event.status, event.raw) == ("farm", "bob", ["smithlab"], "alice", "Complete",
                                         {"account": {"kerberos": "bob"}, "id": 77})
    history = {h.op: h for h in await History.find({}).to_list()}
    assert history["create_user"].author == "alice"
    assert history["create_user"].changes == {"user": "bob", "site": str(dump.ids["site"])}
    assert _utc(history["create_user"].timestamp) == T0
    assert history["seed_access_status"].author is None
    claims = {c.name: c.kind for c in await NameClaim.find({}).to_list()}
    assert claims["alice"] == "user" and claims["smithlab"] == "group"
    assert claims["sudo-users"] == "group" and len(claims) == 13


async def test_dump_import_checks_every_field_and_second_run_is_a_no_op(empty_db, cli, tmp_path):
    dump = build()
    directory = dump.write(tmp_path / "dump" / "cheeto")
    dry = await cli("migrate", "from-cheeto", "--dump", str(tmp_path / "dump"), "--dry-run",
                    "--json")
    assert dry.code == 0, dry.stderr
    counts = {c["collection"]: c for c in dry.json()["collections"]}
    assert counts["users"] == {"collection": "users", "source": 3, "new": 3, "present": 0}
    assert counts["groups"]["new"] == 13 and dry.json()["written"] is False
    assert await User.find({}).count() == 0

    first = await cli("migrate", "from-cheeto", "--dump", str(directory))
    assert first.code == 0, first.stderr
    assert "imported" in first.stderr
    await check_every_field(dump)
    imports = await History.find({"op": "migrate_from_cheeto"}).to_list()
    assert len(imports) == 1 and imports[0].changes["imported"]["users"] == 3

    before = await _counts()
    second = await cli("migrate", "from-cheeto", "--dump", str(directory), "--json")
    assert second.code == 0, second.stderr
    report = second.json()
    assert report["written"] is False
    assert all(c["new"] == 0 for c in report["collections"])
    assert await _counts() == before


async def test_a_single_refusal_writes_nothing_and_is_listed(empty_db, cli, tmp_path):
    dump = build()
    dump.docs["users"][1]["email"] = "nope"
    directory = dump.write(tmp_path / "bad")
    result = await cli("migrate", "from-cheeto", "--dump", str(directory))
    assert result.code == 2
    assert "users bob" in result.stderr and "email" in result.stderr
    assert "nothing was written" in result.stderr
    assert sum((await _counts()).values()) == 0


async def test_conflict_with_what_the_store_holds_is_reported(empty_db, cli, tmp_path):
    dump = build()
    directory = dump.write(tmp_path / "d")
    assert (await cli("migrate", "from-cheeto", "--dump", str(directory))).code == 0
    changed = build()
    for doc, old in zip(changed.docs["users"], dump.docs["users"], strict=True):
        doc["_id"] = old["_id"]
    changed.docs["users"][0]["fullname"] = "Alice Changed"
    changed.docs["users"][1]["name"] = "robert"  # a new user with bob's uid
    result = await cli("migrate", "from-cheeto", "--dump", str(changed.write(tmp_path / "e")),
                       "--dry-run")
    assert result.code == 2
    assert "users alice: already in the store with other values (fullname)" in result.stderr
    assert "uid 41002 is already taken" in result.stderr


async def test_bad_sources_are_one_line_errors(empty_db, cli, tmp_path):
    missing = await cli("migrate", "from-cheeto", "--dump", str(tmp_path / "nope"))
    assert missing.code == 2 and "does not exist" in missing.stderr
    both = await cli("migrate", "from-cheeto")
    assert both.code == 2 and "exactly one of --uri or --dump" in both.stderr
    (tmp_path / "other.bson").write_bytes(b"")
    other = await cli("migrate", "from-cheeto", "--dump", str(tmp_path))
    assert other.code == 2 and "none of the reference's collections" in other.stderr
    (tmp_path / "users.bson").write_bytes(b"\x05\x00\x00")
    junk = await cli("migrate", "from-cheeto", "--dump", str(tmp_path))
    assert junk.code == 2 and "not a readable BSON dump" in junk.stderr, junk.stderr
    secret = await cli("migrate", "from-cheeto", "--uri", "mongodb://u:pw@localhost/")
    assert secret.code == 2 and "CHEETO_SOURCE_MONGO_PASSWORD" in secret.stderr
    assert "pw" not in secret.stderr.replace("password", "")


def as_bare_ids(value):
    if isinstance(value, DBRef):
        return value.id
    if isinstance(value, dict):
        return {k: as_bare_ids(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_bare_ids(v) for v in value]
    return value


async def test_uri_import_from_a_server_holding_the_reference(empty_db, cli, mongo_config):
    """The same reference data restored into a database of the embedded store (it speaks
    MongoDB's wire protocol), imported from its URI.

    The embedded store cannot hold DBRef values (its storage layer is JSON, and the server
    decodes ``{$ref, $id}`` into a DBRef it cannot serialise), so on it the Links are
    restored as bare ObjectIds, the reference's other reference shape (DocRef). DBRefs
    themselves are covered by the ``--dump`` tests above (a dump keeps them as written);
    a real MongoDB (``CHEETO_TEST_MONGO_URI``) gets them as they are here too."""
    if mongo_config.uri:
        uri = mongo_config.uri
    else:
        from urllib.parse import quote_plus
        # the store answers hello as a one-member replica set's primary without a hosts
        # list (its address is a socket), so a client must not try to discover members
        uri = (f"mongodb://{quote_plus(str(mongo_config.embedded.path / 'store.sock'))}/"
               "?directConnection=true")
    dump = build()
    client: AsyncMongoClient = AsyncMongoClient(uri, directConnection=True)
    try:
        source = client["t_migrate_reference_src"]
        for collection, docs in dump.docs.items():
            await source[collection].delete_many({})
            if not mongo_config.uri:
                docs = [as_bare_ids(d) for d in docs]
            await source[collection].insert_many(docs)
    finally:
        await client.close()
    result = await cli("migrate", "from-cheeto", "--uri", uri, "--database",
                       "t_migrate_reference_src")
    assert result.code == 0, result.stderr
    await check_every_field(dump)
    again = await cli("migrate", "from-cheeto", "--uri", uri, "--database",
                      "t_migrate_reference_src", "--json")
    assert again.code == 0 and again.json()["written"] is False
