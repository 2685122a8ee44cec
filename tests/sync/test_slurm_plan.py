"""The pure Slurm plan: ordering, batching, normalisation, and the reference defects fixed.

Every case builds two ``SlurmState``s by hand and checks the rendered commands.
"""

from __future__ import annotations

import pytest

from cheeto_like.sync.slurm.plan import BATCH_ORDER, MAX_NAMES_PER_COMMAND, plan
from cheeto_like.sync.slurm.state import (
    AccountState,
    AssocKey,
    AssocState,
    QOSState,
    SlurmState,
    tres,
)

C = "farm"


def state(**kw) -> SlurmState:
    return SlurmState(cluster=C, **kw)


def q(name: str, owner: str | None = C, **kw) -> QOSState:
    return QOSState(name, owner=owner, **kw)


def assoc(user: str, account: str = "lab", partition: str = "gpu") -> AssocKey:
    return AssocKey(user, account, partition)


A1 = AssocState(frozenset({"lab-qos"}), "lab-qos")


def commands(p, label: str) -> list[str]:
    return [str(c) for b in p.batches if b.label == label for c in b.commands]


def test_identical_states_plan_nothing():
    s = state(qos={"a": q("a", group=tres({"cpu": 8}))}, accounts={"lab": AccountState("lab")},
              associations={assoc("alice"): A1}, default_accounts={"alice": "lab"})
    actual = state(qos={"a": q("a", group=tres({"cpu": 8}))},
                   accounts={"lab": AccountState("lab")},
                   associations={assoc("alice"): A1}, default_accounts={"alice": "lab"})
    p = plan(s, actual)
    assert p.is_empty and p.processes == 0 and p.deletions == []


def test_pairs_a_builder_recorded_hold_only_for_the_rows_they_were_made_from():
    from dataclasses import replace

    rows = {assoc("alice"): A1}
    built = state(associations=rows, built_pairs=(rows, frozenset({("alice", "lab")})))
    assert built.user_account_pairs() == {("alice", "lab")}
    # other rows (a rename, a test's edit): the recorded pairs no longer describe them
    moved = replace(built, associations={assoc("bob", "other"): A1})
    assert moved.user_account_pairs() == {("bob", "other")} and moved.users() == {"bob"}
    # a wrong record for these very rows would be believed: only builders set it
    assert replace(built).user_account_pairs() == {("alice", "lab")}


def test_batch_order_is_adds_modifies_defaults_coordinators_deletes():
    kinds = [kind for _, kind in BATCH_ORDER]
    assert kinds == ["modify", "add", "modify", "add", "modify", "add", "modify", "default",
                     "coordinator", "coordinator", "delete", "delete", "delete", "delete"]
    desired = state(qos={"new": q("new"), "chg": q("chg", priority=5)},
                    accounts={"lab": AccountState("lab", max_user_jobs=3),
                              "new": AccountState("new")},
                    associations={assoc("bob", "new"): AssocState(frozenset({"new"}), "new"),
                                  assoc("alice"): AssocState(frozenset({"chg"}), "chg")},
                    coordinators={"new": frozenset({"bob"})})
    actual = state(qos={"chg": q("chg"), "old": q("old")}, accounts={"lab": AccountState("lab"),
                                                                     "gone": AccountState("gone")},
                   associations={assoc("alice"): AssocState(frozenset({"old"}), "old"),
                                 assoc("carol", "gone"): AssocState(frozenset({"old"}), "old")},
                   default_accounts={"alice": "gone", "carol": "gone"},
                   default_rows=frozenset({assoc("carol", "gone")}))
    p = plan(desired, actual)
    labels = [b.label for b in p.batches]
    assert labels == ["add qos", "modify qos", "add accounts", "modify accounts",
                      "add associations", "modify associations", "set default accounts",
                      "add coordinators", "delete default associations", "delete qos",
                      "delete accounts"]
    assert sorted(p.deletions) == ["account gone", "carol@gone/gpu", "qos old"]
    assert commands(p, "set default accounts") == [
        "modify user where name=alice cluster=farm set defaultaccount=lab"]


def test_add_users_with_the_same_association_in_one_process():
    desired = state(accounts={"lab": AccountState("lab")},
                    associations={assoc(u): A1 for u in ("alice", "bob", "carol")})
    actual = state(accounts={"lab": AccountState("lab")})
    p = plan(desired, actual)
    assert commands(p, "add associations") == [
        "add user alice,bob,carol account=lab partition=gpu cluster=farm qos=lab-qos "
        "defaultqos=lab-qos"]
    # a user's first association on a cluster becomes their default: nothing else to do
    assert commands(p, "set default accounts") == []
    assert p.processes == 1


def test_batches_are_chunked():
    users = [f"u{i:04d}" for i in range(MAX_NAMES_PER_COMMAND * 2 + 1)]
    desired = state(accounts={"lab": AccountState("lab")},
                    associations={assoc(u): A1 for u in users})
    p = plan(desired, state(accounts={"lab": AccountState("lab")}))
    adds = next(b for b in p.batches if b.label == "add associations")
    assert [len(c.targets) for c in adds.commands] == [MAX_NAMES_PER_COMMAND,
                                                       MAX_NAMES_PER_COMMAND, 1]


def test_different_association_shapes_are_separate_commands():
    desired = state(accounts={"lab": AccountState("lab")}, associations={
        assoc("alice", partition="gpu"): A1, assoc("bob", partition="cpu"): A1,
        assoc("carol", partition="gpu"): AssocState(frozenset({"lab-qos", "hi"}), "hi")})
    p = plan(desired, state(accounts={"lab": AccountState("lab")}))
    assert sorted(commands(p, "add associations")) == sorted([
        "add user bob account=lab partition=cpu cluster=farm qos=lab-qos defaultqos=lab-qos",
        "add user alice account=lab partition=gpu cluster=farm qos=lab-qos defaultqos=lab-qos",
        "add user carol account=lab partition=gpu cluster=farm qos=hi,lab-qos defaultqos=hi",
    ])


def test_qos_sets_compare_as_sets_and_default_qos_counts():
    desired = state(associations={assoc("alice"): AssocState(frozenset({"b", "a"}), "a")},
                    accounts={"lab": AccountState("lab")})
    same = state(associations={assoc("alice"): AssocState(frozenset({"a", "b"}), "a")},
                 accounts={"lab": AccountState("lab")}, default_accounts={"alice": "lab"})
    assert plan(desired, same).is_empty
    other_default = state(associations={assoc("alice"): AssocState(frozenset({"a", "b"}), "b")},
                          accounts={"lab": AccountState("lab")}, default_accounts={"alice": "lab"})
    p = plan(desired, other_default)
    assert commands(p, "modify associations") == [
        "modify user where name=alice account=lab partition=gpu cluster=farm set qos=a,b "
        "defaultqos=a"]


def test_qos_add_renders_tres_priority_flags_and_owner_tag():
    desired = state(qos={"q": q("q", group=tres({"cpu": 8, "mem": 16384, "gres/gpu": 2}),
                                priority=10, flags=frozenset({"DenyOnLimit"}))})
    p = plan(desired, state())
    assert commands(p, "add qos") == [
        "add qos q GrpTRES=cpu=8,gres/gpu=2,mem=16384 Priority=10 Flags=DenyOnLimit "
        "Description=cheeto:farm"]


def test_unlimited_qos_add_omits_tres():
    p = plan(state(qos={"q": q("q")}), state())
    assert commands(p, "add qos") == ["add qos q Priority=0 Description=cheeto:farm"]


def test_qos_modify_clears_stale_tres_keys_and_flags():
    desired = state(qos={"q": q("q", group=tres({"cpu": 8}))})
    actual = state(qos={"q": q("q", group=tres({"cpu": 4, "gres/gpu:a100": 2, "node": 1}),
                               flags=frozenset({"NoDecay"}))})
    p = plan(desired, actual)
    assert commands(p, "modify qos") == [
        "modify qos where name=q set GrpTRES=cpu=8,gres/gpu:a100=-1,node=-1 Flags=-1"]


def test_identical_qos_modifications_merge():
    desired = state(qos={n: q(n, priority=3) for n in ("a", "b")})
    actual = state(qos={n: q(n, priority=1) for n in ("a", "b")})
    assert commands(plan(desired, actual), "modify qos") == [
        "modify qos where name=a,b set Priority=3"]


def test_qos_of_another_cluster_is_a_conflict_not_a_change():
    desired = state(qos={"shared": q("shared", priority=5)})
    actual = state(qos={"shared": q("shared", owner="hive"), "theirs": q("theirs", owner="hive"),
                        "normal": q("normal", owner=None)})
    p = plan(desired, actual)
    assert p.is_empty
    assert p.conflicts == ("QOS 'shared' is managed by cluster 'hive'; not touching it",)


def test_untagged_qos_is_adopted_not_deleted():
    desired = state(qos={"adopt": q("adopt")})
    actual = state(qos={"adopt": q("adopt", owner=None), "manual": q("manual", owner=None)})
    p = plan(desired, actual)
    assert commands(p, "modify qos") == ["modify qos where name=adopt set "
                                         "Description=cheeto:farm"]
    assert p.deletions == []


def test_owned_stale_qos_is_deleted():
    p = plan(state(), state(qos={"old": q("old"), "x": q("x", owner="hive")}))
    assert commands(p, "delete qos") == ["remove qos where name=old"]


def test_account_limits_modify_and_unlimited_renders_minus_one():
    desired = state(accounts={"lab": AccountState("lab", max_user_jobs=10,
                                                  max_wall_minutes=10080)})
    actual = state(accounts={"lab": AccountState("lab", max_group_jobs=5)})
    assert commands(plan(desired, actual), "modify accounts") == [
        "modify account where name=lab cluster=farm set MaxJobs=10 GrpJobs=-1 "
        "MaxSubmit=-1 MaxWall=10080"]


def test_new_accounts_with_equal_limits_share_a_command():
    desired = state(accounts={n: AccountState(n) for n in ("a", "b", "c")})
    assert commands(plan(desired, state()), "add accounts") == [
        "add account a,b,c cluster=farm MaxJobs=-1 GrpJobs=-1 MaxSubmit=-1 MaxWall=-1"]


def test_stale_associations_are_deleted_per_account_partition():
    actual = state(accounts={"lab": AccountState("lab")},
                   associations={assoc("a"): A1, assoc("b"): A1, assoc("c", partition="cpu"): A1})
    p = plan(state(accounts={"lab": AccountState("lab")}), actual)
    assert sorted(commands(p, "delete associations")) == [
        "remove user where name=a,b account=lab partition=gpu cluster=farm",
        "remove user where name=c account=lab partition=cpu cluster=farm"]
    assert len(p.deletions) == 3


def test_default_account_prefers_site_default_then_current_then_first():
    accounts = {n: AccountState(n) for n in ("a", "b", "z")}
    desired = state(accounts=accounts, associations={
        assoc("u1", "a"): A1, assoc("u1", "b"): A1,
        assoc("u2", "b"): A1, assoc("u2", "z"): A1,
        assoc("u3", "z"): A1, assoc("u3", "b"): A1},
        default_accounts={"u1": "a"})
    actual = state(accounts=accounts, default_accounts={"u1": "b", "u2": "z", "u3": "gone"})
    p = plan(desired, actual)
    assert sorted(commands(p, "set default accounts")) == [
        "modify user where name=u1 cluster=farm set defaultaccount=a",
        "modify user where name=u3 cluster=farm set defaultaccount=b"]


def test_default_change_is_not_a_deletion():
    desired = state(accounts={"lab": AccountState("lab")}, associations={assoc("a"): A1},
                    default_accounts={"a": "lab"})
    actual = state(accounts={"lab": AccountState("lab")}, associations={assoc("a"): A1},
                   default_accounts={"a": "other"})
    p = plan(desired, actual)
    assert p.deletions == [] and commands(p, "set default accounts")


def test_coordinators_added_and_removed():
    accounts = {"lab": AccountState("lab")}
    desired = state(accounts=accounts, coordinators={"lab": frozenset({"alice", "bob"})})
    actual = state(accounts=accounts, coordinators={"lab": frozenset({"bob", "carol"})})
    p = plan(desired, actual)
    assert commands(p, "add coordinators") == ["add coordinator account=lab names=alice"]
    assert commands(p, "remove coordinators") == ["remove coordinator account=lab names=carol"]
    assert p.deletions == []


def test_counts_report_items_and_processes():
    desired = state(accounts={"lab": AccountState("lab")},
                    associations={assoc(u): A1 for u in ("a", "b")})
    p = plan(desired, state(accounts={"lab": AccountState("lab")}))
    assert p.counts == {"add associations": 2}
    assert p.processes == 1
    assert p.as_dict()["processes"] == 1


def test_cluster_mismatch_is_refused():
    with pytest.raises(ValueError):
        plan(state(), SlurmState(cluster="hive"))


def test_deletes_split_default_rows_from_the_rest():
    """slurmdbd refuses a removal that mixes default and non-default rows of a user, so
    leavers' rows go in two calls: non-default first, then default."""
    accounts = {"lab": AccountState("lab"), "other": AccountState("other")}
    actual = state(accounts=accounts, associations={
        assoc("dan", "lab", "gpu"): A1, assoc("dan", "other", "gpu"): A1,
        assoc("eve", "lab", "gpu"): A1},
        default_accounts={"dan": "lab", "eve": "lab"},
        default_rows=frozenset({assoc("dan", "lab", "gpu"), assoc("eve", "lab", "gpu")}))
    p = plan(state(accounts=accounts), actual)
    assert commands(p, "delete associations") == [
        "remove user where name=dan account=other partition=gpu cluster=farm"]
    assert commands(p, "delete default associations") == [
        "remove user where name=dan,eve account=lab partition=gpu cluster=farm"]


def test_moved_default_decides_which_rows_are_default_when_deleting():
    accounts = {"lab": AccountState("lab"), "other": AccountState("other")}
    desired = state(accounts=accounts, associations={assoc("fay", "other", "gpu"): A1})
    actual = state(accounts=accounts, associations={
        assoc("fay", "other", "gpu"): A1, assoc("fay", "other", "cpu"): A1,
        assoc("fay", "lab", "gpu"): A1},
        default_accounts={"fay": "lab"}, default_rows=frozenset({assoc("fay", "lab", "gpu")}))
    p = plan(desired, actual)
    assert commands(p, "set default accounts") == [
        "modify user where name=fay cluster=farm set defaultaccount=other"]
    # after the move, every row on "other" is flagged default; "lab" is not
    assert commands(p, "delete associations") == [
        "remove user where name=fay account=lab partition=gpu cluster=farm"]
    assert commands(p, "delete default associations") == [
        "remove user where name=fay account=other partition=cpu cluster=farm"]


def test_partitionless_association_keeps_an_empty_partition():
    actual = state(accounts={"lab": AccountState("lab")},
                   associations={assoc("gus", partition=""): A1})
    p = plan(state(accounts={"lab": AccountState("lab")}), actual)
    assert commands(p, "delete associations") == [
        "remove user where name=gus account=lab partition= cluster=farm"]


def test_qos_used_by_another_cluster_is_never_removed():
    actual = state(qos={"old": q("old"), "older": q("older")}, foreign_qos=frozenset({"old"}))
    p = plan(state(), actual)
    assert commands(p, "delete qos") == ["remove qos where name=older"]
    assert "associations of another cluster use it" in p.conflicts[0]


def test_users_needing_several_partitions_share_one_add():
    both = {assoc(u, partition=p): A1 for u in ("a", "b") for p in ("cpu", "gpu")}
    desired = state(accounts={"lab": AccountState("lab")},
                    associations={**both, assoc("c", partition="gpu"): A1})
    p = plan(desired, state(accounts={"lab": AccountState("lab")}))
    assert commands(p, "add associations") == [
        "add user a,b account=lab partition=cpu,gpu cluster=farm qos=lab-qos defaultqos=lab-qos",
        "add user c account=lab partition=gpu cluster=farm qos=lab-qos defaultqos=lab-qos"]
    adds = next(b for b in p.batches if b.label == "add associations")
    assert adds.items == 5


def test_site_default_account_is_added_first_so_new_users_need_no_default_change():
    accounts = {"aaa": AccountState("aaa"), "zsite": AccountState("zsite")}
    desired = state(accounts=accounts,
                    associations={assoc("new", "aaa"): A1, assoc("new", "zsite"): A1,
                                  assoc("old", "aaa"): A1, assoc("old", "zsite"): A1},
                    default_accounts={"new": "zsite", "old": "zsite"})
    actual = state(accounts=accounts, associations={assoc("old", "aaa"): A1},
                   default_accounts={"old": "aaa"})
    p = plan(desired, actual)
    adds = commands(p, "add associations")
    assert adds[0].startswith("add user new,old account=zsite")
    assert commands(p, "set default accounts") == [
        "modify user where name=old cluster=farm set defaultaccount=zsite"]
