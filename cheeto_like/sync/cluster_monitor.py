"""The cluster monitor: what a site's cluster is doing, and which jobs will never start.

``read_snapshot`` asks ``sinfo`` (nodes per partition) and ``squeue`` (every queued job)
once each; everything else here is pure and judges that snapshot:

- ``status_data``: one row per partition (nodes and their states, CPUs, GPUs, running and
  pending jobs, GPUs in use), the figures a weekly look at the cluster wants;
- ``judge``: pending jobs older than a threshold whose reason will not clear by itself
  (an association or QOS limit, an invalid account or QOS, a dependency that can never
  be met, nodes it needs that are drained or down, a hold by its owner or an
  administrator), each with the likely fix, and nodes down or drained for longer than a
  threshold.

A held job (``JobHeldUser``: ``sbatch --hold`` or ``scontrol hold`` by its owner;
``JobHeldAdmin``: ``scontrol hold`` by root, SlurmUser or a Slurm operator/admin) never
starts until someone runs ``scontrol release ID``; ``held_by`` says who holds it (squeue
names no holder: a user hold is its owner's, an admin hold is the operators').

A limit such as ``AssocMaxJobsLimit`` does clear when the user's other jobs end; a job
held by one for longer than the threshold is still worth a look (the limit may be set
too low, or the quota used up), which is why the threshold exists. ``attach_quota`` adds
the store's quota state for the user and the account of such jobs (one quota query for
the site, not one per job).

The monitor runs where squeue can reach slurmctld (the site's head node: the daemon task
``cluster_monitor`` is on ``slurm.<site>``) and records each run as a ``SyncRun`` (target
``cluster``) whose ``extra.escalations`` the operator digest reports once per key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..adapters.sinfo import NodeRow, Sinfo
from ..adapters.squeue import QueuedJob, Squeue
from ..models import SyncRun
from ..models.fields import utcnow
from ..queries.site import get_site
from ..store import Store

MONITOR_TARGET = "cluster"
_LIMIT = re.compile(r"^(Assoc|QOS)(Grp|Max)\w*$")
_UNAVAILABLE_NODES = re.compile(r"UnavailableNodes:(\S+)")
_NODES_DOWN_TEXT = "Nodes required for job are DOWN, DRAINED"


def expand_hostlist(text: str) -> list[str]:
    """``n[01-03,07],gpu1`` -> ``n01 n02 n03 n07 gpu1`` (one bracket per name)."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text):
        match = re.fullmatch(r"(.*?)\[([^\]]*)\](.*)", part)
        if match is None:
            names.append(part)
            continue
        head, ranges, tail = match.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            if high and low.isdigit() and high.isdigit():
                width = len(low)
                names += [f"{head}{n:0{width}d}{tail}" for n in range(int(low), int(high) + 1)]
            else:
                names.append(f"{head}{item}{tail}")
    return [n for n in names if n]


@dataclass(frozen=True)
class Snapshot:
    site: str
    cluster: str
    read_at: datetime
    nodes: list[NodeRow]
    jobs: list[QueuedJob]


async def read_snapshot(site_name: str, *, sinfo: Sinfo, squeue: Squeue,
                        now: datetime | None = None) -> Snapshot:
    site = await get_site(site_name)
    nodes = await sinfo.nodes(site.cluster_name)
    jobs = await squeue.jobs(site.cluster_name)
    return Snapshot(site.name, site.cluster_name, now or utcnow(), nodes, jobs)


# -- status --------------------------------------------------------------------------------


def _state_summary(rows: Iterable[NodeRow]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


def status_data(snap: Snapshot) -> dict[str, Any]:
    """Partitions with their nodes and jobs; the totals count each node and job once."""
    partitions: dict[str, list[NodeRow]] = {}
    for row in snap.nodes:
        partitions.setdefault(row.partition, []).append(row)
    rows = []
    for name, members in partitions.items():
        jobs = [j for j in snap.jobs if j.partition == name]
        running = [j for j in jobs if j.state == "RUNNING"]
        rows.append({
            "partition": name, "default": members[0].default_partition,
            "available": "up" if members[0].partition_up else "down",
            "nodes": len(members), "node_states": _state_summary(members),
            "cpus": sum(r.cpus for r in members),
            "gpus": sum(n for r in members for _, n in r.gpus),
            "running_jobs": len(running),
            "pending_jobs": sum(1 for j in jobs if j.state == "PENDING"),
            "gpus_in_use": sum(j.gpu_count for j in running)})
    unique = {r.node: r for r in snap.nodes}
    running = [j for j in snap.jobs if j.state == "RUNNING"]
    return {
        "site": snap.site, "cluster": snap.cluster, "read_at": snap.read_at,
        "partitions": rows,
        "nodes": [{"node": r.node, "state": r.state, "cpus": r.cpus,
                   "gpus": sum(n for _, n in r.gpus),
                   "partitions": sorted({x.partition for x in snap.nodes if x.node == r.node}),
                   "reason": r.reason, "reason_since": r.reason_since}
                  for r in unique.values()],
        "totals": {"nodes": len(unique),
                   "nodes_unavailable": sum(1 for r in unique.values() if r.unavailable),
                   "cpus": sum(r.cpus for r in unique.values()),
                   "gpus": sum(n for r in unique.values() for _, n in r.gpus),
                   "running_jobs": len(running),
                   "pending_jobs": sum(1 for j in snap.jobs if j.state == "PENDING"),
                   "gpus_in_use": sum(j.gpu_count for j in running),
                   "cpus_in_use": sum(j.cpus for j in running)}}


# -- stalled work --------------------------------------------------------------------------


@dataclass
class StalledJob:
    job_id: str
    user: str
    account: str
    partition: str
    qos: str
    reason: str
    kind: str  # limit | invalid | dependency | nodes | held
    pending_seconds: int
    fix: str
    nodes: list[str] = field(default_factory=list)
    quota: dict[str, Any] | None = None
    held_by: str | None = None  # kind "held": "user <owner>" or "admin"

    def key(self, cluster: str) -> str:
        return f"job:{cluster}:{self.job_id}:{self.kind}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class DownNode:
    node: str
    state: str
    partitions: list[str]
    reason: str | None
    since: datetime | None
    by: str | None
    down_seconds: int | None  # None: Slurm does not say since when
    fix: str

    def key(self, cluster: str) -> str:
        since = int(self.since.timestamp()) if self.since else 0
        return f"node:{cluster}:{self.node}:{since}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Stalled:
    site: str
    cluster: str
    jobs: list[StalledJob]
    nodes: list[DownNode]

    def as_dict(self) -> dict[str, Any]:
        return {"site": self.site, "cluster": self.cluster,
                "jobs": [j.as_dict() for j in self.jobs],
                "nodes": [n.as_dict() for n in self.nodes]}

    def escalations(self) -> list[dict[str, str]]:
        """What the operator digest reports, once per key."""
        out = []
        for job in self.jobs:
            out.append({"key": job.key(self.cluster), "kind": "stalled job", "site": self.site,
                        "summary": f"job {job.job_id} of {job.user} ({job.account}, "
                                   f"{job.partition}) pending {_age(job.pending_seconds)}: "
                                   f"{job.reason}"
                                   + (f" (held by {job.held_by})" if job.held_by else ""),
                        "fix": job.fix})
        for node in self.nodes:
            age = "since an unknown time" if node.down_seconds is None \
                else f"for {_age(node.down_seconds)}"
            out.append({"key": node.key(self.cluster), "kind": "node down", "site": self.site,
                        "summary": f"node {node.node} {node.state} {age}"
                                   + (f": {node.reason}" if node.reason else ""),
                        "fix": node.fix})
        return out


def _age(seconds: int) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f}d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds // 60}m"


_HELD = ("JobHeldUser", "JobHeldAdmin")


def held_by(job: QueuedJob) -> str | None:
    """Who holds a held job: ``user <owner>`` or ``admin`` (None: not held)."""
    word = job.reason.split(",", 1)[0].strip()
    if word == "JobHeldUser":
        return f"user {job.user}"
    if word == "JobHeldAdmin":
        return "admin"
    return None


def classify(reason: str) -> str | None:
    """The kind of a pending reason that will not clear by itself, else None."""
    word = reason.split(",", 1)[0].strip()
    if _LIMIT.match(word):
        return "limit"
    if word in ("InvalidAccount", "InvalidQOS"):
        return "invalid"
    if word == "DependencyNeverSatisfied":
        return "dependency"
    if word in _HELD:
        return "held"
    if word == "ReqNodeNotAvail" or reason.startswith(_NODES_DOWN_TEXT):
        return "nodes"
    return None


def _job_fix(job: QueuedJob, kind: str, site: str, nodes: list[str]) -> str:
    why = f"cheeto ng slurm why -s {site} -u {job.user}"
    if kind == "limit":
        return (f"held by {job.reason.split(',')[0]} (account {job.account}, QOS {job.qos}): "
                f"`{why}`, `cheeto ng quota show -s {site} -u {job.user}`; raise the limit "
                f"(`cheeto ng slurm account edit` / `ng slurm allocation add`) or let the "
                f"user's other jobs finish")
    if kind == "invalid":
        return (f"slurmctld does not let {job.user} use account {job.account} / QOS "
                f"{job.qos}: `{why}`, then `cheeto ng slurm sync -s {site} --apply`; or "
                f"resubmit with a valid -A/--qos")
    if kind == "dependency":
        return f"a job it depends on failed: `scancel {job.job_id}` and resubmit"
    if kind == "held":
        if held_by(job) == "admin":
            return (f"held by an administrator (JobHeldAdmin): release it with `scontrol "
                    f"release {job.job_id}` (as root or a Slurm operator), or `scancel "
                    f"{job.job_id}`")
        return (f"held by its owner {job.user} (JobHeldUser): `scontrol release "
                f"{job.job_id}` (the owner or an operator), or `scancel {job.job_id}`")
    names = ",".join(nodes)
    return (f"needs node(s) {names}, unavailable: fix them, then `scontrol update "
            f"nodename={names} state=resume`")


def judge(snap: Snapshot, *, pending_over: timedelta, down_over: timedelta) -> Stalled:
    unavailable = {r.node: r for r in snap.nodes if r.unavailable}
    by_partition: dict[str, list[NodeRow]] = {}
    for row in snap.nodes:
        by_partition.setdefault(row.partition, []).append(row)
    jobs = []
    for job in snap.jobs:
        if job.state != "PENDING" or job.submitted is None:
            continue
        waited = snap.read_at - job.submitted
        if waited < pending_over:
            continue
        kind = classify(job.reason)
        if kind is None:
            continue
        nodes: list[str] = []
        if kind == "nodes":
            named = _UNAVAILABLE_NODES.search(job.reason)
            wanted = expand_hostlist(named[1]) if named else \
                [r.node for r in by_partition.get(job.partition, [])]
            nodes = [n for n in wanted if n in unavailable]
            if not nodes or (not named and len(nodes) < len(wanted)):
                continue  # reserved or busy, not down: it will clear by itself
        jobs.append(StalledJob(
            job_id=job.job_id, user=job.user, account=job.account, partition=job.partition,
            qos=job.qos, reason=job.reason, kind=kind,
            pending_seconds=int(waited.total_seconds()),
            fix=_job_fix(job, kind, snap.site, nodes), nodes=nodes,
            held_by=held_by(job) if kind == "held" else None))
    down = []
    for name, row in unavailable.items():
        if not row.out_of_service:
            continue
        age = None if row.reason_since is None else snap.read_at - row.reason_since
        if age is not None and age < down_over:
            continue
        down.append(DownNode(
            node=name, state=row.state,
            partitions=sorted({r.partition for r in snap.nodes if r.node == name}),
            reason=row.reason, since=row.reason_since, by=row.reason_by,
            down_seconds=None if age is None else int(age.total_seconds()),
            fix=f"fix the node ({row.reason or 'no reason given'}), then `scontrol update "
                f"nodename={name} state=resume`"))
    jobs.sort(key=lambda j: (-j.pending_seconds, j.job_id))
    down.sort(key=lambda n: n.node)
    return Stalled(snap.site, snap.cluster, jobs, down)


async def attach_quota(stalled: Stalled, now: datetime) -> None:
    """Add the quota state (percent used) of the user and account of limit-held jobs."""
    from ..queries.quota import quota_status

    held = [j for j in stalled.jobs if j.kind == "limit"]
    if not held:
        return
    statuses = {(s.kind, s.name): s for s in await quota_status(stalled.site, now)}
    for job in held:
        state: dict[str, Any] = {}
        for kind, name in (("user", job.user), ("account", job.account)):
            status = statuses.get((kind, name))
            if status is None:
                continue
            over = [res for res, r in (("cpu", status.cpu), ("gpu", status.gpu))
                    if r.percent is not None and r.percent >= 100]
            state[kind] = {"name": name, "cpu_percent": status.cpu.percent,
                           "gpu_percent": status.gpu.percent, "over": over}
            if over:
                job.fix += f"; the {kind} {name} is over its {'/'.join(over)} quota"
        job.quota = state or None


async def record_run(store: Store, stalled: Stalled, *, author: str | None,
                     started_at: datetime) -> str:
    """Store the run (target ``cluster``) so the operator digest can escalate it."""
    run = SyncRun(target=MONITOR_TARGET, site=stalled.site, author=author, apply=False,
                  started_at=started_at, finished_at=utcnow(), status="ok",
                  counts={"stalled_jobs": len(stalled.jobs), "down_nodes": len(stalled.nodes)},
                  extra={"escalations": stalled.escalations()})
    async with store.exclusive():
        await run.insert()
    return run.id


# -- the per-site job snapshot (the "Me" page's jobs) ---------------------------------------

PUBLISH_BATCH = 1000  # rows per insert: 10k+ queued jobs go in bounded round trips


def _gres_text(gpus: tuple[tuple[str | None, int], ...]) -> list[str]:
    return [f"gpu:{kind}:{n}" if kind else f"gpu:{n}" for kind, n in gpus]


async def publish_jobs(store: Store, snap: Snapshot) -> str:
    """Store ``snap``'s jobs as the site's current job snapshot: the rows first (in
    batches), then the header pointing at them, then the site's older rows dropped.
    Readers follow the header, so they never see half a snapshot. Returns its id."""
    from ..models.fields import new_id
    from ..models.job_snapshot import JobSnapshot, SnapshotJob

    snapshot = new_id()
    rows = SnapshotJob.get_pymongo_collection()
    batch: list[dict[str, Any]] = []
    for job in snap.jobs:
        batch.append({"_id": f"{snap.site}:{snapshot}:{job.job_id}", "site": snap.site,
                      "snapshot": snapshot, "job_id": job.job_id, "slurm_user": job.user,
                      "slurm_account": job.account, "partition": job.partition,
                      "state": job.state, "submitted": job.submitted, "cpus": job.cpus,
                      "gpus": job.gpu_count, "nodes": job.nodes,
                      "node_list": job.node_list, "qos": job.qos, "reason": job.reason,
                      "gres": _gres_text(job.gpus)})
        if len(batch) >= PUBLISH_BATCH:
            async with store.exclusive():
                await rows.insert_many(batch, ordered=False)
            batch = []
    async with store.exclusive():
        if batch:
            await rows.insert_many(batch, ordered=False)
        await JobSnapshot.get_pymongo_collection().replace_one(
            {"_id": snap.site},  # the _id repeated: the embedded store's upsert wants it
            {"_id": snap.site, "snapshot": snapshot, "cluster": snap.cluster,
             "read_at": snap.read_at, "jobs": len(snap.jobs)}, upsert=True)
        await rows.delete_many({"site": snap.site, "snapshot": {"$ne": snapshot}})
    return snapshot


# What a pending reason means, said to the job's owner: (words, what to do). ``{id}`` is
# the job id, ``{site}`` the site. Reasons not listed here are shown as Slurm says them.
_PLAIN: dict[str, tuple[str, str]] = {
    "Priority": ("other jobs are ahead of it in the queue",
                 "Nothing to do: it starts when its turn comes."),
    "Resources": ("it waits for enough free CPUs, GPUs or memory",
                  "Nothing to do: it starts when the nodes free up (a smaller request "
                  "may start sooner)."),
    "Dependency": ("it waits for a job it depends on to finish",
                   "Nothing to do: it starts when that job ends."),
    "DependencyNeverSatisfied": ("a job it depends on failed, so it can never start",
                                 "Cancel it (`scancel {id}`) and submit it again."),
    "JobHeldUser": ("you held it", "Release it when you want it to run: `scontrol release "
                    "{id}`."),
    "JobHeldAdmin": ("an operator held it", "Ask the operators why, or cancel it "
                     "(`scancel {id}`)."),
    "BeginTime": ("it was submitted to start later (--begin)",
                  "Nothing to do: it starts after its begin time."),
    "ReqNodeNotAvail": ("nodes it needs are down, drained or reserved",
                        "Wait for the nodes to come back, or submit it without naming "
                        "those nodes."),
    "PartitionDown": ("its partition is down", "Wait for the operators to bring it back."),
    "PartitionTimeLimit": ("its time limit is longer than the partition allows",
                           "Cancel it and submit with a shorter --time."),
    "PartitionNodeLimit": ("it asks for more nodes than the partition allows",
                           "Cancel it and submit asking for fewer nodes."),
    "InvalidAccount": ("you may not use its account there",
                       "Cancel it and submit with one of your accounts (-A), or ask your "
                       "sponsor for access."),
    "InvalidQOS": ("you may not use its QOS there",
                   "Cancel it and submit with a QOS you may use (--qos)."),
    "QOSMaxJobsPerUserLimit": ("you already run as many jobs as the QOS lets one person",
                               "Nothing to do: it starts when one of your jobs ends."),
    "QOSMaxSubmitJobPerUserLimit": ("you have as many jobs queued as the QOS allows",
                                    "Wait for some to end before submitting more."),
    "AssocMaxJobsLimit": ("you already run as many jobs as your account lets you",
                          "Nothing to do: it starts when one of your jobs ends."),
    "AssocGrpCPUMinutesLimit": ("you are out of CPU quota at this site",
                                "See your quota above; ask your sponsor for more (a quota "
                                "request), or wait for the next period."),
    "AssocGrpGRESMinutes": ("you are out of GPU quota at this site",
                            "See your quota above; ask your sponsor for more (a quota "
                            "request), or wait for the next period."),
    "AssocGrpCPURunMinutesLimit": ("your running jobs already hold as many CPU minutes as "
                                   "your account allows",
                                   "Nothing to do: it starts as your other jobs end."),
    "AssocGrpCpuLimit": ("your account's jobs already use as many CPUs as it may",
                         "Nothing to do: it starts as your group's other jobs end."),
    "AssocGrpGRES": ("your account's jobs already use as many GPUs as it may",
                     "Nothing to do: it starts as your group's other jobs end."),
}


def plain_reason(job_id: str, state: str, reason: str, site: str = "") -> tuple[str, str]:
    """A job's state and pending reason in plain words, with what its owner can do."""
    if state != "PENDING":
        return ({"RUNNING": "running", "COMPLETING": "finishing",
                 "SUSPENDED": "suspended"}.get(state, state.lower()), "")
    word = reason.split(",", 1)[0].strip()
    if word in _PLAIN:
        words, todo = _PLAIN[word]
    elif word.startswith("AssocGrpGRESMinutes") or word.startswith("AssocGrpBillingMinutes"):
        words, todo = _PLAIN["AssocGrpGRESMinutes"] if "GRES" in word else \
            _PLAIN["AssocGrpCPUMinutesLimit"]
    elif reason.startswith(_NODES_DOWN_TEXT):
        words, todo = _PLAIN["ReqNodeNotAvail"]
    elif _LIMIT.match(word):
        words, todo = (f"a limit holds it ({word})",
                       "It starts when your other jobs end; if it waits long, ask your "
                       "sponsor or the operators about the limit.")
    elif not word:
        return "waiting", "Nothing to do yet: Slurm has not given a reason."
    else:
        return f"waiting ({reason})", ""
    return words, todo.format(id=job_id, site=site)
