"""Store conformance (see test_store_conformance.py: every MongoDB behaviour the project
relies on, on whichever store the suite runs against), continued: concurrency: commits
and aborts across processes, the transaction file lock, racing creates of one name.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from cheeto_like.config import MongoConfig
from cheeto_like.errors import AlreadyExists
from cheeto_like.models import (
    Group,
    History,
    Site,
    User,
)
from cheeto_like.operations.site import CreateSite
from cheeto_like.operations.user import CreateUser

from .conformance_helpers import Boom
from .factories import AUTHOR

# -- concurrency -----------------------------------------------------------------------------

WORKER = textwrap.dedent("""
    import asyncio, json, sys

    from cheeto_like.config import MongoConfig
    from cheeto_like.models import Site
    from cheeto_like.operations.site import CreateSite
    from cheeto_like.store import connect


    class Boom(Exception):
        pass


    async def main(config_json, database, tag, rounds):
        store = await connect(MongoConfig.model_validate_json(config_json), database=database,
                              autostart=False, create_indexes=False)
        print("ready", flush=True)
        aborted = 0
        try:
            for i in range(rounds):
                await CreateSite.run(store, tag, name=f"{tag}-ok-{i}",
                                     fqdn=f"{tag}-ok-{i}.example.org")
                try:
                    async with store.session(transaction=True) as session:
                        await Site(name=f"{tag}-bad-{i}",
                                   fqdn=f"{tag}-bad-{i}.example.org").insert(session=session)
                        await asyncio.sleep(0.002)
                        raise Boom
                except Boom:
                    aborted += 1
        finally:
            await store.close()
        print(json.dumps({"tag": tag, "aborted": aborted}))


    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
""")


async def _run_rounds(store, tag: str, rounds: int) -> None:
    for i in range(rounds):
        await CreateSite.run(store, tag, name=f"{tag}-ok-{i}", fqdn=f"{tag}-ok-{i}.example.org")
        with pytest.raises(Boom):
            async with store.session(transaction=True) as session:
                await Site(name=f"{tag}-bad-{i}",
                           fqdn=f"{tag}-bad-{i}.example.org").insert(session=session)
                await asyncio.sleep(0.002)
                raise Boom


async def test_concurrent_processes_commits_survive_and_aborts_vanish(
        empty_db, mongo_config: MongoConfig, tmp_path: Path):
    """Two OS processes and this one run committing and aborting transactions at once.

    On the embedded store this exercises the cross-process transaction lock (without it,
    an abort can undo another client's commit); on MongoDB, transaction isolation.
    """
    rounds = 15
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    database = empty_db.database.name
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, str(script), mongo_config.model_dump_json(), database, tag, str(rounds),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        for tag in ("pa", "pb")]
    for proc in procs:  # both are connected and about to start: run alongside them
        assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"ready\n"
    await _run_rounds(empty_db, "main", rounds)
    outputs = [await proc.communicate() for proc in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
        assert json.loads(out)["aborted"] == rounds

    names = {s.name for s in await Site.find_all().to_list()}
    expected = {f"{tag}-ok-{i}" for tag in ("pa", "pb", "main") for i in range(rounds)}
    assert names == expected
    rows = await History.find(History.op == "create_site").to_list()
    assert sorted(r.changes["site"] for r in rows) == sorted(expected)
    assert {r.author for r in rows} == {"pa", "pb", "main"}


async def test_embedded_store_transactions_hold_the_cross_process_file_lock(empty_db):
    """The lock is what serialises transactions on the embedded store; MongoDB needs none."""
    if not empty_db.is_embedded:
        assert empty_db.lock is None
        return

    def try_flock() -> bool:
        fd = os.open(empty_db.lock.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    async with empty_db.session(transaction=True):
        assert not try_flock()  # what another process would see
    assert try_flock()


async def test_racing_creates_of_one_user_name_yield_one_winner_and_one_history_row(db):
    results = await asyncio.gather(
        CreateUser.run(db, AUTHOR, name="alice", uid=5001, email="a@example.org",
                       fullname="Alice One"),
        CreateUser.run(db, AUTHOR, name="alice", uid=5002, email="b@example.org",
                       fullname="Alice Two"),
        return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], AlreadyExists), results
    assert await User.find(User.name == "alice").count() == 1
    assert await Group.find(Group.name == "alice").count() == 1
    assert await History.find(History.op == "create_user").count() == 1
