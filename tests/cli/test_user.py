"""`cheeto ng user …` end to end through the real entry point."""

from __future__ import annotations

import pytest

from cheeto_like.credentials import verify_password
from cheeto_like.models import Group, History, SshKey, User

ED25519 = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq8qZ0ZEn9m9oP3b8mZr3pM0w3a0c2jY2q8m8n3d7xK "
           "alice@laptop")


async def make_user(cli, name: str = "alice", uid: int = 2001, *extra: str):
    r = await cli("ng", "user", "new", "generic", "-u", name, "--email", f"{name}@example.org",
                  "--fullname", f"{name.title()} Example", "--uid", str(uid), *extra)
    assert r.code == 0, r.stderr
    return r


@pytest.fixture
async def farm(cli, db):
    r = await cli("ng", "site", "new", "-s", "farm", "--fqdn", "farm.example.org")
    assert r.code == 0, r.stderr
    return "farm"


async def test_new_generic_with_generated_password(cli, db):
    r = await make_user(cli, "alice", 2001, "--password", "--access", "login-ssh", "slurm")
    password = r.stdout.strip()
    assert password and "\n" not in password
    assert "created user alice" in r.stderr
    user = await User.find_one(User.name == "alice")
    assert user.access == ["login-ssh", "slurm"]
    assert verify_password(password, user.password)
    assert (await Group.find_one(Group.name == "alice")).gid == 2001
    history = await History.find(History.op == "create_user").to_list()
    assert len(history) == 1 and password not in str(history[0].changes)
    assert user.password not in str(history[0].changes)


@pytest.mark.parametrize(("argv", "message"), [
    (["--uid", "4294967296"], "outside 0..4294967295"),
    (["--uid", "-1"], "outside 0..4294967295"),
    (["--uid", "10", "--shell", "/bin/fish"], "not allowed"),
    (["--uid", "10", "--email", "not-an-email"], "not a valid e-mail"),
    (["--uid", "10", "--status", "retired"], "invalid choice: 'retired'"),
    (["--uid", "10", "--access", "teleport"], "unknown access type"),
])
async def test_new_generic_bad_input(cli, db, argv, message):
    base = {"--email": "x@example.org", "--fullname": "X Y"}
    args = ["ng", "user", "new", "generic", "-u", "xavier"]
    for flag, value in base.items():
        if flag not in argv:
            args += [flag, value]
    r = await cli(*args, *argv)
    assert r.code == 2, r.stderr
    assert len(r.error_lines) == 1 and message in r.stderr
    assert r.stdout == ""
    assert await User.count() == 0 and await History.count() == 0


async def test_long_and_invalid_names(cli, db):
    for name in ("a" * 33, "9lives", "Alice", "al ice"):
        r = await cli("ng", "user", "new", "generic", "-u", name, "--email", "a@example.org",
                      "--fullname", "A B", "--uid", "5")
        assert r.code == 2 and len(r.error_lines) == 1, (name, r.stderr)
    assert await User.count() == 0


async def test_duplicates(cli, db):
    await make_user(cli, "alice", 2001)
    r = await cli("ng", "user", "new", "generic", "-u", "alice", "--email", "b@example.org",
                  "--fullname", "B", "--uid", "2002")
    assert r.code == 2 and "already exists" in r.stderr
    r = await cli("ng", "user", "new", "generic", "-u", "bob", "--email", "b@example.org",
                  "--fullname", "B", "--uid", "2001")
    assert r.code == 2 and "uid 2001" in r.stderr
    assert await User.count() == 1


async def test_system_and_shared(cli, db):
    r = await cli("ng", "user", "new", "system", "-u", "svc")
    assert r.code == 0, r.stderr
    user = await User.find_one(User.name == "svc")
    assert user.uid >= 4_000_000_000 and user.shell == "/usr/sbin/nologin"
    r = await cli("ng", "user", "new", "shared", "-u", "labshare", "--email", "l@example.org",
                  "--fullname", "Lab Share")
    assert r.code == 0, r.stderr
    assert 2_000_000_000 <= (await User.find_one(User.name == "labshare")).uid < 3_000_000_000


async def test_status_global_and_per_site(cli, farm):
    await make_user(cli)
    r = await cli("ng", "user", "status", "-u", "alice", "-s", "farm", "--status", "inactive",
                  "--reason", "left")
    assert r.code == 2 and "not on site" in r.stderr
    await cli("ng", "user", "add", "site", "-u", "alice", "-s", "farm")
    r = await cli("ng", "user", "status", "-u", "alice", "-s", "farm", "--status", "inactive",
                  "--reason", "left")
    assert r.code == 0, r.stderr
    data = (await cli("ng", "user", "show", "-u", "alice", "-s", "farm", "--json")).json()
    assert data["status"] == "active"
    assert data["site"]["effective_status"] == "inactive"
    r = await cli("ng", "user", "status", "-u", "alice", "--reset", "--reason", "x")
    assert r.code == 2 and "needs a site" in r.stderr
    r = await cli("ng", "user", "status", "-u", "alice", "--status", "disabled")
    assert r.code == 2  # --reason is required
    r = await cli("ng", "user", "list", "-s", "farm", "--status", "inactive", "--json")
    assert [(u["name"], u["status"]) for u in r.json()] == [("alice", "inactive")]


async def test_type_shell_email_comment_password(cli, db):
    await make_user(cli)
    assert (await cli("ng", "user", "type", "-u", "alice", "--type", "admin")).code == 0
    assert (await cli("ng", "user", "shell", "-u", "alice", "--shell", "/bin/zsh")).code == 0
    assert (await cli("ng", "user", "email", "-u", "alice", "--email", "a2@example.org")).code == 0
    assert (await cli("ng", "user", "comment", "-u", "alice", "-c", "hello")).code == 0
    r = await cli("ng", "user", "password", "-u", "alice", "--stdin", stdin="s3cret-pass\n")
    assert r.code == 0 and r.stdout == ""
    user = await User.find_one(User.name == "alice")
    assert (user.type, user.shell, user.email, user.comments) == (
        "admin", "/bin/zsh", "a2@example.org", ["hello"])
    assert verify_password("s3cret-pass", user.password)
    r = await cli("ng", "user", "password", "-u", "alice")
    assert r.code == 0 and verify_password(r.stdout.strip(),
                                           (await User.find_one(User.name == "alice")).password)
    r = await cli("ng", "user", "type", "-u", "alice", "--type", "wizard")
    assert r.code == 2


async def test_access_add_remove(cli, farm):
    await make_user(cli, "alice", 2001, "--access", "login-ssh")
    await cli("ng", "user", "add", "site", "-u", "alice", "-s", "farm")
    assert (await cli("ng", "user", "add", "access", "-u", "alice", "-a", "slurm")).code == 0
    r = await cli("ng", "user", "add", "access", "-u", "alice", "-s", "farm", "-a", "sudo")
    assert r.code == 0, r.stderr
    data = (await cli("ng", "user", "show", "-u", "alice", "-s", "farm", "--json")).json()
    assert data["access"] == ["login-ssh", "slurm"]
    assert data["site"]["effective_access"] == ["login-ssh", "slurm", "sudo"]
    r = await cli("ng", "user", "remove", "access", "-u", "alice", "-a", "slurm")
    assert r.code == 0
    r = await cli("ng", "user", "add", "access", "-u", "alice", "-a", "warp")
    assert r.code == 2 and "unknown access type" in r.stderr


async def test_ssh_keys(cli, db, tmp_path):
    await make_user(cli)
    keyfile = tmp_path / "id.pub"
    keyfile.write_text(ED25519 + "\n")
    r = await cli("ng", "user", "add", "ssh-key", "-u", "alice", "--key-file", str(keyfile))
    assert r.code == 0, r.stderr and "SHA256:" in r.stderr
    r = await cli("ng", "user", "add", "ssh-key", "-u", "alice", "-k", ED25519)
    assert r.code == 2 and "already has key" in r.stderr
    r = await cli("ng", "user", "add", "ssh-key", "-u", "alice", "-k", "ssh-rsa nonsense")
    assert r.code == 2
    keys = (await cli("ng", "user", "show", "-u", "alice", "--json")).json()["ssh_keys"]
    assert len(keys) == 1 and keys[0]["type"] == "ssh-ed25519"
    r = await cli("ng", "user", "remove", "ssh-key", "-u", "alice")
    assert r.code == 2 and "--key-id" in r.stderr  # no terminal to confirm on
    r = await cli("ng", "user", "remove", "ssh-key", "-u", "alice", "--key-id", keys[0]["id"])
    assert r.code == 0, r.stderr
    assert await SshKey.count() == 0


async def test_sites_and_rename(cli, farm):
    await make_user(cli)
    assert (await cli("ng", "user", "add", "site", "-u", "alice", "-s", "farm")).code == 0
    r = await cli("ng", "user", "add", "site", "-u", "alice", "-s", "farm")
    assert r.code == 2 and "already on site" in r.stderr
    r = await cli("ng", "user", "rename", "-u", "alice", "--to", "alicia")
    assert r.code == 0, r.stderr
    data = (await cli("ng", "user", "show", "-u", "alicia", "--json")).json()
    assert [s["site"] for s in data["sites"]] == ["farm"]
    assert await Group.find_one(Group.name == "alicia") is not None
    assert (await cli("ng", "user", "remove", "site", "-u", "alicia", "-s", "farm")).code == 0
    r = await cli("ng", "user", "show", "-u", "alice")
    assert r.code == 2 and "does not exist" in r.stderr


async def test_show_by_uid_and_email(cli, db):
    await make_user(cli)
    assert (await cli("ng", "user", "show", "--uid", "2001", "--json")).json()["name"] == "alice"
    r = await cli("ng", "user", "show", "--email", "alice@example.org", "--yaml")
    assert r.yaml()["uid"] == 2001
    r = await cli("ng", "user", "show", "--uid", "9")
    assert r.code == 2


async def test_list_filters(cli, farm):
    await make_user(cli, "alice", 2001, "--access", "slurm")
    await make_user(cli, "bob", 2002, "--type", "admin")
    await make_user(cli, "carol", 2003)
    await cli("ng", "user", "add", "site", "-u", "alice", "-s", "farm")
    await cli("ng", "user", "add", "site", "-u", "bob", "-s", "farm")
    names = lambda r: [u["name"] for u in r.json()]  # noqa: E731
    assert names(await cli("ng", "user", "list", "--json")) == ["alice", "bob", "carol"]
    assert names(await cli("ng", "user", "list", "-s", "farm", "--json")) == ["alice", "bob"]
    assert names(await cli("ng", "user", "list", "--type", "admin", "--access", "slurm",
                           "--operator", "or", "--json")) == ["alice", "bob"]
    assert names(await cli("ng", "user", "list", "--type", "admin", "--access", "slurm",
                           "--json")) == []
    assert names(await cli("ng", "user", "list", "--limit", "1", "--json")) == ["alice"]
    r = await cli("ng", "user", "list", "-s", "nowhere")
    assert r.code == 2
