"""`cheeto db dump | restore | check`: a seeded store round-trips document for document,
and `db check` finds what is wrong."""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from cheeto_like import store_files
from cheeto_like.models import NameClaim, User
from cheeto_like.store import Store
from tests.exports.test_golden import seed


def config_for(cli_config: Path, database: str, tmp_path: Path) -> Path:
    """The module's CLI config, pointed at another database of the same store."""
    yaml = YAML(typ="safe")
    data = yaml.load(cli_config.read_text())
    data["mongo"]["default"]["database"] = database
    path = tmp_path / f"{database}.yaml"
    buffer = io.StringIO()
    yaml.dump(data, buffer)
    path.write_text(buffer.getvalue())
    return path


async def drop(store: Store, database: str) -> None:
    """Drop a side database and, on the embedded store, its file's record."""
    await store.client.drop_database(database)
    if store.is_embedded:
        store_files.forget(store_files_dir(store), database)


def store_files_dir(store: Store) -> Path:
    assert store.file_guard is not None
    return store.file_guard.data_dir


async def all_documents(database: Any) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for name in sorted(await database.list_collection_names()):
        docs = await database[name].find({}).sort("_id", 1).to_list()
        if docs:
            out[name] = docs
    return out


async def test_dump_restore_check_round_trip(db, cli, cli_config, tmp_path):
    await seed(db)
    archive = tmp_path / "backup.tar.gz"
    r = await cli("db", "dump", "-o", str(archive))
    assert r.code == 0, r.stderr
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    assert "dumped" in r.stderr and r.stdout == ""
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "cheeto-dump/manifest.json" in names and "cheeto-dump/users.jsonl" in names

    target_db = f"{db.database.name}_restored"[:63]
    target = config_for(cli_config, target_db, tmp_path)
    await drop(db, target_db)
    r = await cli("db", "restore", str(archive), config=target)
    assert r.code == 0, r.stderr
    assert "restored" in r.stderr

    r = await cli("db", "check", "--json", config=target)
    assert r.code == 0, r.stderr
    report = r.json()
    assert report["ok"] is True
    assert {c["target"] for c in report["checks"] if c["check"] == "documents"} >= {
        "users", "groups", "storages", "slurm_accounts", "history", "names"}
    assert all(c["status"] in ("ok", "skipped") for c in report["checks"])

    source = await all_documents(db.database)
    restored = await all_documents(db.client[target_db])
    assert source.keys() == restored.keys()
    for name in source:
        assert restored[name] == source[name], name
    assert len(source["users"]) >= 7 and len(source["history"]) > 20

    # A second restore into the now non-empty database refuses without --force.
    r = await cli("db", "restore", str(archive), config=target)
    assert r.code == 2
    assert len(r.error_lines) == 1 and "not empty" in r.error_lines[0]
    r = await cli("db", "restore", str(archive), "--force", config=target)
    assert r.code == 0, r.stderr
    assert await all_documents(db.client[target_db]) == source
    await drop(db, target_db)


async def test_a_restore_forgets_the_ldap_marks(db, cli, cli_config, tmp_path):
    """The marks say what the directory held at dump time; the directory may be ahead of
    that, so the restored store keeps none and the next LDAP run compares everything."""
    await seed(db)
    await db.database["ldap_marks"].insert_one({"_id": "farm", "through_ms": 1})
    await db.database["ldap_mark_versions"].insert_one({"_id": "farm:0", "v": {}})
    archive = tmp_path / "marks.tar.gz"
    try:
        assert (await cli("db", "dump", "-o", str(archive))).code == 0
    finally:  # raw collections the module's wipe does not empty
        await db.database["ldap_marks"].delete_many({})
        await db.database["ldap_mark_versions"].delete_many({})
    target_db = f"{db.database.name}_marks"[:63]
    target = config_for(cli_config, target_db, tmp_path)
    await drop(db, target_db)
    r = await cli("db", "restore", str(archive), config=target)
    assert r.code == 0, r.stderr
    restored = db.client[target_db]
    assert await restored["ldap_marks"].count_documents({}) == 0
    assert await restored["ldap_mark_versions"].count_documents({}) == 0
    assert await restored["users"].count_documents({}) == await db.database[
        "users"].count_documents({})
    await drop(db, target_db)


async def test_dump_refuses_to_overwrite_without_force(db, cli, tmp_path):
    archive = tmp_path / "b.tar.gz"
    archive.write_text("keep me")
    r = await cli("db", "dump", "-o", str(archive))
    assert r.code == 2 and "--force" in r.stderr
    assert archive.read_text() == "keep me"
    r = await cli("db", "dump", "-o", str(archive), "--force")
    assert r.code == 0, r.stderr
    assert tarfile.is_tarfile(archive)


def tamper(archive: Path, out: Path, member: str, edit: Any) -> None:
    """Copy ``archive`` to ``out`` with ``member``'s text passed through ``edit``."""
    with tarfile.open(archive) as src, tarfile.open(out, "w:gz") as dst:
        for info in src:
            data = src.extractfile(info).read()  # type: ignore[union-attr]
            if info.name == f"cheeto-dump/{member}":
                data = edit(data.decode()).encode()
                info.size = len(data)
            dst.addfile(info, io.BytesIO(data))


async def test_bad_archives_write_nothing(db, cli, cli_config, tmp_path):
    await seed(db)
    archive = tmp_path / "good.tar.gz"
    assert (await cli("db", "dump", "-o", str(archive))).code == 0
    target_db = f"{db.database.name}_bad"[:63]
    target = config_for(cli_config, target_db, tmp_path)
    await drop(db, target_db)

    bad_uid = tmp_path / "bad_uid.tar.gz"
    tamper(archive, bad_uid, "users.jsonl",
           lambda text: text.replace('"uid": {"$numberInt": "2003"}', '"uid": "three"', 1))
    short = tmp_path / "short.tar.gz"
    tamper(archive, short, "groups.jsonl", lambda text: "".join(text.splitlines(True)[1:]))
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"not an archive")
    cases = {bad_uid: "users.jsonl line", short: "groups.jsonl holds",
             garbage: "not a cheeto dump", tmp_path / "missing.tar.gz": "does not exist"}
    for path, expected in cases.items():
        r = await cli("db", "restore", str(path), config=target)
        assert r.code == 2, (path, r.stderr)
        errors = [line for line in r.error_lines if line.startswith("error:")]
        assert len(errors) == 1 and expected in errors[0], r.stderr
        assert await all_documents(db.client[target_db]) == {}
    await drop(db, target_db)


async def test_check_finds_bad_documents_and_registry_gaps(db, cli):
    await seed(db)
    r = await cli("db", "check", "--json")
    assert r.code == 0, r.stderr
    if db.is_embedded:
        files = [c for c in r.json()["checks"] if c["check"] == "file"]
        assert files[0]["status"] == "ok" and files[0]["target"].endswith(".db")

    await User.get_pymongo_collection().insert_one(
        {"_id": "f" * 32, "name": "Bad Name", "uid": "x", "surprise": 1})
    await NameClaim.get_pymongo_collection().delete_many({"name": "bob"})
    r = await cli("db", "check", "--json")
    assert r.code == 1
    checks = {(c["check"], c["target"]): c for c in r.json()["checks"]}
    users = checks["documents", "users"]
    assert users["status"] == "problem" and users["invalid"] == 1
    assert "f" * 32 in users["detail"]
    registry = checks["names", "names registry"]
    assert registry["status"] == "problem" and "bob" in registry["detail"]

    r = await cli("db", "check")  # the human table on stderr, nothing on stdout
    assert r.code == 1 and r.stdout == "" and "names registry" in r.stderr

    await User.get_pymongo_collection().delete_one({"_id": "f" * 32})
    r = await cli("db", "check", "--repair", "--json")
    assert r.code == 0, r.stdout
    assert checks["names", "names registry"]["target"] == "names registry"
    assert {c["status"] for c in r.json()["checks"] if c["check"] == "names"} == {
        "ok", "repaired"}
    r = await cli("db", "check", "--json")
    assert r.code == 0 and r.json()["ok"] is True
    assert await NameClaim.find_one(NameClaim.name == "bob") is not None


async def test_dump_pipes_into_restore(db, cli_config, tmp_path):
    """`cheeto db dump | cheeto db restore -` between two real processes."""
    import asyncio
    import os
    import sys

    await seed(db)
    target_db = f"{db.database.name}_piped"[:63]
    target = config_for(cli_config, target_db, tmp_path)
    await drop(db, target_db)
    entry = "from cheeto_like.cli import console_main; console_main()"
    read_fd, write_fd = os.pipe()
    dumper = await asyncio.create_subprocess_exec(
        sys.executable, "-c", entry, "db", "dump", "--config", str(cli_config),
        stdout=write_fd, stderr=asyncio.subprocess.PIPE)
    os.close(write_fd)
    restorer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", entry, "db", "restore", "-", "--config", str(target),
        stdin=read_fd, stderr=asyncio.subprocess.PIPE)
    os.close(read_fd)
    (_, dump_err), (_, restore_err) = await asyncio.gather(dumper.communicate(),
                                                           restorer.communicate())
    assert dumper.returncode == 0, dump_err.decode()
    assert restorer.returncode == 0, restore_err.decode()
    assert await all_documents(db.client[target_db]) == await all_documents(db.database)
    await drop(db, target_db)


async def test_a_restore_that_fails_while_writing_changes_nothing(db, cli, tmp_path):
    """An archive that reads and validates but breaks a unique index half-way (a second
    user with a taken name, under another _id) fails in the store's transaction: the
    forced restore leaves the store exactly as it was, nothing deleted, nothing added."""
    from cheeto_like import backup

    await seed(db)
    archive = tmp_path / "good.tar.gz"
    assert (await cli("db", "dump", "-o", str(archive))).code == 0
    before = await all_documents(db.database)
    parsed = backup.read_archive(archive)
    users = parsed.collections["users"]
    assert len(users) >= 2
    clone = dict(users[-1], _id="f" * 32)
    users.append(clone)
    clash = tmp_path / "clash.tar.gz"
    with clash.open("wb") as fh:
        backup.build_archive(parsed.database, parsed.collections, fh)
    r = await cli("db", "restore", str(clash), "--force")
    assert r.code == 1, r.stderr
    assert "nothing was changed" in r.stderr
    assert await all_documents(db.database) == before
