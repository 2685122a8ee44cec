"""A process that takes, holds, tries or judges leases, for tests/sync/test_lease_hosts.py:
the holders and takers there are real processes (own pids, pid namespaces, clocks).

    python -m tests.sync.lease_child CONFIG ACTION [ARGS...]

- ``hold TARGET SITE TTL_S``: take the lease, start a lease-bound apply run and a dry
  run (no lease) under its holder name, print ``{"holder", "pid", "run", "dry_run"}``;
  then, per stdin line: ``sweep`` prints what ``close_stale_runs`` and the daemon's
  ``clear_dead_leases`` removed here (``{"closed", "cleared", "lost"}``); ``end`` ends
  the runs ``ok``, releases and exits.
- ``take TARGET SITE TTL_S``: one try, prints ``{"took": bool, "error"}``.
- ``apply SITE TTL_S BLOCK_S``: a real ``sync_site --apply`` whose runner blocks the
  event loop (``time.sleep``) for BLOCK_S right after its first write command; prints
  the report's outcomes and the run id (``sacctmgr`` is whatever is first on PATH).

``LEASE_CHILD_CLOCK_OFFSET`` (seconds, tests only) shifts this host's wall clock as the
process sees it (``time.time``/``time_ns``, ``datetime.now``, ``models.fields.utcnow``),
installed before anything of cheeto_like is imported: lease decisions must not move.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime as _real_datetime
from datetime import timedelta

OFFSET = float(os.environ.get("LEASE_CHILD_CLOCK_OFFSET") or 0)


def _shift_wall_clock(offset: float) -> None:
    """Every wall-clock read of this process is ``offset`` seconds off, as on a host
    whose clock is wrong. The boot-time and monotonic clocks are left alone (a wrong
    time of day does not change how fast time passes)."""
    import datetime as datetime_module

    real_time, real_ns = time.time, time.time_ns

    class AnyDatetime(type):
        """A real ``datetime`` (bson decodes into it) still passes ``isinstance``."""

        def __instancecheck__(cls, instance: object) -> bool:
            return isinstance(instance, _real_datetime)

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, _real_datetime)

    class ShiftedDatetime(_real_datetime, metaclass=AnyDatetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def,override]
            return _real_datetime.now(tz) + timedelta(seconds=offset)

        @classmethod
        def utcnow(cls):  # type: ignore[no-untyped-def,override]
            return _real_datetime.now() + timedelta(seconds=offset)

    time.time = lambda: real_time() + offset  # type: ignore[assignment]
    time.time_ns = lambda: real_ns() + int(offset * 1e9)  # type: ignore[assignment]
    datetime_module.datetime = ShiftedDatetime  # type: ignore[misc]


if OFFSET:
    _shift_wall_clock(OFFSET)

import asyncio  # noqa: E402
import json  # noqa: E402
from typing import Any  # noqa: E402


def say(data: dict[str, Any]) -> None:
    print(json.dumps(data), flush=True)


async def connected(config_path: str) -> Any:
    from cheeto_like.config import load_config
    from cheeto_like.store import connect

    config = load_config(config_path)
    return await connect(config.mongo, autostart=False, long_running=True)


async def hold(store: Any, target: str, site: str, ttl: float) -> None:
    from cheeto_like.daemon.tasks import clear_dead_leases
    from cheeto_like.models import SyncRun
    from cheeto_like.sync.lease import holder_name, lease
    from cheeto_like.sync.runs import close_stale_runs

    async with lease(store, target, site, ttl=timedelta(seconds=ttl)) as held:
        run = SyncRun(target=target, site=site, apply=True, holder=held.holder,
                      lease=held.key)
        dry = SyncRun(target=target, site=f"{site}-dry", holder=holder_name())
        async with store.exclusive():
            await run.insert()
            await dry.insert()
        say({"holder": held.holder, "pid": os.getpid(), "run": run.id, "dry_run": dry.id})
        loop = asyncio.get_running_loop()
        while True:
            line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
            if line == "sweep":
                closed = await close_stale_runs(store)
                cleared = await clear_dead_leases(store)
                say({"closed": closed, "cleared": cleared, "lost": held.gone()})
            elif line in ("end", ""):
                break
        for done in (run, dry):
            done.status = "ok"
            async with store.exclusive():
                await done.save()


async def take(store: Any, target: str, site: str, ttl: float) -> None:
    from cheeto_like.errors import Busy
    from cheeto_like.sync.lease import lease

    try:
        async with lease(store, target, site, ttl=timedelta(seconds=ttl)):
            say({"took": True, "error": None})
    except Busy as exc:
        say({"took": False, "error": exc.message})


async def blocked_apply(store: Any, site: str, ttl: float, block: float) -> None:
    from cheeto_like.adapters.sacctmgr import Result, SAcctMgr
    from cheeto_like.sync.slurm.actual import SAcctMgrReader
    from cheeto_like.sync.slurm.run import sync_site

    class BlocksTheLoop(SAcctMgr):
        """After its first write, the loop is blocked (as by a long computation in it):
        no heartbeat runs, no renewal is sent."""

        writes = 0

        async def run(self, args: Any, *, write: bool) -> Result:
            result = await super().run(args, write=write)
            if write:
                BlocksTheLoop.writes += 1
                if BlocksTheLoop.writes == 1:
                    time.sleep(block)  # noqa: ASYNC251 - blocking the loop is the point
            return result

    runner = BlocksTheLoop(timeout=60)
    report = await sync_site(store, site, reader=SAcctMgrReader(runner), runner=runner,
                             apply=True, lease_ttl=timedelta(seconds=ttl))
    say({"run": report.run_id, "outcomes": [i.outcome for i in report.items],
         "details": [i.detail for i in report.items]})


async def main(argv: list[str]) -> None:
    config, action, *args = argv
    store = await connected(config)
    try:
        if action == "hold":
            await hold(store, args[0], args[1], float(args[2]))
        elif action == "take":
            await take(store, args[0], args[1], float(args[2]))
        elif action == "apply":
            await blocked_apply(store, args[0], float(args[1]), float(args[2]))
        else:
            raise SystemExit(f"unknown action {action!r}")
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
