"""The per-site job snapshot the cluster monitor publishes for the "Me" page: rows, never
one document (12k queued jobs), the header pointing at the current rows, older rows
dropped, each site on its own."""

from __future__ import annotations

from datetime import UTC, datetime

from cheeto_like.adapters.squeue import QueuedJob
from cheeto_like.models.job_snapshot import JobSnapshot, SnapshotJob
from cheeto_like.queries.job_snapshot import jobs_of
from cheeto_like.sync.cluster_monitor import Snapshot, publish_jobs

WHEN = datetime(2026, 12, 5, 12, tzinfo=UTC)


def queued(n: int, user: str, state: str = "PENDING", reason: str = "Priority") -> QueuedJob:
    return QueuedJob(job_id=str(n), user=user, account="lab", partition="cpu", state=state,
                     submitted=WHEN, gpus=(("a100", 2),), nodes=1, cpus=4, node_list="",
                     qos="normal", reason=reason)


async def test_twelve_thousand_jobs_are_rows_replaced_each_run(db) -> None:
    jobs = [queued(n, f"u{n % 500}") for n in range(12_000)] + [queued(99_999, "alice")]
    first = await publish_jobs(db, Snapshot("farm", "farm", WHEN, [], jobs))
    assert await SnapshotJob.find({"site": "farm"}).count() == 12_001
    head = await JobSnapshot.get_pymongo_collection().find_one({"_id": "farm"})
    assert head is not None and head["snapshot"] == first and head["jobs"] == 12_001
    mine = await jobs_of("farm", "alice")
    assert [j["job_id"] for j in mine.jobs] == ["99999"]
    assert mine.jobs[0]["gpus"] == 2 and mine.jobs[0]["reason"] == "Priority"
    assert mine.read_at is not None and mine.read_at.replace(tzinfo=UTC) == WHEN
    assert len((await jobs_of("farm", "u7")).jobs) == 24

    # the next run replaces them: only its rows stay, another site is left alone
    await publish_jobs(db, Snapshot("barn", "barn", WHEN, [], [queued(1, "alice")]))
    later = datetime(2026, 12, 5, 12, 5, tzinfo=UTC)
    second = await publish_jobs(db, Snapshot("farm", "farm", later, [],
                                             [queued(5, "alice", "RUNNING", "None")]))
    assert second != first
    assert await SnapshotJob.find({"site": "farm"}).count() == 1
    assert [j["job_id"] for j in (await jobs_of("farm", "alice")).jobs] == ["5"]
    assert [j["job_id"] for j in (await jobs_of("barn", "alice")).jobs] == ["1"]
    assert await JobSnapshot.find({}).count() == 2

    # an empty queue is a snapshot too: no jobs, but a time
    await publish_jobs(db, Snapshot("farm", "farm", later, [], []))
    empty = await jobs_of("farm", "alice")
    assert empty.jobs == [] and empty.read_at is not None
    assert await SnapshotJob.find({"site": "farm"}).count() == 0
