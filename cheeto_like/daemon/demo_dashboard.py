"""What the demo adds so the web dashboard has something to show (``seed_demo`` runs it
after the site itself): sign-in passwords for bob (a plain user) and alice (the demo's
operator, and sponsor of alicegrp), a Slurm account for alicegrp, default and personal
quotas, and a few finished jobs this month in the usage ledger (through the collector's
own ``ingest``, as if sacct had reported them), so the usage bars and the chart are not
empty.

Idempotent like the rest of the demo: each step checks its result first; the jobs are
keyed like real ones, so a second ingest writes nothing. The passwords are demo
passwords, printed by ``cheeto daemon up --seed-demo``: the demo refuses to seed a
real MongoDB unless forced.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ..models import GpuFactor, Quota, QuotaDefaults, RoleGrant, SlurmAccount, User
from ..store import Store

DEMO_LOGINS = {"bob": "bob-demo-password", "alice": "alice-demo-password"}
DEMO_USER, DEMO_OPERATOR = "bob", "alice"
DEMO_ACCOUNT = "alicegrp"
DEMO_CLUSTER_JOBS = (  # (job id, user, day of the month, hours, CPUs, GPUs)
    ("9001", "bob", 0, 6, 8, 0), ("9002", "bob", 1, 3, 16, 1), ("9003", "alice", 1, 2, 4, 0),
    ("9004", "bob", 3, 10, 4, 0), ("9005", "bob", 5, 4, 8, 2), ("9006", "alice", 6, 1, 2, 0),
)


async def seed_dashboard(store: Store, author: str | None, site: str) -> list[str]:
    """Run the missing steps; return their labels."""
    from ..operations.auth import GrantRole
    from ..operations.quota import SetGpuFactor, SetQuota, SetQuotaDefaults
    from ..operations.slurm import CreateSlurmAccount
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
    if await RoleGrant.find_one({"user": DEMO_OPERATOR, "role": "operator"}) is None:
        await GrantRole.run(store, author, user=DEMO_OPERATOR, role="operator")
        ran.append(f"{DEMO_OPERATOR} operator")
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
    counts = await _ingest_jobs(store, site)
    if counts:
        ran.append(f"{counts} demo jobs in the usage ledger")
    return ran


async def _ingest_jobs(store: Store, site: str) -> int:
    from ..adapters.sacct import AllocTRES, SacctJob
    from ..operations.usage import ingest
    from ..queries.site import get_site
    from ..queries.usage import factor_table

    found = await get_site(site)
    now = datetime.now(UTC)
    month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    jobs = []
    for job_id, user, day, hours, cpus, gpus in DEMO_CLUSTER_JOBS:
        end = min(now - timedelta(minutes=1), month + timedelta(days=day, hours=hours + 8))
        start = end - timedelta(hours=hours)
        jobs.append(SacctJob(cluster=found.cluster_name, job_id=job_id, user=user,
                             account=DEMO_ACCOUNT, partition="main", qos="normal",
                             state="COMPLETED", start=start, end=end,
                             elapsed_s=hours * 3600,
                             tres=AllocTRES(cpus=cpus, gpus=(("a100", gpus),) if gpus else ())))
    counts = await ingest(store, found.name, jobs, await factor_table(found.name))
    return counts.inserted
