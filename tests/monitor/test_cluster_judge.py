"""The cluster monitor's pure parts: sinfo/squeue parsing and the stall judgment, on the
shapes Slurm 22.05 prints (checked against the live cluster in test_cluster_live.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cheeto_like.adapters.sinfo import parse_nodes
from cheeto_like.adapters.squeue import parse_queue
from cheeto_like.sync.cluster_monitor import Snapshot, classify, expand_hostlist, judge

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
T = int(NOW.timestamp())

SINFO = "\n".join([
    "CLUSTER: farm",
    "n01|cpu*|up|idle|64|(null)|Unknown|Unknown|none",
    f"n02|cpu*|up|drained|64|(null)|{T - 7200}|root|disk failed",
    f"n03|cpu*|up|down*|64|(null)|{T - 600}|slurm|Not responding",
    "g01|gpu|up|mixed|32|gpu:a100:4(S:0-1)|Unknown|Unknown|none",
])


def job(job_id: str, state: str, reason: str, *, age: int = 90000, partition: str = "cpu",
        gres: str = "N/A", nodes: str = "") -> str:
    return (f"{job_id}|alice|lab|{partition}|{state}|{T - age}|{gres}|1|4|{nodes}|normal|"
            f"{reason}")


def snapshot(*jobs: str) -> Snapshot:
    return Snapshot("farm", "farm", NOW, parse_nodes(SINFO), parse_queue("\n".join(jobs)))


def test_sinfo_rows():
    rows = {(r.node, r.partition): r for r in parse_nodes(SINFO)}
    assert len(rows) == 4 and rows[("n01", "cpu")].default_partition
    assert rows[("n02", "cpu")].unavailable and rows[("n03", "cpu")].unavailable
    assert not rows[("n01", "cpu")].unavailable and not rows[("g01", "gpu")].unavailable
    [blip] = parse_nodes("n04|cpu*|up|idle*|64|(null)|Unknown|Unknown|none")
    assert blip.unavailable and not blip.out_of_service  # missed a ping: not "down" yet
    assert rows[("g01", "gpu")].gpus == (("a100", 4),)
    assert rows[("n02", "cpu")].reason_since == NOW - timedelta(hours=2)
    assert rows[("n01", "cpu")].reason is None and rows[("n01", "cpu")].reason_since is None


def test_queue_rows_keep_a_reason_with_separators():
    [row] = parse_queue(job("7", "PENDING", "ReqNodeNotAvail, UnavailableNodes:n[02-03]|x"))
    assert row.reason == "ReqNodeNotAvail, UnavailableNodes:n[02-03]|x"
    assert row.submitted == NOW - timedelta(seconds=90000)
    [gpu] = parse_queue(job("8", "RUNNING", "None", gres="gres:gpu:a100:2"))
    assert gpu.gpu_count == 2 and gpu.reason == ""


def test_hostlists():
    assert expand_hostlist("n[01-03,07],gpu1") == ["n01", "n02", "n03", "n07", "gpu1"]
    assert expand_hostlist("localhost") == ["localhost"]
    assert expand_hostlist("a[9-11]") == ["a9", "a10", "a11"]


def test_which_reasons_do_not_clear_by_themselves():
    for reason in ("AssocGrpCPUMinutesLimit", "AssocMaxJobsLimit", "QOSGrpGRES",
                   "QOSMaxWallDurationPerJobLimit"):
        assert classify(reason) == "limit", reason
    assert classify("InvalidAccount") == classify("InvalidQOS") == "invalid"
    assert classify("DependencyNeverSatisfied") == "dependency"
    assert classify("ReqNodeNotAvail, UnavailableNodes:n02") == "nodes"
    assert classify("JobHeldUser") == classify("JobHeldAdmin") == "held"
    for reason in ("Priority", "Resources", "Dependency", "BeginTime", ""):
        assert classify(reason) is None, reason


def test_judgment():
    stalled = judge(snapshot(
        job("1", "PENDING", "AssocGrpCPUMinutesLimit"),
        job("2", "PENDING", "AssocGrpCPUMinutesLimit", age=60),  # too young
        job("3", "PENDING", "Priority"),  # clears by itself
        job("4", "PENDING", "ReqNodeNotAvail, UnavailableNodes:n[02-03]"),
        job("5", "PENDING", "ReqNodeNotAvail, UnavailableNodes:n01"),  # n01 is up: reserved
        job("6", "PENDING", "DependencyNeverSatisfied"),
        job("7", "PENDING", "InvalidAccount"),
        job("8", "RUNNING", "None"),
        job("9", "PENDING", "Nodes required for job are DOWN, DRAINED or reserved for jobs "
                            "in higher priority partitions"),  # cpu still has n01 up
    ), pending_over=timedelta(hours=24), down_over=timedelta(hours=1))
    assert [(j.job_id, j.kind) for j in stalled.jobs] == [
        ("1", "limit"), ("4", "nodes"), ("6", "dependency"), ("7", "invalid")]
    nodes_job = stalled.jobs[1]
    assert nodes_job.nodes == ["n02", "n03"] and "nodename=n02,n03 state=resume" in nodes_job.fix
    assert "cheeto ng slurm why -s farm -u alice" in stalled.jobs[0].fix
    assert "scancel 6" in stalled.jobs[2].fix
    # n02 drained 2 h ago (reported); n03 down 10 min ago (not yet)
    assert [(n.node, n.down_seconds) for n in stalled.nodes] == [("n02", 7200)]
    assert stalled.nodes[0].reason == "disk failed" and stalled.nodes[0].by == "root"
    keys = [e["key"] for e in stalled.escalations()]
    assert keys == ["job:farm:1:limit", "job:farm:4:nodes", "job:farm:6:dependency",
                    "job:farm:7:invalid", f"node:farm:n02:{T - 7200}"]


def test_threshold_durations():
    from cheeto_like.errors import InvalidInput
    from cheeto_like.timeparse import parse_duration

    assert parse_duration("0s") == timedelta(0)
    assert parse_duration("24h") == timedelta(hours=24)
    assert parse_duration("90min") == parse_duration("90m") == timedelta(minutes=90)
    assert parse_duration("2 days") == timedelta(days=2)
    for bad in ("", "-1h", "soon", "1y", "99999999w"):
        try:
            parse_duration(bad)
        except InvalidInput as exc:
            assert "\n" not in exc.message
        else:
            raise AssertionError(f"{bad!r} was accepted")
