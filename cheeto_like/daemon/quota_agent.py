"""The quota agent: the site worker's loop that keeps the head node's quota table.

It runs beside a site's Celery worker (``cheeto daemon worker --site S`` starts it when
S is in ``slurm.enforcement.sites``) or alone (``cheeto daemon quota-agent -s S``). Each
pass, every ``poll_seconds``:

1. charges the jobs the completion hook spooled (sacct's record into the ledger);
2. rebuilds the table when the store moved (the site's data generation: quota changes,
   adjustments, factors), after a charge, when a period ends or a factor starts, and at
   least every ``refresh_seconds`` (the scheduled collect writes the ledger without a
   generation mark); an unchanged table only has its ``written_at`` moved;
3. releases the reservations of the charged jobs (after the table shows their charge:
   in between a job counts twice, never zero times);
4. every ``SWEEP_SECONDS``, drops reservations whose job slurmctld no longer holds as
   queued or running (a completion the hook missed, a cancelled array);
5. when the set of users and accounts out of quota changes, runs the site's Slurm sync
   (the ``slurm_sync`` task's block, under its lease) so the backstop's zero follows.

A pass that fails (store, sacct, slurmctld unreachable) is logged and retried on the
next; the plugin meanwhile reads the last table until it is ``max_age_seconds`` old.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pwd
import sqlite3
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..adapters.sacct import Sacct
from ..adapters.scontrol import SControl, show_jobs
from ..adapters.squeue import Squeue, every_job
from ..config import Config
from ..config.slurm import QuotaEnforcement
from ..enforcement import table as qtable
from ..enforcement.charge import Ledgered, charge_jobs, charge_spool, read_spool
from ..enforcement.desired import build_table
from ..enforcement.layout import Layout
from ..enforcement.sweep import parse_queue, parse_tags, plan_sweep
from ..errors import CheetoError
from ..models.fields import utcnow
from ..queries.generations import all_generations, site_generation
from ..queries.site import get_site
from ..store import Store

log = logging.getLogger(__name__)

SWEEP_SECONDS = 30.0
BLOCKS_RETRY_SECONDS = 30.0
RELEASED_KEPT_SECONDS = 7 * 86400


def out_of_quota(table: qtable.Table) -> frozenset[tuple[str, str]]:
    """Who the backstop blocks: used has reached a quota (as ``sync.slurm.quota``)."""
    return frozenset((s.kind, s.name) for s in table.subjects
                     if (s.cpu_quota is not None and s.cpu_used >= s.cpu_quota)
                     or (s.gpu_quota is not None and s.gpu_used >= s.gpu_quota)
                     or (s.budget is not None and s.money_used >= s.budget))


@dataclass
class PassReport:
    charged: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    released: int = 0
    swept: int = 0
    rebuilt: bool = False
    touched: bool = False
    blocks_synced: bool = False
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class QuotaAgent:
    store: Store
    config: Config
    site: str
    where: Layout
    sacct: Sacct = field(default_factory=Sacct)
    scontrol: SControl = field(default_factory=SControl)
    squeue: Squeue = field(default_factory=Squeue)
    sync_blocks: bool = True
    _generation: Any = None
    _built_at: float = 0.0
    _next_change: datetime | None = None
    _fingerprint: str | None = None
    _blocked: frozenset[tuple[str, str]] | None = None
    _swept_at: float = 0.0
    _cluster: str | None = None
    _blocks_retry_at: float | None = None
    # reservation id -> the jobs seen holding it (``enforcement.sweep``)
    _seen: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    # an open handle on the plugin's file: SQLite deletes the WAL when its last
    # connection closes, and the plugin opens and closes it per submission; with this one
    # open, a submission does not pay for a checkpoint and a new WAL every time
    _keepalive: sqlite3.Connection | None = None

    @property
    def settings(self) -> QuotaEnforcement:
        return self.config.slurm.enforcement

    def _owner(self) -> tuple[int, int] | None:
        try:
            entry = pwd.getpwnam(self.settings.slurm_user)
        except KeyError:
            return None
        return entry.pw_uid, entry.pw_gid

    def _seed(self) -> dict[str, tuple[float, float]]:
        """The config's rate card of the site (``usage.rates``, the seed)."""
        from ..queries.usage import config_seed

        return config_seed(self.config.usage, self.site)

    def _ensure_spool(self) -> None:
        """The hook writes as SlurmUser: a spool this (root) process had to re-create
        must be theirs, or every completion would be lost."""
        if self.where.spool.is_dir():
            return
        self.where.spool.mkdir(mode=0o700, parents=True, exist_ok=True)
        owner = self._owner()
        if owner is not None and os.geteuid() == 0:
            os.chown(self.where.spool, *owner)

    def _keep_wal(self) -> None:
        if self._keepalive is None and self.where.reservations.is_file():
            self._keepalive = sqlite3.connect(self.where.reservations, timeout=5)

    async def one_pass(self) -> PassReport:
        """One pass; a step that fails (sacct, squeue) is logged and the others still
        run, so the table keeps its freshness while slurmdbd is away (the reservations
        it cannot release stay counted: over, never under)."""
        report = PassReport()
        errors: list[str] = []
        if self._cluster is None:
            self._cluster = (await get_site(self.site)).cluster_name
        self._ensure_spool()
        self._keep_wal()
        charged = None
        try:
            entries = read_spool(self.where.spool)
            if entries:
                charged = await charge_spool(self.store, self.site, self._cluster, entries,
                                             self.sacct, seed=self._seed())
                report.charged, report.waiting = charged.jobs, charged.waiting
        except CheetoError as exc:
            errors.append(f"charge: {exc.message}")
        now = time.time()
        drops: list[str] = []
        swept: Ledgered | None = None
        if now - self._swept_at >= SWEEP_SECONDS and self.where.reservations.is_file():
            try:
                drops, swept = await self._sweep(now)
                self._swept_at = now
                report.charged = [*report.charged, *swept.jobs]
            except CheetoError as exc:
                errors.append(f"sweep: {exc.message}")
        releases = [*(charged.releases if charged else ()), *(swept.releases if swept else ())]
        generation = site_generation(await all_generations(), self.site)
        # a release makes the table due even when its charge was in the ledger already
        # (a collect wrote it): the table may predate that collect
        due = (generation != self._generation or bool(report.charged) or bool(releases)
               or bool(drops)
               or now - self._built_at >= self.settings.refresh_seconds
               or (self._next_change is not None and utcnow() >= self._next_change)
               or (self._blocks_retry_at is not None and now >= self._blocks_retry_at)
               or not self.where.table.is_file())
        if due:
            built = await build_table(self.site, datetime.now(UTC), seed=self._seed(),
                                      currency=self.config.usage.currency)
            fingerprint = built.table.fingerprint()
            if fingerprint != self._fingerprint or not self.where.table.is_file():
                qtable.write_table(self.where.table, built.table, owner=self._owner())
                report.rebuilt = True
            else:
                qtable.touch_table(self.where.table, owner=self._owner())
                report.touched = True
            self._generation, self._built_at = generation, now
            self._next_change, self._fingerprint = built.next_change, fingerprint
            report.blocks_synced = await self._follow_blocks(out_of_quota(built.table), now)
        # after the table shows the charges: in between a job counts twice, never zero
        if releases or drops:
            with qtable.reservations(self.where.reservations, self._owner()) as db:
                report.released = qtable.release(db, releases)
                report.swept = qtable.drop(db, drops,
                                           released_before=now - RELEASED_KEPT_SECONDS)
        if charged is not None:
            for path in charged.done:
                path.unlink(missing_ok=True)
        report.error = "; ".join(errors) or None
        for line in errors:
            log.warning("quota agent %s: %s", self.site, line)
        return report

    async def _follow_blocks(self, blocked: frozenset[tuple[str, str]], now: float) -> bool:
        """Run the Slurm sync when the out-of-quota set moved; a sync that failed is
        tried again after ``BLOCKS_RETRY_SECONDS`` (the set is remembered only once the
        blocks were written, or when nobody is to write them here)."""
        if self._blocked is None or blocked == self._blocked or not self.sync_blocks:
            self._blocked, self._blocks_retry_at = blocked, None
            return False
        outcome = await self._sync_blocks()
        if outcome is False:
            self._blocks_retry_at = now + BLOCKS_RETRY_SECONDS
            return False
        self._blocked, self._blocks_retry_at = blocked, None
        return bool(outcome)

    async def _sweep(self, now: float) -> tuple[list[str], Ledgered]:
        """What the hook missed (``enforcement.sweep``): reservations whose jobs ended
        are charged from sacct first and go once complete; ones that never became a job
        go after the grace. Returns the reservations to drop and what was charged."""
        assert self._cluster is not None
        queue_text = await every_job(self.squeue, self._cluster)
        shown = await show_jobs(self.scontrol)
        if not shown.ok:
            raise CheetoError(f"scontrol show job failed ({shown.summary()})")
        with qtable.reservations(self.where.reservations, self._owner()) as db:
            rows = [(r.id, r.user, r.created) for r in qtable.list_reservations(db)]
        plan = plan_sweep(rows, parse_queue(queue_text), parse_tags(shown.stdout),
                          self._seen, now=now,
                          grace=self.settings.reservation_grace_seconds)
        ledgered = await charge_jobs(self.store, self.site, self._cluster, plan.ids(),
                                     self.sacct, seed=self._seed())
        return [*plan.drop, *plan.ready(ledgered.complete)], ledgered

    async def _sync_blocks(self) -> bool | None:
        """The ``slurm_sync`` task's body on this agent's store connection (the task's
        own runner connects and rebinds the models, which would leave this process's
        models on a closed client); the sync's lease keeps it from overlapping a
        scheduled run. True: written; None: no slurm_sync task here (the scheduled sync
        elsewhere writes them); False: it failed (tried again)."""
        from .config import TASKS, daemon_config, task_block
        from .tasks import _slurm, resolve_author

        try:
            block = task_block(self.config, TASKS["slurm_sync"])
        except CheetoError as exc:
            log.info("quota agent %s: the out-of-quota set changed; no Slurm sync (%s)",
                     self.site, exc.message)
            return None
        try:
            author = await resolve_author(self.store, daemon_config(self.config).author)
            await _slurm(self.store, self.config, block, self.site, author)
        except CheetoError as exc:
            log.warning("quota agent %s: the Slurm sync for the new blocks did not run: %s",
                        self.site, exc.message)
            return False
        log.info("quota agent %s: the Slurm sync wrote the new blocks", self.site)
        return True

    async def run(self, *, once: bool = False, stop: asyncio.Event | None = None) -> None:
        from .. import logs

        stop = stop or asyncio.Event()
        with logs.context(site=self.site):  # every line the agent logs names its site
            await self._loop(once, stop)

    async def _loop(self, once: bool, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                report = await self.one_pass()
                if report.charged or report.rebuilt or report.released or report.swept:
                    log.info("quota agent %s: %s", self.site, report.as_dict())
            except Exception as exc:  # any failure: log it and serve the next pass
                if once:
                    raise
                log.warning("quota agent %s: pass failed: %s", self.site, exc)
            if once:
                return
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.settings.poll_seconds)
            except TimeoutError:
                pass


def agent_layout(config: Config, site: str, slurm_conf: Path) -> Layout:
    from ..enforcement.layout import layout

    return layout(config.slurm.enforcement, site, slurm_conf)


class AgentChild:
    """The site worker's quota agent, as a child process it keeps running.

    A child rather than a thread: the Celery worker forks its pool, and a thread holding
    a store connection does not survive (or worse, half-survives) a fork. The child is
    restarted when it dies (after ``RESTART_SECONDS``, logged) and stopped with the
    worker."""

    RESTART_SECONDS = 5.0

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        import threading

        self.argv = argv
        self.env = env or {}  # added to this process's (the metrics directory to join)
        self.stopping = threading.Event()
        self.proc: Any = None
        self.thread = threading.Thread(target=self._keep, name="quota-agent", daemon=True)

    def start(self) -> AgentChild:
        self.thread.start()
        return self

    def _keep(self) -> None:
        import subprocess

        while not self.stopping.is_set():
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                         env={**os.environ, **self.env})
            code = self.proc.wait()
            if self.stopping.is_set():
                return
            log.warning("quota agent exited with %s; restarting in %.0f s", code,
                        self.RESTART_SECONDS)
            self.stopping.wait(self.RESTART_SECONDS)

    def stop(self) -> None:
        import subprocess

        self.stopping.set()
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
