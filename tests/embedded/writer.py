"""A writer process for the embedded store's kill tests (run as a subprocess).

    python -m tests.embedded.writer DATA_DIR setup
    python -m tests.embedded.writer DATA_DIR batch PREFIX COUNT HASH
    python -m tests.embedded.writer DATA_DIR user NAME UID

``batch`` runs the real first chunk of a class batch (``CreateClassChunk`` over the whole
batch: its record and every account in one transaction, with a History row) and prints one
line per command it sends (``cmd <name>``), flushed, so the test can kill it at a chosen
command, once it reads a line on stdin (so the test can start the next writer while the
current one runs). Its ``prepare`` reuses one given password hash (yescrypt costs ~0.1 s a hash,
and what is tested is the transaction, which hashing precedes).
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pymongo import monitoring

from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.operations.class_users import ClassBatchArgs, CreateClassChunk
from cheeto_like.operations.group import SeedAccessStatusGroups
from cheeto_like.operations.site import CreateSite
from cheeto_like.operations.storage import (
    CreateAutomountMap,
    CreateStorageVolume,
    SetSiteStorageDefaults,
)
from cheeto_like.operations.user import CreateUser
from cheeto_like.store import connect

DATABASE = "killtest"
AUTHOR = "killtest"


class Announce(monitoring.CommandListener):
    def started(self, event: monitoring.CommandStartedEvent) -> None:
        sys.stdout.write(f"cmd {event.command_name}\n")
        sys.stdout.flush()

    def succeeded(self, event: Any) -> None:
        pass

    def failed(self, event: Any) -> None:
        pass


def config(data_dir: str) -> MongoConfig:
    return MongoConfig(embedded=EmbeddedStoreConfig(path=Path(data_dir)), database=DATABASE)


async def main(data_dir: str, mode: str, *rest: str) -> None:
    listeners = [Announce()] if mode == "batch" else None
    store = await connect(config(data_dir), autostart=False, listeners=listeners)
    try:
        if mode == "setup":
            await SeedAccessStatusGroups.run(store, AUTHOR)
            await CreateSite.run(store, AUTHOR, name="farm", fqdn="farm.example.org")
            await CreateStorageVolume.run(store, AUTHOR, site="farm", name="home",
                                          backend="zfs", host="nas1", host_path="/export/home")
            await CreateAutomountMap.run(store, AUTHOR, site="farm", name="home",
                                         prefix="/home", options=["rw"])
            await SetSiteStorageDefaults.run(store, AUTHOR, site="farm", home_volume="home",
                                             home_automount_map="home")
        elif mode == "batch":
            prefix, count, hashed = rest
            spec = ClassBatchArgs(site="farm", prefix=prefix, count=int(count),
                                  email="class@example.org",
                                  expires_at=datetime.now(UTC) + timedelta(days=30))
            sys.stdin.readline()  # started ahead of time; wait for the test's go-ahead
            print("go", flush=True)
            await CreateClassChunk.run(store, AUTHOR, spec=spec, batch=spec.batch_id(),
                                       run="killtest", start=0, stop=spec.count,
                                       hashes=[hashed] * spec.count, fresh=True)
            print("done", flush=True)
        elif mode == "user":
            name, uid = rest
            await CreateUser.run(store, AUTHOR, name=name, email=f"{name}@example.org",
                                 uid=int(uid), fullname=name)
            print("done", flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
