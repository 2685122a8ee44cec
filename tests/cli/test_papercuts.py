"""Issue 28 item 7: the CLI papercuts a week of use found, through the real entry point."""

from __future__ import annotations

from ..factories import home_defaults, make_group, make_site, make_user


async def test_site_option_takes_aliases_and_any_case(cli, db):
    await make_site(db, "farm")
    r = await cli("ng", "site", "alias", "add", "-s", "farm", "caesfarm")
    assert r.code == 0, r.stderr
    for spelling in ("farm", "FARM", "caesfarm", "CaesFarm"):
        r = await cli("ng", "site", "show", "-s", spelling, "--json")
        assert r.code == 0, (spelling, r.stderr)
        assert r.json()["name"] == "farm"
    await make_user(db, "alice", site="farm")
    r = await cli("ng", "user", "show", "-u", "alice", "--json")
    assert r.code == 0
    r = await cli("ng", "slurm", "why", "-s", "CAESFARM", "-u", "alice", "--offline", "--json")
    assert r.code == 0, r.stderr
    assert r.json()["site"] == "farm"
    r = await cli("ng", "site", "show", "-s", "fram")
    assert r.code == 2 and "site 'fram' does not exist (did you mean farm?)" in r.stderr


async def test_unknown_names_say_what_is_close(cli, db):
    await make_site(db, "farm")
    await make_user(db, "alice", site="farm")
    await make_group(db, "labgroup")
    r = await cli("ng", "user", "show", "-u", "alcie")
    assert r.code == 2 and "user 'alcie' does not exist (did you mean alice?)" in r.stderr
    r = await cli("ng", "group", "show", "-g", "labgrp")
    assert r.code == 2 and "(did you mean labgroup?)" in r.stderr
    r = await cli("ng", "user", "show", "-u", "zzzzzz")
    assert r.code == 2 and "did you mean" not in r.stderr


async def test_unknown_commands_and_options_say_what_is_close(cli):
    r = await cli("ng", "usr", "list")
    assert r.code == 2 and "unknown command 'usr' (did you mean user?)" in r.stderr
    r = await cli("ng", "user", "lsit")
    assert r.code == 2 and "(did you mean list?)" in r.stderr
    r = await cli("ng", "request", "list", "--status", "al")
    assert r.code == 2 and "invalid choice: 'al'" in r.stderr and "did you mean all?" in r.stderr


async def test_no_silent_option_prefixes(cli, db):
    await make_site(db, "farm")
    # --acces was taken as --access: now it is refused, naming the option it is close to
    r = await cli("ng", "user", "list", "--acces", "slurm")
    assert r.code == 2 and "unrecognized arguments: --acces" in r.stderr
    assert "did you mean --access?" in r.stderr
    r = await cli("ng", "site", "list", "--jso")
    assert r.code == 2 and "did you mean --json?" in r.stderr


async def test_api_help_and_unit_do_not_call_the_api_read_only(cli):
    from pathlib import Path

    r = await cli("daemon", "api", "--help")
    assert r.code == 0
    text = " ".join((r.stdout + r.stderr).split())
    assert "read-only" not in text and "/api/v1 reads and writes" in text
    unit = Path(__file__).parents[2] / "deploy" / "systemd" / "cheeto-api.service"
    assert "reads and writes the store" in unit.read_text()


async def test_class_help_says_the_padding_the_names_get(cli, db):
    r = await cli("ng", "user", "new", "class", "--help")
    text = " ".join(r.stdout.split())
    assert "-n 9: <prefix>-1 … <prefix>-9; -n 30: <prefix>-01 … <prefix>-30" in text
    await make_site(db, "farm")
    await home_defaults(db)
    r = await cli("ng", "user", "new", "class", "-s", "farm", "--prefix", "matsx", "-n", "3",
                  "--expires-at", "+30d")
    assert r.code == 0, r.stderr
    assert [line.split()[0] for line in r.stdout.splitlines()] == [
        "matsx-1", "matsx-2", "matsx-3"]


async def test_store_commands_with_a_client_only_config_say_so(cli, tmp_path):
    """A login node's config names the API only: `ng` commands refuse in one line instead
    of starting a local embedded store and answering from it (an empty one)."""
    cfg = tmp_path / "client.yaml"
    cfg.write_text("client:\n  url: https://hpc.example.org/api\n")
    # (the session fails a test that starts the default embedded store, so none started)
    for argv in (("ng", "user", "list"), ("ng", "site", "show", "-s", "farm"),
                 ("db", "check")):
        r = await cli(*argv, config=cfg)
        assert r.code == 2, r.stderr
        assert len(r.error_lines) == 1 and "is a client's config" in r.stderr
        assert "https://hpc.example.org/api" in r.stderr and "started" not in r.stderr
