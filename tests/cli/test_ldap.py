"""`cheeto ng ldap …` end to end through the entry point, against the session's slapd:
sync and dry run output, the show commands, confirmation for destructive commands, the
deletion cap, and one-line errors (exit 1) for an unreachable or refusing directory."""

from __future__ import annotations

import io
import socket
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from cheeto_like.config import SKELETON, LDAPConfig
from cheeto_like.models import SyncRun
from tests.factories import ED25519_KEY, make_group, make_site, make_user
from tests.services.ldap import Slapd
from tests.sync.ldap_lab import Lab


def write_config(base: Path, target: Path, ldap: dict[str, Any]) -> Path:
    yaml = YAML(typ="safe")
    data = yaml.load(base.read_text())
    data["ldap"] = {"default": ldap}
    with target.open("w") as fh:
        yaml.dump(data, fh)
    return target


def ldap_block(lab: Lab, **overrides: Any) -> dict[str, Any]:
    block = {**lab.config.model_dump(mode="json", exclude_none=True),
             "password": lab.slapd.root_password}
    block.update(overrides)
    return block


@pytest.fixture
async def setup(db, slapd: Slapd, cli_config: Path, tmp_path: Path):
    lab = Lab(db, slapd)
    await make_site(db, lab.site)
    alice = lab.name("alice")
    await make_user(db, alice, site=lab.site, access=["login-ssh"], ssh_key=ED25519_KEY)
    await make_group(db, lab.name("lab"))
    config = write_config(cli_config, tmp_path / "config.yaml", ldap_block(lab))
    return lab, config


async def test_sync_site_dry_run_then_apply(cli, setup):
    lab, config = setup
    r = await cli("ng", "ldap", "sync-site", "-s", lab.site, "--dry-run", "--json",
                  config=config)
    assert r.code == 0, r.stderr
    data = r.json()
    assert data["mode"] == "dry-run" and data["writes"] > 0 and data["applied_writes"] == {}
    assert lab.entry(lab.site_dn()) is None
    r = await cli("ng", "ldap", "sync-site", "-s", lab.site, config=config)
    assert r.code == 0, r.stderr
    assert "APPLIED" in r.stderr and "add users (1)" in r.stderr
    r = await cli("ng", "ldap", "sync-site", "-s", lab.site, "--full", "--concurrency", "4",
                  config=config)
    assert r.code == 0 and "nothing to do" in r.stderr
    r = await cli("ng", "ldap", "sync-site", "-s", lab.site, "--scope", "users,bogus",
                  config=config)
    assert r.code == 2 and "--scope takes" in r.stderr


async def test_bootstrap_twice(cli, setup):
    lab, config = setup
    first = await cli("ng", "ldap", "bootstrap", "-s", lab.site, "--json", config=config)
    assert first.code == 0, first.stderr
    assert first.json()["counts"]["add groups"] == 10
    second = await cli("ng", "ldap", "bootstrap", "-s", lab.site, "--json", config=config)
    assert second.code == 0 and second.json()["writes"] == 0


async def test_show_commands(cli, setup):
    lab, config = setup
    alice = lab.name("alice")
    r = await cli("ng", "ldap", "show", "user", "-u", alice, "-s", lab.site, "--json",
                  config=config)
    assert r.code == 0, r.stderr
    data = r.json()
    assert data["entry"] is None and data["pending"] == ["add entry"]
    assert data["sites"][lab.site]["dirty"] is True
    assert data["groups"]["missing"][:1] == ["active-users"]
    await cli("ng", "ldap", "sync-site", "-s", lab.site, config=config)
    r = await cli("ng", "ldap", "show", "user", "-u", alice, "-s", lab.site, "--yaml",
                  config=config)
    data = r.yaml()
    assert data["pending"] == [] and data["sites"][lab.site]["dirty"] is False
    assert data["entry"]["sshPublicKey"] == f'environment="REMOTE_SSH_USER={alice}" {ED25519_KEY}'
    assert "login-ssh-users" in data["groups"]["ldap"] and data["groups"]["extra"] == []
    r = await cli("ng", "ldap", "show", "group", "-g", "login-ssh-users", "-s", lab.site,
                  "--json", config=config)
    data = r.json()
    assert data["members"] == {"desired": [alice], "missing": [], "extra": []}
    assert data["pending"] == []
    r = await cli("ng", "ldap", "show", "site", "-s", lab.site, "--json", config=config)
    data = r.json()
    assert data["dirty"] == {"users": 0, "left_site": 0, "groups": 0, "automount_keys": 0}
    assert data["last_run"]["status"] == "ok" and data["ldap"]["groups"] >= 11
    assert data["mark"]["pending"] == [] and data["mark"]["known"]["users"] == 1
    r = await cli("ng", "ldap", "show", "site", "-s", lab.site, config=config)
    assert r.code == 0 and f"LDAP at {lab.site}" in r.stderr
    r = await cli("ng", "ldap", "show", "user", "-u", "nobody", config=config)
    assert r.code == 2 and "does not exist" in r.stderr


async def test_prune_asks_first_and_respects_the_cap(cli, setup):
    lab, config = setup
    await cli("ng", "ldap", "sync-site", "-s", lab.site, config=config)
    for i in range(3):
        lab.ldapadd(f"dn: {lab.group_dn(f'junk{i}')}\nobjectClass: groupOfMembers\n"
                    f"objectClass: posixGroup\ncn: junk{i}\ngidNumber: {80 + i}\n")
    r = await cli("ng", "ldap", "prune-site", "-s", lab.site, config=config)  # stdin: no TTY
    assert r.code == 2 and "pass --force" in r.stderr
    assert lab.entry(lab.group_dn("junk0")) is not None
    r = await cli("ng", "ldap", "prune-site", "-s", lab.site, "--force", "--max-deletions", "2",
                  "--json", config=config)
    assert r.code == 1 and r.json()["aborted"] is True and len(r.json()["would_delete"]) == 3
    assert lab.entry(lab.group_dn("junk0")) is not None
    r = await cli("ng", "ldap", "prune-site", "-s", lab.site, "--dry-run", config=config)
    assert r.code == 0 and "delete groups (3)" in r.stderr
    r = await cli("ng", "ldap", "prune-site", "-s", lab.site, "--force", config=config)
    assert r.code == 0, r.stderr
    assert all(lab.entry(lab.group_dn(f"junk{i}")) is None for i in range(3))
    r = await cli("ng", "ldap", "prune-site", "-s", lab.site, config=config)
    assert r.code == 0 and "nothing to do" in r.stderr


async def test_sync_refuses_past_the_cap_with_exit_1(cli, setup):
    lab, config = setup
    await cli("ng", "ldap", "sync-site", "-s", lab.site, config=config)
    lab.ldapadd(f"dn: {lab.group_dn('junk')}\nobjectClass: groupOfMembers\n"
                "objectClass: posixGroup\ncn: junk\ngidNumber: 79\n")
    # a hand-made stray: --full lists the directory (an incremental run reads by name)
    r = await cli("ng", "ldap", "sync-site", "-s", lab.site, "--full", "--max-deletions", "0",
                  config=config)
    assert r.code == 1 and "more than --max-deletions 0" in r.stderr
    assert lab.entry(lab.group_dn("junk")) is not None
    r = await cli("ng", "ldap", "sync-site", "-s", lab.site, "--no-prune", "--max-deletions",
                  "0", config=config)
    assert r.code == 0


async def test_clear_tree_of_a_site(cli, setup):
    lab, config = setup
    await cli("ng", "ldap", "sync-site", "-s", lab.site, config=config)
    r = await cli("ng", "ldap", "clear-tree", "-s", lab.site, "--dry-run", "--json",
                  config=config)
    assert r.code == 0
    deletions = r.json()["deletions"]
    depths = [d.count(",") for d in deletions]
    assert depths == sorted(depths, reverse=True)  # leaves first
    assert f"ou=groups,{lab.site_dn()}" in deletions and lab.site_dn() not in deletions
    r = await cli("ng", "ldap", "clear-tree", "-s", lab.site, config=config)
    assert r.code == 2 and "pass --force" in r.stderr
    r = await cli("ng", "ldap", "clear-tree", "-s", lab.site, "--force", "--max-deletions", "3",
                  config=config)
    assert r.code == 1 and "more than --max-deletions 3" in r.stderr
    r = await cli("ng", "ldap", "clear-tree", "-s", lab.site, "--force", config=config)
    assert r.code == 0, r.stderr
    assert lab.search(lab.site_dn(), "(objectClass=*)", "1.1") == {
        lab.site_dn(): {}}  # only the base is left
    assert lab.entry(lab.user_dn(lab.name("alice"))) is not None  # users are elsewhere
    runs = await SyncRun.find({"site": lab.site, "extra.command": "clear-tree"}).to_list()
    assert {r.apply for r in runs} == {True, False}
    # the site's mark went with the tree: the next incremental run lists and rebuilds it
    r = await cli("ng", "ldap", "sync-site", "-s", lab.site, config=config)
    assert r.code == 0, r.stderr
    assert lab.entry(f"ou=groups,{lab.site_dn()}") is not None


async def test_unreachable_and_refused_directories_are_one_line_exit_1(cli, setup, cli_config,
                                                                        tmp_path):
    lab, _ = setup
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"ldap://127.0.0.1:{sock.getsockname()[1]}"
    cases = ((ldap_block(lab, servers=[closed], connect_timeout_seconds=1),
              f"cannot reach any LDAP server ({closed}:"),
             (ldap_block(lab, password="wrong"), "invalid credentials"))
    for i, (block, message) in enumerate(cases):
        config = write_config(cli_config, tmp_path / f"bad{i}.yaml", block)
        r = await cli("ng", "ldap", "sync-site", "-s", lab.site, config=config)
        assert r.code == 1 and message in r.stderr, r.stderr
        assert len(r.error_lines) == 1 and "Traceback" not in r.stderr
    assert lab.entry(lab.site_dn()) is None


async def test_missing_ldap_section_is_a_config_error(cli, setup):
    lab, _ = setup
    r = await cli("ng", "ldap", "sync-site", "-s", lab.site)
    assert r.code == 2 and "no ldap section" in r.stderr


def _uncomment(line: str) -> str:
    line = line[1:] if line.startswith("#") else line
    stripped = line.lstrip()
    if stripped.startswith("# "):
        line = " " * (len(line) - len(stripped)) + stripped[2:]
    return line


def test_skeleton_ldap_block_is_valid():
    lines = SKELETON.split("# ldap:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    text = "\n".join(_uncomment(line) for line in lines)
    block = YAML(typ="safe").load(io.StringIO(text))["default"]
    config = LDAPConfig(**block)
    assert config.users_dn == "ou=people,dc=hpc,dc=example,dc=org"
    assert config.master_options == {"auto.group": "--ghost"}
    with pytest.raises(ValueError):
        LDAPConfig(servers=["http://x"], searchbase="dc=x")
    with pytest.raises(ValueError):
        LDAPConfig(servers=["ldap://x"], searchbase="dc=x", master_entry_format="{path}")
