"""What the submit-time quota check adds to one ``sbatch`` (issue 26): the time a
submission takes with the check and without it, on a live one-node cluster
(tests/services/slurm_cluster.py) whose ``job_submit.lua`` is the one ``ng site
enforcement install`` writes.

The table holds ``--users`` users and as many accounts (``write_table``, the worker's
own writer), the reservations file ``--reservations`` rows over them (the plugin's
schema, opened as the plugin opens it); the submitter (a unix user of the test
harness) and its account are in the table with a quota nothing reaches, so every job
is accepted. Each job is ``sbatch --hold`` (nothing runs), timed from the client with
``time.perf_counter`` around the whole process (sbatch's own start-up included).

Sides, in one cluster and one run, the order rotated every round:

- ``check``: the plugin as ``ng site enforcement install`` renders it (fail_open, a
  fresh table), rendered once at the start so every round runs the same text (its
  hash, the commit and whether the source differs from it are printed as ``plugin``);
- ``lua_noop``: the same JobSubmitPlugins=lua, its script replaced by one whose
  ``slurm_job_submit`` returns ``slurm.SUCCESS`` (slurmctld reloads the script when its
  mtime, in whole seconds, moves past the loaded one's): **the baseline**, what the
  check itself costs;
- ``no_plugin``: the ``JobSubmitPlugins=lua`` line commented out of slurm.conf and
  ``scontrol reconfigure`` (show config then says ``(null)``, and the warm-up jobs
  carry no tag): slurmctld with no job_submit plugin at all, i.e. what Lua itself costs.

Between sides the held jobs are cancelled, the reservations the side added deleted and
the table's ``written_at`` moved (``touch_table``). Each side starts with warm-up jobs
(not timed) that prove the switch: the check's carry the reservation tag in
AdminComment, the others do not. One submission to an account with a tiny quota must
be refused with the quota message (the table is really read). slurmctld's
``MinJobAge`` is lowered to 2 s and ``MaxJobCount`` raised in this bench's slurm.conf
(cancelled jobs stay counted until purged, and a run submits more than 10,000).

Per side and round: p50, p99 and mean of the client wall times (ms) and of slurmctld's
own ``usec=`` for the RPC (22.05 starts that timer after the job_submit plugin has
run: a control that the rest of the submission costs the same on every side); over
the rounds, min and median of each, and the check's added time (check − baseline of
the same round).
One JSON object on stdout; progress on stderr.

    .venv/bin/python bench/quota_submit.py [--submissions 1000] [--rounds 5]
        [--users 20000] [--reservations 5000] [--sides check,lua_noop,no_plugin]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import progress

from cheeto_like.enforcement import table as qtable
from cheeto_like.enforcement.layout import TAG
from cheeto_like.enforcement.render import render_lua
from cheeto_like.files import write_atomically
from tests.services.slurm_cluster import SlurmCluster, ensure_unix_user

SUBMITTER = "alice"  # a unix user the live tests make anyway
ACCOUNT = "qbench"
TINY = "qbenchtiny"  # in the table with half a CPU-minute: its jobs are refused
WARMUP = 3
SIDES = ("check", "lua_noop", "no_plugin")
BASELINE = "lua_noop"
NOOP_LUA = """-- bench/quota_submit.py: the baseline, JobSubmitPlugins=lua doing nothing
function slurm_job_submit(job_desc, part_list, submit_uid)
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end

return slurm.SUCCESS
"""
USEC = re.compile(r"_slurm_rpc_submit_batch_job: JobId=(\d+) InitPrio=\d+ usec=(\d+)")


class BenchCluster(SlurmCluster):
    """The harness's cluster, purging cancelled jobs soon (MinJobAge) and holding more."""

    def _slurm_conf_text(self) -> str:
        text = super()._slurm_conf_text()
        if "MinJobAge=300\n" not in text:
            raise SystemExit("the harness's slurm.conf changed: no MinJobAge=300 line")
        return text.replace("MinJobAge=300\n", "MinJobAge=2\nMaxJobCount=100000\n")


# ------------------------------------------------------------------------ the files


def seed_table(cluster: SlurmCluster, users: int, rng: random.Random) -> None:
    """``users`` users and as many accounts, the submitter's two among them; minutes,
    budgets in money for a third of them, and rates (the plugin prices every job)."""
    rows = []
    for kind, prefix in (("user", "u"), ("account", "a")):
        for n in range(users):
            quota = rng.choice((None, 600.0, 6000.0, 60000.0))
            gpu = rng.choice((None, 60.0, 600.0))
            budget = rng.choice((None, None, 100.0, 5000.0))
            rows.append(qtable.SubjectRow(
                kind, f"{prefix}{n:05d}", quota, gpu, round(rng.uniform(0, quota or 1e3), 4),
                round(rng.uniform(0, gpu or 10.0), 4), budget,
                round(rng.uniform(0, budget or 10.0), 4)))
    rows += [qtable.SubjectRow("user", SUBMITTER, 1e9, 1e9, 1234.5, 0.0, 1e9, 12.5),
             qtable.SubjectRow("account", ACCOUNT, 1e9, 1e9, 98765.4, 12.0, 1e9, 950.0),
             qtable.SubjectRow("account", TINY, 0.5, None, 0.0, 0.0)]
    table = qtable.Table(site=cluster.enforcement_site, subjects=tuple(rows),
                         defaults=(("user", 6000.0, 600.0), ("account", None, None)),
                         factors=(("a100", 2.0), ("default", 1.0), ("t4", 0.5)),
                         rates=(("*", 0.01, 0.5), ("cpu", 0.02, 0.0), ("gpu", 0.02, 1.0)),
                         budgets=(("user", 500.0), ("account", None)), currency="CHF")
    qtable.write_table(cluster.enforcement.table, table)


def seed_reservations(cluster: SlurmCluster, count: int, users: int,
                      rng: random.Random) -> int:
    """``count`` rows (ids ``seed…``) over random users and accounts, 1 % of them the
    submitter's and its account's (so its SUMs read rows)."""
    own = max(1, count // 100)
    now = int(time.time())
    rows = []
    for n in range(count):
        mine = n < own
        user = SUBMITTER if mine else f"u{rng.randrange(users):05d}"
        account = ACCOUNT if mine else f"a{rng.randrange(users):05d}"
        cpu, gpu = float(rng.choice((1, 4, 60, 240))), float(rng.choice((0, 0, 0, 60)))
        rows.append((f"seed{n:06d}", user, account, cpu, gpu, rng.choice((1, 1, 1, 16)),
                     now - rng.randrange(86400), round(cpu / 60 * 0.02 + gpu / 60, 6)))
    with qtable.reservations(cluster.enforcement.reservations) as db:
        db.execute("BEGIN IMMEDIATE")
        db.executemany("INSERT INTO reservations (id, user, account, cpu_each, gpu_each,"
                       " count, created, cost_each) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        db.execute("COMMIT")
    return own


def reservation_count(cluster: SlurmCluster) -> tuple[int, int]:
    """(seeded rows, rows the plugin added)."""
    with qtable.reservations(cluster.enforcement.reservations) as db:
        seeded, = db.execute("SELECT count(*) FROM reservations WHERE id LIKE 'seed%'"
                             ).fetchone()
        added, = db.execute("SELECT count(*) FROM reservations WHERE id NOT LIKE 'seed%'"
                            ).fetchone()
    return seeded, added


def priced(cluster: SlurmCluster) -> bool:
    """Every reservation the plugin added has a price (it read the rates)."""
    with qtable.reservations(cluster.enforcement.reservations) as db:
        cheapest, = db.execute("SELECT min(cost_each) FROM reservations"
                               " WHERE id NOT LIKE 'seed%'").fetchone()
    return cheapest is not None and cheapest > 0


def drop_added_reservations(cluster: SlurmCluster) -> None:
    with qtable.reservations(cluster.enforcement.reservations) as db:
        db.execute("DELETE FROM reservations WHERE id NOT LIKE 'seed%'")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


# ------------------------------------------------------------------------ the sides


class Switch:
    """Puts the cluster on one side: the Lua script and JobSubmitPlugins."""

    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster
        self.plugin = True
        # rendered once: every check side runs the same text, even if the source changes
        self.check_text = render_lua(cluster.enforcement_settings(), cluster.enforcement)
        self.script = "check"

    def _next_second(self) -> None:
        """slurmctld reloads the script only when its mtime (whole seconds) is past the
        loaded one's: write the next one in a later second."""
        lua = self.cluster.enforcement.lua
        if lua.exists():
            while int(time.time()) <= int(lua.stat().st_mtime):
                time.sleep(0.05)

    def _set_script(self, name: str) -> None:
        if name == self.script:
            return
        self._next_second()
        if name == "check":  # what install writes (it keeps a file not its own)
            write_atomically(self.cluster.enforcement.lua, self.check_text, mode=0o644)
        else:
            write_atomically(self.cluster.enforcement.lua, NOOP_LUA, mode=0o644)
        self.script = name

    def _set_plugin(self, on: bool) -> None:
        """JobSubmitPlugins=lua in slurm.conf, or commented out; scontrol reconfigure."""
        if on == self.plugin:
            return
        conf = self.cluster.slurm_conf
        line, off = "\nJobSubmitPlugins=lua\n", "\n#JobSubmitPlugins=lua\n"
        old, new = (off, line) if on else (line, off)
        text = conf.read_text()
        if old not in text:
            raise SystemExit(f"slurm.conf lacks {old.strip()}")
        conf.write_text(text.replace(old, new))
        self.cluster.scontrol("reconfigure")
        wanted = ("lua", "job_submit/lua") if on else ("(null)", "")
        deadline = time.monotonic() + 30
        while True:
            live = self.cluster.scontrol("show", "config")
            found = re.search(r"^JobSubmitPlugins\s*=[ \t]*(\S*)", live, re.M)
            if found and found.group(1) in wanted:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"JobSubmitPlugins did not become {wanted[0]}")
            time.sleep(0.2)
        self.plugin = on

    def to(self, side: str) -> None:
        if side == "no_plugin":
            self._set_plugin(False)
        else:
            # the script first: the plugin loaded again by reconfigure reads the new one
            self._set_script(side)
            self._set_plugin(True)


class Submitter:
    def __init__(self, cluster: SlurmCluster) -> None:
        entry = ensure_unix_user(SUBMITTER)
        self.uid, self.gid = entry.pw_uid, entry.pw_gid
        self.env = {**cluster.client_env(), "HOME": "/tmp"}
        self.base = cluster.base
        self.cluster = cluster

    def argv(self, account: str) -> list[str]:
        return ["sbatch", "--parsable", "--hold", "--time=1", "-n1", "-A", account,
                "-p", "cpu", "-o", "/dev/null", f"--chdir={self.base}/jobs",
                "--wrap", "true"]

    def submit(self, account: str = ACCOUNT) -> tuple[float, subprocess.CompletedProcess[str]]:
        argv = self.argv(account)
        started = time.perf_counter()
        done = subprocess.run(argv, env=self.env, user=self.uid, group=self.gid,
                              extra_groups=[], capture_output=True, text=True,
                              timeout=60, check=False)
        return time.perf_counter() - started, done

    def job_id(self, done: subprocess.CompletedProcess[str]) -> str:
        if done.returncode != 0 or not done.stdout.strip():
            raise SystemExit(f"sbatch failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout.strip().split(";")[0]

    def admin_comment(self, job_id: str) -> str:
        out = self.cluster.scontrol("-o", "show", "job", job_id)
        found = re.search(r"\bAdminComment=(\S*)", out)
        return found.group(1) if found else ""

    def cancel_all(self) -> None:
        self.cluster.as_user("root", "scancel", "-u", SUBMITTER)
        deadline = time.monotonic() + 30
        while self.cluster.squeue("-h", "-u", SUBMITTER, "-t", "PD,R", "-o", "%i").split():
            if time.monotonic() > deadline:
                raise SystemExit("held jobs were not cancelled in 30 s")
            time.sleep(0.2)


def percentile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least q of them at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": round(percentile(values, 0.50), 3), "p99": round(percentile(values, 0.99), 3),
            "mean": round(statistics.fmean(values), 3), "max": round(max(values), 3)}


def server_usec(cluster: SlurmCluster, job_ids: list[str]) -> list[float]:
    """slurmctld's ``usec=`` of these jobs' submit RPCs, in ms."""
    wanted = set(job_ids)
    found = []
    text = cluster._log("slurmctld.log").read_text(errors="replace")
    for match in USEC.finditer(text):
        if match.group(1) in wanted:
            found.append(int(match.group(2)) / 1000)
    return found


def one_side(cluster: SlurmCluster, switch: Switch, sub: Submitter, side: str,
             submissions: int) -> dict[str, object]:
    switch.to(side)
    qtable.touch_table(cluster.enforcement.table)
    for _ in range(WARMUP):
        _, done = sub.submit()
        comment = sub.admin_comment(sub.job_id(done))
        if (TAG in comment) != (side == "check"):
            raise SystemExit(f"side {side}: a warm-up job's AdminComment is {comment!r}")
    before = reservation_count(cluster)[1]
    walls, ids = [], []
    for _ in range(submissions):
        elapsed, done = sub.submit()
        ids.append(sub.job_id(done))
        walls.append(elapsed * 1000)
    added = reservation_count(cluster)[1] - before
    if added != (submissions if side == "check" else 0):
        raise SystemExit(f"side {side}: the plugin added {added} reservations")
    if side == "check" and not priced(cluster):
        raise SystemExit("the check's reservations carry no cost (the rates were not read)")
    server = server_usec(cluster, ids)
    sub.cancel_all()
    drop_added_reservations(cluster)
    return {"client_ms": summary(walls), "walls": walls,
            "slurmctld_ms": summary(server) if server else None,
            "reservations_added": added}


def over_rounds(rounds: list[dict[str, dict]], side: str, clock: str) -> dict:
    out = {}
    for stat in ("p50", "p99", "mean"):
        values = [r[side][clock][stat] for r in rounds if r[side][clock]]
        if values:
            out[stat] = {"min": round(min(values), 3),
                         "median": round(statistics.median(values), 3)}
    return out


def added(rounds: list[dict[str, dict]], side: str, base: str, clock: str) -> dict:
    """check − base, per round (same run, same round), then min/median."""
    out = {}
    for stat in ("p50", "p99", "mean"):
        values = [r[side][clock][stat] - r[base][clock][stat]
                  for r in rounds if r[side][clock] and r[base][clock]]
        if values:
            out[stat] = {"min": round(min(values), 3),
                         "median": round(statistics.median(values), 3),
                         "rounds": [round(v, 3) for v in values]}
    return out


def provenance() -> dict[str, object]:
    """Which job_submit.lua ran: its hash, the commit, and whether the file differs from
    it (other work in the tree)."""
    source = Path(__file__).resolve().parent.parent / "cheeto_like/enforcement/job_submit.lua"

    def git(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(source.parent), *argv], capture_output=True,
                              text=True, check=False)

    head = git("rev-parse", "--short", "HEAD").stdout.strip()
    changed = git("diff", "--quiet", "HEAD", "--", str(source)).returncode != 0
    return {"sha256": hashlib.sha256(source.read_bytes()).hexdigest()[:16],
            "commit": head, "uncommitted_changes": changed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=1000,
                        help="timed sbatch calls per side and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (each side once)")
    parser.add_argument("--users", type=int, default=20000,
                        help="users in the table (and as many accounts)")
    parser.add_argument("--reservations", type=int, default=5000,
                        help="reservation rows seeded before the first round")
    parser.add_argument("--sides", default=",".join(SIDES),
                        help=f"comma-separated, from {', '.join(SIDES)}")
    parser.add_argument("--seed", type=int, default=26, help="random seed of the rows")
    opts = parser.parse_args()
    sides = [s for s in opts.sides.split(",") if s]
    if not sides or any(s not in SIDES for s in sides) or "check" not in sides:
        parser.error(f"--sides: 'check' and any of {', '.join(SIDES)}")
    if opts.submissions < 1 or opts.rounds < 1 or opts.users < 1 or opts.reservations < 0:
        parser.error("--submissions, --rounds, --users must be >= 1")
    rng = random.Random(opts.seed)
    began = time.monotonic()
    load_start = list(os.getloadavg())
    cluster = BenchCluster()
    try:
        progress("starting the cluster (slurmdbd, slurmctld, slurmd)")
        cluster.start()
        progress(f"  up in {cluster.startup_seconds:.1f} s")
        for account in (ACCOUNT, TINY):
            cluster.sacctmgr("-i", "add", "account", account, f"cluster={cluster.cluster_name}")
        cluster.sacctmgr("-i", "add", "user", SUBMITTER, f"account={ACCOUNT},{TINY}",
                         f"cluster={cluster.cluster_name}")
        t0 = time.perf_counter()
        seed_table(cluster, opts.users, rng)
        table_seconds = time.perf_counter() - t0
        own = seed_reservations(cluster, opts.reservations, opts.users, rng)
        progress(f"  table: {opts.users} users + {opts.users} accounts "
                 f"({cluster.enforcement.table.stat().st_size // 1024} KiB, "
                 f"{table_seconds:.2f} s); {opts.reservations} reservations")
        switch = Switch(cluster)
        plugin = provenance()
        if cluster.enforcement.lua.read_text() != switch.check_text:
            raise SystemExit("the installed plugin is not the one rendered now (its source "
                             "changed while the cluster started): run again")
        sub = Submitter(cluster)
        # the check really reads the table: a job of the tiny account is refused
        switch.to("check")
        _, refused = sub.submit(TINY)
        if refused.returncode == 0 or "exceed a quota" not in refused.stderr:
            raise SystemExit(f"the tiny account's job was not refused: {refused.stderr!r}")
        rounds: list[dict[str, dict]] = []
        for n in range(opts.rounds):
            order = sides[n % len(sides):] + sides[:n % len(sides)]
            result: dict[str, dict] = {}
            for side in order:
                t = time.monotonic()
                result[side] = one_side(cluster, switch, sub, side, opts.submissions)
                c = result[side]["client_ms"]
                progress(f"round {n + 1}/{opts.rounds} {side:9s} p50 {c['p50']:.1f} ms "
                         f"p99 {c['p99']:.1f} ms ({time.monotonic() - t:.0f} s)")
            result["order"] = order
            result["loadavg"] = list(os.getloadavg())
            rounds.append(result)
        switch.to("check")  # leave it as installed (the cluster goes anyway)
        log = cluster._log("slurmctld.log").read_text(errors="replace")
        plugin_lines = {"stale_or_error": log.count("(on_stale "),
                        "refused": log.count("cheeto quota: refused")}
    finally:
        cluster.stop()
    figures: dict[str, object] = {
        "submissions": opts.submissions, "rounds": opts.rounds, "plugin": plugin,
        "table": {"users": opts.users + 1, "accounts": opts.users + 2,
                  "write_table_s": round(table_seconds, 2)},
        "reservations": {"seeded": opts.reservations, "submitter_rows": own,
                         "plus_per_check_side": "each accepted job's row, up to "
                                                f"{opts.submissions}"},
        "baseline": f"{BASELINE}: JobSubmitPlugins=lua with a script whose "
                    "slurm_job_submit returns slurm.SUCCESS (same cluster, same run)",
        "sides": {side: {"client_ms": over_rounds(rounds, side, "client_ms"),
                         "slurmctld_ms": over_rounds(rounds, side, "slurmctld_ms")}
                  for side in sides},
    }
    figures["added_is"] = ("the check's percentile minus the baseline's, per round "
                           "(same run), then min/median over the rounds")
    for base in (b for b in (BASELINE, "no_plugin") if b in sides):
        figures[f"added_vs_{base}_ms"] = added(rounds, "check", base, "client_ms")
    pooled = {side: summary([w for r in rounds for w in r[side]["walls"]]) for side in sides}
    figures["pooled_client_ms"] = pooled  # all rounds' submissions of a side together
    if BASELINE in sides:
        figures["pooled_added_ms"] = {stat: round(pooled["check"][stat]
                                                  - pooled[BASELINE][stat], 3)
                                      for stat in ("p50", "p99", "mean")}
    if "no_plugin" in sides and BASELINE in sides:
        figures["lua_itself_ms"] = added(rounds, BASELINE, "no_plugin", "client_ms")
    figures["plugin_log"] = plugin_lines  # the check never fell back to on_stale
    figures["goal"] = "check adds < 5 ms at p99"
    if BASELINE in sides:
        figures["goal_met"] = figures[f"added_vs_{BASELINE}_ms"]["p99"]["median"] < 5
    figures["per_round"] = [
        {"order": r["order"], "loadavg": r["loadavg"],
         **{s: {"client": r[s]["client_ms"], "slurmctld": r[s]["slurmctld_ms"]}
            for s in sides}} for r in rounds]
    figures["loadavg"] = {"start": load_start, "end": list(os.getloadavg())}
    figures["seconds"] = round(time.monotonic() - began, 1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
