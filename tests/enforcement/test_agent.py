"""The quota agent against the real store, without a cluster: the table it builds, when
it rebuilds, and the commands around it (`ng site enforcement`, `daemon quota-agent`)."""

from __future__ import annotations

import io
import json
import os
import pwd
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from cheeto_like.config import load_config
from cheeto_like.daemon.quota_agent import QuotaAgent, out_of_quota
from cheeto_like.enforcement import table as qtable
from cheeto_like.enforcement.desired import build_table
from cheeto_like.enforcement.layout import layout
from cheeto_like.enforcement.render import install
from cheeto_like.operations.quota import AdjustUsage, SetGpuFactor, SetQuota, SetQuotaDefaults
from cheeto_like.operations.usage import ingest
from cheeto_like.queries.usage import factor_table
from tests.factories import AUTHOR, make_group, make_site, make_user
from tests.operations.test_usage import job


@pytest.fixture
async def farm(db):
    await make_site(db, "farm")
    for name in ("alice", "bob", "carol"):
        await make_user(db, name)
    await make_group(db, "lab")
    return db


@pytest.fixture
def config_path(cli_config: Path, tmp_path: Path) -> Path:
    data = YAML(typ="safe").load(cli_config.read_text())
    data["slurm"] = {"enforcement": {"state_dir": str(tmp_path / "state"),
                                     "slurm_user": pwd.getpwuid(os.getuid()).pw_name,
                                     "sites": ["farm"]}}
    buffer = io.StringIO()
    YAML(typ="safe").dump(data, buffer)
    path = tmp_path / "config.yaml"
    path.write_text(buffer.getvalue())
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "slurm.conf").write_text("ClusterName=farm\n")
    return path


async def test_the_table_holds_quotas_usage_adjustments_defaults_and_factors(farm):
    now = datetime.now(UTC)
    await SetQuotaDefaults.run(farm, AUTHOR, site="farm", user_cpu_minutes=100,
                               account_gpu_minutes=50, period="monthly")
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=600,
                       gpu_minutes=None)
    await SetGpuFactor.run(farm, AUTHOR, site="farm", gpu_type="a100", factor=2.0)
    later = (now + timedelta(days=3)).replace(microsecond=0)
    await SetGpuFactor.run(farm, AUTHOR, site="farm", gpu_type="t4", factor=0.5,
                           effective_from=later)
    # started before a100's factor: charged at the default 1.0 (factors apply by start)
    await ingest(farm, "farm", [job("1", "bob", "lab", start=now - timedelta(hours=2),
                                    minutes=60, tres="cpu=2,gres/gpu:a100=1")],
                 await factor_table("farm"))
    await AdjustUsage.run(farm, AUTHOR, site="farm", user="carol", cpu_minutes=5,
                          reason="debit from the old system")
    # read after the writes: a100's version starts at its own "now", after ``now`` above
    built = await build_table("farm", datetime.now(UTC))
    rows = {(s.kind, s.name): s for s in built.table.subjects}
    assert (rows["user", "alice"].cpu_quota, rows["user", "alice"].cpu_used) == (600.0, 0.0)
    assert (rows["user", "bob"].cpu_quota, rows["user", "bob"].cpu_used) == (100.0, 120.0)
    assert rows["account", "lab"].gpu_quota == 50.0 and rows["account", "lab"].gpu_used == 60.0
    assert rows["user", "carol"].cpu_used == 5.0  # an adjustment alone gives a row
    assert dict((k, (c, g)) for k, c, g in built.table.defaults) == {
        "user": (100.0, None), "account": (None, 50.0)}
    assert dict(built.table.factors) == {"a100": 2.0}  # t4's version starts later
    # the table goes stale by itself at the next factor version or the month's end
    month_end = (now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
                 + timedelta(days=32)).replace(day=1)
    assert built.next_change == min(later, month_end)
    assert out_of_quota(built.table) == {("user", "bob"), ("account", "lab")}


async def test_the_agent_rebuilds_when_the_store_moves_and_otherwise_only_touches(
        farm, config_path, tmp_path):
    config = load_config(config_path)
    where = layout(config.slurm.enforcement, "farm", tmp_path / "etc" / "slurm.conf")
    install(config.slurm.enforcement, where)
    agent = QuotaAgent(farm, config, "farm", where, sync_blocks=False)
    first = await agent.one_pass()
    assert first.rebuilt and not first.charged
    written = qtable.read_meta(where.table)
    quiet = await agent.one_pass()  # nothing moved, refresh not due: nothing written
    assert not quiet.rebuilt and not quiet.touched
    assert qtable.read_meta(where.table) == written
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=30)
    moved = await agent.one_pass()
    assert moved.rebuilt
    fingerprint = qtable.read_meta(where.table)["fingerprint"]
    with sqlite3.connect(where.table) as db:
        assert db.execute("SELECT cpu_quota FROM subjects WHERE name = 'alice'"
                          ).fetchone() == (30.0,)
    agent._built_at = 0  # the refresh is due: the same table, only written_at moves
    again = await agent.one_pass()
    assert again.touched and not again.rebuilt
    assert qtable.read_meta(where.table)["fingerprint"] == fingerprint


async def test_enforcement_show_and_install_and_the_agent_command(farm, cli, config_path,
                                                                   tmp_path):
    conf = tmp_path / "etc" / "slurm.conf"
    r = await cli("ng", "site", "enforcement", "show", "-s", "farm", "--slurm-conf", str(conf),
                  "--json", config=config_path)
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["slurm_conf_lines"] == [
        "JobSubmitPlugins=lua", "JobCompType=jobcomp/script",
        f"JobCompLoc={tmp_path}/etc/cheeto-jobcomp",
        "AccountingStorageEnforce=associations,limits,qos,safe"]
    assert data["agent_runs_on_worker"] is True
    assert {f["path"]: f["mode"] for f in data["files"]}[str(tmp_path / "state" / "farm")] \
        == "0700"
    r = await cli("ng", "site", "enforcement", "show", "-s", "farm", "--slurm-conf", str(conf),
                  "--file", "lua", config=config_path)
    assert r.code == 0 and r.stdout.startswith("--[[ cheeto-like: the submit-time quota check")
    assert f'table = "{tmp_path}/state/farm/quota.db"' in r.stdout
    # the agent refuses to start before install made its directory
    r = await cli("daemon", "quota-agent", "-s", "farm", "--once", config=config_path)
    assert r.code == 2 and "enforcement install -s farm" in r.stderr
    r = await cli("ng", "site", "enforcement", "install", "-s", "farm", "--slurm-conf",
                  str(conf), "--dry-run", "--json", config=config_path)
    assert r.code == 0, r.stderr
    assert not (tmp_path / "etc" / "job_submit.lua").exists()
    r = await cli("ng", "site", "enforcement", "install", "-s", "farm", "--slurm-conf",
                  str(conf), config=config_path)
    assert r.code == 0, r.stderr
    assert "JobSubmitPlugins=lua" in r.stderr
    assert (tmp_path / "etc" / "job_submit.lua").is_file()
    r = await cli("daemon", "quota-agent", "-s", "farm", "--once", "--json",
                  config=config_path)
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["rebuilt"] is True
    assert qtable.read_meta(tmp_path / "state" / "farm" / "quota.db")["site"] == "farm"
    r = await cli("ng", "site", "enforcement", "install", "-s", "farm", "--slurm-conf",
                  str(tmp_path / "nope.conf"), config=config_path)
    assert r.code == 2 and "is not a file" in r.stderr
    r = await cli("ng", "site", "enforcement", "show", "-s", "nosuch", config=config_path)
    assert r.code == 2


async def test_an_agent_a_site_worker_started_records_into_the_workers_metrics(
        farm, config_path, tmp_path, monkeypatch):
    """The site worker gives its agent child its metrics directory (``child_env``); the
    agent records there without emptying it or serving, so the worker's port adds the
    agent's figures (its store commands here; the Slurm syncs it starts the same way)."""
    import asyncio
    import subprocess

    from prometheus_client import CollectorRegistry, multiprocess

    from cheeto_like import metrics
    from cheeto_like.daemon.stack import cheeto_argv
    from cheeto_like.metrics import process

    config = load_config(config_path)
    conf = tmp_path / "etc" / "slurm.conf"
    install(config.slurm.enforcement, layout(config.slurm.enforcement, "farm", conf))
    worker_dir = tmp_path / "worker-metrics"
    worker_dir.mkdir(mode=0o700)
    (worker_dir / "counter_1.db").write_bytes(b"")  # the worker's own: never emptied
    assert metrics.child_env() == {}  # a process serving no directory gives none
    monkeypatch.setitem(process._state, "directory", worker_dir)
    env = {**os.environ, **metrics.child_env()}
    argv = cheeto_argv("daemon", "quota-agent", "-s", "farm", "--once", "--slurm-conf",
                       str(conf), "--config", str(config_path))
    done = await asyncio.to_thread(subprocess.run, argv, env=env, capture_output=True,
                                   text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (worker_dir / "counter_1.db").exists()
    (worker_dir / "counter_1.db").unlink()
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(worker_dir))
    timed = sum(sample.value for family in registry.collect() for sample in family.samples
                if sample.name == "cheeto_store_command_duration_seconds_count")
    assert timed > 0
    # a directory that is a symlink is refused: the agent runs, and records nothing
    link = tmp_path / "link-metrics"
    link.symlink_to(worker_dir)
    before = sorted(p.name for p in worker_dir.iterdir())
    done = await asyncio.to_thread(subprocess.run, argv, env={**env, "CHEETO_METRICS_JOIN":
                                                               str(link)},
                                   capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in worker_dir.iterdir()) == before


def test_the_site_worker_keeps_its_agent_child_running_and_stops_it(tmp_path):
    import subprocess
    import sys
    import time

    from cheeto_like.daemon.quota_agent import AgentChild

    marks = tmp_path / "starts"
    script = (f"import time; open({str(marks)!r}, 'a').write('x');"
              "time.sleep(0.2 if len(open(" + repr(str(marks)) + ").read()) < 2 else 60)")
    child = AgentChild([sys.executable, "-c", script])
    child.RESTART_SECONDS = 0.1
    child.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (not marks.exists() or len(marks.read_text()) < 2):
        time.sleep(0.05)
    assert marks.read_text() == "xx"  # died once, started again
    proc = child.proc
    child.stop()
    assert proc.poll() is not None
    child.thread.join(5)
    assert not child.thread.is_alive()
    assert isinstance(proc, subprocess.Popen)
