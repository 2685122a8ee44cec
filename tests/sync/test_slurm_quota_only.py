"""Quota-only sites (``SiteSlurmSettings.mode = "quota_only"``, what a slurm-quota site
is): the Slurm sync leaves accounts and associations as it finds them and only writes
quota blocks (the ``cpu``/``gres/gpu`` keys of GrpTRESMins) on the users and accounts it
finds, judging names the store does not hold by the site's default quotas.

Pure tests of the state and the plan first, then the store side, then one apply
against the real slurmdbd with accounts and users made by hand with sacctmgr.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.adapters.sacct import parse_line
from cheeto_like.adapters.sacctmgr import SAcctMgr
from cheeto_like.errors import InvalidInput
from cheeto_like.models.fields import utcnow
from cheeto_like.operations.quota import SetQuota, SetQuotaDefaults
from cheeto_like.operations.slurm import SetSiteSlurmMode
from cheeto_like.operations.usage import ingest
from cheeto_like.queries.quota import QuotaStatus, ResourceStatus
from cheeto_like.queries.site import get_site
from cheeto_like.queries.usage import factor_table
from cheeto_like.sync.slurm.actual import SAcctMgrReader
from cheeto_like.sync.slurm.limits import ASSOC_LIMIT_FORMAT
from cheeto_like.sync.slurm.plan import plan
from cheeto_like.sync.slurm.quota import (
    QUOTA_ONLY_NOTE,
    apply_quota_only,
    blocks_from,
    quota_only_state,
)
from cheeto_like.sync.slurm.run import sync_site
from cheeto_like.sync.slurm.state import AccountState, AssocKey, AssocState, QOSState, SlurmState
from tests.factories import AUTHOR, make_group, make_site, make_user
from tests.services.slurm import SlurmAccounting

C = "farm"
NOW = datetime(2026, 5, 10, tzinfo=UTC)
CPU0 = (("cpu", 0),)
GPU0 = (("gres/gpu", 0),)
# rows as a slurm-quota site has them: QOS without a default, limits set by hand
PLAIN = AssocState(frozenset({"normal"}))
LIMITED = AssocState(frozenset({"normal", "fast"}), "fast", extra=(("MaxJobs", "3"),))


def status(kind: str, name: str, cpu: tuple[float, float | None],
           gpu: tuple[float, float | None] = (0.0, None)) -> QuotaStatus:
    return QuotaStatus(kind, name, "default", "none", NOW, NOW,
                       ResourceStatus(cpu[0], 0.0, cpu[1]), ResourceStatus(gpu[0], 0.0, gpu[1]))


def cmds(p) -> list[str]:
    return [str(c) for b in p.batches for c in b.commands]


def found() -> SlurmState:
    """A cluster nobody made with cheeto: an untagged QOS, hand-set limits, a stale
    block (bob's ``cpu=0``), keys of GrpTRESMins that are not blocks (``mem``, a typed
    GPU)."""
    return SlurmState(
        cluster=C,
        qos={"fast": QOSState("fast", group=(("cpu", 8),))},
        accounts={"lab": AccountState("lab", max_user_jobs=10,
                                      extra=(("GrpTRES", "cpu=64"),),
                                      grp_tres_mins=(("mem", 100),)),
                  "other": AccountState("other")},
        associations={
            AssocKey("alice", "lab", "cpu"): LIMITED,
            AssocKey("alice", "other", ""): PLAIN,
            AssocKey("bob", "lab", "cpu"): PLAIN._replace(grp_tres_mins=(("cpu", 0),
                                                                         ("mem", 7))),
            AssocKey("cara", "other", ""): PLAIN._replace(
                grp_tres_mins=(("gres/gpu:a100", 5),)),
        },
        default_accounts={"alice": "lab", "bob": "lab"},  # cara: none (left so)
        coordinators={"lab": frozenset({"bob"})})


def test_desired_is_the_cluster_with_only_block_keys_changed():
    actual = found()
    blocks = blocks_from([status("user", "alice", (9.0, 5.0)),  # out of CPU
                          status("user", "bob", (1.0, 5.0)),  # not (any more)
                          status("user", "cara", (0.0, None), (3.0, 2.0)),  # out of GPU
                          status("account", "lab", (0.0, None), (9.0, 1.0)),
                          status("user", "ghost", (9.0, 1.0))])  # not on the cluster
    desired = quota_only_state(actual, blocks)
    assert desired.quota_only and desired.notes[0] == QUOTA_ONLY_NOTE
    assert [n.split(" is ")[0] for n in desired.notes[1:]] == [
        "quota: account lab", "quota: user alice", "quota: user cara"]
    assert {str(k): v.grp_tres_mins for k, v in desired.associations.items()} == {
        "alice@lab/cpu": CPU0, "alice@other/": CPU0,
        "bob@lab/cpu": (("mem", 7),),  # the stale block cleared, mem kept
        "cara@other/": (("gres/gpu", 0), ("gres/gpu:a100", 5))}
    assert desired.accounts["lab"].grp_tres_mins == (("gres/gpu", 0), ("mem", 100))
    # everything but GrpTRESMins exactly as found
    for key, assoc in desired.associations.items():
        assert assoc._replace(grp_tres_mins=()) == \
            actual.associations[key]._replace(grp_tres_mins=())
    assert desired.accounts["lab"].extra == actual.accounts["lab"].extra
    assert desired.accounts["lab"].limits == actual.accounts["lab"].limits
    assert desired.accounts["other"] == actual.accounts["other"]
    assert (desired.qos, desired.default_accounts, desired.coordinators) == (
        actual.qos, actual.default_accounts, actual.coordinators)


def test_the_plan_only_modifies_grptresmins_then_plans_nothing():
    actual = found()
    blocks = blocks_from([status("user", "alice", (9.0, 5.0)),
                          status("account", "lab", (0.0, None), (9.0, 1.0))])
    desired = quota_only_state(actual, blocks)
    planned = plan(desired, actual)
    assert planned.quota_only and planned.as_dict()["quota_only"] is True
    assert [(b.label, b.kind) for b in planned.batches] == [
        ("modify accounts", "modify"), ("modify associations", "modify")]
    assert cmds(planned) == [
        "modify account where name=lab cluster=farm set GrpTRESMins=gres/gpu=0",
        "modify user where name=bob account=lab partition=cpu cluster=farm set "
        "GrpTRESMins=cpu=-1",
        "modify user where name=alice account=lab partition=cpu cluster=farm set "
        "GrpTRESMins=cpu=0",
        "modify user where name=alice account=other partition= cluster=farm set "
        "GrpTRESMins=cpu=0"]
    assert planned.removals == [] and planned.deletions == []
    assert planned.notes == desired.notes
    # applied, the cluster is the desired state: the next run plans nothing
    again = quota_only_state(desired, blocks)
    assert plan(again, desired).is_empty
    # the managed plan of the same cluster would take it over (contrast)
    managed = plan(SlurmState(cluster=C), actual)
    assert managed.deletions and not managed.quota_only


def test_no_quota_anywhere_clears_only_the_block_keys():
    actual = found()
    desired = quota_only_state(actual, blocks_from([]))
    assert cmds(plan(desired, actual)) == [
        "modify user where name=bob account=lab partition=cpu cluster=farm set "
        "GrpTRESMins=cpu=-1"]
    assert desired.notes == (QUOTA_ONLY_NOTE,)


def test_an_empty_cluster_plans_nothing():
    empty = SlurmState(cluster=C)
    desired = quota_only_state(empty, blocks_from([status("user", "alice", (9.0, 5.0))]))
    assert plan(desired, empty).is_empty and desired.notes == (QUOTA_ONLY_NOTE,)


def test_a_quota_only_state_with_other_rows_is_refused():
    actual = found()
    desired = quota_only_state(actual, blocks_from([]))
    grown = SlurmState(cluster=C, accounts={**actual.accounts, "new": AccountState("new")},
                       associations=actual.associations, quota_only=True)
    with pytest.raises(ValueError, match="exactly the actual rows"):
        plan(grown, actual)
    fewer = SlurmState(cluster=C, accounts=actual.accounts, associations={},
                       quota_only=True)
    with pytest.raises(ValueError, match="exactly the actual rows"):
        plan(fewer, actual)
    assert plan(desired, actual).quota_only


# -- the store side ------------------------------------------------------------------


async def test_default_quotas_judge_names_the_store_does_not_hold(db):
    await make_site(db, "farm")
    await make_group(db, "lab")
    await make_user(db, "alice")
    actual = found()
    # nothing limited: only the stale block goes
    desired = await apply_quota_only(actual, "farm", NOW)
    assert {k.user for k, v in desired.associations.items()
            if ("cpu", 0) in v.grp_tres_mins} == set()
    # a default of 0 GPU minutes: everyone found is out of GPU minutes, held or not by
    # the store; an own quota (alice, held) wins over the default
    await SetQuotaDefaults.run(db, AUTHOR, site="farm", user_gpu_minutes=0,
                               account_cpu_minutes=0)
    await SetQuota.run(db, AUTHOR, site="farm", user="alice", gpu_minutes=100)
    await SetQuota.run(db, AUTHOR, site="farm", account="lab", cpu_minutes=100)
    desired = await apply_quota_only(actual, "farm", NOW)
    blocked = {str(k): v.grp_tres_mins for k, v in desired.associations.items()}
    assert blocked == {"alice@lab/cpu": (), "alice@other/": (),
                       "bob@lab/cpu": (("gres/gpu", 0), ("mem", 7)),
                       "cara@other/": (("gres/gpu", 0), ("gres/gpu:a100", 5))}
    assert desired.accounts["other"].grp_tres_mins == CPU0  # default account quota 0
    assert desired.accounts["lab"].grp_tres_mins == (("mem", 100),)  # its own 100
    assert desired.quota_only


async def test_set_mode_operation_and_cli(db, cli):
    await make_site(db, "farm")
    assert (await get_site("farm")).slurm.mode == "managed"
    r = await cli("ng", "site", "slurm", "set-mode", "-s", "farm", "--slurm-mode",
                  "quota-only")
    assert r.code == 0, r.stderr
    assert (await get_site("farm")).slurm.mode == "quota_only"
    r = await cli("ng", "site", "show", "-s", "farm", "--json")
    assert r.code == 0 and json.loads(r.stdout)["slurm"]["mode"] == "quota-only", r.stdout
    r = await cli("ng", "site", "slurm", "set-mode", "-s", "farm", "--slurm-mode", "bogus")
    assert r.code == 2
    await SetSiteSlurmMode.run(db, AUTHOR, site="farm", mode="managed")
    assert (await get_site("farm")).slurm.mode == "managed"
    with pytest.raises(InvalidInput, match="mode"):
        await SetSiteSlurmMode.run(db, AUTHOR, site="farm", mode="quota-only")


# -- against the real slurmdbd -------------------------------------------------------

SITE = "qonly"
SNAPSHOT = ("-i", "-P", "-n", "show", "assoc", "where", f"cluster={SITE}", "WOPLimits",
            f"format=account,user,partition,qos,defaultqos,{ASSOC_LIMIT_FORMAT}")
GRPTRESMINS = 5 + ASSOC_LIMIT_FORMAT.split(",").index("grptresmins")


def rows(slurm: SlurmAccounting) -> dict[tuple[str, str, str], list[str]]:
    out = slurm.sacctmgr(*SNAPSHOT).stdout
    return {(c[0], c[1], c[2]): c for c in (ln.split("|") for ln in out.splitlines() if ln)}


def mgr(slurm: SlurmAccounting, *args: str) -> None:
    result = slurm.sacctmgr("-i", *args, check=False)
    assert result.returncode == 0 and not result.stderr.strip(), result


async def test_a_quota_only_site_blocks_what_it_finds_and_touches_nothing_else(
        db, slurm_accounting: SlurmAccounting):
    slurm = slurm_accounting
    runner = SAcctMgr(env=slurm.env, timeout=30)

    async def sync(apply: bool = True):
        report = await sync_site(db, SITE, reader=SAcctMgrReader(runner), runner=runner,
                                 apply=apply, author=AUTHOR)
        assert report.ok, [i.model_dump() for i in report.items if i.outcome != "ok"]
        return report

    await make_site(db, SITE)
    slurm.add_cluster(SITE)
    # a slurm-quota site: everything made by hand, nothing of it in the store
    mgr(slurm, "add", "qos", "qohand", "MaxWall=60")
    mgr(slurm, "add", "account", "qoacct", f"cluster={SITE}", "MaxJobs=7")
    mgr(slurm, "add", "account", "qoidle", f"cluster={SITE}")
    mgr(slurm, "add", "user", "qoa", "account=qoacct", f"cluster={SITE}")
    mgr(slurm, "add", "user", "qob", "account=qoacct", f"cluster={SITE}", "qos=normal,qohand",
        "MaxJobs=3")
    mgr(slurm, "add", "user", "qob", "account=qoidle", f"cluster={SITE}")
    mgr(slurm, "add", "user", "qoc", "account=qoidle", f"cluster={SITE}")
    # a block that no longer holds (qoc is within quota), beside a key that is no block
    mgr(slurm, "modify", "user", "where", "name=qoc", "account=qoidle", f"cluster={SITE}",
        "set", "GrpTRESMins=cpu=0,mem=100")
    before = rows(slurm)
    qos_before = slurm.sacctmgr("-i", "-P", "-n", "show", "qos", "where", "name=qohand",
                                "format=name,description,maxwall").stdout
    # default quotas: 5 CPU-minutes a user; qoa has used 6 (a job the ledger holds)
    await SetQuotaDefaults.run(db, AUTHOR, site=SITE, user_cpu_minutes=5,
                               account_cpu_minutes=1000)
    start = utcnow() - timedelta(minutes=10)
    end = start + timedelta(minutes=3)
    line = (f"901|{SITE}|qoa|qoacct|cpu|normal|COMPLETED|{start:%Y-%m-%dT%H:%M:%S}|"
            f"{end:%Y-%m-%dT%H:%M:%S}|180|cpu=2,mem=100M,node=1")
    await ingest(db, SITE, [parse_line(line)], await factor_table(SITE))
    await SetSiteSlurmMode.run(db, AUTHOR, site=SITE, mode="quota_only")

    report = await sync()
    planned = report.plan
    assert planned.quota_only and planned.notes[0] == QUOTA_ONLY_NOTE
    assert any("user qoa is out of quota" in n for n in planned.notes), planned.notes
    assert {b.kind for b in planned.batches} == {"modify"} and not planned.deletions
    assert sorted(cmds(planned)) == [
        f"modify user where name=qoa account=qoacct partition= cluster={SITE} set "
        "GrpTRESMins=cpu=0",
        f"modify user where name=qoc account=qoidle partition= cluster={SITE} set "
        "GrpTRESMins=cpu=-1"]
    after = rows(slurm)
    assert after.keys() == before.keys()  # no row added or deleted
    changed = {key: (before[key][GRPTRESMINS], row[GRPTRESMINS])
               for key, row in after.items() if row != before[key]}
    assert changed == {("qoacct", "qoa", ""): ("", "cpu=0"),
                       ("qoidle", "qoc", ""): ("cpu=0,mem=100M", "mem=100M")}
    for key, row in after.items():  # every other column exactly as found
        assert row[:GRPTRESMINS] + row[GRPTRESMINS + 1:] == \
            before[key][:GRPTRESMINS] + before[key][GRPTRESMINS + 1:], key
    assert slurm.sacctmgr("-i", "-P", "-n", "show", "qos", "where", "name=qohand",
                          "format=name,description,maxwall").stdout == qos_before

    again = await sync()
    assert again.plan.is_empty, cmds(again.plan)
    assert again.plan.notes[0] == QUOTA_ONLY_NOTE

    # back to managed: the sync takes the cluster over again (dry run: it would delete
    # the hand-made accounts and associations the store does not hold)
    await SetSiteSlurmMode.run(db, AUTHOR, site=SITE, mode="managed")
    managed = await sync(apply=False)
    assert not managed.plan.quota_only and QUOTA_ONLY_NOTE not in managed.plan.notes
    assert {"account qoacct", "account qoidle"} <= set(managed.plan.deletions)
    assert rows(slurm) == after  # a dry run changed nothing
