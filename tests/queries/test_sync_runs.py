"""``daemon status`` and ``ng slurm why`` name the same last sync (queries/sync_runs.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from ruamel.yaml import YAML

from cheeto_like.models import SyncRun
from cheeto_like.models.sync import SyncItem
from cheeto_like.queries.sync_runs import last_sync_run
from tests.factories import insert_sync_run, make_site, make_user, put_on_site

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


async def _runs() -> tuple[SyncRun, SyncRun]:
    applied = SyncRun(target="slurm", site="farm", apply=True, status="ok", author="cron",
                      started_at=T0, finished_at=T0 + timedelta(seconds=3), duration_s=3.0)
    await insert_sync_run(applied, [SyncItem(batch="add associations",
                                             command="add user alice",
                                             targets=["alice@lab/cpu"], outcome="ok")])
    dry = SyncRun(target="slurm", site="farm", apply=False, status="ok", author="ops",
                  started_at=T0 + timedelta(hours=1),
                  finished_at=T0 + timedelta(hours=1, seconds=2), duration_s=2.0)
    other = SyncRun(target="ldap", site="farm", apply=True, status="failed",
                    started_at=T0 + timedelta(hours=2))
    elsewhere = SyncRun(target="slurm", site="hive", apply=True, status="ok",
                        started_at=T0 + timedelta(hours=3))
    for run in (dry, other, elsewhere):
        await run.insert()
    return applied, dry


async def test_last_sync_run_is_the_newest_of_the_target_at_the_site(db):
    assert await last_sync_run("slurm", "farm") is None
    _, dry = await _runs()
    found = await last_sync_run("slurm", "farm")
    assert found is not None and found.id == dry.id and found.apply is False
    assert await last_sync_run("puppet", "farm") is None


async def test_status_and_why_agree_on_the_last_sync(cli, db, cli_config, tmp_path: Path):
    await make_site(db, "farm")
    await make_user(db, "alice")
    await put_on_site(db, "alice", "farm")
    applied, dry = await _runs()
    config = tmp_path / "daemon.yaml"
    data = YAML(typ="safe").load(cli_config.read_text())
    data["daemon"] = {"default": {"sites": ["farm"], "tasks": {"slurm_sync": {}}}}
    YAML(typ="safe").dump(data, config)

    status = await cli("daemon", "status", "--json", config=config)
    assert status.code == 0, status.stderr
    row = next(r for r in status.json() if (r["task"], r["site"]) == ("slurm_sync", "farm"))
    assert (row["source"], row["by"], row["duration_s"]) == ("sync_run", "ops", 2.0)

    why = await cli("ng", "slurm", "why", "-s", "farm", "-u", "alice", "--offline", "--json")
    assert why.code == 0, why.stderr
    last = why.json()["last_sync"]
    assert (last["run"], last["apply"], last["status"]) == (dry.id, False, "ok")
    assert last["run"] != applied.id
