"""Quota figures (issue 30) from the code paths that know them: the Slurm sync's blocks
(real slurmdbd), the notice pass's percentages, and the submit check's refusals on the
live cluster (slurmctld running the real plugin), read by the site worker's collector.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from cheeto_like.adapters.sacctmgr import SAcctMgr
from cheeto_like.config import load_config
from cheeto_like.metrics.collectors_quota import QuotaFiles, site_files
from cheeto_like.operations.quota import AdjustUsage, SetQuota
from cheeto_like.operations.quota_notify import due_notices
from tests.enforcement.live import QuotaSite, write_config
from tests.factories import AUTHOR
from tests.metrics.recorded import recording, sample
from tests.services.slurm import SlurmAccounting
from tests.services.slurm_cluster import SlurmCluster
from tests.sync.test_slurm_sync import Lab


@pytest.fixture
def metrics_on() -> Iterator[None]:
    with recording("site_worker"):
        yield


@pytest.fixture
async def lab(db, slurm_accounting: SlurmAccounting) -> Lab:
    return await Lab(db, slurm_accounting, SAcctMgr(env=slurm_accounting.env,
                                                    timeout=30)).build()


def blocked(site: str, kind: str) -> float:
    return sample("cheeto_quota_subjects_blocked", site=site, kind=kind)


async def test_the_slurm_sync_sets_who_it_blocks(lab: Lab, metrics_on: None):
    await lab.sync()
    assert blocked(lab.site, "user") == 0 and blocked(lab.site, "account") == 0
    await SetQuota.run(lab.store, AUTHOR, site=lab.site, user=lab.users[0], cpu_minutes=0)
    await SetQuota.run(lab.store, AUTHOR, site=lab.site, user=lab.users[1], gpu_minutes=0)
    report = await lab.sync()
    assert report.ok and report.plan.batches  # the blocks were written
    assert blocked(lab.site, "user") == 2 and blocked(lab.site, "account") == 0
    await SetQuota.run(lab.store, AUTHOR, site=lab.site, account=lab.lab, cpu_minutes=0)
    await lab.sync(apply=False)  # a dry run knows the blocks as well
    assert blocked(lab.site, "account") == 1


async def test_the_notice_pass_counts_subjects_past_each_threshold(lab: Lab,
                                                                   metrics_on: None):
    site = lab.site
    for user, used in ((lab.users[0], 80), (lab.users[1], 95)):
        await SetQuota.run(lab.store, AUTHOR, site=site, user=user, cpu_minutes=100)
        await AdjustUsage.run(lab.store, AUTHOR, site=site, user=user, cpu_minutes=used,
                              reason="test usage")
    await SetQuota.run(lab.store, AUTHOR, site=site, account=lab.lab, cpu_minutes=1000)
    due = await due_notices(site, datetime.now(UTC), (75, 90, 100))
    assert {d.status.name for d in due} == set(lab.users[:2])
    past = {t: sample("cheeto_quota_subjects_over_threshold", site=site, threshold=str(t))
            for t in (75, 90, 100)}
    assert past == {75: 2, 90: 1, 100: 0}


@pytest.fixture
async def qsite(db, slurm_cluster: SlurmCluster, cli_config: Path, tmp_path: Path):
    config = write_config(tmp_path / "config.yaml", cli_config, slurm_cluster)
    made = QuotaSite(db, slurm_cluster, config)
    yield made
    slurm_cluster.cancel_all()
    slurm_cluster.clear_enforcement_state()


async def test_a_refused_submission_moves_the_count_the_site_worker_reads(qsite: QuotaSite):
    """slurmctld's plugin counts the refusal in reservations.db; the site worker's
    collector (as registered for ``slurm.enforcement.sites``) exposes it and the age of
    the table the plugin judged the job by."""
    await qsite.build({"lab": ["qtmetric"]})
    config = load_config(qsite.config_path)
    [files] = site_files(config, ["farm", "not-enforced"])
    assert (files.table, files.reservations) == (qsite.cluster.enforcement.table,
                                                 qsite.cluster.enforcement.reservations)
    registry = CollectorRegistry()
    registry.register(QuotaFiles([files]))

    def refusals(quota: str) -> float | None:
        return registry.get_sample_value("cheeto_quota_submit_refusals_total",
                                         {"site": "farm", "quota": quota})

    await SetQuota.run(qsite.store, AUTHOR, site="farm", user="qtmetric", cpu_minutes=1)
    await qsite.refresh()
    before = refusals("cpu") or 0.0
    qsite.accepted("qtmetric", "lab", "--hold", "--time=1")  # 1 CPU-minute fits
    assert refusals("cpu") == before
    assert "CPU quota 1.0 min" in qsite.refused("qtmetric", "lab", "--hold", "--time=1")
    assert refusals("cpu") == before + 1
    qsite.refused("qtmetric", "lab", "--hold", "--time=1")
    assert refusals("cpu") == before + 2
    assert refusals("gpu") == 0 and refusals("budget") == 0
    age = registry.get_sample_value("cheeto_quota_table_age_seconds", {"site": "farm"})
    assert age is not None and 0 <= age < config.slurm.enforcement.max_age_seconds
