"""Quota blocks, pure: who is out of quota, how the block lands on the desired state, and
the sacctmgr commands the plan renders for it (test_slurm_quota_live.py shows what Slurm
does with them; test_slurm_quota_desired below the store side)."""

from __future__ import annotations

from datetime import UTC, datetime

from cheeto_like.operations.quota import AdjustUsage, SetQuota, SetQuotaDefaults
from cheeto_like.queries.quota import QuotaStatus, ResourceStatus
from cheeto_like.sync.slurm.limits import tres_mins_args
from cheeto_like.sync.slurm.plan import plan
from cheeto_like.sync.slurm.quota import blocks_from, quota_blocks, with_blocks
from cheeto_like.sync.slurm.state import AccountState, AssocKey, AssocState, SlurmState
from tests.factories import AUTHOR, make_group, make_site, make_user

C = "farm"
A = AssocState(frozenset({"lab-qos"}), "lab-qos")
CPU0 = (("cpu", 0),)
NOW = datetime(2026, 5, 10, tzinfo=UTC)


def state(**kw) -> SlurmState:
    return SlurmState(cluster=C, **kw)


def cmds(p) -> list[str]:
    return [str(c) for b in p.batches for c in b.commands]


def status(kind: str, name: str, cpu: tuple[float, float | None],
           gpu: tuple[float, float | None] = (0.0, None)) -> QuotaStatus:
    return QuotaStatus(kind, name, "own", "none", NOW, NOW,
                       ResourceStatus(cpu[0], 0.0, cpu[1]), ResourceStatus(gpu[0], 0.0, gpu[1]))


def test_tres_mins_args_set_what_differs_and_clear_what_is_extra():
    assert tres_mins_args(CPU0, ()) == ("GrpTRESMins=cpu=0",)
    assert tres_mins_args(CPU0, CPU0) == ()
    assert tres_mins_args((), CPU0) == ("GrpTRESMins=cpu=-1",)
    assert tres_mins_args(CPU0, (("cpu", 500), ("mem", 3))) == ("GrpTRESMins=cpu=0,mem=-1",)
    assert tres_mins_args((("cpu", 0), ("gres/gpu", 0)), CPU0) == ("GrpTRESMins=gres/gpu=0",)


def test_who_is_out_of_quota():
    blocks = blocks_from([
        status("user", "alice", (60.0, 60.0)),  # used it all: out
        status("user", "bob", (59.9, 60.0)),  # not yet
        status("user", "cara", (10.0, None), (5.0, 0.0)),  # a GPU quota of 0: out of GPU
        status("account", "lab", (100.0, 50.0), (9.0, 8.0)),  # out of both
    ])
    assert blocks.users == {"alice": CPU0, "cara": (("gres/gpu", 0),)}
    assert blocks.accounts == {"lab": (("cpu", 0), ("gres/gpu", 0))}
    assert "CPU 100.0 of 50.0 min, GPU 9.0 of 8.0 min" in blocks.notes[("account", "lab")]


def test_blocks_land_on_every_row_of_the_user_and_on_the_account_row():
    desired = state(accounts={"lab": AccountState("lab"), "lab2": AccountState("lab2")},
                    associations={AssocKey("alice", "lab", "cpu"): A,
                                  AssocKey("alice", "lab2", "gpu"): A,
                                  AssocKey("bob", "lab", "cpu"): A})
    blocks = blocks_from([status("user", "alice", (1.0, 1.0)),
                          status("account", "lab2", (5.0, 1.0)),
                          status("user", "ghost", (9.0, 1.0))])  # no rows here: no note
    blocked = with_blocks(desired, blocks)
    assert {k.user + "@" + k.account: v.grp_tres_mins
            for k, v in blocked.associations.items()} == {
        "alice@lab": CPU0, "alice@lab2": CPU0, "bob@lab": ()}
    assert blocked.accounts["lab2"].grp_tres_mins == CPU0
    assert blocked.accounts["lab"].grp_tres_mins == ()
    assert [n.split(" is ")[0] for n in blocked.notes] == ["quota: account lab2",
                                                          "quota: user alice"]


def test_the_plan_blocks_releases_and_then_plans_nothing():
    actual = state(accounts={"lab": AccountState("lab")},
                   associations={AssocKey("alice", "lab", "cpu"): A},
                   default_accounts={"alice": "lab"})
    desired = with_blocks(actual, blocks_from([status("user", "alice", (2.0, 1.0)),
                                               status("account", "lab", (2.0, 1.0))]))
    assert cmds(plan(desired, actual)) == [
        "modify account where name=lab cluster=farm set MaxJobs=-1 GrpJobs=-1 MaxSubmit=-1 "
        "MaxWall=-1 GrpTRESMins=cpu=0",
        "modify user where name=alice account=lab partition=cpu cluster=farm set "
        "GrpTRESMins=cpu=0"]
    assert cmds(plan(desired, desired)) == []  # converged: a second run plans nothing
    assert cmds(plan(actual, desired)) == [  # credit or a higher quota: released
        "modify account where name=lab cluster=farm set MaxJobs=-1 GrpJobs=-1 MaxSubmit=-1 "
        "MaxWall=-1 GrpTRESMins=cpu=-1",
        "modify user where name=alice account=lab partition=cpu cluster=farm set "
        "GrpTRESMins=cpu=-1"]


def test_a_spent_budget_blocks_cpu_and_gpu_and_the_plan_renders_both():
    """Issue 28: money is spent by CPUs and GPUs alike, so a budget at 100 % blocks both
    keys, whatever the minutes say; a budget below it blocks nothing."""
    actual = state(accounts={"lab": AccountState("lab")},
                   associations={AssocKey("alice", "lab", "cpu"): A},
                   default_accounts={"alice": "lab"})
    spent = status("account", "lab", (1.0, None))
    spent.budget = ResourceStatus(500.0, 0.0, 500.0)
    fine = status("user", "alice", (1.0, None))
    fine.budget = ResourceStatus(499.0, 0.0, 500.0)
    blocks = blocks_from([spent, fine])
    assert blocks.accounts == {"lab": (("cpu", 0), ("gres/gpu", 0))} and blocks.users == {}
    assert "budget 500.00 of 500.00" in blocks.notes[("account", "lab")]
    desired = with_blocks(actual, blocks)
    assert cmds(plan(desired, actual)) == [
        "modify account where name=lab cluster=farm set MaxJobs=-1 GrpJobs=-1 MaxSubmit=-1 "
        "MaxWall=-1 GrpTRESMins=cpu=0,gres/gpu=0"]
    assert cmds(plan(desired, desired)) == []


def test_new_rows_are_added_already_blocked():
    desired = with_blocks(
        state(accounts={"lab": AccountState("lab")},
              associations={AssocKey("alice", "lab", "cpu"): A}),
        blocks_from([status("user", "alice", (2.0, 1.0)), status("account", "lab", (2.0, 1.0))]))
    rendered = cmds(plan(desired, state()))
    assert rendered[0].startswith("add account lab cluster=farm ")
    assert rendered[0].endswith(" GrpTRESMins=cpu=0")
    assert rendered[1] == ("add user alice account=lab partition=cpu cluster=farm "
                           "qos=lab-qos defaultqos=lab-qos GrpTRESMins=cpu=0")


def test_hand_set_grptresmins_is_repaired_alongside_other_drift():
    desired = with_blocks(state(accounts={"lab": AccountState("lab")},
                                associations={AssocKey("alice", "lab", "cpu"): A},
                                default_accounts={"alice": "lab"}),
                          blocks_from([status("user", "alice", (2.0, 1.0))]))
    drifted = A._replace(extra=(("MaxJobs", "0"),), grp_tres_mins=(("cpu", 500), ("mem", 3)))
    actual = state(accounts={"lab": AccountState("lab", grp_tres_mins=(("cpu", 7),))},
                   associations={AssocKey("alice", "lab", "cpu"): drifted},
                   default_accounts={"alice": "lab"})
    assert cmds(plan(desired, actual)) == [
        "modify account where name=lab cluster=farm set MaxJobs=-1 GrpJobs=-1 MaxSubmit=-1 "
        "MaxWall=-1 GrpTRESMins=cpu=-1",
        "modify user where name=alice account=lab partition=cpu cluster=farm set "
        "MaxJobs=-1 GrpTRESMins=cpu=0,mem=-1"]


# -- the store side ------------------------------------------------------------------


async def test_quota_blocks_from_the_store(db):
    await make_site(db, "farm")
    await make_group(db, "lab")
    assert await quota_blocks("farm", NOW, users=["alice"], accounts=["lab"]) == (
        await quota_blocks("farm", NOW))  # no quota anywhere: nothing (and no ledger read)
    assert (await quota_blocks("farm", NOW, users=["alice"])).users == {}
    # a default user quota of 0 GPU minutes blocks GPUs of everyone associated
    await SetQuotaDefaults.run(db, AUTHOR, site="farm", user_gpu_minutes=0)
    blocks = await quota_blocks("farm", NOW, users=["alice", "bob"], accounts=["lab"])
    assert blocks.users == {"alice": (("gres/gpu", 0),), "bob": (("gres/gpu", 0),)}
    assert blocks.accounts == {}
    # an own quota, a debit that uses it up, then a credit
    await SetQuota.run(db, AUTHOR, site="farm", account="lab", cpu_minutes=60)
    await AdjustUsage.run(db, AUTHOR, site="farm", account="lab", cpu_minutes=60,
                          reason="debit", at=NOW)
    assert (await quota_blocks("farm", NOW, accounts=["lab"])).accounts == {"lab": CPU0}
    await AdjustUsage.run(db, AUTHOR, site="farm", account="lab", cpu_minutes=-1,
                          reason="credit", at=NOW)
    assert (await quota_blocks("farm", NOW, accounts=["lab"])).accounts == {}


async def test_quota_blocks_read_a_constant_number_of_times(db, mongo_config):
    """Quotas, adjustments and ledger rows of 2 users, then of 12: the same commands."""
    from cheeto_like.operations.usage import ingest
    from cheeto_like.queries.usage import factor_table
    from tests.operations.test_usage import job
    from tests.queries.test_query_count import command_count

    await make_site(db, "farm")
    await make_group(db, "lab")
    await SetQuotaDefaults.run(db, AUTHOR, site="farm", user_cpu_minutes=50,
                               account_cpu_minutes=1000, period="monthly")
    counts = []
    names: list[str] = []
    for batch in (range(2), range(2, 12)):
        for i in batch:
            name = f"qc{i}"
            names.append(name)
            await make_user(db, name)
            await SetQuota.run(db, AUTHOR, site="farm", user=name, cpu_minutes=10 + i,
                               period="monthly")
            await AdjustUsage.run(db, AUTHOR, site="farm", user=name, cpu_minutes=5,
                                  reason="r", at=NOW)
            await ingest(db, "farm", [job(str(100 + i), name, "lab", start=NOW, minutes=3)],
                         await factor_table("farm"))
        counts.append(await command_count(db, mongo_config, lambda: quota_blocks(
            "farm", NOW, users=names, accounts=["lab"])))
    assert counts[0] == counts[1], counts
    blocks = await quota_blocks("farm", NOW, users=names, accounts=["lab"])
    used = 5 + 2 * 3  # the debit + the job's CPU-minutes (job() uses 2 CPUs)
    assert sorted(blocks.users) == sorted(n for i, n in enumerate(names) if used >= 10 + i)
