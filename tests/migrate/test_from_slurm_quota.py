"""``cheeto migrate from-slurm-quota``: a slurm-quota v3 database, built in a temporary
directory with the schema slurm-quota creates, is imported into one site row by row
(defaults, own quotas, opening balances, GPU factors, roles); a dry run writes nothing, a
second run changes nothing, the source file is never written, and a file that is not
such a database is one line, exit 2."""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cheeto_like.migrate.from_slurm_quota import (
    Known,
    Source,
    Subject,
    import_id,
    map_slurm_quota,
    quota_minutes,
)
from cheeto_like.models import History, Quota, QuotaAdjustment, QuotaDefaults
from cheeto_like.models.auth import RoleGrant
from cheeto_like.models.usage import GpuFactor
from cheeto_like.operations.quota import SetGpuFactor, SetQuota

from ..factories import AUTHOR, make_group, make_site, make_user

# slurm-quota v3's tables, as its database.py creates them (and slurm-quota-migrate
# brings a v2 file to)
SCHEMA = """
CREATE TABLE users (
    username TEXT PRIMARY KEY,
    total_consumed_cpu_minutes INTEGER DEFAULT 0,
    quota_cpu_minutes INTEGER DEFAULT -1,
    total_consumed_gpu_minutes INTEGER DEFAULT 0,
    quota_gpu_minutes INTEGER DEFAULT -1,
    last_updated TIMESTAMP DEFAULT CURRENT_TIMESTAMP
);
CREATE TABLE accounts (
    account TEXT PRIMARY KEY,
    total_consumed_cpu_minutes INTEGER DEFAULT 0,
    quota_cpu_minutes INTEGER DEFAULT -1,
    total_consumed_gpu_minutes INTEGER DEFAULT 0,
    quota_gpu_minutes INTEGER DEFAULT -1,
    last_updated TIMESTAMP DEFAULT CURRENT_TIMESTAMP
);
CREATE TABLE jobs_preallocations (
    job_uuid TEXT PRIMARY KEY,
    username TEXT NOT NULL,
    account TEXT NOT NULL,
    preallocated_cpu_minutes INTEGER NOT NULL,
    preallocated_gpu_minutes INTEGER DEFAULT 0,
    array_size INTEGER DEFAULT 1,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    FOREIGN KEY (username) REFERENCES users (username),
    FOREIGN KEY (account) REFERENCES accounts (account)
);
CREATE TABLE gpu_factors (gpu_type TEXT PRIMARY KEY, factor REAL NOT NULL);
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE operators (username TEXT PRIMARY KEY);
CREATE TABLE managers (username TEXT PRIMARY KEY);
CREATE TABLE manager_accounts (
    manager_username TEXT NOT NULL,
    account TEXT NOT NULL,
    PRIMARY KEY (manager_username, account),
    FOREIGN KEY (manager_username) REFERENCES managers(username) ON DELETE CASCADE
);
"""

# (name, consumed cpu, quota cpu, consumed gpu, quota gpu)
USERS = [
    ("alice", 150, 12000, 20, -1),      # own CPU quota, consumed both
    ("bob", 0, 6000, 0, -1),            # the defaults, nothing consumed: nothing to import
    ("carol", 30, -1, 0, 100),          # own quota, not in the store
    ("dave", 45, 6000, 0, -1),          # the defaults, consumed: an opening balance only
    ("Bad.Name", 0, 6000, 0, -1),       # not a POSIX name, but carries nothing
]
ACCOUNTS = [
    ("lab", 1000, 90000, 50, 600),      # own CPU quota; GPU equal to the default (pinned)
    ("physics", 0, 60000, 0, 600),      # the defaults
    ("ghostlab", 10, 60000, 0, 600),    # consumed, not in the store
]
SETTINGS = {"default_user_quota_cpu_minutes": "6000", "default_user_quota_gpu_minutes": "-1",
            "default_account_quota_cpu_minutes": "60000",
            "default_account_quota_gpu_minutes": "600"}
FACTORS = [("default", 0.5), ("a100", 2.0), ("t4", 0.25), ("broken", -1.0)]


def build_db(path: Path, *, users=USERS, accounts=ACCOUNTS, settings=SETTINGS,
             factors=FACTORS, wal: bool = False) -> sqlite3.Connection:
    """The database as slurm-quota leaves it; the connection stays open (close it)."""
    conn = sqlite3.connect(path)
    if wal:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(SCHEMA)
    conn.executemany("INSERT INTO users (username, total_consumed_cpu_minutes, "
                     "quota_cpu_minutes, total_consumed_gpu_minutes, quota_gpu_minutes) "
                     "VALUES (?, ?, ?, ?, ?)", users)
    conn.executemany("INSERT INTO accounts (account, total_consumed_cpu_minutes, "
                     "quota_cpu_minutes, total_consumed_gpu_minutes, quota_gpu_minutes) "
                     "VALUES (?, ?, ?, ?, ?)", accounts)
    conn.executemany("INSERT INTO settings (key, value) VALUES (?, ?)", settings.items())
    conn.executemany("INSERT INTO gpu_factors (gpu_type, factor) VALUES (?, ?)", factors)
    conn.executemany("INSERT INTO operators (username) VALUES (?)", [("alice",), ("ghost",)])
    conn.executemany("INSERT INTO managers (username) VALUES (?)", [("bob",), ("carol",)])
    conn.executemany("INSERT INTO manager_accounts (manager_username, account) VALUES (?, ?)",
                     [("bob", "lab"), ("bob", "ghostlab"), ("carol", "lab")])
    conn.executemany("INSERT INTO jobs_preallocations (job_uuid, username, account, "
                     "preallocated_cpu_minutes) VALUES (?, ?, ?, ?)",
                     [("u-1", "alice", "lab", 60), ("u-2", "dave", "lab", 30)])
    conn.commit()
    return conn


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
async def farm(db):
    await make_site(db, "farm")
    for name in ("alice", "bob", "dave"):
        await make_user(db, name)
    for name in ("lab", "physics"):
        await make_group(db, name)
    return db


@pytest.fixture
def sq(tmp_path):
    path = tmp_path / "slurm-quota.db"
    build_db(path).close()
    return path


async def _state() -> dict[str, Any]:
    """Every document an import writes, by collection, without bookkeeping times."""
    out: dict[str, Any] = {}
    for model in (QuotaDefaults, Quota, QuotaAdjustment, GpuFactor, RoleGrant):
        docs = await model.find({}).to_list()
        out[model.get_settings().name] = sorted(
            (d.model_dump(exclude={"created_at", "updated_at", "revision_id"}) for d in docs),
            key=lambda d: d["id"])
    return out


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


async def test_every_kind_of_row_is_imported(farm, cli, sq):
    before = digest(sq)
    started = datetime.now(UTC).replace(microsecond=0)
    r = await cli("migrate", "from-slurm-quota", str(sq), "--site", "farm", "--json")
    assert r.code == 0, r.stderr
    report = r.json()
    assert report["written"] is True and report["refused"] == []
    counts = {c["collection"]: (c["source"], c["new"], c["present"])
              for c in report["collections"]}
    assert counts == {"quota_defaults": (1, 1, 0), "quotas": (8, 3, 0),
                      "quota_adjustments": (8, 5, 0), "gpu_factors": (4, 3, 0),
                      "role_grants": (4, 2, 0)}
    assert digest(sq) == before  # read only

    d = await QuotaDefaults.find_one({"site": "farm"})
    assert (d.user_cpu_minutes, d.user_gpu_minutes, d.account_cpu_minutes,
            d.account_gpu_minutes, d.period, d.carry_over) == (6000, None, 60000, 600,
                                                               "none", False)

    quotas = {(q.user or q.account): q for q in await Quota.find({}).to_list()}
    assert {k: (q.site, q.user, q.account, q.cpu_minutes, q.gpu_minutes, q.period,
                q.follows_defaults) for k, q in quotas.items()} == {
        "alice": ("farm", "alice", None, 12000, None, "none", ["period"]),
        "carol": ("farm", "carol", None, None, 100, "none", ["period"]),
        "lab": ("farm", None, "lab", 90000, 600, "none", ["period"])}  # bob, dave, physics:
    # the defaults; lab's GPU equals the default and is set all the same
    assert quotas["alice"].id == import_id("quotas", "farm", "user", "alice")

    adjustments = {(a.user or a.account): a for a in await QuotaAdjustment.find({}).to_list()}
    assert {k: (a.user, a.account, a.cpu_minutes, a.gpu_minutes)
            for k, a in adjustments.items()} == {
        "alice": ("alice", None, 150, 20), "carol": ("carol", None, 30, 0),
        "dave": ("dave", None, 45, 0), "lab": (None, "lab", 1000, 50),
        "ghostlab": (None, "ghostlab", 10, 0)}
    alice = adjustments["alice"]
    assert alice.reason == f"opening balance from slurm-quota {sq.resolve()}"
    assert started <= _aware(alice.at) <= datetime.now(UTC)
    assert alice.at_epoch == int(_aware(alice.at).timestamp())

    factors = {f.gpu_type: f for f in await GpuFactor.find({"site": "farm"}).to_list()}
    assert {t: f.factor for t, f in factors.items()} == {"default": 0.5, "a100": 2.0,
                                                          "t4": 0.25}
    assert started <= _aware(factors["a100"].effective_from) <= datetime.now(UTC)

    grants = {(g.user, g.role): g for g in await RoleGrant.find({}).to_list()}
    assert {k: g.accounts for k, g in grants.items()} == {("alice", "operator"): [],
                                                          ("bob", "manager"): ["lab"]}

    assert report["not_in_store"] == {"users": ["carol"], "accounts": ["ghostlab"]}
    skipped = "\n".join(report["skipped"])
    for expected in ("broken", "operator ghost: not a user in the store",
                     "account 'ghostlab' is not a group in the store",
                     "manager carol: not a user in the store"):
        assert expected in skipped
    notes = "\n".join(report["notes"])
    for expected in ("2 jobs_preallocations row(s) not imported",
                     "2 users with the default quotas and nothing consumed",
                     "1 account with the default quotas", "2 own quota(s) differ",
                     f"--site farm --since {started:%Y-%m-%d}", "serve.ini"):
        assert expected in notes

    rows = await History.find({"op": "migrate_from_slurm_quota"}).to_list()
    assert len(rows) == 1 and rows[0].changes["imported"] == {
        "quota_defaults": 1, "quotas": 3, "quota_adjustments": 5, "gpu_factors": 3,
        "role_grants": 2}

    # what the site now says: alice's quota and the opening balance as used
    shown = await cli("ng", "quota", "show", "--site", "farm", "--user", "alice",
                      "--no-squeue", "--json")
    assert shown.code == 0, shown.stderr
    (status,) = shown.json()["subjects"]
    cpu, gpu = status["cpu_minutes"], status["gpu_minutes"]
    assert (status["source"], cpu["used"], cpu["quota"], gpu["used"], gpu["quota"]) == (
        "own", 150, 12000, 20, None)


async def test_a_dry_run_writes_nothing(farm, cli, sq):
    before = await _state()
    r = await cli("migrate", "from-slurm-quota", str(sq), "--site", "farm", "--dry-run",
                  "--json")
    assert r.code == 0, r.stderr
    report = r.json()
    assert report["dry_run"] is True and report["written"] is False
    assert sum(c["new"] for c in report["collections"]) == 14
    assert await _state() == before
    assert await History.find({"op": "migrate_from_slurm_quota"}).count() == 0
    human = await cli("migrate", "from-slurm-quota", str(sq), "--site", "farm", "--dry-run")
    assert human.code == 0 and "14 document(s) would be written" in human.stderr


async def test_a_second_run_changes_nothing(farm, cli, sq):
    first = await cli("migrate", "from-slurm-quota", str(sq), "--site", "farm")
    assert first.code == 0, first.stderr
    after_first = await _state()
    second = await cli("migrate", "from-slurm-quota", str(sq), "--site", "farm", "--json")
    assert second.code == 0, second.stderr
    counts = {c["collection"]: (c["new"], c["present"]) for c in second.json()["collections"]}
    assert counts == {"quota_defaults": (0, 1), "quotas": (0, 3), "quota_adjustments": (0, 5),
                      "gpu_factors": (0, 3), "role_grants": (0, 2)}
    assert second.json()["written"] is False
    assert await _state() == after_first  # the opening balances did not double
    assert await History.find({"op": "migrate_from_slurm_quota"}).count() == 1
    human = await cli("migrate", "from-slurm-quota", str(sq), "--site", "farm")
    assert human.code == 0 and "nothing to import" in human.stderr


async def test_a_balance_that_moved_on_since_the_import_is_refused(farm, cli, tmp_path):
    path = tmp_path / "sq.db"
    build_db(path).close()
    assert (await cli("migrate", "from-slurm-quota", str(path), "--site", "farm")).code == 0
    before = await _state()
    with sqlite3.connect(path) as conn:  # slurm-quota charged alice some more
        conn.execute("UPDATE users SET total_consumed_cpu_minutes = 200 "
                     "WHERE username = 'alice'")
        conn.execute("UPDATE users SET quota_cpu_minutes = 15000 WHERE username = 'carol'")
    conn.close()
    r = await cli("migrate", "from-slurm-quota", str(path), "--site", "farm", "--json")
    assert r.code == 2
    refused = "\n".join(r.json()["refused"])
    assert "user alice: an earlier import opened the balance at CPU 150" in refused
    assert "this database says CPU 200" in refused
    assert "user carol: the store holds another quota" in refused
    assert await _state() == before


async def test_a_quota_the_store_already_holds_alike_is_present(farm, cli, sq):
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=12000.0,
                       gpu_minutes=None)
    r = await cli("migrate", "from-slurm-quota", str(sq), "--site", "farm", "--json")
    assert r.code == 0, r.stderr
    counts = {c["collection"]: (c["new"], c["present"]) for c in r.json()["collections"]}
    assert counts["quotas"] == (2, 1)
    assert await Quota.find({"user": "alice"}).count() == 1


async def test_a_live_wal_database_is_read_with_its_wal(farm, cli, tmp_path):
    path = tmp_path / "live.db"
    conn = build_db(path, wal=True)  # held open: the rows stay in the -wal file
    try:
        assert Path(f"{path}-wal").stat().st_size > 0
        r = await cli("migrate", "from-slurm-quota", str(path), "--site", "farm", "--json")
        assert r.code == 0, r.stderr
        assert await Quota.find({}).count() == 3
    finally:
        conn.close()


async def test_a_gpu_factor_already_in_force_is_kept_and_a_future_one_refuses(farm, cli, sq):
    await SetGpuFactor.run(farm, AUTHOR, site="farm", gpu_type="a100", factor=2.0)
    r = await cli("migrate", "from-slurm-quota", str(sq), "--site", "farm", "--json")
    assert r.code == 0, r.stderr
    counts = {c["collection"]: (c["new"], c["present"]) for c in r.json()["collections"]}
    assert counts["gpu_factors"] == (2, 1)
    assert await GpuFactor.find({"gpu_type": "a100"}).count() == 1

    later = datetime.now(UTC) + timedelta(days=30)
    await SetGpuFactor.run(farm, AUTHOR, site="farm", gpu_type="t4", factor=0.3,
                           effective_from=later)
    again = await cli("migrate", "from-slurm-quota", str(sq), "--site", "farm", "--json")
    assert again.code == 2
    assert any("gpu_factors t4: the store has factor 0.3 from" in line
               for line in again.json()["refused"])


@pytest.mark.parametrize("kind", ["text", "v2", "missing", "empty"])
async def test_a_file_that_is_not_a_v3_database_is_one_line_exit_2(farm, cli, tmp_path, kind):
    path = tmp_path / "not.db"
    if kind == "text":
        path.write_text("users,quota\nalice,100\n" * 100)
    elif kind == "v2":  # before slurm-quota-migrate: no GPU columns, no roles
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE users (username TEXT PRIMARY KEY, "
                         "total_consumed_cpu_minutes INTEGER, quota_cpu_minutes INTEGER)")
        conn.close()
    elif kind == "empty":
        path.write_bytes(b"")
    before = digest(path) if path.exists() else None
    r = await cli("migrate", "from-slurm-quota", str(path), "--site", "farm")
    assert r.code == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr
    if kind == "missing":
        assert "no such file" in lines[0]
    else:
        assert "is not a slurm-quota v3 database" in lines[0]
        assert digest(path) == before
    assert await _state() == {"quota_defaults": [], "quotas": [], "quota_adjustments": [],
                              "gpu_factors": [], "role_grants": []}


async def test_the_site_must_exist(farm, cli, sq):
    r = await cli("migrate", "from-slurm-quota", str(sq), "--site", "nosuch")
    assert r.code == 2 and "nosuch" in r.stderr


# -- the pure mapping ------------------------------------------------------------------


NOW = datetime(2026, 11, 25, 12, tzinfo=UTC)


def _map(source: Source, known: Known | None = None):
    return map_slurm_quota(source, site="farm", origin="/tmp/sq.db",
                           known=known or Known(users=frozenset({"alice"})), now=NOW)


@pytest.mark.parametrize(("raw", "expected"), [
    (-1, (None, None)), (None, (None, None)), (0, (0.0, None)), (600, (600.0, None)),
    ("600", (600.0, None)), (12.5, (12.5, None)), ("-1", (None, None))])
def test_quota_values(raw, expected):
    assert quota_minutes(raw) == expected


@pytest.mark.parametrize("raw", [-2, "lots", 1e13, float("nan"), b"600"])
def test_bad_quota_values_are_problems(raw):
    assert quota_minutes(raw)[1] is not None


def test_a_bad_name_that_holds_something_is_refused():
    source = Source(users=[Subject("Alice Smith", 10, -1, 0, -1), Subject("UPPER", 0, -1, 0, -1)])
    out = _map(source)
    assert [r.line() for r in out.refusals] == [
        "users Alice Smith: user 'Alice Smith' is not a valid POSIX name (lowercase letters,"
        " digits, '_', '.', '-'; at most 32), and it holds a quota or consumed minutes"]
    assert any("1 user with the default quotas" in n for n in out.notes)


def test_bad_values_and_factors_are_refused():
    source = Source(users=[Subject("alice", -5, -1, 0, -1)],
                    gpu_factors=[("a100", 5000.0), ("bad type!", 1.0), ("t4", "x")])
    out = _map(source)
    lines = [r.line() for r in out.refusals]
    assert lines[0].startswith("users alice: CPU consumed -5")
    assert "gpu_factors a100: factor 5000 is above 1000" in lines
    assert any(line.startswith("gpu_factors bad type!") for line in lines)
    assert any("GPU factor t4 = 'x'" in s for s in out.skipped)


def test_missing_settings_read_as_unlimited():
    out = _map(Source(settings={"default_user_quota_cpu_minutes": "soon"}))
    (defaults,) = [m.doc for m in out.docs["quota_defaults"]]
    assert (defaults.user_cpu_minutes, defaults.account_gpu_minutes) == (None, None)
    assert sum("read as unlimited" in n for n in out.notes) == 4


def test_a_manager_already_granted_other_accounts_is_left_alone():
    known = Known(users=frozenset({"bob"}), groups=frozenset({"lab", "chem"}),
                  grants={("bob", "manager"): {"_id": "g1", "user": "bob", "role": "manager",
                                               "accounts": ["chem"], "granted_by": "root"}})
    out = _map(Source(managers=["bob"], manager_accounts=[("bob", "lab")]), known)
    assert not out.docs.get("role_grants")
    assert any("manager bob: already manages chem; not changed (add lab" in s
               for s in out.skipped)
