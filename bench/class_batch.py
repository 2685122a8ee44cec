"""Measure class batches (``ng user new class``): how many transactions a batch takes,
the longest one, the commands sent inside them, and how much they write (issue 24.5: a
transaction must stay well under MongoDB's 60 s ``transactionLifetimeLimitSeconds`` and
its cache limit; a batch runs in chunks of ``--chunk-size`` accounts).

Runs ``CreateClassUsers`` for each ``--count`` on a fresh database and prints one JSON
object: per batch, the run's wall seconds, the number of transactions and the longest
one's wall seconds (its first command to its commit's reply), the commands inside
transactions (by name), and the BSON bytes of the documents inserted and of the update
commands. Password hashing (``prepare``, before any transaction, ~0.1-0.3 s per account
with yescrypt) is replaced by a fixed hash, so the figures are the store's alone.

    .venv/bin/python bench/class_batch.py [--count 300 --count 2000] [--chunk-size 25]
        [--mongo-uri URI]

Without ``--mongo-uri`` it starts its own embedded store in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import bson
from _common import free_port, progress, throwaway_server
from pymongo import monitoring

from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.credentials import hash_password
from cheeto_like.operations.class_users import CHUNK, CreateClassUsers
from cheeto_like.operations.group import SeedAccessStatusGroups
from cheeto_like.operations.site import CreateSite
from cheeto_like.operations.storage import (
    CreateAutomountMap,
    CreateStorageVolume,
    SetSiteStorageDefaults,
)
from cheeto_like.store import Store, connect

DATABASE = "bench_class_batch"
SITE = "bench"
HASH = hash_password("not-a-real-password")


class Commands(monitoring.CommandListener):
    """Every command sent inside a transaction (``txnNumber`` + ``autocommit``), with
    each transaction's first command and commit reply times."""

    def __init__(self) -> None:
        self.names: Counter[str] = Counter()
        self.insert_bytes = self.update_bytes = 0
        self.opened: dict[tuple[Any, Any], float] = {}
        self.commits: dict[int, tuple[Any, Any]] = {}
        self.durations: list[float] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        cmd = event.command
        if "autocommit" not in cmd:
            return
        key = (bytes(cmd["lsid"]["id"]), cmd.get("txnNumber"))
        self.opened.setdefault(key, time.perf_counter())
        if event.command_name == "commitTransaction":
            self.commits[event.request_id] = key
        self.names[event.command_name] += 1
        if event.command_name == "insert":
            self.insert_bytes += sum(len(bson.encode(d)) for d in cmd.get("documents", []))
        elif event.command_name == "update":
            self.update_bytes += sum(len(bson.encode(u)) for u in cmd.get("updates", []))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        key = self.commits.pop(event.request_id, None)
        if key is not None and key in self.opened:
            self.durations.append(time.perf_counter() - self.opened.pop(key))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


class FixedHashBatch(CreateClassUsers):
    """The batch with hashing left out (it runs before the transaction anyway)."""

    @classmethod
    async def prepare(cls, args: Any) -> list[tuple[str, str]]:
        return [(f"pw{i}", HASH) for i in range(args.count)]


async def setup(store: Store) -> None:
    await SeedAccessStatusGroups.run(store, "bench")
    await CreateSite.run(store, "bench", name=SITE, fqdn="bench.example.org")
    await CreateStorageVolume.run(store, "bench", site=SITE, name="home", backend="zfs",
                                  host="nas1", host_path="/export/home")
    await CreateAutomountMap.run(store, "bench", site=SITE, name="home", prefix="/home",
                                 options=["rw"])
    await SetSiteStorageDefaults.run(store, "bench", site=SITE, home_volume="home",
                                     home_quota="20G", home_automount_map="home")


async def measure(mongo: MongoConfig, count: int, chunk: int) -> dict[str, Any]:
    listener = Commands()
    store = await connect(mongo, autostart=False, listeners=[listener])
    try:
        await store.drop_database()
        await store.bind()
        await setup(store)
        listener.__init__()  # type: ignore[misc]  # only the batch's transaction
        started = time.perf_counter()
        await FixedHashBatch.run(store, "bench", site=SITE, prefix=f"c{count}", count=count,
                                 email="ta@example.org",
                                 expires_at=datetime.now(UTC) + timedelta(days=90),
                                 chunk_size=chunk)
        total = time.perf_counter() - started
    finally:
        await store.close()
    return {"count": count, "chunk_size": chunk, "run_s": round(total, 2),
            "transactions": len(listener.durations),
            "longest_transaction_s": round(max(listener.durations, default=0), 2),
            "commands": sum(listener.names.values()),
            "commands_per_user": round(sum(listener.names.values()) / count, 1),
            "by_command": dict(listener.names.most_common()),
            "inserted_bytes": listener.insert_bytes, "update_bytes": listener.update_bytes}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, action="append",
                        help="batch sizes (repeatable; default 300 and 2000)")
    parser.add_argument("--chunk-size", type=int, default=CHUNK,
                        help=f"accounts per transaction (default {CHUNK})")
    parser.add_argument("--mongo-uri", help="a MongoDB replica set to use instead")
    opts = parser.parse_args()
    counts = opts.count or [300, 2000]
    with tempfile.TemporaryDirectory(prefix="cheeto-bench-") as tmp:
        server = None
        if opts.mongo_uri:
            mongo = MongoConfig(uri=opts.mongo_uri, database=DATABASE)
        else:
            embedded = EmbeddedStoreConfig(path=Path(tmp) / "store", port=free_port())
            server = throwaway_server(embedded)
            server.start_background()
            mongo = MongoConfig(embedded=embedded, database=DATABASE)
        try:
            results = []
            for count in counts:
                progress(f"batch of {count}")
                results.append(await measure(mongo, count, opts.chunk_size))
                progress(f"  {results[-1]['run_s']} s, {results[-1]['transactions']} "
                         f"transactions (longest {results[-1]['longest_transaction_s']} s), "
                         f"{results[-1]['commands']} commands")
        finally:
            if server is not None:
                server.stop()
    print(json.dumps({"store": "mongodb" if opts.mongo_uri else "embedded nx-27017",
                      "batches": results}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
