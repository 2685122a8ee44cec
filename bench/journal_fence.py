"""What fencing costs an apply per command: ``RunJournal.steps`` with and without the
lease it proves (``Held.fence``: one conditional write on the lease document before the
step write), on a throwaway embedded store.

Each round times ``--steps`` journal steps (closing one command, starting the next, as
``sync.slurm.run.apply_plan`` does) for each side, the sides alternating; min and median
milliseconds per step are printed as one JSON object on stdout (progress on stderr).

    .venv/bin/python bench/journal_fence.py [--steps 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import free_port, progress, throwaway_server

from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.models import SyncRun
from cheeto_like.models.sync import SyncItem
from cheeto_like.store import Store, connect
from cheeto_like.sync.lease import lease
from cheeto_like.sync.runs import RunJournal


async def one_side(store: Store, steps: int, *, fenced: bool) -> float:
    """Seconds per step for ``steps`` steps of one run."""
    async with lease(store, "slurm", "bench") as held:
        run = SyncRun(target="slurm", site="bench", apply=True, holder=held.holder,
                      lease=held.key)
        await run.insert()
        journal = RunJournal(store, run, held=held if fenced else None)
        await journal.write([SyncItem(batch="add", command=f"add account a{n}")
                             for n in range(steps)])
        started = time.perf_counter()
        for n in range(steps):
            if n:
                journal.items[n - 1].outcome = "ok"
            journal.items[n].outcome = "started"
            await journal.steps([n - 1, n] if n else [n])
        elapsed = time.perf_counter() - started
        await journal.discard_steps()
    return elapsed / steps


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="journal steps per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (each side once)")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cheeto-fence-") as tmp:
        embedded = EmbeddedStoreConfig(path=Path(tmp) / "store", port=free_port())
        server = throwaway_server(embedded)
        server.start_background()
        try:
            store = await connect(MongoConfig(embedded=embedded, database="bench_fence"),
                                  autostart=False)
            sides: dict[str, list[float]] = {"unfenced": [], "fenced": []}
            for n in range(opts.rounds):
                progress(f"round {n + 1}/{opts.rounds}")
                for name in ("unfenced", "fenced") if n % 2 == 0 else ("fenced", "unfenced"):
                    sides[name].append(await one_side(store, opts.steps,
                                                      fenced=name == "fenced") * 1000)
            await store.close()
        finally:
            server.stop()
    figures = {name: {"min_ms": round(min(v), 2), "median_ms": round(statistics.median(v), 2)}
               for name, v in sides.items()}
    figures["added_median_ms"] = round(figures["fenced"]["median_ms"]
                                       - figures["unfenced"]["median_ms"], 2)
    figures["loadavg"] = list(os.getloadavg())
    print(json.dumps({"steps": opts.steps, "rounds": opts.rounds, **figures}))


if __name__ == "__main__":
    asyncio.run(main())
