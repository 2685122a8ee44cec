"""Conformance of sacctmgr against a real slurmdbd, continued: every limit column (§10),
quota blocks, renames (§11), multi-cluster isolation and QOS removal.

Ground rules and the normalisers under test: test_sacctmgr_qos.py and
sacctmgr_harness.py; the prose is docs/sacctmgr-notes.md.
"""

from __future__ import annotations

from tests.adapters.sacctmgr_harness import (
    Mgr,
    lines_of,
)

# ================================================================= §10 every limit column


def test_every_limit_column_reads_back_and_minus_one_clears_it(mgr: Mgr) -> None:
    """The column names the sync reads (``format=``) and writes (``set``) for limits the
    store does not manage; user rows read with WOPLimits show only their own values."""
    from cheeto_like.sync.slurm.limits import (
        ASSOC_LIMIT_FORMAT,
        ASSOC_LIMITS,
        QOS_LIMIT_FORMAT,
        QOS_LIMITS,
        parse_limits,
        reset_args,
    )

    c = mgr.cluster("cflim")
    mgr.run("add", "account", "cfa_lim", f"cluster={c}")
    mgr.run("add", "user", "cfu_lim", "account=cfa_lim", f"cluster={c}")
    mgr.run("add", "qos", "cfq_lim")

    def sample(set_name: str, is_tres: bool) -> str:
        return f"{set_name}=cpu=3" if is_tres else f"{set_name}=3"

    assoc_sets = [sample(n, t) for _, n, t in ASSOC_LIMITS]
    mgr.run("modify", "user", "where", "name=cfu_lim", "account=cfa_lim", f"cluster={c}",
            "set", *assoc_sets)
    rows = {(r[0], r[1]): r[3:] for r in mgr.rows(
        "show", "assoc", "where", f"cluster={c}", "WOPLimits",
        f"format=account,user,partition,{ASSOC_LIMIT_FORMAT}")}
    mine = parse_limits(rows[("cfa_lim", "cfu_lim")], ASSOC_LIMITS)
    assert {k for k, _ in mine} == {n for _, n, _ in ASSOC_LIMITS}  # every column set
    assert dict(mine)["GrpWall"] == "00:03:00" and dict(mine)["MaxTRES"] == "cpu=3"
    assert parse_limits(rows[("cfa_lim", "")], ASSOC_LIMITS) == ()  # not inherited upward
    mgr.run("modify", "user", "where", "name=cfu_lim", "account=cfa_lim", f"cluster={c}",
            "set", *reset_args(mine, ASSOC_LIMITS))
    rows = {(r[0], r[1]): r[3:] for r in mgr.rows(
        "show", "assoc", "where", f"cluster={c}", "WOPLimits",
        f"format=account,user,partition,{ASSOC_LIMIT_FORMAT}")}
    assert parse_limits(rows[("cfa_lim", "cfu_lim")], ASSOC_LIMITS) == ()

    mgr.run("modify", "qos", "where", "name=cfq_lim", "set",
            *[sample(n, t) for _, n, t in QOS_LIMITS])
    (row,) = mgr.rows("show", "qos", "where", "name=cfq_lim", f"format=name,{QOS_LIMIT_FORMAT}")
    qos = parse_limits(row[1:], QOS_LIMITS)
    assert {k for k, _ in qos} == {n for _, n, _ in QOS_LIMITS}
    mgr.run("modify", "qos", "where", "name=cfq_lim", "set", *reset_args(qos, QOS_LIMITS))
    (row,) = mgr.rows("show", "qos", "where", "name=cfq_lim", f"format=name,{QOS_LIMIT_FORMAT}")
    assert parse_limits(row[1:], QOS_LIMITS) == ()


def test_quota_blocks_grptresmins_zero_reads_back_and_mixed_set_clears(mgr: Mgr) -> None:
    """§12: a quota block (``GrpTRESMins=cpu=0``) on a user row and an account row reads
    back as ``cpu=0`` with WOPLimits; one ``GrpTRESMins=cpu=0,mem=-1`` sets one key and
    clears another; adding rows with the block works in the same call."""
    from cheeto_like.sync.slurm.actual import parse_limit_rows, with_limits
    from cheeto_like.sync.slurm.limits import ASSOC_LIMIT_FORMAT, tres_mins_args
    from cheeto_like.sync.slurm.state import AccountState, AssocKey, AssocState

    c = mgr.cluster("cfquota")
    mgr.run("add", "account", "cfa_q", f"cluster={c}", "GrpTRESMins=gres/gpu=0")
    mgr.run("add", "user", "cfu_q", "account=cfa_q", f"cluster={c}", "GrpTRESMins=cpu=0")
    mgr.run("add", "user", "cfu_q2", "account=cfa_q", f"cluster={c}")
    mgr.run("modify", "user", "where", "name=cfu_q2", "account=cfa_q", f"cluster={c}",
            "set", "GrpTRESMins=cpu=500,mem=7")

    def read() -> tuple[dict[str, AccountState], dict[AssocKey, AssocState]]:
        text = "\n".join("|".join(r) for r in mgr.rows(
            "show", "assoc", "where", f"cluster={c}", "WOPLimits",
            f"format=account,user,partition,{ASSOC_LIMIT_FORMAT}"))
        accounts = {"cfa_q": AccountState("cfa_q")}
        assocs = {AssocKey(u, "cfa_q", ""): AssocState(frozenset()) for u in ("cfu_q", "cfu_q2")}
        with_limits(accounts, assocs, parse_limit_rows(text))
        return accounts, assocs

    accounts, assocs = read()
    assert accounts["cfa_q"].grp_tres_mins == (("gres/gpu", 0),)
    assert assocs[AssocKey("cfu_q", "cfa_q", "")].grp_tres_mins == (("cpu", 0),)
    drifted = assocs[AssocKey("cfu_q2", "cfa_q", "")]
    assert drifted.grp_tres_mins == (("cpu", 500), ("mem", 7)) and drifted.extra == ()
    mgr.run("modify", "user", "where", "name=cfu_q2", "account=cfa_q", f"cluster={c}", "set",
            *tres_mins_args((("cpu", 0),), drifted.grp_tres_mins))
    mgr.run("modify", "account", "where", "name=cfa_q", f"cluster={c}", "set",
            *tres_mins_args((), (("gres/gpu", 0),)))
    accounts, assocs = read()
    assert assocs[AssocKey("cfu_q2", "cfa_q", "")].grp_tres_mins == (("cpu", 0),)
    assert accounts["cfa_q"].grp_tres_mins == ()


# ================================================================= §11 renames


def test_newname_renames_a_user_everywhere_and_accounts_cannot_be_renamed(mgr: Mgr) -> None:
    c1, c2 = mgr.cluster("cfren1"), mgr.cluster("cfren2")
    mgr.run("add", "account", "cfa_ren", f"cluster={c1}")
    mgr.run("add", "account", "cfa_ren", f"cluster={c2}")
    mgr.run("add", "user", "cfu_ren_old", "account=cfa_ren", f"cluster={c1}")
    mgr.run("add", "user", "cfu_ren_old", "account=cfa_ren", f"cluster={c2}")
    mgr.run("add", "user", "cfu_ren_other", "account=cfa_ren", f"cluster={c1}")
    mgr.run("add", "coordinator", "account=cfa_ren", "names=cfu_ren_old")
    # cluster= does not scope it: the user record is global
    mgr.run("modify", "user", "where", "name=cfu_ren_old", f"cluster={c1}", "set",
            "newname=cfu_ren_new")
    for cluster in (c1, c2):
        users = {r[1] for r in mgr.user_assocs(cluster)}
        assert "cfu_ren_new" in users and "cfu_ren_old" not in users
    assert mgr.defaults(c1)["cfu_ren_new"] == "cfa_ren"
    assert mgr.coordinators("cfa_ren") == ["cfu_ren_new"]
    # the old name is gone: nothing matches; a taken new name is refused with rc 1
    assert lines_of(mgr.fails("modify", "user", "where", "name=cfu_ren_old", "set",
                            "newname=x").stdout) == ["Nothing modified"]
    taken = mgr.fails("modify", "user", "where", "name=cfu_ren_other", "set",
                      "newname=cfu_ren_new")
    assert lines_of(taken.stdout) == ["Nothing modified"] and taken.stderr.strip()
    # accounts have no rename in 22.05
    for form in ("name=cfa_ren2", "newname=cfa_ren2"):
        refused = mgr.fails("modify", "account", "where", "name=cfa_ren", "set", form)
        assert refused.stderr.strip() in ("Can't modify the name of an account",
                                          "Unknown option: newname=cfa_ren2\n Use keyword "
                                          "'where' to modify condition")


# ================================================================= multi-cluster isolation


def test_multi_cluster_isolation(mgr: Mgr) -> None:
    c1, c2 = mgr.cluster("cfiso1"), mgr.cluster("cfiso2")
    mgr.run("add", "qos", "cfq_iso", "Description=cheeto:cfiso2")
    for cluster in (c1, c2):
        mgr.run("add", "account", "cfa_iso", f"cluster={cluster}", "MaxJobs=5")
        mgr.run(
            "add", "user", "cfu_iso1,cfu_iso2", "account=cfa_iso", "partition=p",
            "qos=cfq_iso", f"cluster={cluster}",
        )  # fmt: skip
    before_c2 = mgr.assocs(c2)
    # Reads are scoped.
    scoped = mgr.rows("show", "assoc", "where", f"cluster={c1}", "format=cluster")
    assert {row[0] for row in scoped} == {c1}
    # Writes scoped with cluster=c1 never touch c2.
    mgr.run("modify", "account", "where", "name=cfa_iso", f"cluster={c1}", "set", "MaxJobs=7")
    mgr.run(
        "modify", "user", "where", "name=cfu_iso1,cfu_iso2", "account=cfa_iso", "partition=p",
        f"cluster={c1}", "set", "qos=normal", "defaultqos=-1",
    )  # fmt: skip
    mgr.run("remove", "user", "where", "name=cfu_iso2", "account=cfa_iso", f"cluster={c1}")
    mgr.run("add", "user", "cfu_iso3", "account=cfa_iso", f"cluster={c1}")
    assert mgr.assocs(c2) == before_c2
    assert {row[1] for row in mgr.assocs(c1) if row[1]} == {"root", "cfu_iso1", "cfu_iso3"}
    # QOS are global: the tag in Description is the only ownership marker, and it reads
    # back verbatim when written lowercase.
    assert mgr.qos("cfq_iso")[1] == "cheeto:cfiso2"
    # Unscoped reads mix clusters; unscoped writes hit every cluster.
    unscoped = mgr.rows("show", "assoc", "where", "user=cfu_iso1", "format=cluster")
    assert {c1, c2} <= {row[0] for row in unscoped}
    mgr.run(
        "modify", "user", "where", "name=cfu_iso1", "account=cfa_iso", "set", "MaxJobs=1",
    )  # fmt: skip
    maxjobs = mgr.rows("show", "assoc", "where", "user=cfu_iso1", "format=cluster,maxjobs")
    assert {(c1, "1"), (c2, "1")} <= set(maxjobs)


def test_remove_qos_corrupts_association_qos_lists_unless_detached_first(mgr: Mgr) -> None:
    """22.05 bug: `remove qos` strips ',<id>,' from every association's qos column with
    replace(qos, ',<id>,', ''), gluing the neighbours together (',1,X,7,' -> ',17,'), in
    EVERY cluster. An association must drop the QOS (modify ... set qos=) before removal."""
    c1, c2 = mgr.cluster("cfqrm1"), mgr.cluster("cfqrm2")
    mgr.run("add", "qos", "cfq_rm_victim,cfq_rm_keep")
    ids = dict(
        (name, int(qos_id)) for qos_id, name in mgr.rows("show", "qos", "format=id,name")
    )
    for cluster in (c1, c2):
        mgr.run("add", "account", "cfa_qrm", f"cluster={cluster}")
        mgr.run(
            "add", "user", "cfu_qrm", "account=cfa_qrm", f"cluster={cluster}",
            "qos=normal,cfq_rm_victim,cfq_rm_keep",
        )  # fmt: skip
    # c1 detaches the QOS first (the safe order); c2 (another reconciler's cluster) does not.
    mgr.run(
        "modify", "user", "where", "name=cfu_qrm", "account=cfa_qrm", f"cluster={c1}", "set",
        "qos=normal,cfq_rm_keep", "defaultqos=-1",
    )  # fmt: skip
    removed = mgr.run("remove", "qos", "cfq_rm_victim")
    assert lines_of(removed.stdout) == ["Deleting QOS(s)...", "cfq_rm_victim"]
    raw = mgr.slurm.sql(f"SELECT qos FROM {c2}_assoc_table WHERE user='cfu_qrm';").strip()
    # The stored list is an id list in insertion order: ",1,<victim>,<keep>," became:
    glued = int(f"1{ids['cfq_rm_keep']}")
    assert raw == f",{glued},"
    # ... which now reads as whatever QOS has that id (blank if none): normal and
    # cfq_rm_keep are both gone from c2's association, with rc 0 and no warning.
    names = {qos_id: name for name, qos_id in ids.items()}
    (c2_row,) = mgr.user_assocs(c2, "account,user,qos")
    assert c2_row[2] == names.get(glued, "")
    (c1_row,) = mgr.user_assocs(c1, "account,user,qos")
    assert c1_row[2] == "cfq_rm_keep,normal"  # detached first: intact


def test_remove_qos_refusals_and_exit_codes(mgr: Mgr) -> None:
    cluster = mgr.cluster("cfqrm3")
    mgr.run("add", "qos", "cfq_rm_def")
    mgr.run("add", "account", "cfa_qrm3", f"cluster={cluster}")
    mgr.run(
        "add", "user", "cfu_qrm3", "account=cfa_qrm3", "qos=cfq_rm_def",
        "defaultqos=cfq_rm_def", f"cluster={cluster}",
    )  # fmt: skip
    refused = mgr.fails("remove", "qos", "cfq_rm_def")
    assert refused.stdout == ""
    assert lines_of(refused.stderr)[0] == \
        "Associations listed below have these as their Default QOS."
    assert lines_of(refused.stderr)[-1] == "Changes Discarded"
    mgr.run(
        "modify", "user", "where", "name=cfu_qrm3", f"cluster={cluster}", "set", "qos=normal",
        "defaultqos=-1",
    )  # fmt: skip
    mgr.run("remove", "qos", "where", "name=cfq_rm_def")
    assert lines_of(mgr.fails("remove", "qos", "cfq_rm_def").stdout) == ["Nothing deleted"]
