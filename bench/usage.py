"""Benchmark the usage ledger on the embedded store.

- ingest: parse N synthetic ``sacct -X -P -n`` lines (the exact format
  ``adapters/sacct.py`` asks for: plain, array and het job ids, typed and untyped GPUs)
  and upsert them into the ledger (rows/s);
- re-collect of the same window: the same lines again, which must write 0 records;
- reports over a ledger of ``--ledger`` rows (topped up with bulk inserts of records
  built the same way): one account by day, the whole site by user and by GPU type, with
  the number of store commands each one sent (constant in the number of jobs: the
  aggregation runs in the store);
- the quota blocks the Slurm sync's desired state computes for 1,000 users and 100
  accounts under default quotas (sync/slurm/quota.py), with its store commands;
- issue 31: the ingest against its floor (the same lines parsed + ``insert_many`` of
  plain documents into the same ledger collection), alternating the two
  sides, ``--rounds`` rounds, min and median, and the ratio of the medians; and the
  quota part of the Slurm sync, ``ng quota show`` (the site-wide status) and ``ng usage
  summary`` (the platform summary) at 10k ledger rows and at ``--ledger`` rows (the
  running totals built with the bulk top-up, as the charge path keeps them), with the
  ratio large / 10k, also per subject in the status (a month of a small ledger holds
  fewer people). The reports run last, over that large ledger.
Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python bench/usage.py [--rows 100000] [--ledger 1000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import free_port, progress, throwaway_server
from pymongo import monitoring

from cheeto_like.adapters.sacct import parse_output
from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.models import QuotaDefaults, QuotaTotal, Site, UsageRecord
from cheeto_like.models.fields import new_id
from cheeto_like.models.usage import FactorTable, fingerprint, record_key
from cheeto_like.operations.quota_totals import Deltas, apply
from cheeto_like.operations.usage import ingest, ledger_doc, record_content
from cheeto_like.queries.quota import platform_summary, quota_status
from cheeto_like.queries.usage import Rate, usage_report
from cheeto_like.store import connect
from cheeto_like.sync.slurm.quota import quota_blocks

SITE = "benchfarm"
START = datetime(2026, 1, 1, tzinfo=UTC)
CHUNK = 5000
FILL_BATCH = 50_000


class Counter(monitoring.CommandListener):
    """Counts the commands the client sends (find, aggregate, getMore, insert, …)."""

    def __init__(self) -> None:
        self.by_name: dict[str, int] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.by_name[event.command_name] = self.by_name.get(event.command_name, 0) + 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def reset(self) -> dict[str, int]:
        seen, self.by_name = self.by_name, {}
        return {k: v for k, v in seen.items() if k not in ("endSessions", "hello", "ismaster")}


def sacct_lines(count: int, first_id: int, seed: int) -> str:
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        job = first_id + i
        kind = i % 10
        job_id = f"{job}_{i % 7}" if kind == 7 else f"{job}+{i % 2}" if kind == 8 else str(job)
        user = f"u{rng.randrange(1000):04d}"
        account = f"lab{int(user[1:]) % 100:03d}"
        start = START + timedelta(seconds=rng.randrange(300 * 86400))
        elapsed = rng.randrange(60, 86400)
        end = start + timedelta(seconds=elapsed)
        cpus = rng.choice((1, 2, 4, 8, 16, 32))
        if kind in (3, 4):
            partition, gpus = "gpu", f",gres/gpu:{('a100', 't4')[kind - 3]}=2,gres/gpu=2"
        elif kind == 5:
            partition, gpus = "gpu", ",gres/gpu=1"
        else:
            partition, gpus = rng.choice(("cpu", "bigmem")), ""
        lines.append(f"{job_id}|farm|{user}|{account}|{partition}|normal|COMPLETED|"
                     f"{start:%Y-%m-%dT%H:%M:%S}|{end:%Y-%m-%dT%H:%M:%S}|{elapsed}|"
                     f"billing={cpus},cpu={cpus}{gpus},mem={cpus * 1000}M,node=1")
    return "\n".join(lines) + "\n"


async def top_up(store: Any, total: int, have: int, factors: FactorTable,
                 next_id: int = 10_000_000) -> float:
    """Bulk-insert records (the documents ingest stores: ``record_content`` +
    ``ledger_doc``) until the ledger holds ``total``, and move the running quota totals
    by them (what the charge path does, in one ``$inc`` per subject and month at the
    end); returns the seconds it took. Plain documents in large unordered batches:
    validating a million models made the 1M fill take 11 minutes."""
    started = time.monotonic()
    collection = UsageRecord.get_pymongo_collection()
    deltas = Deltas()
    now = datetime.now(UTC)
    while have < total:
        n = min(FILL_BATCH, total - have)
        docs = []
        for job in parse_output(sacct_lines(n, next_id, seed=next_id)).jobs:
            content = record_content(SITE, job, factors)
            doc = ledger_doc(record_key(SITE, job.cluster, job.job_id), content,
                             fingerprint(content), now)
            deltas.add(SITE, doc, +1)
            docs.append(doc)
        await collection.insert_many(docs, ordered=False)
        have += len(docs)
        next_id += n
        progress(f"ledger: {have:,} rows")
    async with store.session(transaction=True) as session:
        await apply(deltas, session)
    return time.monotonic() - started


FLOOR_SITE = "benchfloor"


def floor_docs(jobs: list[Any]) -> list[dict[str, Any]]:
    """The floor's documents: the parsed fields as they are, no charge, no fingerprint
    (another site's keys, so they go into the ledger beside ours)."""
    return [{"_id": new_id(), "key": f"{FLOOR_SITE}/{j.cluster}/{j.job_id}",
             "site": FLOOR_SITE, "cluster": j.cluster,
             "job_id": j.job_id, "user": j.user, "account": j.account,
             "partition": j.partition, "qos": j.qos, "state": j.state, "start": j.start,
             "end": j.end, "elapsed_s": j.elapsed_s, "cpus": j.tres.cpus,
             "mem_mb": j.tres.mem_mb} for j in jobs]


async def ingest_vs_floor(store: Any, rows: int, rounds: int,
                          factors: FactorTable) -> dict[str, Any]:
    """``ng usage collect``'s ingest of ``rows`` sacct lines into an empty ledger
    against the floor (the same lines parsed + ``insert_many`` into the same ledger
    collection, with its indexes), alternating which goes first; each round starts
    from empty."""
    text = sacct_lines(rows, 1_000_000, seed=1)
    ours: list[float] = []
    floor: list[float] = []
    ledger = UsageRecord.get_pymongo_collection()

    async def run_ours() -> None:
        t0 = time.monotonic()
        await ingest(store, SITE, parse_output(text).jobs, factors)
        ours.append(time.monotonic() - t0)
        await ledger.delete_many({"site": SITE})
        await QuotaTotal.get_pymongo_collection().delete_many({"site": SITE})

    async def run_floor() -> None:
        t0 = time.monotonic()
        docs = floor_docs(parse_output(text).jobs)
        for start in range(0, len(docs), CHUNK):
            await ledger.insert_many(docs[start:start + CHUNK])
        floor.append(time.monotonic() - t0)
        await ledger.delete_many({"site": FLOOR_SITE})

    for n in range(rounds):
        progress(f"ingest vs floor, round {n + 1} of {rounds}")
        for side in ((run_ours, run_floor) if n % 2 == 0 else (run_floor, run_ours)):
            await side()
    med_ours, med_floor = statistics.median(ours), statistics.median(floor)
    return {"rows": rows, "rounds": rounds,
            "ours_s": {"min": round(min(ours), 2), "median": round(med_ours, 2)},
            "floor_s": {"min": round(min(floor), 2), "median": round(med_floor, 2)},
            "ours_rows_per_s": round(rows / med_ours),
            "floor_rows_per_s": round(rows / med_floor),
            "ratio": round(med_floor / med_ours, 3)}


async def quota_reads(rounds: int) -> dict[str, Any]:
    """Per period (``none``: every subject has used the site at 10k rows already;
    ``monthly``: a 10k ledger's month holds fewer subjects than a large one's), the
    sync's quota part (``quota_blocks`` for 1,000 users and 100 accounts under the
    site's defaults), ``ng quota show``'s site-wide status and ``ng usage summary``'s
    platform summary: min and median of ``rounds`` runs, seconds."""
    out = {}
    for period in ("none", "monthly"):
        found = await _quota_reads(rounds, period)
        out.update({f"{label}, period {period}": v for label, v in found.items()})
    return out


async def _quota_reads(rounds: int, period: str) -> dict[str, Any]:
    users = [f"u{i:04d}" for i in range(1000)]
    accounts = [f"lab{i:03d}" for i in range(100)]
    await QuotaDefaults.find({"site": SITE}).delete()
    await QuotaDefaults(site=SITE, period=period, user_cpu_minutes=1e6,
                        account_cpu_minutes=1e7).insert()
    now = START + timedelta(days=40)
    cases = {
        "sync quota part": lambda: quota_blocks(SITE, now, users=users, accounts=accounts),
        "ng quota show": lambda: quota_status(SITE, now),
        "ng usage summary": lambda: platform_summary(SITE, now, accounts),
    }
    out: dict[str, Any] = {}
    for label, call in cases.items():
        times = []
        for _ in range(rounds):
            t0 = time.monotonic()
            await call()
            times.append(time.monotonic() - t0)
        out[label] = {"min": round(min(times), 4), "median": round(statistics.median(times), 4)}
    # O(subjects): how many subjects the site-wide status holds (those who used the month)
    out["subjects in status"] = len(await quota_status(SITE, now))
    return out


async def flat_costs(store: Any, ledger: int, rounds: int,
                     factors: FactorTable) -> dict[str, Any]:
    """Issue 31: the quota reads at 10k ledger rows and at ``ledger`` rows."""
    await UsageRecord.get_pymongo_collection().delete_many({})
    await QuotaTotal.get_pymongo_collection().delete_many({})
    fill = await top_up(store, 10_000, 0, factors)
    small = await quota_reads(rounds)
    fill += await top_up(store, ledger, 10_000, factors, next_id=20_000_000)
    large = await quota_reads(rounds)
    ratios = {k: round(large[k]["median"] / small[k]["median"], 2)
              for k in small if not k.startswith("subjects")}
    # a month of a 10k ledger holds fewer subjects than a month of 1M: the same ratio per
    # subject in the status says whether the cost follows the jobs or the people
    per_subject = {}
    for k in ratios:
        period = k.rsplit("period ", 1)[1]
        more = (large[f"subjects in status, period {period}"]
                / small[f"subjects in status, period {period}"])
        per_subject[k] = round(ratios[k] / more, 2)
    return {"small_rows": 10_000, "large_rows": ledger, "fill_s": round(fill, 1),
            "small": small, "large": large, "ratio_large_to_small": ratios,
            "ratio_large_to_small_per_subject": per_subject}


async def run(rows: int, ledger: int, rounds: int) -> dict[str, Any]:
    counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        embedded = EmbeddedStoreConfig(path=Path(tmp), port=free_port())
        server = throwaway_server(embedded)
        server.start_background()
        try:
            store = await connect(MongoConfig(embedded=embedded, database="bench_usage"),
                                  autostart=False, listeners=[counter])
            await store.drop_database()
            await store.bind()
            await Site(name=SITE, fqdn=f"{SITE}.example.org").insert()
            factors = FactorTable.build([("a100", START, 2.0), ("default", START, 1.0)])
            text = sacct_lines(rows, 1_000_000, seed=1)
            progress(f"ingest {rows:,} rows")
            counter.reset()
            t0 = time.monotonic()
            parsed = parse_output(text)
            parse_s = time.monotonic() - t0
            counts = await ingest(store, SITE, parsed.jobs, factors)
            ingest_s = time.monotonic() - t0
            ingest_cmds = counter.reset()
            progress("re-collect")
            t0 = time.monotonic()
            again = await ingest(store, SITE, parse_output(text).jobs, factors)
            again_s = time.monotonic() - t0
            again_cmds = counter.reset()
            blocks = await quota_blocks_case(counter)
            floor = await ingest_vs_floor(store, rows, rounds, factors)
            flat = await flat_costs(store, ledger, rounds, factors)
            size = await UsageRecord.get_pymongo_collection().count_documents({})
            counter.reset()
            reports: dict[str, Any] = {}
            year = (START, START + timedelta(days=366))
            cases = {
                "one account, by day": {"account": "lab042", "by": "day"},
                "one user, by partition": {"user": "u0042", "by": "partition"},
                "whole site, by user": {"by": "user"},
                "whole site, by gpu-type, priced": {
                    "by": "gpu-type",
                    "rates": {"gpu": Rate(cpu_hour=0.1, gpu_hour=2.0), "*": Rate(0.05)}},
            }
            for label, kwargs in cases.items():
                progress(f"report: {label}")
                t0 = time.monotonic()
                report = await usage_report(SITE, *year, **kwargs)
                reports[label] = {"seconds": round(time.monotonic() - t0, 3),
                                  "rows": len(report.rows), "jobs": report.total.jobs,
                                  "store_commands": counter.reset()}
            await store.close()
        finally:
            server.stop()
    return {
        "ingest": {"rows": rows, "parse_s": round(parse_s, 2),
                   "parse_rows_per_s": round(rows / parse_s),
                   "parse_and_write_s": round(ingest_s, 2),
                   "rows_per_s": round(rows / ingest_s), "inserted": counts.inserted,
                   "store_commands": ingest_cmds},
        "recollect": {"rows": rows, "seconds": round(again_s, 2),
                      "rows_per_s": round(rows / again_s), "inserted": again.inserted,
                      "replaced": again.replaced, "unchanged": again.unchanged,
                      "store_commands": again_cmds},
        "ledger": {"rows": size, "fill_s": flat["fill_s"]},
        "reports": reports,
        "quota_blocks": blocks,
        "ingest_vs_floor": floor,
        "quota_reads_10k_vs_large": flat,
    }


async def quota_blocks_case(counter: Counter) -> dict[str, Any]:
    """What the Slurm sync's desired state adds when quotas are in force: the blocks of
    1,000 users and 100 accounts under the site's default quotas (period none: every
    job in the ledger counts), and under monthly ones (one month of jobs)."""
    users = [f"u{i:04d}" for i in range(1000)]
    accounts = [f"lab{i:03d}" for i in range(100)]
    out: dict[str, Any] = {}
    for period in ("none", "monthly"):
        await QuotaDefaults.find({"site": SITE}).delete()
        await QuotaDefaults(site=SITE, period=period, user_cpu_minutes=1e6,
                            account_cpu_minutes=1e7).insert()
        progress(f"quota blocks, period {period}")
        counter.reset()
        t0 = time.monotonic()
        blocks = await quota_blocks(SITE, START + timedelta(days=40), users=users,
                                    accounts=accounts)
        out[f"defaults, period {period}"] = {
            "seconds": round(time.monotonic() - t0, 3), "users_blocked": len(blocks.users),
            "accounts_blocked": len(blocks.accounts), "store_commands": counter.reset()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="sacct rows to ingest")
    parser.add_argument("--ledger", type=int, default=1_000_000,
                        help="ledger size for the reports")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of each timed side (min and median)")
    args = parser.parse_args()
    if args.rows < 1 or args.ledger < max(args.rows, 10_000) or args.rounds < 1:
        parser.error("--rows and --rounds must be >= 1 and --ledger >= --rows and 10,000")
    started = os.getloadavg()
    out = asyncio.run(run(args.rows, args.ledger, args.rounds))
    out["loadavg"] = {"start": [round(x, 2) for x in started],
                      "end": [round(x, 2) for x in os.getloadavg()]}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
