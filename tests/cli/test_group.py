"""`cheeto ng group …` end to end."""

from __future__ import annotations

from cheeto_like.models import Group, GroupMembership


async def setup(cli):
    await cli("ng", "site", "new", "-s", "farm", "--fqdn", "farm.example.org")
    for name, uid in (("alice", 2001), ("bob", 2002)):
        r = await cli("ng", "user", "new", "generic", "-u", name, "--email",
                      f"{name}@example.org", "--fullname", f"{name} x", "--uid", str(uid))
        assert r.code == 0, r.stderr
        await cli("ng", "user", "add", "site", "-u", name, "-s", "farm")


async def test_new_variants(cli, db):
    assert (await cli("ng", "group", "new", "generic", "-g", "physics", "--gid", "5000")).code == 0
    r = await cli("ng", "group", "new", "generic", "-g", "chem", "--gid", "5000")
    assert r.code == 2 and "gid 5000" in r.stderr
    r = await cli("ng", "group", "new", "generic", "-g", "physics", "--gid", "5001")
    assert r.code == 2 and "already exists" in r.stderr
    for kind, low in (("system", 4_000_000_000), ("class", 3_000_000_000),
                      ("lab", 3_900_000_000)):
        r = await cli("ng", "group", "new", kind, "-g", f"{kind}grp1")
        assert r.code == 0, r.stderr
        assert (await Group.find_one(Group.name == f"{kind}grp1")).gid >= low


async def test_from_sponsor_and_roles(cli, db):
    await setup(cli)
    r = await cli("ng", "group", "new", "from-sponsor", "-u", "alice", "-s", "farm")
    assert r.code == 0, r.stderr
    group = await Group.find_one(Group.name == "alicegrp")
    assert group.gid == 100_002_001
    for role in ("member", "sudoer", "slurmer"):
        r = await cli("ng", "group", "add", role, "-g", "alicegrp", "-u", "bob", "-s", "farm")
        assert r.code == 0, r.stderr
    edge = await GroupMembership.find_one(GroupMembership.user == "bob")
    assert edge.roles == ["member", "slurmer", "sudoer"]
    data = (await cli("ng", "group", "show", "-g", "alicegrp", "-s", "farm", "--json")).json()
    assert data["site"]["members"] == ["alice", "bob"]
    assert data["site"]["sponsors"] == ["alice"]
    for role in ("member", "sudoer", "slurmer"):
        assert (await cli("ng", "group", "remove", role, "-g", "alicegrp", "-u", "bob", "-s",
                          "farm")).code == 0
    assert await GroupMembership.find_one(GroupMembership.user == "bob") is None
    r = await cli("ng", "group", "add", "member", "-g", "sudo-users", "-u", "bob", "-s", "farm")
    assert r.code == 2
    r = await cli("ng", "group", "add", "member", "-g", "nope", "-u", "bob", "-s", "farm")
    assert r.code == 2 and "group 'nope' does not exist" in r.stderr


async def test_list_filters_and_sticky(cli, db):
    await setup(cli)
    await cli("ng", "group", "new", "generic", "-g", "physics", "--gid", "5000")
    await cli("ng", "group", "new", "generic", "-g", "everyone", "--gid", "5001")
    await cli("ng", "group", "add", "member", "-g", "physics", "-u", "alice", "-s", "farm")
    await cli("ng", "site", "sticky", "add", "group", "-s", "farm", "-g", "everyone")
    names = lambda r: [g["name"] for g in r.json()]  # noqa: E731
    assert names(await cli("ng", "group", "list", "--member", "alice", "-s", "farm",
                           "--json")) == ["everyone", "physics"]
    assert names(await cli("ng", "group", "list", "--member", "bob", "--json")) == ["everyone"]
    assert "access" in {g["type"] for g in (await cli("ng", "group", "list", "--json")).json()}
    assert names(await cli("ng", "group", "list", "--type", "status", "--json")) == [
        "active-users", "disabled-users", "inactive-users", "offboarding-users"]
    data = (await cli("ng", "group", "show", "-g", "everyone", "-s", "farm", "--json")).json()
    assert data["site"]["members"] == ["alice", "bob"] and data["sticky_at"] == ["farm"]


async def test_rename(cli, db):
    await setup(cli)
    await cli("ng", "group", "new", "generic", "-g", "physics", "--gid", "5000")
    await cli("ng", "group", "add", "member", "-g", "physics", "-u", "alice", "-s", "farm")
    r = await cli("ng", "group", "rename", "-g", "physics", "--to", "astro")
    assert r.code == 0, r.stderr
    assert (await GroupMembership.find_one(GroupMembership.user == "alice")).group == "astro"
    r = await cli("ng", "group", "rename", "-g", "alice", "--to", "alice2")
    assert r.code == 2 and "personal group" in r.stderr


async def test_seed_is_idempotent(cli, empty_db):
    r = await cli("ng", "group", "seed-access-status", "--json")
    assert r.code == 0, r.stderr
    outcome = {row["group"]: row["outcome"] for row in r.json()}
    assert set(outcome.values()) == {"created"} and len(outcome) == 10
    assert (await Group.find_one(Group.name == "sudo-users")).gid >= 3_333_333_000
    r = await cli("ng", "group", "seed-access-status", "--json")
    assert {row["outcome"] for row in r.json()} == {"already_exists"}
