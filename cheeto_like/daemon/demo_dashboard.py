"""What the demo adds so the web dashboard has something to show (``seed_demo`` runs it
after the site itself): sign-in passwords for bob (a plain user), alice (the demo's
operator, and sponsor of alicegrp) and dana (an admin); a partition ``main`` with
alicegrp's account, QOS and association in it, so bob (a slurmer of alicegrp) can
submit; default and personal quotas; two pending requests with their amounts and
reasons (bob's own quota, and more for alicegrp), waiting for alice; and six weeks of
finished jobs in the usage ledger, all in the past, more of them lately (through the
collector's own ``ingest``, as if sacct had reported them), so the bars and the charts
show a trend.

Idempotent like the rest of the demo: each step checks its result first; the jobs are
keyed like real ones (cluster and job id), so a second ingest writes nothing even on
another day. The passwords are demo passwords, printed by ``cheeto daemon up
--seed-demo``: the demo refuses to seed a real MongoDB unless forced.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ..models import (
    GpuFactor,
    Quota,
    QuotaDefaults,
    Request,
    RoleGrant,
    SlurmAccount,
    SlurmAssociation,
    SlurmPartition,
    User,
)
from ..store import Store

DEMO_LOGINS = {"bob": "bob-demo-password", "alice": "alice-demo-password",
               "dana": "dana-demo-password"}
DEMO_USER, DEMO_OPERATOR, DEMO_ADMIN = "bob", "alice", "dana"
DEMO_ROLES = {DEMO_USER: "a user", DEMO_OPERATOR: "operator, sponsor", DEMO_ADMIN: "admin"}
DEMO_ACCOUNT = "alicegrp"
DEMO_PARTITION = "main"
DEMO_WEEKS = 6
DEMO_REQUESTS: tuple[dict[str, Any], ...] = (
    {"kind": "quota", "user": DEMO_USER, "group": DEMO_ACCOUNT, "cpu_minutes": 60 * 500.0,
     "gpu_minutes": 60 * 40.0,
     "reason": "Thesis simulations: 40 runs of 12 hours each before the March deadline."},
    {"kind": "quota", "account": DEMO_ACCOUNT, "cpu_minutes": 60 * 2000.0,
     "reason": "Two students join the group in January; the group's runs double."},
)


def demo_logins_line() -> str:
    """The banner's line: every demo login with its password and role."""
    return ", ".join(f"{name} / {DEMO_LOGINS[name]} ({role})"
                     for name, role in DEMO_ROLES.items())


def demo_jobs(now: datetime) -> list[tuple[str, str, datetime, int, int, int]]:
    """(job id, user, end, hours, CPUs, GPUs) over the last ``DEMO_WEEKS`` weeks: bob
    every other day, longer runs lately; alice every fifth day; every job started and
    ended before ``now``. The ids do not depend on ``now``."""
    last = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    jobs = []
    for ago in range(DEMO_WEEKS * 7, -1, -1):
        day_end = last - timedelta(days=ago)
        if ago % 2 == 0:
            hours = 1 + (DEMO_WEEKS * 7 - ago) // 12  # 1 h six weeks ago, 4 h now
            jobs.append((f"{9100 + ago}", DEMO_USER, day_end, hours, 4,
                         1 if ago % 4 == 0 else 0))
        if ago % 5 == 0:
            jobs.append((f"{9200 + ago}", DEMO_OPERATOR, day_end - timedelta(hours=2), 2, 2,
                         0))
    return jobs


async def seed_dashboard(store: Store, author: str | None, site: str) -> list[str]:
    """Run the missing steps; return their labels."""
    from ..operations.auth import GrantRole
    from ..operations.quota import SetGpuFactor, SetQuota, SetQuotaDefaults
    from ..operations.slurm import (
        CreateSlurmAccount,
        CreateSlurmPartition,
        ProvisionSlurmAllocation,
    )
    from ..operations.user import SetUserPassword

    ran = []
    for name, password in DEMO_LOGINS.items():
        user = await User.find_one({"name": name})
        if user is not None and not user.password:
            await SetUserPassword.run(store, author, name=name, password=password)
            ran.append(f"{name}'s dashboard password")
    if await SlurmAccount.find_one({"group": DEMO_ACCOUNT, "site": site}) is None:
        await CreateSlurmAccount.run(store, author, site=site, group=DEMO_ACCOUNT)
        ran.append(f"Slurm account {DEMO_ACCOUNT}")
    if await SlurmPartition.find_one({"name": DEMO_PARTITION, "site": site}) is None:
        await CreateSlurmPartition.run(store, author, site=site, name=DEMO_PARTITION)
        ran.append(f"partition {DEMO_PARTITION}")
    if await SlurmAssociation.find_one({"site": site, "account": DEMO_ACCOUNT,
                                        "partition": DEMO_PARTITION}) is None:
        await ProvisionSlurmAllocation.run(store, author, site=site, group=DEMO_ACCOUNT,
                                           partition=DEMO_PARTITION)
        ran.append(f"{DEMO_ACCOUNT} in partition {DEMO_PARTITION}")
    for name, role in ((DEMO_OPERATOR, "operator"), (DEMO_ADMIN, "admin")):
        if await RoleGrant.find_one({"user": name, "role": role}) is None:
            await GrantRole.run(store, author, user=name, role=role)
            ran.append(f"{name} {role}")
    if await QuotaDefaults.find_one({"site": site}) is None:
        await SetQuotaDefaults.run(store, author, site=site, period="monthly",
                                   user_cpu_minutes=60 * 100.0, user_gpu_minutes=60 * 10.0,
                                   account_cpu_minutes=60 * 1000.0,
                                   account_gpu_minutes=60 * 50.0)
        ran.append("default quotas")
    if await Quota.find_one({"site": site, "user": DEMO_USER}) is None:
        await SetQuota.run(store, author, site=site, user=DEMO_USER, cpu_minutes=60 * 300.0,
                           gpu_minutes=60 * 20.0)
        ran.append(f"{DEMO_USER}'s quota")
    if await GpuFactor.find_one({"site": site, "gpu_type": "a100"}) is None:
        await SetGpuFactor.run(store, author, site=site, gpu_type="a100", factor=2.0)
        ran.append("GPU factor a100")
    ran += await _file_requests(store, site)
    counts = await _ingest_jobs(store, site)
    if counts:
        ran.append(f"{counts} demo jobs in the usage ledger")
    return ran


async def _file_requests(store: Store, site: str) -> list[str]:
    """bob's pending requests (filed by bob, waiting for alice, alicegrp's sponsor)."""
    from ..config import Config
    from ..operations.request import FileRequest
    from ..queries.request import steps_for

    ran = []
    for spec in DEMO_REQUESTS:
        match = {"site": site, "kind": spec["kind"], "requester": DEMO_USER,
                 "reason": spec["reason"]}
        if await Request.find_one(match) is not None:
            continue
        made = await FileRequest.run(store, DEMO_USER, site=site,
                                     steps=steps_for(Config().requests, spec["kind"]), **spec)
        ran.append(f"request {made.number} ({spec['kind']})")
    return ran


async def _ingest_jobs(store: Store, site: str) -> int:
    from ..adapters.sacct import AllocTRES, SacctJob
    from ..operations.usage import ingest
    from ..queries.site import get_site
    from ..queries.usage import factor_table

    found = await get_site(site)
    jobs = []
    for job_id, user, end, hours, cpus, gpus in demo_jobs(datetime.now(UTC)):
        jobs.append(SacctJob(cluster=found.cluster_name, job_id=job_id, user=user,
                             account=DEMO_ACCOUNT, partition=DEMO_PARTITION, qos="normal",
                             state="COMPLETED", start=end - timedelta(hours=hours), end=end,
                             elapsed_s=hours * 3600,
                             tres=AllocTRES(cpus=cpus, gpus=(("a100", gpus),) if gpus else ())))
    counts = await ingest(store, found.name, jobs, await factor_table(found.name))
    return counts.inserted
