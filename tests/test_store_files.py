"""Damage to the embedded store's files is loud: an error naming the path, never an empty
store (``cheeto_like/store_files.py``). Each test runs its own server on its own data
directory, because these tests delete and corrupt files."""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from cheeto_like import store_files
from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.embedded import EmbeddedServer
from cheeto_like.errors import ExternalError
from cheeto_like.models import Site
from cheeto_like.operations.site import CreateSite
from cheeto_like.store import connect

if os.environ.get("CHEETO_TEST_MONGO_URI"):
    pytest.skip("file checks concern the embedded store only", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def own(tmp_path: Path) -> Iterator[tuple[MongoConfig, EmbeddedServer]]:
    """A private embedded store (data dir + port) for one test, stopped afterwards."""
    embedded = EmbeddedStoreConfig(path=tmp_path / "store", port=_free_port())
    config = MongoConfig(database="main", embedded=embedded)
    server = EmbeddedServer(embedded, exit_with=os.getpid())
    try:
        yield config, server
    finally:
        server.stop()


async def _create(config: MongoConfig, notes: list[str] | None = None) -> None:
    store = await connect(config, notify=(notes.append if notes is not None else None))
    try:
        await CreateSite.run(store, "tester", name="farm", fqdn="farm.example.org")
    finally:
        await store.close()


async def test_first_creation_is_said_once_and_recorded(own):
    config, server = own
    notes: list[str] = []
    await _create(config, notes)
    db_file = server.data_dir / "main.db"
    assert [n for n in notes if "created a new store database" in n] == [
        f"created a new store database 'main' in {db_file}"]
    marker = server.data_dir / "store.json"
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    assert json.loads(marker.read_text())["databases"]["main"]["inode"] == db_file.stat().st_ino
    again: list[str] = []
    store = await connect(config, notify=again.append)
    assert await Site.find_one(Site.name == "farm") is not None
    await store.close()
    assert not [n for n in again if "created" in n]


@pytest.mark.parametrize("damage", ["delete", "truncate", "garbage"])
async def test_damaged_file_is_an_error_naming_it(own, damage):
    config, server = own
    await _create(config)
    server.stop()
    db_file = server.data_dir / "main.db"
    for suffix in ("-wal", "-shm"):
        Path(f"{db_file}{suffix}").unlink(missing_ok=True)
    if damage == "delete":
        db_file.unlink()
    elif damage == "truncate":
        db_file.write_bytes(b"")
    else:
        db_file.write_bytes(b"this is not a database at all" * 200)
    expected = {"delete": "is missing", "truncate": "is empty (0 bytes)",
                "garbage": "is not an SQLite database"}[damage]
    with pytest.raises(ExternalError) as caught:
        await connect(config)
    assert f"store file {db_file} {expected}" in caught.value.message
    assert "\n" not in caught.value.message
    assert not server.is_up()  # refused before starting a server on it
    if damage == "delete":
        assert not db_file.exists()  # nothing re-created it
    else:
        assert db_file.stat().st_size > 0 or damage == "truncate"


async def test_server_refuses_to_start_on_a_damaged_recorded_file(own):
    config, server = own
    await _create(config)
    server.stop()
    (server.data_dir / "main.db").write_bytes(b"garbage" * 100)
    with pytest.raises(ExternalError) as caught:
        server.start_background()
    assert f"store file {server.data_dir / 'main.db'} is not an SQLite database" in str(
        caught.value)


async def test_cli_reports_a_corrupt_file_in_one_line(own, tmp_path):
    from cheeto_like.cli import main

    config, server = own
    await _create(config)
    server.stop()
    db_file = server.data_dir / "main.db"
    db_file.write_bytes(b"\x00garbage header" * 300)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"mongo:\n  default:\n    database: main\n    embedded:\n"
                   f"      path: {server.data_dir}\n      port: {server.port}\n")
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(main, ["ng", "site", "list", "--json", "--config", str(cfg)],
                                   stdout=out, stderr=err, stdin=io.StringIO(""))
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    assert code == 1
    assert len(lines) == 1 and str(db_file) in lines[0] and "internal error" not in lines[0]
    assert out.getvalue() == ""


async def test_file_deleted_while_running_refuses_writes(own):
    config, server = own
    await _create(config)
    store = await connect(config)
    try:
        db_file = server.data_dir / "main.db"
        db_file.unlink()
        with pytest.raises(ExternalError) as caught:
            await CreateSite.run(store, "tester", name="lost", fqdn="lost.example.org")
        assert "was deleted while the embedded store ran" in caught.value.message
        assert str(db_file) in caught.value.message
    finally:
        await store.close()
    with pytest.raises(ExternalError, match="is missing"):
        await connect(config)


async def test_file_replaced_while_running_is_refused(own):
    config, server = own
    await _create(config)
    db_file = server.data_dir / "main.db"
    moved = db_file.with_name("moved.db")
    db_file.rename(moved)
    moved.with_name("copy.db").write_bytes(moved.read_bytes())
    moved.with_name("copy.db").rename(db_file)  # same content, another inode
    with pytest.raises(ExternalError, match="replaced or re-created while the embedded store"):
        await connect(config)


async def test_a_store_from_before_the_marker_is_adopted(own):
    config, server = own
    await _create(config)
    (server.data_dir / "store.json").unlink()
    notes: list[str] = []
    store = await connect(config, notify=notes.append)
    assert await Site.find_one(Site.name == "farm") is not None
    await store.close()
    assert not [n for n in notes if "created" in n]
    assert "main" in store_files.read_marker(server.data_dir)


def test_integrity_check(tmp_path):
    import sqlite3

    good = tmp_path / "good.db"
    conn = sqlite3.connect(good)
    conn.execute("create table t (x)")
    conn.commit()
    conn.close()
    assert store_files.integrity_check(good) == []
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"nope" * 10)
    assert store_files.integrity_check(bad) == ["file is not an SQLite database (bad header)"]
    # A page-level corruption behind a valid header.
    data = bytearray(good.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)
    broken = tmp_path / "broken.db"
    broken.write_bytes(bytes(data))
    assert store_files.integrity_check(broken) != []


async def test_server_refuses_writes_to_a_deleted_file_even_outside_sessions(own):
    """The server checks too: a raw write (no session, so no client-side guard) to a
    database whose file was deleted under it fails, naming the file."""
    from pymongo.errors import OperationFailure

    config, server = own
    await _create(config)
    store = await connect(config)
    try:
        db_file = server.data_dir / "main.db"
        collection = store.database["sites"]
        await collection.insert_one({"_id": "x" * 32, "probe": 1})  # the file is fine
        db_file.unlink()
        with pytest.raises(OperationFailure) as caught:
            await collection.insert_one({"_id": "y" * 32, "probe": 2})
        assert f"store file {db_file} was deleted while the embedded store ran" in str(
            caught.value)
        with pytest.raises(OperationFailure, match="was deleted"):
            await collection.update_one({"_id": "x" * 32}, {"$set": {"probe": 3}})
    finally:
        await store.close()


async def test_a_lost_file_is_rebuilt_from_a_backup(own, tmp_path):
    """The way back after a loss: `db restore --force` (with the store stopped)."""
    from cheeto_like.cli import main

    config, server = own
    await _create(config)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"mongo:\n  default:\n    database: main\n    embedded:\n"
                   f"      path: {server.data_dir}\n")

    async def cheeto(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = await asyncio.to_thread(main, [*argv, "--config", str(cfg)], stdout=out,
                                       stderr=err, stdin=io.StringIO(""))
        return code, out.getvalue(), err.getvalue()

    archive = tmp_path / "backup.tar.gz"
    assert (await cheeto("db", "dump", "-o", str(archive)))[0] == 0
    db_file = server.data_dir / "main.db"
    db_file.unlink()  # under the running server
    code, _, err = await cheeto("db", "restore", str(archive), "--force")
    assert code == 1 and "stop it first" in err
    server.stop()
    code, _, err = await cheeto("ng", "site", "list", "--json")
    assert code == 1 and "is missing" in err and "cheeto db restore --help" in err
    code, _, err = await cheeto("db", "restore", str(archive))
    assert code == 1 and "is missing" in err
    code, _, err = await cheeto("db", "restore", str(archive), "--force")
    assert code == 0, err
    assert "starting it afresh" in err and "restored" in err
    code, out, _ = await cheeto("ng", "site", "list", "--json")
    assert code == 0 and [s["name"] for s in json.loads(out)] == ["farm"]
