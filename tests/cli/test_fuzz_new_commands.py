"""Hostile input on the newer commands (issues 13-17): usage and quota, roles and API
keys, requests, the cluster monitor, the access audit, moving in (``migrate
from-cheeto``, ``ng site adopt``, ``config import-reference``) and ``token issue``.

A refusal is exit 2, exactly one line on stderr, nothing on stdout, no traceback or
"internal error", control characters shown as escapes, and the store exactly as before.
File arguments only ever point into the test's own directory: a path that escapes it
would be written by a command that accepts it (an audit once replaced /etc/passwd)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import bson
import pytest

from cheeto_like.models import ALL_MODELS, RoleGrant
from cheeto_like.operations.group_membership import AddGroupSponsor
from tests.conftest import CliResult, seed_access_status, wipe

from ..factories import make_group, make_site, make_user

LONG = "x" * 10_000
RTL = "\u202eevil"
NUL = "a\x00b"
ANSI = "\x1b[31mred"
MARKUP = "[red]x[/]"
TRAVERSAL = "../../etc/passwd"
NAMES = ["", LONG, RTL, NUL, ANSI, MARKUP, TRAVERSAL, "nobody"]
NUMBERS = ["", "-5", "99999999999999999999999", "nan", "1e400", "ten", "10q", ANSI]
DATES = ["2026-13-45", "yesterday-ish", "+99999999999y", "", ANSI]
DURATIONS = ["", "-5", "0x", "forever", "1e400", "99999999999999999999999d", ANSI]
TIMEOUTS = ["0", "-5", "-0", "nan", "inf", "1e400", "99999999999999999999999", "ten"]


async def state() -> dict[str, list[dict[str, Any]]]:
    """Every document of every collection (the data is small)."""
    return {m.get_settings().name: sorted(
        [d async for d in m.get_pymongo_collection().find({})], key=lambda d: str(d["_id"]))
        for m in ALL_MODELS}


async def refused(cli, *argv: str, match: str | None = None) -> Any:
    before = await state()
    r = await cli(*argv)
    assert r.code == 2, (argv[:6], r.code, r.stderr[-500:])
    assert len(r.error_lines) == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert "\x1b" not in r.stderr and "\x00" not in r.stderr and "\u202e" not in r.stderr
    assert r.stdout == ""
    if match is not None:
        assert match in r.stderr, r.stderr
    assert await state() == before
    return r


async def seed_lab(db) -> None:
    """farm; alice, bob (lab's sponsor), carol (operator)."""
    await make_site(db, "farm")
    for name in ("alice", "bob", "carol"):
        await make_user(db, name, site="farm")
    await make_group(db, "lab")
    await AddGroupSponsor.run(db, "tester", group="lab", user="bob", site="farm")
    await RoleGrant(user="carol", role="operator").insert()


async def file_request_and_key(run) -> None:
    """Request 1 (alice joins lab) and an API key k0, through the CLI."""
    r = await run("ng", "request", "new", "join", "-s", "farm", "-g", "lab", "-u", "alice",
                  "--author", "alice")
    assert r.code == 0, r.stderr
    r = await run("ng", "apikey", "create", "--name", "k0", "--scope", "api:read")
    assert r.code == 0, r.stderr


@pytest.fixture(scope="module")
async def filed(store, cli_config):
    """The seeded site, made ONCE for the module: every case asserts it leaves the store
    exactly as it found it (``refused``), so the cases can share it (one seeding instead
    of ~450 keeps this module a few minutes shorter)."""
    from cheeto_like.cli import main

    async def run(*argv: str):
        out, err = io.StringIO(), io.StringIO()
        code = await asyncio.to_thread(main, [*argv, "--config", str(cli_config)],
                                       stdout=out, stderr=err, stdin=io.StringIO(""))
        await store.bind(create_indexes=False)
        return CliResult(code, out.getvalue(), err.getvalue())

    await wipe()
    await seed_access_status()
    await seed_lab(store)
    await file_request_and_key(run)
    return store


@pytest.fixture
async def fresh(db, cli):
    """The same seeded site, for a case that may write (made anew, on a wiped store)."""
    await seed_lab(db)
    await file_request_and_key(cli)
    return db


def cases(template: str, values: list[str]) -> list[list[str]]:
    return [[v if part == "{}" else part for part in template.split()] for v in values]


# -- names the store does not know (or could never hold) ------------------------------------

NAME_TEMPLATES = [
    "ng quota set -s {} -u alice --cpu 10h",
    "ng quota set -s farm -u {} --cpu 10h",
    "ng quota set -s farm -A {} --cpu 10h",
    "ng quota remove -s farm -u {}",
    "ng quota adjust -s farm -u {} --cpu -1h --reason r",
    "ng quota show -s {} --no-squeue",
    "ng quota show -s farm -u {} --no-squeue",
    "ng quota show -s farm -A {} --no-squeue",
    "ng quota defaults set -s {} --user-cpu 10h",
    "ng quota defaults show -s {}",
    "ng quota gpu-factor set -s farm --type {} --factor 2",
    "ng quota gpu-factor list -s {}",
    "ng usage report -s {}",
    "ng usage summary -s {}",
    "ng apikey create --name {} --scope api:read",
    "ng apikey rotate --name {}",
    "ng apikey revoke --name {} -f",
    "ng role grant -u {} --role operator",
    "ng role grant -u alice --role manager -A {}",
    "ng role revoke -u {} --role operator",
    "ng request new account -s {} -g lab -u alice",
    "ng request new join -s farm -g {} -u alice",
    "ng request new join -s farm -g lab -u {}",
    "ng request new access -s farm -g lab -u alice --access {}",
    "ng request new quota -s farm --account {} --cpu 10h",
    "ng request list -s {}",
    "ng request list -u {}",
    "ng cluster stalled -s {} --sinfo /bin/false --squeue /bin/false",
    "ng cluster status -s {} --sinfo /bin/false --squeue /bin/false",
    "ng audit run -s {} --no-send --no-slurm --no-ldap",
    "ng site adopt -s {} --from-slurm --sacctmgr /bin/false --dry-run",
]
# names a key or a GPU type may legitimately be
_NAME_OK = {("ng quota gpu-factor set -s farm --type {} --factor 2", "nobody"),
            ("ng apikey create --name {} --scope api:read", "nobody")}
NAME_CASES = [argv for t in NAME_TEMPLATES for v in NAMES if (t, v) not in _NAME_OK
              for argv in cases(t, [v])]


@pytest.mark.parametrize("argv", NAME_CASES, ids=[" ".join(a)[:70] for a in NAME_CASES])
async def test_bad_names_are_refused(cli, filed, argv):
    await refused(cli, *argv, "--author", "carol")


# -- numbers, quotas, dates, durations, time limits ---------------------------------------

VALUE_CASES = [
    *cases("ng quota set -s farm -u alice --cpu {}", NUMBERS),
    *cases("ng quota set -s farm -u alice --gpu {}", NUMBERS),
    *cases("ng quota adjust -s farm -u alice --cpu {} --reason r",
           [n for n in NUMBERS if n != "-5"]),  # -5: a credit of five minutes
    *cases("ng quota adjust -s farm -u alice --cpu -1h --reason {}", ["", ANSI, NUL, RTL]),
    *cases("ng quota defaults set -s farm --user-cpu {}", NUMBERS),
    *cases("ng quota gpu-factor set -s farm --type a100 --factor {}", NUMBERS),
    *cases("ng quota gpu-factor set -s farm --type a100 --factor 2 --from {}",
           [*DATES, "2020-01-01"]),
    *cases("ng quota set -s farm -u alice --cpu 1h --period explicit --start {} --end +30d",
           DATES),
    *cases("ng quota set -s farm -u alice --cpu 1h --period explicit --start -1d --end {}",
           [*DATES, "-2d"]),
    *cases("ng quota set -s farm -u alice --cpu 1h --period monthly --start {}", ["-1h"]),
    *cases("ng quota defaults set -s farm --user-cpu 1h --period yearly --end {}", ["+1d"]),
    *cases("ng usage report -s farm --start {} --end +1d", DATES),
    *cases("ng usage report -s farm --start -1d --end {}", [*DATES, "-2d"]),
    *cases("ng usage prune --before {} --dry-run", DATES),
    *cases("ng apikey create --name k1 --scope api:read --expires-in {}", DURATIONS),
    *cases("ng apikey rotate --name k0 --overlap-hours {}", NUMBERS),
    *cases("ng apikey rotate --name k0 --expires-in {}", DURATIONS),
    *cases("ng request new quota -s farm --account lab --cpu {}", NUMBERS),
    *cases("ng request new storage -s farm -g lab --quota {}", ["", "-1T", "1Q", "1025P",
                                                                 ANSI, LONG]),
    *cases("ng request new join -s farm -g lab -u alice --reason {}", [NUL, ANSI, RTL]),
    *cases("ng request list -n {}", ["0", "-1", *NUMBERS]),
    *cases("ng request show {}", ["0", "-1", "999", *NUMBERS]),
    *cases("ng request approve {}", ["999", "x", "-1"]),
    *cases("ng request deny {} --reason no", ["999", "x"]),
    *cases("ng request deny 1 --reason {}", ["", NUL, ANSI]),
    *cases("ng request comment {} -m hi", ["999", "x"]),
    *cases("ng request comment 1 -m {}", ["", NUL, ANSI, RTL]),
    *cases("ng cluster stalled -s farm --pending-over {} --sinfo /bin/false "
           "--squeue /bin/false", DURATIONS),
    *cases("ng cluster stalled -s farm --down-over {} --sinfo /bin/false "
           "--squeue /bin/false", DURATIONS),
    *cases("ng cluster stalled -s farm --timeout {} --sinfo /bin/false --squeue /bin/false",
           TIMEOUTS),
    *cases("ng site adopt -s farm --from-slurm --sacctmgr /bin/false --timeout {} --dry-run",
           TIMEOUTS),
    *cases("ng audit run --timeout {} --no-send --no-ldap --sacctmgr /bin/false", TIMEOUTS),
    *cases("ng usage collect -s farm --sacct /bin/false --timeout {}", TIMEOUTS),
    *cases("ng audit run --fail-on {} --no-send --no-slurm --no-ldap", ["", "urgent", ANSI]),
    *cases("ng role grant -u alice --role {}", ["", "god", ANSI]),
    *cases("ng apikey create --name k1 --scope {}", ["", "root", ANSI]),
]


@pytest.mark.parametrize("argv", VALUE_CASES, ids=[" ".join(a)[:70] for a in VALUE_CASES])
async def test_bad_values_are_refused(cli, filed, argv):
    await refused(cli, *argv, "--author", "carol")


# -- what the refusal says: user data never as markup or raw escapes ------------------------


@pytest.mark.parametrize(("value", "shown"), [
    (MARKUP, MARKUP), (ANSI, "\\x1b[31mred"), (RTL, "\\u202eevil")])
async def test_refusals_show_user_data_literally(cli, filed, value, shown):
    r = await refused(cli, "ng", "quota", "show", "-s", "farm", "-A", value, "--no-squeue")
    assert shown in r.stderr
    r = await refused(cli, "ng", "alerts", "digest", "--dry-run", "-s", value)
    assert shown in r.stderr  # argparse's own message quotes the word
    r = await refused(cli, "ng", "role", "grant", "-u", "alice", "--role", value)
    assert shown in r.stderr


# -- output and input files ---------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--jsonl", "--markdown"])
@pytest.mark.parametrize("name", [NUL, LONG, "missing/dir/out", ".", "sub"])
async def test_audit_output_files_in_bad_places(cli, filed, tmp_path, flag, name):
    (tmp_path / "sub").mkdir()
    await refused(cli, "ng", "audit", "run", flag, f"{tmp_path}/{name}", "--no-send",
                  "--no-slurm", "--no-ldap", match="cannot write")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"]


def garbage_files(tmp_path: Path) -> dict[str, str]:
    """Input files an admin might point a command at by mistake."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "binary").write_bytes(b"\x00\x01\x02\xff" * 100)
    (tmp_path / "latin1.yaml").write_bytes("caf\xe9: 1\n".encode("latin-1"))
    (tmp_path / "garbage.yaml").write_text("{[: - ]\n\t: ::\n")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "garbage.csv").write_text("a,b\n\"unterminated\n")
    with (tmp_path / "huge.yaml").open("wb") as handle:
        handle.truncate(17 * 1024 * 1024)
    return {"missing": str(tmp_path / "missing.yaml"), "dir": str(tmp_path / "dir"),
            "binary": str(tmp_path / "binary"), "latin1": str(tmp_path / "latin1.yaml"),
            "garbage": str(tmp_path / "garbage.yaml"), "list": str(tmp_path / "list.yaml"),
            "csv": str(tmp_path / "garbage.csv"), "huge": str(tmp_path / "huge.yaml"),
            "nul": f"{tmp_path}/a\x00b", "long": f"{tmp_path}/{LONG}",
            "traversal": f"{tmp_path}/../../../../../../etc/passwd"}


async def test_config_import_reference_garbage(cli, filed, tmp_path):
    for name, path in garbage_files(tmp_path).items():
        r = await refused(cli, "config", "import-reference", path)
        assert name != "traversal" or "root:" not in r.stderr  # never echoes the file


def bson_dump(directory: Path, docs: dict[str, list[dict[str, Any]]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for collection, rows in docs.items():
        (directory / f"{collection}.bson").write_bytes(b"".join(bson.encode(d) for d in rows))


async def test_migrate_from_cheeto_garbage(cli, filed, tmp_path):
    files = garbage_files(tmp_path)
    for name in ("missing", "binary", "nul", "long", "traversal", "dir"):
        await refused(cli, "migrate", "from-cheeto", "--dump", files[name], "--dry-run")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "users.bson").write_bytes(b"\x05\x00\x00\x00garbage")
    await refused(cli, "migrate", "from-cheeto", "--dump", str(tmp_path / "bad"))
    await refused(cli, "migrate", "from-cheeto", "--dump", str(tmp_path / "dir"),
                  "--database", TRAVERSAL)
    for uri in ("", "http://x", "mongodb://u:pw@host/", ANSI):
        await refused(cli, "migrate", "from-cheeto", "--uri", uri, "--dry-run")


@pytest.mark.parametrize("argv", [
    *cases("token issue -u {}", NAMES),
    *cases("token issue -u alice --ttl {}", DURATIONS),
])
async def test_token_issue_bad_input(cli, filed, argv, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    await refused(cli, *argv)


@pytest.mark.parametrize("doc", [
    {"_id": 1, "name": 5},
    {"_id": "x", "name": None, "uid": "many"},
    {"_id": "y", "name": "\x1b[31mz", "uid": -1, "email": ["a"]},
    {"name": LONG, "uid": 2**62},
])
async def test_migrate_from_cheeto_wrong_types(cli, fresh, tmp_path, doc):
    """Documents that decode but hold the wrong types: refused or reported, never a crash,
    and nothing written. Last in the module: it may import, so it gets its own fresh
    store (which wipes the module's shared one)."""
    bson_dump(tmp_path / "dump", {"users": [doc], "sites": [{"_id": "s", "name": "farm"}]})
    before = await state()
    r = await cli("migrate", "from-cheeto", "--dump", str(tmp_path / "dump"), "--json")
    assert r.code in (0, 2), r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert "\x1b" not in r.stderr
    if r.code == 2:
        assert len(r.error_lines) == 1 and await state() == before
    else:  # imported what it could: every refusal is reported, nothing raw
        assert "\x1b" not in json.loads(r.stdout).__repr__()
