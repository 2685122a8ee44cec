"""`cheeto ng history`: filters and machine output."""

from __future__ import annotations


async def test_history_filters(cli, db):
    await cli("ng", "site", "new", "-s", "farm", "--fqdn", "farm.example.org", "--author", "ops1")
    await cli("ng", "site", "new", "-s", "hive", "--fqdn", "hive.example.org", "--author", "ops2")
    await cli("ng", "group", "new", "generic", "-g", "lab", "--gid", "5000", "--author", "ops1")
    rows = (await cli("ng", "history", "--json")).json()
    assert [r["op"] for r in rows] == ["create_group", "create_site", "create_site"]
    rows = (await cli("ng", "history", "--op", "create_site", "--json")).json()
    assert [r["changes"]["site"] for r in rows] == ["hive", "farm"]
    rows = (await cli("ng", "history", "-u", "ops1", "--json")).json()
    assert {r["author"] for r in rows} == {"ops1"} and len(rows) == 2
    rows = (await cli("ng", "history", "-n", "1", "--since=-1d", "--json")).json()
    assert len(rows) == 1
    assert (await cli("ng", "history", "--until=-1d", "--json")).json() == []
    r = await cli("ng", "history", "--op", "make_coffee")
    assert r.code == 2 and "unknown operation" in r.stderr
    r = await cli("ng", "history")
    assert r.code == 0 and r.stdout == "" and "create_group" in r.stderr
