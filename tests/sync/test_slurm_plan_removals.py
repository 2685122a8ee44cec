"""What the pure Slurm plan counts as a removal (the per-run cap and the daily budget):
deleted accounts and associations, removed coordinators, and QOS dropped from an
association that stays."""

from __future__ import annotations

import pytest

from cheeto_like.errors import GuardTripped
from cheeto_like.sync.slurm.plan import plan
from cheeto_like.sync.slurm.run import check_guard
from cheeto_like.sync.slurm.state import AccountState, AssocKey, AssocState, SlurmState

C = "farm"
LAB = {"lab": AccountState("lab")}


def state(**kw) -> SlurmState:
    return SlurmState(cluster=C, **kw)


def key(user: str, partition: str = "gpu") -> AssocKey:
    return AssocKey(user, "lab", partition)


def removals_per_command(p) -> dict[str, int]:
    return {str(c): p.command_removals(b, c) for b in p.batches for c in b.commands}


def test_coordinator_removals_count_one_per_name():
    desired = state(accounts=LAB, coordinators={"lab": frozenset({"alice"})})
    actual = state(accounts=LAB, coordinators={"lab": frozenset({"bob", "carol", "alice"})})
    p = plan(desired, actual)
    assert p.deletions == []
    assert p.removals == ["coordinator lab:bob", "coordinator lab:carol"]
    assert removals_per_command(p) == {"remove coordinator account=lab names=bob,carol": 2}


def test_adding_coordinators_removes_nothing():
    desired = state(accounts=LAB, coordinators={"lab": frozenset({"alice", "bob"})})
    actual = state(accounts=LAB)
    assert plan(desired, actual).removals == []


def test_qos_dropped_from_an_association_is_a_removal():
    both = AssocState(frozenset({"hi", "lo"}), "lo")
    desired = state(accounts=LAB, associations={key("alice"): AssocState(frozenset({"lo"}), "lo"),
                                                key("bob"): AssocState(frozenset({"lo"}), "lo")},
                    default_accounts={"alice": "lab", "bob": "lab"})
    actual = state(accounts=LAB, associations={key("alice"): both, key("bob"): both},
                   default_accounts={"alice": "lab", "bob": "lab"})
    p = plan(desired, actual)
    assert [b.label for b in p.batches] == ["modify associations"]
    assert p.deletions == []
    assert p.removals == ["qos hi from alice@lab/gpu", "qos hi from bob@lab/gpu"]
    (command,) = [c for b in p.batches for c in b.commands]
    assert removals_per_command(p) == {str(command): 2}
    assert p.as_dict()["removals"] == 2


def test_qos_added_to_an_association_or_default_changed_is_not_a_removal():
    desired = state(accounts=LAB, associations={key("alice"): AssocState(frozenset({"hi", "lo"}),
                                                                         "hi")},
                    default_accounts={"alice": "lab"})
    actual = state(accounts=LAB, associations={key("alice"): AssocState(frozenset({"lo"}), "lo")},
                   default_accounts={"alice": "lab"})
    p = plan(desired, actual)
    assert not p.is_empty and p.removals == []


def test_every_kind_of_removal_is_counted_once():
    desired = state(accounts=LAB, associations={key("alice"): AssocState(frozenset({"lo"}), "lo")},
                    default_accounts={"alice": "lab"})
    actual = state(accounts={**LAB, "old": AccountState("old")},
                   associations={key("alice"): AssocState(frozenset({"hi", "lo"}), "lo"),
                                 key("bob"): AssocState(frozenset({"lo"}), "lo"),
                                 key("bob", "cpu"): AssocState(frozenset({"lo"}), "lo")},
                   default_accounts={"alice": "lab", "bob": "lab"},
                   coordinators={"lab": frozenset({"carol"})})
    p = plan(desired, actual)
    assert sorted(p.removals) == sorted([
        "account old", "bob@lab/cpu", "bob@lab/gpu", "coordinator lab:carol",
        "qos hi from alice@lab/gpu"])
    assert sum(removals_per_command(p).values()) == len(p.removals) == 5


def test_the_per_run_cap_counts_every_removal_not_only_deletions():
    desired = state(accounts=LAB)
    actual = state(accounts=LAB, coordinators={"lab": frozenset({"a", "b", "c"})})
    p = plan(desired, actual)
    assert p.deletions == []
    check_guard(p, 3)
    with pytest.raises(GuardTripped, match="removes 3 Slurm entities") as trip:
        check_guard(p, 2)
    assert trip.value.would_delete == ["coordinator lab:a", "coordinator lab:b",
                                       "coordinator lab:c"]
