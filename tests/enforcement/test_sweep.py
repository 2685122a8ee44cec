"""The sweep's decision (pure): a reservation goes only when its jobs are gone and
charged, or when it never became a job; text a user controls proves nothing."""

from __future__ import annotations

from cheeto_like.enforcement.layout import TAG
from cheeto_like.enforcement.sweep import parse_queue, parse_tags, plan_sweep

A, B, C, D = "a" * 32, "b" * 32, "c" * 32, "d" * 32


def test_live_jobs_keep_gone_ones_charge_first_and_never_seen_old_ones_drop():
    queue = parse_queue("CLUSTER: farm\n"
                        "10|10|alice|PENDING\n"
                        "11|11|alice|COMPLETED\n"
                        "13|12_1|bob|RUNNING\n"
                        "14|12_2|bob|COMPLETED\n")
    tags = parse_tags(f"JobId=10 JobName=x AdminComment={TAG}{A}\n"
                      f"JobId=11 JobName=y AdminComment={TAG}{B}\n"
                      f"JobId=13 ArrayJobId=12 AdminComment={TAG}{C}\n"
                      f"JobId=14 ArrayJobId=12 AdminComment={TAG}{C}\n")
    seen: dict[str, set[tuple[str, str]]] = {}
    rows = [(A, "alice", 0), (B, "alice", 0), (C, "bob", 0), (D, "carol", 0),
            ("e" * 32, "carol", 990)]
    plan = plan_sweep(rows, queue, tags, seen, now=1000, grace=120)
    assert plan.keep == {A, C, "e" * 32}  # live, or too young to judge
    assert plan.charge == {B: {("11", "11")}}  # ended: charged before it goes
    assert plan.drop == [D]                    # never a job, older than the grace
    assert seen[C] == {("12_1", "13"), ("12_2", "14")}
    # the array's last element ends and leaves slurmctld: charge both, then drop
    later = plan_sweep(rows[2:3], [], {}, seen, now=2000, grace=120)
    assert later.charge == {C: {("12_1", "13"), ("12_2", "14")}} and not later.drop
    assert later.ids() == ["12_1", "12_2", "13", "14"]
    assert later.ready({"12_1"}) == [] and later.ready({"12_1", "14"}) == [C]


def test_a_job_name_cannot_fake_a_state_or_hold_another_users_reservation():
    queue = parse_queue("20|20|mallory|PENDING\n21|21|alice|COMPLETED\n")
    tags = parse_tags(
        f"JobId=20 JobName=x JobState=COMPLETED {TAG}{A} AdminComment={TAG}{B}\n"
        "JobId=21 JobName=y\n"
        f"junk JobId=21 {TAG}{A}\n")
    seen: dict[str, set[tuple[str, str]]] = {}
    rows = [(A, "alice", 0), (B, "mallory", 0)]
    plan = plan_sweep(rows, queue, tags, seen, now=1000, grace=120)
    # squeue's state counts, not the name's; alice's tag in mallory's job is ignored
    assert plan.keep == {B}
    assert plan.drop == [A] and A not in seen
