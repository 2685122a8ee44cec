"""Leases between real processes (issue 25), each holder or taker its own process
(tests/sync/lease_child.py) on the module's store:

- two holders in two pid namespaces (``unshare -pf --mount-proc``) with one hostname:
  neither clears the other's live lease or marks its runs crashed; once one is killed,
  its lease-bound run is closed only after its lease expired by the store's clock;
- a real ``--apply`` whose event loop is blocked past its lease while another process
  takes the lease over: no sacctmgr command of the first runs after the takeover (a
  wrapper logs every write command);
- a holder or taker whose wall clock is 90 s fast or slow: no live lease is stolen, and
  a dead holder's lease lasts one TTL by the store's clock, not longer.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from cheeto_like.daemon.tasks import clear_dead_leases
from cheeto_like.models import SyncLease, SyncRun
from cheeto_like.queries.sync_runs import run_items
from cheeto_like.sync.lease import lease, store_time
from cheeto_like.sync.runs import close_stale_runs
from tests.services.slurm import SlurmAccounting
from tests.sync.test_slurm_crash_budget import seed

ROOT = Path(__file__).resolve().parents[2]
TTL = 2.0


class Child:
    """A lease_child process: JSON lines out, commands in."""

    def __init__(self, proc: asyncio.subprocess.Process, errors: Path) -> None:
        self.proc, self.errors = proc, errors

    async def line(self, wait: float = 90) -> dict[str, Any]:
        assert self.proc.stdout is not None
        raw = await asyncio.wait_for(self.proc.stdout.readline(), wait)
        assert raw, f"the child ended: {self.errors.read_text()[-3000:]}"
        return json.loads(raw)

    async def ask(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{command}\n".encode())
        await self.proc.stdin.drain()
        return await self.line()

    async def end(self) -> int:
        if self.proc.returncode is None and self.proc.stdin is not None:
            self.proc.stdin.write(b"end\n")
            await self.proc.stdin.drain()
        return await asyncio.wait_for(self.proc.wait(), 60)

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)


async def start(config: Path, tmp_path: Path, *args: str, namespace: int | None = None,
                env: dict[str, str] | None = None) -> Child:
    """``namespace``: run in a new pid namespace (one hostname), after starting that many
    short processes in it, so the holder's pid there differs from the other's."""
    argv = [sys.executable, "-m", "tests.sync.lease_child", str(config), *args]
    if namespace is not None:
        pad = f"i=0; while [ $i -lt {namespace} ]; do /bin/true; i=$((i+1)); done; "
        argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c",
                pad + '"$@"; status=$?; exit $status', "sh", *argv]
    errors = tmp_path / f"child-{len(list(tmp_path.glob('child-*')))}.log"
    with errors.open("wb") as sink:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=sink, env=env or dict(os.environ))
    return Child(proc, errors)


async def lease_doc(key: str) -> dict[str, Any] | None:
    return await SyncLease.get_pymongo_collection().find_one({"_id": key})


async def until(predicate: Any, what: str, within: float = 90) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await predicate():
        assert loop.time() < deadline, f"never: {what}"
        await asyncio.sleep(0.05)


async def renewed(key: str, since: int) -> bool:
    doc = await lease_doc(key)
    return doc is not None and doc["expires_ms"] > since


async def expired(db: Any, key: str) -> bool:
    """Past the lease's expiry by the store's clock (or gone)."""
    doc = await lease_doc(key)
    return doc is None or (await store_time(db)).ms > doc["expires_ms"]


async def test_two_pid_namespaces_with_one_hostname_leave_each_others_leases_and_runs(
        db, cli_config, tmp_path):
    assert shutil.which("unshare"), "util-linux's unshare is needed"
    a = await start(cli_config, tmp_path, "hold", "slurm", "nsa", str(TTL), namespace=40)
    b = await start(cli_config, tmp_path, "hold", "slurm", "nsb", str(TTL), namespace=0)
    try:
        first_a, first_b = await a.line(), await b.line()
        host_a, pid_a, _, id_a = first_a["holder"].split(":")
        host_b, pid_b, _, id_b = first_b["holder"].split(":")
        # one hostname, two pid namespaces: pids that mean nothing in the other one
        assert host_a == host_b == socket.gethostname()
        assert int(pid_a) == first_a["pid"] != first_b["pid"] == int(pid_b)
        assert id_a.split("/")[0] != id_b.split("/")[0] != ""
        for _ in range(2):  # now, and again once both leases were renewed
            for child in (a, b):
                assert await child.ask("sweep") == {"closed": [], "cleared": [], "lost": None}
            # nor does this process (a third namespace) judge them
            assert await close_stale_runs(db) == [] and await clear_dead_leases(db) == []
            marks = {key: (await lease_doc(key))["expires_ms"]
                     for key in ("slurm:nsa", "slurm:nsb")}
            for key, since in marks.items():
                await until(lambda k=key, s=since: renewed(k, s), f"{key} renewed")
        running = {r.id for r in await SyncRun.find({"status": "running"}).to_list()}
        assert running == {first_a["run"], first_a["dry_run"], first_b["run"],
                           first_b["dry_run"]}

        a.kill()  # the whole namespace goes
        await asyncio.wait_for(a.proc.wait(), 30)
        # its run is stale once its lease expired unrenewed, by the store's clock
        await until(lambda: expired(db, "slurm:nsa"), "A's lease expired")
        swept = await b.ask("sweep")
        assert swept == {"closed": [first_a["run"]], "cleared": [], "lost": None}
        # the dry run (no lease) of a holder in another namespace is never judged
        assert (await SyncRun.get(first_a["dry_run"])).status == "running"
        assert (await SyncRun.get(first_a["run"])).status == "crashed"
        assert (await lease_doc("slurm:nsb"))["holder"] == first_b["holder"]
        assert await b.end() == 0
        assert {r.status for r in await SyncRun.find(
            {"_id": {"$in": [first_b["run"], first_b["dry_run"]]}}).to_list()} == {"ok"}
    finally:
        a.kill()
        b.kill()


@pytest.mark.parametrize("holder_offset,taker_offset", [(90, -90), (-90, 90)],
                         ids=["holder-fast", "holder-slow"])
async def test_a_host_clock_90_s_off_steals_no_live_lease_and_keeps_no_dead_one(
        db, cli_config, tmp_path, holder_offset, taker_offset):
    ttl_ms = int(TTL * 1000)

    def shifted(offset: int) -> dict[str, str]:
        return {**os.environ, "LEASE_CHILD_CLOCK_OFFSET": str(offset)}

    async def within_one_ttl() -> None:
        """The lease never expires more than one TTL after the store's now (a fast
        holder's clock would have written an expiry 90 s further out)."""
        doc = await lease_doc("slurm:skew")
        now = (await store_time(db)).ms
        assert doc is None or doc["expires_ms"] - now <= ttl_ms, (doc, now)

    holder = await start(cli_config, tmp_path, "hold", "slurm", "skew", str(TTL),
                         env=shifted(holder_offset))
    judge = await start(cli_config, tmp_path, "hold", "slurm", "skew-judge", str(TTL),
                        env=shifted(taker_offset))
    try:
        held, _ = await holder.line(), await judge.line()
        for _ in range(2):  # across renewals: more than a TTL in all
            await within_one_ttl()
            tried = await start(cli_config, tmp_path, "take", "slurm", "skew", str(TTL),
                                env=shifted(taker_offset))
            outcome = await tried.line()
            await tried.end()
            assert outcome["took"] is False and held["holder"] in outcome["error"]
            assert await judge.ask("sweep") == {"closed": [], "cleared": [], "lost": None}
            assert await holder.ask("sweep") == {"closed": [], "cleared": [], "lost": None}
            since = (await lease_doc("slurm:skew"))["expires_ms"]
            await until(lambda s=since: renewed("slurm:skew", s), "the lease renewed")
        assert (await SyncRun.get(held["run"])).status == "running"

        holder.kill()  # dead: its lease lasts until its expiry by the store's clock
        await asyncio.wait_for(holder.proc.wait(), 30)
        await within_one_ttl()
        await until(lambda: expired(db, "slurm:skew"), "the dead holder's lease expired")
        tried = await start(cli_config, tmp_path, "take", "slurm", "skew", str(TTL),
                            env=shifted(taker_offset))
        assert (await tried.line())["took"] is True
        await tried.end()
        swept = await judge.ask("sweep")
        # the lease-bound run by its lease; the dry run because its holder, of this same
        # pid namespace, provably ended
        assert sorted(swept["closed"]) == sorted([held["run"], held["dry_run"]])
        assert swept["cleared"] == [] and swept["lost"] is None
        assert await judge.end() == 0
    finally:
        holder.kill()
        judge.kill()


async def test_a_holder_whose_loop_is_blocked_past_its_lease_runs_nothing_after_the_takeover(
        db, slurm_accounting: SlurmAccounting, cli_config, tmp_path):
    site, _ = await seed(db, slurm_accounting, groups=3, coordinators=True)
    log = tmp_path / "writes.log"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    real = shutil.which("sacctmgr")
    assert real is not None
    wrapper = bindir / "sacctmgr"  # logs every write command, then runs the real one
    wrapper.write_text(f'#!/bin/sh\ncase " $* " in *" show "*|*" list "*) ;; '
                       f'*) echo "first $*" >> {log} ;; esac\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, **slurm_accounting.env, "PATH": f"{bindir}:{os.environ['PATH']}"}
    first = await start(cli_config, tmp_path, "apply", site, "1.5", "10", env=env)
    key = f"slurm:{site}"
    try:
        async def wrote() -> bool:
            return log.exists() and bool(log.read_text().strip())

        await until(wrote, "the first write command")
        # its loop is blocked now: no renewal; once expired by the store's clock, take it
        await until(lambda: expired(db, key), "the blocked holder's lease expired")
        async with lease(db, "slurm", site) as mine:
            with log.open("a") as sink:
                sink.write("TAKEOVER\n")
            report = await first.line(wait=120)
            assert await asyncio.wait_for(first.proc.wait(), 60) == 0
            assert (await lease_doc(key))["holder"] == mine.holder  # left alone
        lines = log.read_text().splitlines()
        # no command of the first holder ran after the takeover
        assert lines[-1] == "TAKEOVER" and lines.count("TAKEOVER") == 1
        assert len(lines) == 2  # one write before its loop blocked, none after
        outcomes = report["outcomes"]
        assert len(outcomes) > 1 and outcomes[0] == "ok"
        assert set(outcomes[1:]) == {"skipped"}
        assert all("lease" in detail for detail in report["details"][1:])
        run = await SyncRun.get(report["run"])
        assert run.status == "failed" and "lease" in (run.error or "")
        assert [i.outcome for i in await run_items(run.id)] == outcomes
    finally:
        first.kill()
