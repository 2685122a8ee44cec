"""The two SQLite files the plugin reads, and how the site worker writes them.

``quota.db`` (written here, read by the plugin): replaced whole by an atomic rename,
so the plugin, which opens it once per submission, sees the old table or the new one,
never half of one, and never waits on a lock. When nothing changed, only its
``written_at`` moves (one tiny in-place write), so ``max_age`` measures whether the
worker is alive, not whether anybody changed a quota.

- ``meta(key, value)``: ``written_at`` (epoch seconds), ``site``, ``fingerprint``;
- ``subjects(kind, name, cpu_quota, gpu_quota, cpu_used, gpu_used)``: every user and
  account with a quota of its own or usage in its period (minutes; a NULL quota is
  unlimited);
- ``defaults(kind, cpu_quota, gpu_quota)``: what applies to any other name;
- ``gpu_factors(gpu_type, factor)``: the factors in force now (``default`` for others);
- money (issue 28): ``subjects`` and ``defaults`` carry ``budget`` (NULL: none) and
  subjects ``money_used`` (the ledger's cost + money adjustments, in ``meta``'s
  ``currency``); ``rates(partition, cpu_hour, gpu_hour)`` are the rates in force now
  (``*``: every partition without one), which the plugin prices a request with.

``reservations.db`` (written by the plugin, one row per accepted job, id = the tag in
the job's admin_comment; ``cost_each`` is an element's price, added to files from before
budgets by ``ALTER TABLE`` here and in the plugin, each guarded by a look at the
columns): the worker releases an element's share when the hook reports it finished
(``released`` makes that idempotent per job id), and drops rows whose job is no longer
queued or running (a completion the hook missed). ``refusals(quota, n)`` counts the
jobs and changes the plugin refused, by quota kind (cpu, gpu, budget, no_time_limit,
stale): the site worker's metrics read it (``metrics.collectors_quota``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

BUSY_MS = 5000

RESERVATIONS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS reservations (id TEXT PRIMARY KEY, user TEXT NOT NULL,"
    " account TEXT NOT NULL, cpu_each REAL NOT NULL, gpu_each REAL NOT NULL,"
    " count INTEGER NOT NULL, created INTEGER NOT NULL, cost_each REAL NOT NULL DEFAULT 0)",
    "CREATE INDEX IF NOT EXISTS reservations_user ON reservations(user)",
    "CREATE INDEX IF NOT EXISTS reservations_account ON reservations(account)",
    "CREATE TABLE IF NOT EXISTS released (id TEXT NOT NULL, job_id TEXT NOT NULL,"
    " at INTEGER NOT NULL, PRIMARY KEY (id, job_id))",
    # the plugin's refusals by quota kind (metrics.collectors_quota reads them)
    "CREATE TABLE IF NOT EXISTS refusals (quota TEXT PRIMARY KEY, n INTEGER NOT NULL)",
)


@dataclass(frozen=True)
class SubjectRow:
    kind: str  # user | account
    name: str
    cpu_quota: float | None
    gpu_quota: float | None
    cpu_used: float
    gpu_used: float
    budget: float | None = None  # money (meta ``currency``); None: no budget
    money_used: float = 0.0


@dataclass(frozen=True)
class Table:
    """What ``quota.db`` holds (pure data: ``desired.build_table`` makes it)."""

    site: str
    subjects: tuple[SubjectRow, ...]
    defaults: tuple[tuple[str, float | None, float | None], ...]  # (kind, cpu, gpu)
    factors: tuple[tuple[str, float], ...]
    # (partition or '*', cpu_hour, gpu_hour) in force now; (kind, budget) defaults
    rates: tuple[tuple[str, float, float], ...] = ()
    budgets: tuple[tuple[str, float | None], ...] = ()
    currency: str = ""

    def fingerprint(self) -> str:
        blob = json.dumps([self.site, [list(vars(s).values()) for s in self.subjects],
                           self.defaults, self.factors, self.rates, self.budgets,
                           self.currency], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _chown(path: Path, owner: tuple[int, int] | None) -> None:
    if owner is not None and os.geteuid() == 0:
        os.chown(path, *owner)


def write_table(path: Path, table: Table, *, now: float | None = None,
                owner: tuple[int, int] | None = None) -> None:
    """Build the whole file beside ``path`` and rename it over (mode 0600)."""
    written = int(now if now is not None else time.time())
    fd, tmp = tempfile.mkstemp(prefix=".quota.", suffix=".db", dir=path.parent)
    os.close(fd)
    try:
        with contextlib.closing(sqlite3.connect(tmp)) as db:
            db.executescript(
                "PRAGMA journal_mode=DELETE;"
                "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
                "CREATE TABLE subjects (kind TEXT NOT NULL, name TEXT NOT NULL,"
                " cpu_quota REAL, gpu_quota REAL, cpu_used REAL NOT NULL,"
                " gpu_used REAL NOT NULL, budget REAL, money_used REAL NOT NULL DEFAULT 0,"
                " PRIMARY KEY (kind, name)) WITHOUT ROWID;"
                "CREATE TABLE defaults (kind TEXT PRIMARY KEY, cpu_quota REAL, gpu_quota REAL,"
                " budget REAL);"
                "CREATE TABLE gpu_factors (gpu_type TEXT PRIMARY KEY, factor REAL NOT NULL);"
                "CREATE TABLE rates (partition TEXT PRIMARY KEY, cpu_hour REAL NOT NULL,"
                " gpu_hour REAL NOT NULL);")
            db.executemany("INSERT INTO meta VALUES (?, ?)",
                           [("written_at", str(written)), ("site", table.site),
                            ("fingerprint", table.fingerprint()),
                            ("currency", table.currency)])
            db.executemany("INSERT INTO subjects VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           [(s.kind, s.name, s.cpu_quota, s.gpu_quota, s.cpu_used, s.gpu_used,
                             s.budget, s.money_used) for s in table.subjects])
            budgets = dict(table.budgets)
            db.executemany("INSERT INTO defaults VALUES (?, ?, ?, ?)",
                           [(kind, cpu, gpu, budgets.get(kind))
                            for kind, cpu, gpu in table.defaults])
            db.executemany("INSERT INTO gpu_factors VALUES (?, ?)", table.factors)
            db.executemany("INSERT INTO rates VALUES (?, ?, ?)", table.rates)
            db.commit()
        os.chmod(tmp, 0o600)
        _chown(Path(tmp), owner)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def touch_table(path: Path, *, now: float | None = None,
                owner: tuple[int, int] | None = None) -> bool:
    """Move ``written_at`` of an unchanged table; False when there is no table.

    On a copy renamed over the table, like a full write: an update in place would hold
    the file's lock while the plugin opens it, and Lua's DBI sets no busy timeout, so
    that submission would see "database is locked" and fall to ``on_stale``."""
    if not path.is_file():
        return False
    written = int(now if now is not None else time.time())
    fd, tmp = tempfile.mkstemp(prefix=".quota.", suffix=".db", dir=path.parent)
    os.close(fd)
    try:
        shutil.copyfile(path, tmp)
        with contextlib.closing(sqlite3.connect(tmp)) as db:
            db.execute("UPDATE meta SET value = ? WHERE key = 'written_at'", (str(written),))
            db.commit()
        os.chmod(tmp, 0o600)
        _chown(Path(tmp), owner)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def read_meta(path: Path) -> dict[str, str]:
    """The table's meta rows ({} when there is no table); read-only."""
    if not path.is_file():
        return {}
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return dict(db.execute("SELECT key, value FROM meta").fetchall())


@contextlib.contextmanager
def reservations(path: Path, owner: tuple[int, int] | None = None
                 ) -> Iterator[sqlite3.Connection]:
    """The plugin's file, opened as it opens it (WAL, a busy timeout), schema ensured."""
    fresh = not path.exists()
    db = sqlite3.connect(path, timeout=BUSY_MS / 1000, isolation_level=None)
    try:
        db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
        db.execute("PRAGMA journal_mode=WAL")
        for statement in RESERVATIONS_SCHEMA:
            db.execute(statement)
        columns = {row[1] for row in db.execute("PRAGMA table_info(reservations)")}
        if "cost_each" not in columns:  # a file from before budgets
            with contextlib.suppress(sqlite3.OperationalError):  # the plugin added it first
                db.execute("ALTER TABLE reservations ADD COLUMN cost_each REAL NOT NULL"
                           " DEFAULT 0")
        if fresh:
            path.chmod(0o600)
            _chown(path, owner)
        yield db
    finally:
        db.close()


@dataclass(frozen=True)
class Reserved:
    id: str
    user: str
    account: str
    cpu: float  # all elements still reserved
    gpu: float
    count: int
    created: int
    cost: float = 0.0


def list_reservations(db: sqlite3.Connection) -> list[Reserved]:
    rows = db.execute("SELECT id, user, account, cpu_each * count, gpu_each * count, count,"
                      " created, cost_each * count FROM reservations ORDER BY created"
                      ).fetchall()
    return [Reserved(*row) for row in rows]


def release(db: sqlite3.Connection, finished: Iterable[tuple[str, str]], *,
            now: float | None = None) -> int:
    """Release one element per (reservation id, job id) finished; a job id released
    before is skipped (a re-delivered hook file, a collect). Returns how many."""
    at = int(now if now is not None else time.time())
    released = 0
    db.execute("BEGIN IMMEDIATE")
    try:
        for rid, job_id in finished:
            cursor = db.execute("INSERT OR IGNORE INTO released VALUES (?, ?, ?)",
                                (rid, job_id, at))
            if cursor.rowcount != 1:
                continue
            db.execute("UPDATE reservations SET count = count - 1 WHERE id = ?", (rid,))
            released += 1
        db.execute("DELETE FROM reservations WHERE count <= 0")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return released


def drop(db: sqlite3.Connection, ids: Iterable[str], *, released_before: float) -> int:
    """Drop whole reservations (their jobs are gone) and forget old ``released`` rows."""
    wanted = list(ids)
    db.execute("BEGIN IMMEDIATE")
    try:
        gone = 0
        for rid in wanted:
            gone += db.execute("DELETE FROM reservations WHERE id = ?", (rid,)).rowcount
        db.execute("DELETE FROM released WHERE at < ?", (int(released_before),))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return gone
