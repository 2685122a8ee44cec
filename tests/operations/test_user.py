"""User creation (generic, system, shared; the id bands) and the rename cascade.

Every failure leaves no document and no History row; History never holds a plaintext
password, a password hash or a full SSH key. Attributes, keys and global status/access:
test_user_attributes.py; per-site state: test_user_site.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from cheeto_like.constants import DEFAULT_SHELL, NOLOGIN_SHELL
from cheeto_like.credentials import parse_ssh_key, verify_password
from cheeto_like.errors import AlreadyExists, Conflict, InvalidInput, NotFound
from cheeto_like.models import (
    Group,
    GroupMembership,
    HippoEvent,
    History,
    SlurmAccount,
    SshKey,
    Storage,
    SyncRun,
    User,
    UserSiteInfo,
)
from cheeto_like.operations.group_membership import AddGroupMember, AddGroupSponsor
from cheeto_like.operations.user import (
    AddUserComment,
    CreateSharedUser,
    CreateSystemUser,
    CreateUser,
    RenameUser,
    SetUserPassword,
)

from ..factories import (
    AUTHOR,
    ED25519_KEY,
    history,
    make_group,
    make_site,
    make_user,
    reload_user,
    snapshot,
)


def assert_no_secrets(changes: dict, *secrets: str) -> None:
    text = json.dumps(changes)
    for secret in secrets:
        assert secret not in text
    assert "$y$" not in text


async def create(db, name: str = "alice", uid: int = 5000, **kwargs):
    kwargs.setdefault("email", f"{name}@example.org")
    kwargs.setdefault("fullname", "Alice Liddell")
    return await CreateUser.run(db, AUTHOR, name=name, uid=uid, **kwargs)


# -- CreateUser ------------------------------------------------------------------------------


async def test_create_user_makes_the_user_and_personal_group(db):
    user, group = await create(db)
    stored = await reload_user("alice")
    assert stored.id == user.id
    assert (stored.uid, stored.gid, stored.home_directory) == (5000, 5000, "/home/alice")
    assert (stored.status, stored.access, stored.shell, stored.type) == (
        "active", [], DEFAULT_SHELL, "user")
    assert stored.password is None and stored.ldap.fingerprint
    personal = await Group.find_one(Group.name == "alice")
    assert (personal.id, personal.gid, personal.type) == (group.id, 5000, "user")
    assert await SshKey.count() == 0
    [row] = await history()
    assert (row.op, row.author) == ("create_user", AUTHOR)
    assert row.changes == {"user": "alice", "uid": 5000, "gid": 5000, "type": "user",
                           "email": "alice@example.org", "status": "active", "access": [],
                           "has_password": False, "ssh_key": None}


async def test_create_user_with_every_option(db):
    expiry = datetime(2031, 1, 1, tzinfo=UTC)
    await create(db, gid=7777, home_directory="/data/alice", access=["slurm", "login-ssh"],
                 status="inactive", shell="/bin/zsh", surname="Liddell", type="admin",
                 expires_at=expiry)
    user = await reload_user("alice")
    assert (user.gid, user.home_directory, user.access) == (7777, "/data/alice",
                                                            ["slurm", "login-ssh"])
    assert (user.status, user.shell, user.surname, user.type) == (
        "inactive", "/bin/zsh", "Liddell", "admin")
    assert user.expires_at == expiry
    assert (await Group.find_one(Group.name == "alice")).gid == 7777


async def test_create_user_hashes_the_password(db):
    await create(db, password="correct horse battery")
    user = await reload_user("alice")
    assert user.password.startswith("$y$")
    assert verify_password("correct horse battery", user.password)
    assert not verify_password("wrong", user.password)
    [row] = await history()
    assert row.changes["has_password"] is True
    assert_no_secrets(row.changes, "correct horse battery", user.password)


async def test_create_user_stores_an_ssh_key_and_logs_only_its_fingerprint(db):
    await create(db, ssh_key=f"  {ED25519_KEY}\n")
    [key] = await SshKey.find_all().to_list()
    assert (key.user, key.key) == ("alice", ED25519_KEY)
    [row] = await history()
    assert row.changes["ssh_key"] == parse_ssh_key(ED25519_KEY).fingerprint
    assert_no_secrets(row.changes, parse_ssh_key(ED25519_KEY).blob)


async def test_create_user_ignores_a_blank_ssh_key(db):
    await create(db, ssh_key="   ")
    assert await SshKey.count() == 0


async def setup_taken(db) -> None:
    await create(db, "taken", uid=5000)
    await make_group(db, "lab", gid=6000)


@pytest.mark.parametrize(("overrides", "error", "message"), [
    ({"name": "taken", "uid": 5001}, AlreadyExists, "user 'taken' already exists"),
    ({"uid": 5000}, AlreadyExists, "uid 5000 is already used"),
    ({"name": "lab"}, AlreadyExists, "group named 'lab' already exists"),
    ({"uid": 6000}, AlreadyExists, "gid 6000 is already used by group 'lab'"),
    ({"gid": 6000}, AlreadyExists, "gid 6000 is already used by group 'lab'"),
    ({"status": "retired"}, NotFound, "unknown status 'retired'"),
    ({"access": ["slurm", "teleport"]}, NotFound, "unknown access type teleport"),
    ({"uid": -1}, InvalidInput, "uid: id -1 is outside"),
    ({"uid": 4_294_967_296}, InvalidInput, "uid: id 4294967296 is outside"),
    ({"shell": "/bin/fish"}, InvalidInput, "shell: shell '/bin/fish' is not allowed"),
    ({"email": "alice@"}, InvalidInput, "email: 'alice@' is not a valid e-mail"),
    ({"name": "a" * 33}, InvalidInput, "longer than 32 characters"),
    ({"name": "Alice"}, InvalidInput, "not a valid POSIX name"),
    ({"home_directory": "home/alice"}, InvalidInput, "must be absolute"),
    ({"fullname": " "}, InvalidInput, "fullname: value must not be empty"),
    ({"type": "wizard"}, InvalidInput, "user type 'wizard'"),
    ({"ssh_key": "ssh-rsa AAAA not-a-key"}, InvalidInput, "SSH key"),
])
async def test_create_user_failure_writes_nothing(db, overrides, error, message):
    await setup_taken(db)
    before = await snapshot()
    with pytest.raises(error, match=message):
        await create(db, **{"name": "alice", "uid": 5555, **overrides})
    assert await snapshot() == before


async def test_create_user_accepts_the_id_bounds(db):
    await create(db, "root2", uid=0)
    await create(db, "top", uid=4_294_967_295)
    assert {u.uid for u in await User.find_all().to_list()} == {0, 4_294_967_295}


async def test_create_user_needs_seeded_status_groups(empty_db):
    with pytest.raises(NotFound, match="seed-access-status"):
        await create(empty_db)
    assert not any((await snapshot()).values())


# -- system and shared users ----------------------------------------------------------------


async def test_system_users_take_uids_from_4e9_with_no_login_shell(db):
    first, _ = await CreateSystemUser.run(db, AUTHOR, name="svc", password="s3cret")
    second, _ = await CreateSystemUser.run(db, AUTHOR, name="svc2", email="ops@example.org",
                                           fullname="Ops Robot")
    assert (first.uid, second.uid) == (4_000_000_000, 4_000_000_001)
    assert first.shell == NOLOGIN_SHELL and first.type == "system"
    assert first.fullname == "HPC svc" and first.email == "root@localhost.localdomain"
    assert (second.email, second.fullname) == ("ops@example.org", "Ops Robot")
    assert (await Group.find_one(Group.name == "svc")).gid == 4_000_000_000
    rows = await history("create_system_user")
    assert rows[0].changes == {"user": "svc", "uid": 4_000_000_000, "type": "system",
                               "has_password": True}
    assert_no_secrets(rows[0].changes, "s3cret")
    assert await history("create_user") == []


async def test_system_uid_skips_a_system_group_gid(db):
    await make_group(db, "sysgrp", gid=4_000_000_000, type="system")
    user, _ = await CreateSystemUser.run(db, AUTHOR, name="svc")
    assert user.uid == 4_000_000_001


async def test_shared_users_start_at_2e9(db):
    user, group = await CreateSharedUser.run(db, AUTHOR, name="labshare",
                                             email="lab@example.org", fullname="Lab Share")
    assert (user.uid, group.gid, user.type, user.shell) == (
        2_000_000_000, 2_000_000_000, "shared", DEFAULT_SHELL)


async def test_shared_uids_stay_below_3e9_when_class_and_system_users_exist(db):
    """The reference allocated max(uid >= 2e9) + 1, jumping past class and system uids."""
    await create(db, "classy", uid=3_000_000_005, type="class")
    await CreateSystemUser.run(db, AUTHOR, name="svc")
    await CreateSharedUser.run(db, AUTHOR, name="share1", email="s@example.org",
                               fullname="Share One")
    second, _ = await CreateSharedUser.run(db, AUTHOR, name="share2", email="s@example.org",
                                           fullname="Share Two")
    assert second.uid == 2_000_000_001


async def test_shared_band_exhausted_is_a_conflict(db):
    await create(db, "last", uid=2_999_999_999)
    before = await snapshot()
    with pytest.raises(Conflict, match=r"no free id left in 2000000000\.\.2999999999"):
        await CreateSharedUser.run(db, AUTHOR, name="share", email="s@example.org",
                                   fullname="Share")
    assert await snapshot() == before


# -- rename ----------------------------------------------------------------------------------


async def build_world(db) -> None:
    """alice is referenced from every kind of record; bob is a bystander."""
    await make_site(db, "farm")
    await make_user(db, "alice", site="farm", ssh_key=ED25519_KEY)
    await make_user(db, "bob", site="farm")
    await make_group(db, "lab")
    await AddGroupMember.run(db, AUTHOR, group="lab", user="alice", site="farm")
    await AddGroupSponsor.run(db, AUTHOR, group="lab", user="alice", site="farm")
    await AddGroupMember.run(db, AUTHOR, group="lab", user="bob", site="farm")
    # bob is an explicit member of alice's personal group
    await AddGroupMember.run(db, AUTHOR, group="alice", user="bob", site="farm")
    await AddUserComment.run(db, "alice", name="bob", comment="written by alice")
    await SlurmAccount(group="lab", site="farm", coordinators=["alice", "bob"]).insert()
    await SlurmAccount(group="alice", site="farm").insert()
    await Storage(name="alice", site="farm", category="home", owner="alice", group="alice",
                  volume="home/alice").insert()
    await HippoEvent(hippo_id=1, hippo_endpoint="https://hippo", action="CreateAccount",
                     target_username="alice", target_user="alice",
                     target_groupnames=["alice"], target_groups=["alice", "lab"]).insert()
    await SyncRun(target="slurm", site="farm", author="alice").insert()


async def test_rename_user_cascades_everywhere(db):
    await build_world(db)
    await RenameUser.run(db, AUTHOR, name="alice", new_name="alicia")

    assert await User.find_one(User.name == "alice") is None
    user = await reload_user("alicia")
    assert user.home_directory == "/home/alice"  # data on disk is renamed separately
    personal = await Group.find_one(Group.name == "alicia")
    assert personal is not None and personal.type == "user" and personal.gid == user.gid
    assert await Group.find_one(Group.name == "alice") is None
    assert [k.user for k in await SshKey.find_all().to_list()] == ["alicia"]
    assert {u.user for u in await UserSiteInfo.find_all().to_list()} == {"alicia", "bob"}
    edges = {(e.user, e.group): e.roles for e in await GroupMembership.find_all().to_list()}
    assert edges == {("alicia", "lab"): ["member", "sponsor"], ("bob", "lab"): ["member"],
                     ("bob", "alicia"): ["member"]}
    lab_account = await SlurmAccount.find_one(SlurmAccount.group == "lab")
    assert set(lab_account.coordinators) == {"alicia", "bob"}
    assert await SlurmAccount.find_one(SlurmAccount.group == "alicia") is not None
    storage = await Storage.find_one(Storage.category == "home")
    assert (storage.name, storage.owner, storage.group) == ("alice", "alicia", "alicia")
    event = await HippoEvent.find_one(HippoEvent.hippo_id == 1)
    assert (event.target_user, event.target_username) == ("alicia", "alice")
    assert event.target_groups == ["alicia", "lab"]
    assert (await SyncRun.find_one(SyncRun.site == "farm")).author == "alicia"
    assert [r.author for r in await history("add_user_comment")] == ["alicia"]

    [row] = await history("rename_user")
    assert row.author == AUTHOR
    assert row.changes["user"] == "alice" and row.changes["new_name"] == "alicia"
    assert row.changes["references"] == {
        "ssh_keys.user": 1, "user_site_info.user": 1, "group_membership.user": 1,
        "slurm_accounts.coordinators": 1, "storages.owner": 1,
        "hippo_events.target_user": 1, "history.author": 1, "sync_runs.author": 1}
    assert row.changes["group_references"] == {
        "group_membership.group": 1, "slurm_accounts.group": 1, "storages.group": 1,
        "hippo_events.target_groups": 1}


async def test_rename_user_moves_the_ldap_fingerprint(db):
    await make_user(db, "alice")
    before = await reload_user("alice")
    await RenameUser.run(db, AUTHOR, name="alice", new_name="alicia")
    after = await reload_user("alicia")
    assert after.ldap.fingerprint != before.ldap.fingerprint
    assert after.ldap.modified_at > before.ldap.modified_at


@pytest.mark.parametrize(("new_name", "error", "message"), [
    ("bob", AlreadyExists, "user 'bob' already exists"),
    ("lab", AlreadyExists, "group named 'lab' already exists"),
    ("sudo-users", AlreadyExists, "group named 'sudo-users' already exists"),
    ("alice", InvalidInput, "same as the old one"),
    ("Alicia", InvalidInput, "not a valid POSIX name"),
])
async def test_rename_user_refusals_change_nothing(db, new_name, error, message):
    await build_world(db)
    snapshot = {m: await m.get_pymongo_collection().find({}).sort("_id").to_list()
                for m in (User, Group, SshKey, UserSiteInfo, GroupMembership, SlurmAccount,
                          Storage, HippoEvent, History, SyncRun)}
    with pytest.raises(error, match=message):
        await RenameUser.run(db, AUTHOR, name="alice", new_name=new_name)
    for model, docs in snapshot.items():
        assert await model.get_pymongo_collection().find({}).sort("_id").to_list() == docs


async def test_rename_unknown_user(db):
    with pytest.raises(NotFound):
        await RenameUser.run(db, AUTHOR, name="ghost", new_name="spirit")


async def test_a_collision_inside_the_cascade_rolls_back_the_whole_rename(db):
    """A stale edge already naming the new user makes the cascade hit a unique index after
    the user itself was renamed: nothing of the rename may survive."""
    await build_world(db)
    await GroupMembership(user="alicia", group="lab", site="farm", roles=["member"]).insert()
    snapshot_before = {m: await m.get_pymongo_collection().find({}).sort("_id").to_list()
                       for m in (User, Group, SshKey, UserSiteInfo, GroupMembership)}
    with pytest.raises(AlreadyExists, match="group membership"):
        await RenameUser.run(db, AUTHOR, name="alice", new_name="alicia")
    for model, docs in snapshot_before.items():
        assert await model.get_pymongo_collection().find({}).sort("_id").to_list() == docs
    assert await history("rename_user") == []


async def test_no_history_row_ever_holds_a_password(db):
    secrets = ["pw-create-user", "pw-system", "pw-shared", "pw-set"]
    await create(db, password=secrets[0])
    await CreateSystemUser.run(db, AUTHOR, name="svc", password=secrets[1])
    await CreateSharedUser.run(db, AUTHOR, name="share", email="s@example.org",
                               fullname="Share", password=secrets[2])
    await SetUserPassword.run(db, AUTHOR, name="alice", password=secrets[3])
    hashes = [u.password for u in await User.find_all().to_list()]
    assert all(h and h.startswith("$y$") for h in hashes)
    rows = await history()
    assert [r.op for r in rows] == ["create_user", "create_system_user", "create_shared_user",
                                    "set_user_password"]
    for row in rows:
        assert_no_secrets(row.changes, *secrets, *hashes)
    assert rows[2].changes == {"user": "share", "uid": 2_000_000_000, "type": "shared",
                               "has_password": True}


async def test_add_comment_history(db):
    await make_user(db, "alice")
    await AddUserComment.run(db, AUTHOR, name="alice", comment="hello")
    [row] = await history("add_user_comment")
    assert (row.author, row.changes) == (AUTHOR, {"user": "alice", "comment": "hello"})
