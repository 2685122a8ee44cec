"""`cheeto ng site …`: exit codes, stdout/stderr separation, confirmation of removal."""

from __future__ import annotations

import asyncio
import io

from cheeto_like.models import GroupMembership, History, Site, UserSiteInfo


async def test_new_show_list(cli, db):
    r = await cli("ng", "site", "new", "-s", "farm", "--fqdn", "farm.hpc.example.org")
    assert r.code == 0, r.stderr
    assert r.stdout == ""
    assert "created site farm" in r.stderr

    r = await cli("ng", "site", "show", "-s", "farm", "--json")
    assert r.code == 0
    data = r.json()
    assert data["name"] == "farm" and data["fqdn"] == "farm.hpc.example.org"
    assert data["slurm"]["cluster_name"] == "farm"

    r = await cli("ng", "site", "list", "--yaml")
    assert [s["name"] for s in r.yaml()] == ["farm"]

    r = await cli("ng", "site", "list")
    assert r.stdout == "" and "farm.hpc.example.org" in r.stderr


async def test_bad_input_is_one_line_and_writes_nothing(cli, db):
    r = await cli("ng", "site", "new", "-s", "Farm!", "--fqdn", "farm.example.org")
    assert r.code == 2
    assert len(r.error_lines) == 1 and r.error_lines[0].startswith("error: name:")
    r = await cli("ng", "site", "new", "-s", "farm", "--fqdn", "not a host")
    assert r.code == 2 and len(r.error_lines) == 1
    assert await Site.count() == 0
    assert await History.count() == 0


async def test_duplicate_and_unknown(cli, db):
    assert (await cli("ng", "site", "new", "-s", "farm", "--fqdn", "farm.example.org")).code == 0
    r = await cli("ng", "site", "new", "-s", "farm", "--fqdn", "other.example.org")
    assert r.code == 2 and "already exists" in r.stderr
    r = await cli("ng", "site", "show", "-s", "hive")
    assert r.code == 2 and r.error_lines == ["error: site 'hive' does not exist"]


async def test_missing_required_flag_is_a_usage_error(cli, db):
    r = await cli("ng", "site", "new", "-s", "farm")
    assert r.code == 2
    assert len(r.error_lines) == 1 and "--fqdn" in r.stderr


async def test_alias_and_sticky(cli, db):
    await cli("ng", "site", "new", "-s", "farm", "--fqdn", "farm.example.org")
    await cli("ng", "site", "new", "-s", "hive", "--fqdn", "hive.example.org")
    assert (await cli("ng", "site", "alias", "add", "-s", "farm", "caesfarm")).code == 0
    r = await cli("ng", "site", "alias", "add", "-s", "hive", "caesfarm")
    assert r.code == 2 and "already names site 'farm'" in r.stderr
    assert (await cli("ng", "group", "new", "generic", "-g", "hpcusers", "--gid", "5000")).code == 0
    r = await cli("ng", "site", "sticky", "add", "group", "-s", "farm", "-g", "hpcusers")
    assert r.code == 0, r.stderr
    assert (await Site.find_one(Site.name == "farm")).group.sticky == ["hpcusers"]
    r = await cli("ng", "site", "sticky", "add", "group", "-s", "farm", "-g", "sudo-users")
    assert r.code == 2
    assert (await cli("ng", "site", "sticky", "remove", "group", "-s", "farm", "-g",
                      "hpcusers")).code == 0
    assert (await cli("ng", "site", "alias", "rm", "-s", "farm", "caesfarm")).code == 0
    assert (await Site.find_one(Site.name == "farm")).aliases == []


async def test_remove_with_dependents_needs_force(cli, db):
    await cli("ng", "site", "new", "-s", "farm", "--fqdn", "farm.example.org")
    await cli("ng", "user", "new", "generic", "-u", "alice", "--email", "alice@example.org",
              "--fullname", "Alice A", "--uid", "2001")
    await cli("ng", "group", "new", "generic", "-g", "lab", "--gid", "5001")
    await cli("ng", "user", "add", "site", "-u", "alice", "-s", "farm")
    await cli("ng", "group", "add", "member", "-g", "lab", "-u", "alice", "-s", "farm")

    r = await cli("ng", "site", "remove", "-s", "farm")
    assert r.code == 2
    assert "user_site_info" in r.stderr and "group_membership" in r.stderr
    assert "confirm on a terminal or pass --force" in r.stderr
    assert await Site.find_one(Site.name == "farm") is not None

    r = await cli("ng", "site", "rm", "-s", "farm", "--force")
    assert r.code == 0, r.stderr
    assert await Site.find_one(Site.name == "farm") is None
    assert await UserSiteInfo.count() == 0 and await GroupMembership.count() == 0


class _Terminal(io.StringIO):
    """Typed answers on what the CLI takes for a terminal."""

    def isatty(self) -> bool:
        return True


async def _on_terminal(cli_config, store, answer: str, *argv: str) -> tuple[int, str]:
    from cheeto_like.cli import main

    err = io.StringIO()
    code = await asyncio.to_thread(main, [*argv, "--config", str(cli_config)],
                                   stdout=io.StringIO(), stderr=err, stdin=_Terminal(answer))
    await store.bind(create_indexes=False)
    return code, err.getvalue()


async def test_remove_lists_aliases_and_refuses_without_terminal(cli, db):
    """A site with only an alias is still confirmed: the alias is listed and, without a
    terminal, nothing is removed unless --force."""
    await cli("ng", "site", "new", "-s", "farm", "--fqdn", "farm.example.org")
    await cli("ng", "site", "alias", "add", "-s", "farm", "caesfarm")
    r = await cli("ng", "site", "remove", "-s", "farm")
    assert r.code == 2
    assert "caesfarm" in r.stderr and "farm.example.org" in r.stderr
    assert r.error_lines[-1] == ("error: not removing site 'farm' (alias=1); confirm on a "
                                 "terminal or pass --force")
    assert await Site.find_one(Site.name == "farm") is not None
    assert await History.find({"op": "remove_site"}).count() == 0

    r = await cli("ng", "site", "remove", "-s", "farm", "--force")
    assert r.code == 0, r.stderr
    assert await Site.find_one(Site.name == "farm") is None
    [row] = await History.find({"op": "remove_site"}).to_list()
    assert row.changes["aliases"] == ["caesfarm"]
    assert row.changes["fqdn"] == "farm.example.org"


async def test_remove_asks_on_a_terminal(cli, cli_config, store, db):
    await cli("ng", "site", "new", "-s", "farm", "--fqdn", "farm.example.org")
    code, err = await _on_terminal(cli_config, store, "n\n", "ng", "site", "remove", "-s", "farm")
    assert code == 2 and "Delete site farm and these records? [y/N]" in err
    assert "no dependents" in err
    assert await Site.find_one(Site.name == "farm") is not None

    code, err = await _on_terminal(cli_config, store, "y\n", "ng", "site", "remove", "-s", "farm")
    assert code == 0, err
    assert await Site.find_one(Site.name == "farm") is None
