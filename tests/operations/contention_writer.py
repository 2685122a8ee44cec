"""A writer process for tests/operations/test_transactions.py and bench/store_contention.py:
connects to the store named on the command line and runs ``count`` quota adjustments
(real ``AdjustUsage`` operations), printing one JSON line: how many succeeded, and the
errors of those that did not."""

from __future__ import annotations

import asyncio
import json
import sys

from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.errors import CheetoError
from cheeto_like.operations.quota import AdjustUsage
from cheeto_like.store import connect


async def main(path: str, database: str, site: str, user: str, count: int,
               retry_seconds: float) -> None:
    config = MongoConfig(embedded=EmbeddedStoreConfig(path=path),
                         transaction_retry_seconds=retry_seconds)
    store = await connect(config, database=database, autostart=False, create_indexes=False)
    ok, errors = 0, []
    try:
        for n in range(count):
            try:
                await AdjustUsage.run(store, "writer", site=site, user=user, cpu_minutes=1,
                                      reason=f"subprocess {n}")
                ok += 1
            except CheetoError as exc:
                errors.append(str(exc))
    finally:
        await store.close()
    print(json.dumps({"ok": ok, "errors": errors}))


if __name__ == "__main__":
    a = sys.argv[1:]
    asyncio.run(main(a[0], a[1], a[2], a[3], int(a[4]), float(a[5])))
