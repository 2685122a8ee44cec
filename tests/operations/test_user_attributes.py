"""A user's own attributes: global status (with its audit comment and expiry rules),
type, shell, e-mail, password, comments, global access, and SSH keys.

Every failure leaves no History row; History never holds a plaintext password, a password
hash or a full SSH key.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.credentials import parse_ssh_key, verify_password
from cheeto_like.errors import AlreadyExists, InvalidInput, NotFound
from cheeto_like.models import SshKey
from cheeto_like.operations.user import (
    AddUserAccess,
    AddUserComment,
    AddUserSshKey,
    RemoveUserAccess,
    RemoveUserSshKey,
    SetUserEmail,
    SetUserPassword,
    SetUserShell,
    SetUserStatus,
    SetUserType,
)

from ..factories import (
    AUTHOR,
    ED25519_KEY,
    ED25519_KEY_2,
    history,
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


# -- global status ---------------------------------------------------------------------------


async def test_set_global_status_appends_a_comment(db):
    await make_user(db, "alice")
    await SetUserStatus.run(db, AUTHOR, name="alice", status="inactive", reason="left")
    user = await reload_user("alice")
    assert user.status == "inactive"
    assert user.comments == ["status=inactive, scope=global, reason=left"]
    [row] = await history("set_user_status")
    assert row.changes == {"user": "alice", "site": None, "status": "inactive", "reset": False,
                           "previous": "active", "stored": "inactive", "reason": "left"}


async def test_offboarding_to_active_clears_the_expiry(db):
    expiry = datetime.now(UTC) + timedelta(days=30)
    await make_user(db, "alice", status="offboarding", expires_at=expiry)
    await SetUserStatus.run(db, AUTHOR, name="alice", status="active", reason="rehired")
    assert (await reload_user("alice")).expires_at is None


async def test_offboarding_to_inactive_keeps_the_expiry(db):
    expiry = datetime(2031, 1, 1, tzinfo=UTC)
    await make_user(db, "alice", status="offboarding", expires_at=expiry)
    await SetUserStatus.run(db, AUTHOR, name="alice", status="inactive", reason="gone")
    assert (await reload_user("alice")).expires_at == expiry


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"status": "retired"}, NotFound, "unknown status 'retired'"),
    ({}, InvalidInput, "a status is required"),
    ({"reset": True}, InvalidInput, "--reset needs a site"),
    ({"status": "active", "reset": True, "site": "farm"}, InvalidInput, "not both"),
    ({"status": "active", "reason": ""}, InvalidInput, "reason"),
])
async def test_set_status_refusals_write_nothing(db, kwargs, error, message):
    await make_site(db, "farm")
    await make_user(db, "alice", site="farm")
    before = await snapshot()
    with pytest.raises(error, match=message):
        await SetUserStatus.run(db, AUTHOR, **{"name": "alice", "reason": "r", **kwargs})
    assert await snapshot() == before
    assert (await reload_user("alice")).comments == []


async def test_set_status_of_unknown_user(db):
    with pytest.raises(NotFound, match="user 'ghost' does not exist"):
        await SetUserStatus.run(db, AUTHOR, name="ghost", status="active", reason="r")
    assert await history("set_user_status") == []


# -- attributes ------------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "field", "value", "bad"), [
    (SetUserType, "type", "admin", "wizard"),
    (SetUserShell, "shell", "/bin/zsh", "/bin/fish"),
    (SetUserEmail, "email", "alice@cs.example.org", "alice"),
])
async def test_set_user_field(db, op, field, value, bad):
    await make_user(db, "alice")
    old = getattr(await reload_user("alice"), field)
    await op.run(db, AUTHOR, name="alice", **{field: value})
    assert getattr(await reload_user("alice"), field) == value
    [row] = await history(op.op_name)
    assert row.changes == {"user": "alice", field: value, "previous": old}
    with pytest.raises(InvalidInput):
        await op.run(db, AUTHOR, name="alice", **{field: bad})
    assert len(await history(op.op_name)) == 1


async def test_set_field_of_unknown_user(db):
    with pytest.raises(NotFound):
        await SetUserShell.run(db, AUTHOR, name="ghost", shell="/bin/zsh")


async def test_set_password_hashes_with_a_fresh_salt(db):
    await make_user(db, "alice")
    await SetUserPassword.run(db, AUTHOR, name="alice", password="pw-one")
    first = (await reload_user("alice")).password
    await SetUserPassword.run(db, AUTHOR, name="alice", password="pw-one")
    second = (await reload_user("alice")).password
    assert first != second and first.startswith("$y$")
    assert verify_password("pw-one", first) and verify_password("pw-one", second)
    rows = await history("set_user_password")
    assert [r.changes for r in rows] == [{"user": "alice"}, {"user": "alice"}]
    for row in rows:
        assert_no_secrets(row.changes, "pw-one", first, second)


async def test_set_empty_password_is_refused(db):
    await make_user(db, "alice")
    with pytest.raises(InvalidInput):
        await SetUserPassword.run(db, AUTHOR, name="alice", password="")


async def test_add_comment(db):
    await make_user(db, "alice")
    await AddUserComment.run(db, AUTHOR, name="alice", comment="met at SC24")
    await AddUserComment.run(db, AUTHOR, name="alice", comment="second")
    assert (await reload_user("alice")).comments == ["met at SC24", "second"]
    with pytest.raises(InvalidInput):
        await AddUserComment.run(db, AUTHOR, name="alice", comment="  ")


# -- global access ---------------------------------------------------------------------------


async def test_add_and_remove_global_access(db):
    await make_user(db, "alice", access=["login-ssh"])
    await AddUserAccess.run(db, AUTHOR, name="alice", access=["slurm", "login-ssh", "slurm"])
    assert (await reload_user("alice")).access == ["login-ssh", "slurm"]
    await AddUserAccess.run(db, AUTHOR, name="alice", access=["slurm"])
    assert [r.changes["added"] for r in await history("add_user_access")] == [["slurm"], []]
    await RemoveUserAccess.run(db, AUTHOR, name="alice", access=["login-ssh", "sudo"])
    assert (await reload_user("alice")).access == ["slurm"]
    [row] = await history("remove_user_access")
    assert row.changes == {"user": "alice", "site": None, "access": ["login-ssh", "sudo"],
                           "removed": ["login-ssh"]}
    await RemoveUserAccess.run(db, AUTHOR, name="alice", access=["slurm"])
    assert (await reload_user("alice")).access == []


async def test_add_unknown_access_writes_nothing(db):
    await make_user(db, "alice")
    with pytest.raises(NotFound, match="unknown access type teleport"):
        await AddUserAccess.run(db, AUTHOR, name="alice", access=["slurm", "teleport"])
    assert (await reload_user("alice")).access == []
    with pytest.raises(InvalidInput):
        await AddUserAccess.run(db, AUTHOR, name="alice", access=[])
    assert await history("add_user_access") == []


async def test_global_access_change_marks_the_user_dirty(db):
    await make_user(db, "alice")
    before = (await reload_user("alice")).ldap.modified_at
    await AddUserAccess.run(db, AUTHOR, name="alice", access=["slurm"])
    assert (await reload_user("alice")).ldap.modified_at > before


# -- SSH keys --------------------------------------------------------------------------------


async def test_add_ssh_key(db):
    await make_user(db, "alice")
    before = (await reload_user("alice")).ldap.modified_at
    key = await AddUserSshKey.run(db, AUTHOR, name="alice", key=f"{ED25519_KEY}  ")
    assert (key.user, key.key) == ("alice", ED25519_KEY)
    [row] = await history("add_user_ssh_key")
    assert row.changes == {"user": "alice",
                           "key_fingerprint": parse_ssh_key(ED25519_KEY).fingerprint,
                           "replaced_count": 0}
    assert (await reload_user("alice")).ldap.modified_at > before


async def test_add_the_same_key_twice_is_already_exists(db):
    await make_user(db, "alice", ssh_key=ED25519_KEY)
    same_blob = ED25519_KEY.replace("alice@laptop", "other comment")
    with pytest.raises(AlreadyExists, match="already has key SHA256:"):
        await AddUserSshKey.run(db, AUTHOR, name="alice", key=same_blob)
    assert await SshKey.count() == 1
    assert await history("add_user_ssh_key") == []


async def test_the_same_key_may_belong_to_two_users(db):
    await make_user(db, "alice", ssh_key=ED25519_KEY)
    await make_user(db, "bob")
    await AddUserSshKey.run(db, AUTHOR, name="bob", key=ED25519_KEY)
    assert await SshKey.count() == 2


async def test_replace_ssh_keys(db):
    await make_user(db, "alice", ssh_key=ED25519_KEY)
    await AddUserSshKey.run(db, AUTHOR, name="alice", key=ED25519_KEY_2, replace=True)
    assert [k.key for k in await SshKey.find_all().to_list()] == [ED25519_KEY_2]
    await AddUserSshKey.run(db, AUTHOR, name="alice", key=ED25519_KEY_2, replace=True)
    assert [r.changes["replaced_count"] for r in await history("add_user_ssh_key")] == [1, 1]
    assert await SshKey.count() == 1


@pytest.mark.parametrize("key", ["", "ssh-ed25519", "ssh-rsa " + ED25519_KEY.split()[1],
                                 "ssh-ed25519 !!!notbase64"])
async def test_add_invalid_ssh_key_is_invalid_input(db, key):
    await make_user(db, "alice")
    with pytest.raises(InvalidInput):
        await AddUserSshKey.run(db, AUTHOR, name="alice", key=key)
    assert await SshKey.count() == 0 and await history("add_user_ssh_key") == []


async def test_add_ssh_key_to_unknown_user(db):
    with pytest.raises(NotFound):
        await AddUserSshKey.run(db, AUTHOR, name="ghost", key=ED25519_KEY)
    assert await SshKey.count() == 0


async def test_remove_ssh_key_by_id(db):
    await make_user(db, "alice", ssh_key=ED25519_KEY)
    second = await AddUserSshKey.run(db, AUTHOR, name="alice", key=ED25519_KEY_2)
    await RemoveUserSshKey.run(db, AUTHOR, name="alice", key_id=second.id)
    assert [k.key for k in await SshKey.find_all().to_list()] == [ED25519_KEY]
    [row] = await history("remove_user_ssh_key")
    assert row.changes == {"user": "alice", "key_id": second.id,
                           "key_fingerprint": parse_ssh_key(ED25519_KEY_2).fingerprint}


async def test_remove_another_users_key_is_not_found(db):
    await make_user(db, "alice", ssh_key=ED25519_KEY)
    await make_user(db, "bob")
    [key] = await SshKey.find_all().to_list()
    for name, key_id in (("bob", key.id), ("alice", "0" * 32)):
        with pytest.raises(NotFound, match="has no SSH key with id"):
            await RemoveUserSshKey.run(db, AUTHOR, name=name, key_id=key_id)
    assert await SshKey.count() == 1 and await history("remove_user_ssh_key") == []
