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
from cheeto_like.models import SyncRun
from cheeto_like.operations.user import SetUserStatus
from cheeto_like.sync.runs import close_stale_runs
from cheeto_like.sync.slurm.actual import SAcctMgrReader
from cheeto_like.sync.slurm.run import sync_site
from tests.factories import AUTHOR
from tests.metrics.recorded import recording, sample
from tests.services.ldap import Slapd
from tests.services.slurm import SlurmAccounting
from tests.sync.ldap_lab import Lab as LdapLab
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


async def test_a_crashed_run_is_counted_by_whoever_closes_it(db):
    from tests.sync.test_runs import dead_holder

    gone = await dead_holder()
    run = SyncRun(target="slurm", site="crashsite", apply=True, holder=gone)
    await run.insert()
    assert await close_stale_runs(db) == [run.id]
    assert runs("crashsite", "apply", "crashed") == 1
    assert await close_stale_runs(db) == []  # closed once, counted once
    assert runs("crashsite", "apply", "crashed") == 1


class ContextReader(SAcctMgrReader):
    """slurmdbd's reader, noting the log context each read ran in."""

    def __init__(self, runner: SAcctMgr) -> None:
        super().__init__(runner)
        self.contexts: list[dict[str, str]] = []

    async def read(self, what: str, cluster: str) -> str:
        from cheeto_like import logs

        self.contexts.append(logs.current())
        return await super().read(what, cluster)


async def test_what_a_run_logs_carries_its_run_id_and_site(lab: Lab, runner: SAcctMgr):
    reader = ContextReader(runner)
    report = await sync_site(lab.store, lab.site, reader=reader, runner=runner, apply=True,
                             author=AUTHOR)
    assert reader.contexts and report.run_id
    assert {(c.get("run_id"), c.get("site")) for c in reader.contexts} == \
        {(report.run_id, lab.site)}
    assert await SyncRun.get(report.run_id) is not None


async def test_a_puppet_run_records_written_and_deleted_files(db, tmp_path):
    from cheeto_like.operations.user import AddUserSshKey
    from cheeto_like.sync.puppet import sync_puppet
    from tests.factories import ED25519_KEY, make_site, make_user
    from tests.sync.test_puppet_sync import git

    origin, clone = tmp_path / "origin.git", tmp_path / "puppet"
    git(tmp_path, "init", "--bare", "-b", "main", str(origin))
    git(tmp_path, "clone", str(origin), str(clone))
    (clone / "keys").mkdir()
    (clone / "keys" / "gone.pub").write_text("ssh-ed25519 AAAA gone\n")  # on no site
    git(clone, "add", ".")
    git(clone, "commit", "-m", "init")
    git(clone, "push", "-u", "origin", "main")
    await make_site(db, "pupsite", "pupsite.hpc.example.org")
    await make_user(db, "pupalice", site="pupsite")
    await AddUserSshKey.run(db, AUTHOR, name="pupalice", key=ED25519_KEY)
    dry = await sync_puppet(db, "pupsite", clone, dry_run=True, author=AUTHOR)
    assert len(dry.changed) == 3  # the site's YAML and alice's key written, gone's deleted
    assert runs("pupsite", "dry_run", "ok", target="puppet") == 1
    assert changes("pupsite", target="puppet") == {"add": 0, "modify": 2, "remove": 1}
    report = await sync_puppet(db, "pupsite", clone, push=True, author=AUTHOR)
    assert report.committed
    assert runs("pupsite", "apply", "ok", target="puppet") == 1
    assert sample("cheeto_sync_deletions_total", target="puppet", site="pupsite") == 1
    await sync_puppet(db, "pupsite", clone, push=True, author=AUTHOR)
    assert sample("cheeto_sync_drift_items", target="puppet", site="pupsite") == 0
    assert sample("cheeto_sync_deletions_total", target="puppet", site="pupsite") == 1


async def test_hippo_and_iam_runs_record_by_target(db, hippo, fake_hippo_server, iam,
                                                   fake_iam_server):
    """The people reconcilers count their runs like the others: an ok run and one whose
    key the service refused (failed), with its duration."""
    from cheeto_like.adapters.http import HttpAuthError
    from cheeto_like.adapters.iam import IAMClient
    from cheeto_like.operations.hippo import LEASE_SITE, process_events
    from cheeto_like.operations.iam import sync_all_users_iam
    from tests.factories import make_user
    from tests.iam.test_sync import SETTINGS, T0
    from tests.services.fixtures_people import hippo_config, iam_config

    await process_events(db, AUTHOR, hippo_config(fake_hippo_server))
    with pytest.raises(HttpAuthError):
        await process_events(db, AUTHOR, hippo_config(fake_hippo_server, api_key="wrong"))
    assert runs(LEASE_SITE, "apply", "ok", target="hippo") == 1
    assert runs(LEASE_SITE, "apply", "failed", target="hippo") == 1
    assert sample("cheeto_sync_duration_seconds_count", target="hippo", site=LEASE_SITE,
                  mode="apply") == 2
    await make_user(db, "iamalice")  # IAM is asked about each user: one to ask about
    async with IAMClient(iam_config(fake_iam_server)) as client:
        await sync_all_users_iam(db, AUTHOR, client, settings=SETTINGS, now=T0)
    async with IAMClient(iam_config(fake_iam_server, api_key="nope")) as bad:
        with pytest.raises(HttpAuthError):
            await sync_all_users_iam(db, AUTHOR, bad, settings=SETTINGS, now=T0)
    assert runs("all", "apply", "ok", target="iam") == 1
    assert runs("all", "apply", "failed", target="iam") == 1
