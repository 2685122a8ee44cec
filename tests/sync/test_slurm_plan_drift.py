"""Pure plan and parse cases for issue 11: renames planned as ``newname``, limits set by
hand cleared, and associations under ``root`` treated as drift.

The live-cluster tests (test_slurm_live.py) show what Slurm does with each; these pin
the rendered commands and the parsing of the extra columns.
"""

from __future__ import annotations

from cheeto_like.sync.slurm.actual import (
    parse_associations,
    parse_default_accounts,
    parse_limit_rows,
    parse_qos,
    with_limits,
)
from cheeto_like.sync.slurm.limits import ASSOC_LIMITS, QOS_LIMITS, reset_args
from cheeto_like.sync.slurm.plan import plan
from cheeto_like.sync.slurm.state import AccountState, AssocKey, AssocState, QOSState, SlurmState

C = "farm"
A = AssocState(frozenset({"lab-qos"}), "lab-qos")


def state(**kw) -> SlurmState:
    return SlurmState(cluster=C, **kw)


def cmds(p, label: str) -> list[str]:
    return [str(c) for b in p.batches if b.label == label for c in b.commands]


# -- renames --------------------------------------------------------------------------


def test_a_renamed_user_is_renamed_not_added_and_deleted():
    desired = state(accounts={"lab": AccountState("lab")},
                    associations={AssocKey("aliddell", "lab", "gpu"): A},
                    default_accounts={"aliddell": "lab"}, renames={"alice": "aliddell"},
                    coordinators={"lab": frozenset({"aliddell"})})
    actual = state(accounts={"lab": AccountState("lab")},
                   associations={AssocKey("alice", "lab", "gpu"): A},
                   default_accounts={"alice": "lab"},
                   coordinators={"lab": frozenset({"alice"})})
    p = plan(desired, actual)
    assert cmds(p, "rename users") == ["modify user where name=alice set newname=aliddell"]
    assert [b.label for b in p.batches] == ["rename users"]  # nothing added or deleted
    assert p.deletions == []


def test_a_rename_is_not_planned_when_the_old_name_is_wanted_or_the_new_one_exists():
    wanted = {AssocKey("alice", "lab", "gpu"): A, AssocKey("aliddell", "lab", "gpu"): A}
    desired = state(accounts={"lab": AccountState("lab")}, associations=wanted,
                    renames={"alice": "aliddell"})
    actual = state(accounts={"lab": AccountState("lab")},
                   associations={AssocKey("alice", "lab", "gpu"): A})
    p = plan(desired, actual)  # "alice" was reused by a new person: add aliddell
    assert cmds(p, "rename users") == []
    assert cmds(p, "add associations")
    both = state(accounts={"lab": AccountState("lab")},
                 associations={AssocKey("alice", "lab", "gpu"): A,
                               AssocKey("aliddell", "lab", "gpu"): A})
    only_new = state(accounts={"lab": AccountState("lab")},
                     associations={AssocKey("aliddell", "lab", "gpu"): A},
                     renames={"alice": "aliddell"})
    p = plan(only_new, both)  # already renamed elsewhere: the stale old name goes
    assert cmds(p, "rename users") == []
    assert p.deletions == ["alice@lab/gpu"]


# -- limits set by hand -----------------------------------------------------------------


def test_limit_columns_parse_and_render_their_reset():
    cells = [""] * len(ASSOC_LIMITS)
    names = [c for c, _, _ in ASSOC_LIMITS]
    cells[names.index("maxjobs")] = "0"
    cells[names.index("grptresmins")] = "cpu=10,gres/gpu:a100=2"
    cells[names.index("maxwall")] = "00:01:00"
    text = "\n".join(["lab|||" + "|".join(cells), "lab|bob|gpu|" + "|".join(cells)])
    rows = parse_limit_rows(text)
    bob = rows[("lab", "bob", "gpu")]
    assert dict(bob) == {"MaxJobs": "0", "GrpTRESMins": "cpu=10,gres/gpu:a100=2",
                         "MaxWall": "00:01:00"}
    assert reset_args(bob, ASSOC_LIMITS) == ("GrpTRESMins=cpu=-1,gres/gpu:a100=-1",
                                             "MaxJobs=-1", "MaxWall=-1")
    accounts = {"lab": AccountState("lab")}
    assocs = {AssocKey("bob", "lab", "gpu"): A}
    with_limits(accounts, assocs, rows)
    # MaxJobs/MaxWall on the account row are the store's own limits, not extras;
    # GrpTRESMins is the store's too (quota blocks), parsed into grp_tres_mins
    assert accounts["lab"].extra == ()
    assert accounts["lab"].grp_tres_mins == (("cpu", 10), ("gres/gpu:a100", 2))
    bob_row = assocs[AssocKey("bob", "lab", "gpu")]
    assert bob_row.extra == (("MaxJobs", "0"), ("MaxWall", "00:01:00"))
    assert bob_row.grp_tres_mins == (("cpu", 10), ("gres/gpu:a100", 2))


def test_hand_set_limits_on_owned_rows_are_cleared():
    desired = state(qos={"lab-qos": QOSState("lab-qos", owner=C)},
                    accounts={"lab": AccountState("lab")},
                    associations={AssocKey("bob", "lab", "gpu"): A})
    actual = state(
        qos={"lab-qos": QOSState("lab-qos", owner=C,
                                 extra=(("GrpJobs", "1"), ("MaxWall", "00:01:00")))},
        accounts={"lab": AccountState("lab", extra=(("GrpSubmitJobs", "0"),))},
        associations={AssocKey("bob", "lab", "gpu"): AssocState(
            A.qos, A.default_qos, extra=(("MaxJobs", "0"),))})
    p = plan(desired, actual)
    assert cmds(p, "modify qos") == ["modify qos where name=lab-qos set GrpJobs=-1 MaxWall=-1"]
    assert cmds(p, "modify accounts") == [
        "modify account where name=lab cluster=farm set MaxJobs=-1 GrpJobs=-1 MaxSubmit=-1 "
        "MaxWall=-1 GrpSubmitJobs=-1"]
    assert cmds(p, "modify associations") == [
        "modify user where name=bob account=lab partition=gpu cluster=farm set MaxJobs=-1"]
    assert p.deletions == []


def test_qos_rows_read_the_extra_limit_columns_and_old_dumps_still_parse():
    cells = [""] * len(QOS_LIMITS)
    names = [c for c, _, _ in QOS_LIMITS]
    cells[names.index("grpjobs")] = "1"
    cells[names.index("maxwall")] = "00:01:00"
    text = ("normal|Normal QOS default|0||||" + "|" * len(QOS_LIMITS) + "\n"
            "q1|cheeto:farm|0|DenyOnLimit|cpu=2||" + "|" + "|".join(cells) + "\n"
            "q2|cheeto:farm|0|||||\n")  # a dump made with only the first 7 columns
    found = parse_qos(text)
    assert found["q1"].extra == (("GrpJobs", "1"), ("MaxWall", "00:01:00"))
    assert found["q2"].extra == ()


# -- associations under root ------------------------------------------------------------


def test_only_roots_own_rows_under_root_are_skipped():
    text = ("root|||normal|||||\n"
            "root|root||normal|||||\n"
            "root|dave||normal|||||\n"
            "root|slurmadm||normal|||||\n"
            "lab|||normal|||||\n")
    accounts, assocs = parse_associations(text, frozenset({"root", "slurmadm"}))
    assert set(accounts) == {"lab"}
    assert set(assocs) == {AssocKey("dave", "root", "")}
    defaults = parse_default_accounts("root|root\ndave|root\nbob|lab\n")
    assert defaults == {"dave": "root", "bob": "lab"}


def test_a_hand_made_user_under_root_is_deleted():
    actual = state(associations={AssocKey("dave", "root", ""): AssocState(frozenset({"normal"}))},
                   default_accounts={"dave": "root"},
                   default_rows=frozenset({AssocKey("dave", "root", "")}))
    p = plan(state(), actual)
    assert p.deletions == ["dave@root/"]
    assert cmds(p, "delete default associations") == [
        "remove user where name=dave account=root partition= cluster=farm"]
