"""A daemon-like process for tests/operations/test_base_metrics.py: turns metrics on
(a plain in-process registry), connects to the embedded store named on the command line,
injects failures with the store's ``failCommand`` fail point, runs real ``CreateGroup``
operations through them and prints the store families' values as one JSON line."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from cheeto_like import metrics
from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.operations.group import CreateGroup
from cheeto_like.store import CommandTimer, Store, connect


async def fail_point(store: Store, mode: Any, **data: Any) -> None:
    await store.client.admin.command({"configureFailPoint": "failCommand", "mode": mode,
                                      "data": data})


def sample(name: str, **labels: str) -> float:
    from cheeto_like.metrics.families import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


async def main(path: str, database: str, gid: int) -> None:
    metrics.activate("hub_worker")
    config = MongoConfig(embedded=EmbeddedStoreConfig(path=path))
    store = await connect(config, database=database, autostart=False, create_indexes=False)
    timers = [x for x in store.client.options.event_listeners if isinstance(x, CommandTimer)]
    try:
        # two write conflicts on the new group's inserts: the transaction runs again twice
        await fail_point(store, {"times": 2}, failCommands=["insert"], errorCode=112,
                         errorLabels=["TransientTransactionError"])
        await CreateGroup.run(store, "metrics-child", name="conflicted", gid=gid)
        # a commit whose reply is lost twice (a write concern error: the result is
        # unknown): the commit is sent again twice, and the transaction is not re-run
        await fail_point(store, {"times": 2}, failCommands=["commitTransaction"],
                         writeConcernError={"code": 64, "codeName": "WriteConcernFailed",
                                            "errmsg": "waiting for replication timed out"})
        await CreateGroup.run(store, "metrics-child", name="uncertain", gid=gid + 1)
    finally:
        await fail_point(store, "off")
        await store.close()
    duration = "cheeto_store_command_duration_seconds_count"
    print(json.dumps({
        "timers": len(timers),
        "transient": sample("cheeto_store_transaction_retries_total", reason="transient"),
        "unknown_commit": sample("cheeto_store_transaction_retries_total",
                                 reason="unknown_commit"),
        "conflicts": sample("cheeto_store_write_conflicts_total"),
        "timed": {name: sample(duration, command=name)
                  for name in ("find", "insert", "bulkWrite", "commitTransaction", "other")},
    }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
