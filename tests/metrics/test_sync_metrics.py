"""Sync runs against the real slurmdbd and slapd record their figures (issue 30): runs by
mode and outcome, duration, the plan's size by kind, what became of each command, drift,
removals and guard trips. Values are read back from prometheus_client's registry after
real runs (``tests.metrics.recorded``), with metrics turned on in this process as a
worker turns them on.

Each test uses its own site (the labs name them), so the counters of one test never mix
with another's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cheeto_like.adapters.sacctmgr import SAcctMgr
from cheeto_like.errors import GuardTripped
from cheeto_like.operations.user import SetUserStatus
from cheeto_like.sync.slurm import sync_site
from cheeto_like.sync.slurm_actual import SAcctMgrReader
from tests.factories import AUTHOR
from tests.metrics.recorded import recording, sample
from tests.services.ldap import Slapd
from tests.services.slurm import SlurmAccounting
from tests.sync.test_ldap_sync import Lab as LdapLab
from tests.sync.test_slurm_sync import Lab


@pytest.fixture(autouse=True)
def metrics_on() -> Iterator[None]:
    with recording("hub_worker"):
        yield


@pytest.fixture
def runner(slurm_accounting: SlurmAccounting) -> SAcctMgr:
    return SAcctMgr(env=slurm_accounting.env, timeout=30)


@pytest.fixture
async def lab(db, slurm_accounting: SlurmAccounting, runner: SAcctMgr) -> Lab:
    return await Lab(db, slurm_accounting, runner).build()


def runs(site: str, mode: str, outcome: str, target: str = "slurm") -> float:
    return sample("cheeto_sync_runs_total", target=target, site=site, mode=mode,
                  outcome=outcome)


def changes(site: str, target: str = "slurm") -> dict[str, float]:
    return {kind: sample("cheeto_sync_plan_changes", target=target, site=site, kind=kind)
            for kind in ("add", "modify", "remove")}


async def test_an_apply_records_its_run_plan_commands_and_drift(lab: Lab):
    report = await lab.sync()
    assert report.ok
    site = lab.site
    assert runs(site, "apply", "ok") == 1
    assert sample("cheeto_sync_duration_seconds_count", target="slurm", site=site,
                  mode="apply") == 1
    planned = changes(site)
    # a fresh cluster: QOS, account, associations added, defaults set; nothing removed
    entities = sum(b.items for b in report.plan.batches)
    assert planned["add"] > 0 and planned["remove"] == 0
    assert sum(planned.values()) == entities
    assert sample("cheeto_sync_drift_items", target="slurm", site=site) == entities
    assert sample("cheeto_sync_commands_total", target="slurm", site=site,
                  outcome="applied") == report.plan.processes
    assert sample("cheeto_sync_commands_total", target="slurm", site=site,
                  outcome="failed") == 0
    # converged: the next run finds nothing, and the gauges say so
    again = await lab.sync()
    assert again.plan.is_empty
    assert runs(site, "apply", "ok") == 2
    assert changes(site) == {"add": 0, "modify": 0, "remove": 0}
    assert sample("cheeto_sync_drift_items", target="slurm", site=site) == 0


async def test_a_dry_run_counts_as_dry_run_and_applies_no_command(lab: Lab):
    report = await lab.sync(apply=False)
    site = lab.site
    assert runs(site, "dry_run", "ok") == 1 and runs(site, "apply", "ok") == 0
    assert sample("cheeto_sync_drift_items", target="slurm", site=site) == \
        sum(b.items for b in report.plan.batches) > 0
    for outcome in ("applied", "failed", "skipped"):
        assert sample("cheeto_sync_commands_total", target="slurm", site=site,
                      outcome=outcome) == 0


async def test_removals_count_and_guards_trip_by_name(lab: Lab, runner: SAcctMgr):
    await lab.sync()
    site = lab.site
    await SetUserStatus.run(lab.store, AUTHOR, name=lab.users[0], status="inactive",
                            reason="test")
    # the per-run cap
    with pytest.raises(GuardTripped):
        await lab.sync(max_deletions=0)
    assert sample("cheeto_sync_guard_trips_total", target="slurm", site=site,
                  guard="max_deletions") == 1
    assert runs(site, "apply", "refused") == 1
    # the daily budget (what is left of it: nothing)
    with pytest.raises(GuardTripped):
        await sync_site(lab.store, site, reader=SAcctMgrReader(runner), runner=runner,
                        apply=True, max_deletions=50, per_day=0, author=AUTHOR)
    assert sample("cheeto_sync_guard_trips_total", target="slurm", site=site,
                  guard="daily_budget") == 1
    assert runs(site, "apply", "refused") == 2
    assert sample("cheeto_sync_deletions_total", target="slurm", site=site) == 0
    # no guard in the way: the removal is applied and counted
    report = await lab.sync()
    assert report.ok and report.plan.deletions
    assert changes(site)["remove"] == len(report.plan.deletions)
    assert sample("cheeto_sync_deletions_total", target="slurm", site=site) == \
        len(report.plan.removals) > 0


async def test_an_ldap_run_records_by_target(db, slapd: Slapd):
    lab = LdapLab(db, slapd)
    await lab.make_sites()
    dry = await lab.sync(bootstrap=True, dry_run=True)
    assert runs(lab.site, "dry_run", "ok", target="ldap") == 1
    assert changes(lab.site, target="ldap")["add"] == sum(
        len(b.changes) for b in dry.plan.batches if b.kind == "add") > 0
    report = await lab.sync(bootstrap=True)
    assert report.ok
    assert runs(lab.site, "apply", "ok", target="ldap") == 1
    writes = sum(len(b.changes) for b in report.plan.batches)
    assert sample("cheeto_sync_commands_total", target="ldap", site=lab.site,
                  outcome="applied") == writes
    assert sample("cheeto_sync_drift_items", target="ldap", site=lab.site) == writes
