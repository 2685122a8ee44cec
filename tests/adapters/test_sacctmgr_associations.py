"""Conformance of sacctmgr against a real slurmdbd, continued: user associations
(batched add/modify/remove, QOS lists, partitions), default accounts and coordinators.

Ground rules and the normalisers under test: test_sacctmgr_qos.py and
sacctmgr_harness.py; the prose is docs/sacctmgr-notes.md.
"""

from __future__ import annotations

from tests.adapters.sacctmgr_harness import (
    Mgr,
    lines_of,
    parse_qos_list,
    squeezed,
)

# ================================================================= user associations


def test_user_associations_batched_add_modify_remove(mgr: Mgr) -> None:
    cluster = mgr.cluster("cfusers")
    mgr.run("add", "account", "cfa_u", f"cluster={cluster}")
    mgr.run("add", "qos", "cfq_u1,cfq_u2")
    added = mgr.run(
        "add", "user", "cfu_a,cfu_b,cfu_c", "account=cfa_u", "partition=p",
        "qos=cfq_u1,cfq_u2", "defaultqos=cfq_u1", f"cluster={cluster}",
    )  # fmt: skip
    assert " Adding User(s)" in added.stdout
    assert "QOS = cfq_u1,cfq_u2" in lines_of(added.stdout)
    row = ("cfa_u", "p", "cfq_u1,cfq_u2", "cfq_u1")
    assert mgr.user_assocs(cluster) == {
        (row[0], user, *row[1:]) for user in ("cfu_a", "cfu_b", "cfu_c")
    }
    # All already there: rc 1 "Nothing new added."
    dup = mgr.fails(
        "add", "user", "cfu_a,cfu_b,cfu_c", "account=cfa_u", "partition=p", f"cluster={cluster}"
    )
    assert lines_of(dup.stdout) == ["Nothing new added."]
    # Some already there: the new ones are added, rc 0, existing ones are NOT modified.
    partial = mgr.run(
        "add", "user", "cfu_c,cfu_d", "account=cfa_u", "partition=p", "qos=cfq_u2",
        f"cluster={cluster}",
    )  # fmt: skip
    assert "U = cfu_d" in partial.stdout and "U = cfu_c" not in partial.stdout
    assocs = mgr.user_assocs(cluster)
    assert ("cfa_u", "cfu_c", "p", "cfq_u1,cfq_u2", "cfq_u1") in assocs
    assert ("cfa_u", "cfu_d", "p", "cfq_u2", "") in assocs
    # Batched modify; unknown names in the list are ignored (rc 0) ...
    mgr.run(
        "modify", "user", "where", "name=cfu_a,cfu_b,cfu_nobody", "account=cfa_u",
        "partition=p", f"cluster={cluster}", "set", "qos=cfq_u2", "defaultqos=-1",
    )  # fmt: skip
    assocs = mgr.user_assocs(cluster)
    assert ("cfa_u", "cfu_a", "p", "cfq_u2", "") in assocs
    assert ("cfa_u", "cfu_b", "p", "cfq_u2", "") in assocs
    # ... but if nothing matches: rc 1 "Nothing modified".
    none = mgr.fails(
        "modify", "user", "where", "name=cfu_nobody", "account=cfa_u", f"cluster={cluster}",
        "set", "qos=cfq_u2",
    )  # fmt: skip
    assert lines_of(none.stdout) == ["Nothing modified"]
    # Batched remove; unknown names are ignored; a user losing its last association is
    # deleted as a user too.
    removed = mgr.run(
        "remove", "user", "where", "name=cfu_c,cfu_d,cfu_nobody", "account=cfa_u",
        "partition=p", f"cluster={cluster}",
    )  # fmt: skip
    lines = lines_of(removed.stdout)
    assert lines[0] == "Deleting user associations..."
    assert "C = cfusers A = cfa_u U = cfu_c P = p" in lines
    assert lines[-3:] == ["Deleting users (No Associations)...", "cfu_c", "cfu_d"]
    assert mgr.rows("show", "user", "cfu_c", "format=user") == []
    gone = mgr.fails(
        "remove", "user", "where", "name=cfu_c,cfu_d", "account=cfa_u", f"cluster={cluster}"
    )
    assert lines_of(gone.stdout) == ["Nothing deleted"]


def test_user_association_qos_lists(mgr: Mgr) -> None:
    cluster = mgr.cluster("cfqoslist")
    mgr.run("add", "account", "cfa_ql", f"cluster={cluster}")
    mgr.run("add", "qos", "cfq_ql_z,cfq_ql_a,cfq_ql_m")
    where = ("where", "name=cfu_ql", "account=cfa_ql", "partition=p", f"cluster={cluster}")
    mgr.run(
        "add", "user", "cfu_ql", "account=cfa_ql", "partition=p",
        "qos=cfq_ql_z,normal,cfq_ql_a", f"cluster={cluster}",
    )  # fmt: skip

    def qos() -> tuple[str, str]:
        (row,) = mgr.user_assocs(cluster)
        return row[3], row[4]

    assert qos() == ("cfq_ql_a,cfq_ql_z,normal", "")  # sorted by name, not by id or input
    assert parse_qos_list(qos()[0]) == {"cfq_ql_a", "cfq_ql_z", "normal"}
    mgr.run("modify", "user", *where, "set", "qos+=cfq_ql_m")
    assert qos()[0] == "cfq_ql_a,cfq_ql_m,cfq_ql_z,normal"
    mgr.run("modify", "user", *where, "set", "qos-=normal")
    assert qos()[0] == "cfq_ql_a,cfq_ql_m,cfq_ql_z"
    mgr.run("modify", "user", *where, "set", "qos=cfq_ql_m", "defaultqos=cfq_ql_m")
    assert qos() == ("cfq_ql_m", "cfq_ql_m")
    # Dropping the default QOS from the list WITHOUT touching defaultqos is refused, but
    # exits 0: the only sign is stderr.
    refused = mgr.run("modify", "user", *where, "set", "qos=cfq_ql_a", stderr_ok=True)
    assert refused.stdout == ""
    assert refused.stderr.startswith(" These associations don't have access to their default qos.")
    assert qos() == ("cfq_ql_m", "cfq_ql_m")
    # Same for a defaultqos outside the list.
    outside = mgr.run("modify", "user", *where, "set", "defaultqos=cfq_ql_z", stderr_ok=True)
    assert "don't have access to their default qos" in outside.stderr
    assert qos() == ("cfq_ql_m", "cfq_ql_m")
    # Sending both together works.
    mgr.run("modify", "user", *where, "set", "qos=cfq_ql_a", "defaultqos=-1")
    assert qos() == ("cfq_ql_a", "")
    # `qos=` (empty) means inherit from the parent (root's normal); `qos=-1` is an error.
    mgr.run("modify", "user", *where, "set", "qos=")
    assert qos() == ("normal", "")
    minus = mgr.fails("modify", "user", *where, "set", "qos=-1")
    assert "You gave a bad qos '1'" in minus.stderr
    # On ADD a defaultqos outside the list is accepted as is.
    mgr.run(
        "add", "user", "cfu_ql2", "account=cfa_ql", "partition=p", "qos=cfq_ql_a",
        "defaultqos=cfq_ql_z", f"cluster={cluster}",
    )  # fmt: skip
    assert ("cfa_ql", "cfu_ql2", "p", "cfq_ql_a", "cfq_ql_z") in mgr.user_assocs(cluster)


def test_add_user_errors(mgr: Mgr) -> None:
    c1 = mgr.cluster("cfuerr")
    mgr.run("add", "account", "cfa_err", f"cluster={c1}")
    bad_qos = mgr.fails(
        "add", "user", "cfu_err", "account=cfa_err", "qos=cfq_nosuch", f"cluster={c1}"
    )
    assert bad_qos.stdout == ""
    assert "You gave a bad qos 'cfq_nosuch'" in bad_qos.stderr
    bad_acct = mgr.fails("add", "user", "cfu_err", "account=cfa_nosuch", f"cluster={c1}")
    assert bad_acct.stdout == ""
    assert lines_of(bad_acct.stderr) == [
        "This account 'cfa_nosuch' doesn't exist.",
        "Contact your admin to add this account.",
        "No associations or wckeys created.",
    ]
    no_cluster = mgr.fails("add", "user", "cfu_err", "account=cfa_err", "cluster=cfnosuch")
    assert "This cluster 'cfnosuch' doesn't exist." in no_cluster.stderr
    assert mgr.user_assocs(c1) == set()
    unknown = mgr.fails("modify", "qos", "normal", "set", "NoSuchOption=3")
    assert lines_of(unknown.stdout) == [
        "Unknown option: NoSuchOption=3",
        "Use keyword 'where' to modify condition",
    ]


def test_partitions_are_free_text_and_empty_partition_selects_partitionless(mgr: Mgr) -> None:
    cluster = mgr.cluster("cfpart")
    mgr.run("add", "account", "cfa_p", f"cluster={cluster}")
    for partition in ("", "gpu-never-defined", "x"):
        mgr.run(
            "add", "user", "cfu_p", "account=cfa_p", f"partition={partition}",
            f"cluster={cluster}",
        )  # fmt: skip
    fmt = "account,user,partition,qos"
    assert mgr.user_assocs(cluster, fmt) == {
        ("cfa_p", "cfu_p", "", "normal"),
        ("cfa_p", "cfu_p", "gpu-never-defined", "normal"),
        ("cfa_p", "cfu_p", "x", "normal"),
    }
    # `partition=` (empty) in where matches only the partition-less association.
    where = ("where", "name=cfu_p", "account=cfa_p", f"cluster={cluster}")
    mgr.run("modify", "user", *where, "partition=", "set", "MaxJobs=4")
    rows = mgr.rows(
        "show", "assoc", "where", f"cluster={cluster}", "user=cfu_p", "partition=",
        "format=partition,maxjobs",
    )  # fmt: skip
    assert rows == [("", "4")]
    mgr.run("remove", "user", *where, "partition=x")
    mgr.run("remove", "user", *where, "partition=")
    assert mgr.user_assocs(cluster, fmt) == {("cfa_p", "cfu_p", "gpu-never-defined", "normal")}


# ================================================================= default accounts


def test_default_account_is_per_cluster(mgr: Mgr) -> None:
    c1, c2 = mgr.cluster("cfdef1"), mgr.cluster("cfdef2")
    for cluster in (c1, c2):
        mgr.run("add", "account", "cfa_d1,cfa_d2", f"cluster={cluster}")
    mgr.run("add", "user", "cfu_d", "account=cfa_d1", "partition=p1", f"cluster={c1}")
    mgr.run("add", "user", "cfu_d", "account=cfa_d2", "partition=p2", f"cluster={c1}")
    mgr.run("add", "user", "cfu_d", "account=cfa_d2", f"cluster={c2}")
    mgr.run("add", "user", "cfu_d", "account=cfa_d1", f"cluster={c2}")
    # The first association added on a cluster becomes the default there.
    assert mgr.defaults(c1)["cfu_d"] == "cfa_d1"
    assert mgr.defaults(c2)["cfu_d"] == "cfa_d2"
    # `show user where cluster=X` lists every user in slurmdbd (users are global); users
    # without an association on X have a blank default.
    mgr.run("add", "user", "cfu_d_other", "account=cfa_d1", f"cluster={c2}")
    assert mgr.defaults(c1)["cfu_d_other"] == ""
    # Unscoped, DefaultAccount is the one on slurm.conf's ClusterName (not one of ours).
    unscoped = dict(mgr.rows("show", "user", "cfu_d", "format=user,defaultaccount"))
    assert unscoped == {"cfu_d": ""}
    # onlydefaults: the default association rows (several when the account has several
    # partitions and the default was set by modify).
    only = mgr.rows(
        "show", "assoc", "where", f"cluster={c1}", "user=cfu_d", "onlydefaults",
        "format=cluster,account,user,partition",
    )  # fmt: skip
    assert only == [(c1, "cfa_d1", "cfu_d", "p1")]
    # Changing the default on one cluster does not touch the other.
    changed = mgr.run(
        "modify", "user", "where", "name=cfu_d", f"cluster={c1}", "set", "defaultaccount=cfa_d2"
    )
    assert lines_of(changed.stdout) == ["Modified users...", "cfu_d"]
    assert mgr.defaults(c1)["cfu_d"] == "cfa_d2"
    assert mgr.defaults(c2)["cfu_d"] == "cfa_d2"
    mgr.run(
        "modify", "user", "where", "name=cfu_d", f"cluster={c2}", "set", "defaultaccount=cfa_d1"
    )
    assert (mgr.defaults(c1)["cfu_d"], mgr.defaults(c2)["cfu_d"]) == ("cfa_d2", "cfa_d1")
    # The new default needs an association of that user on that account on that cluster.
    mgr.run("add", "account", "cfa_d3", f"cluster={c2}")
    refused = mgr.fails(
        "modify", "user", "where", "name=cfu_d", f"cluster={c1}", "set", "defaultaccount=cfa_d3"
    )
    assert lines_of(refused.stdout) == [
        "Can't modify because these users aren't associated with new default account "
        "'cfa_d3'...",
        "U = cfu_d C = cfdef1",
    ]
    # Without cluster= it applies to every cluster and fails as a whole if any lacks it.
    mgr.run("add", "user", "cfu_d", "account=cfa_d3", f"cluster={c2}")
    everywhere = mgr.fails("modify", "user", "where", "name=cfu_d", "set", "defaultaccount=cfa_d3")
    assert "U = cfu_d C = cfdef1" in everywhere.stdout
    assert mgr.defaults(c2)["cfu_d"] == "cfa_d1"
    # Batched modify of defaults.
    mgr.run("add", "user", "cfu_d2", "account=cfa_d1", f"cluster={c1}")
    mgr.run("add", "user", "cfu_d2", "account=cfa_d2", f"cluster={c1}")
    mgr.run(
        "modify", "user", "where", "name=cfu_d,cfu_d2", f"cluster={c1}", "set",
        "defaultaccount=cfa_d2",
    )  # fmt: skip
    assert (mgr.defaults(c1)["cfu_d"], mgr.defaults(c1)["cfu_d2"]) == ("cfa_d2", "cfa_d2")


def test_removing_default_association_rules(mgr: Mgr) -> None:
    """slurmdbd 22.05 checks only the rows being removed, sorted by (user, is_def): a call
    is refused iff a default row comes after any non-default row, whoever owns them."""
    cluster = mgr.cluster("cfdefrm")
    mgr.run("add", "account", "cfa_x1,cfa_x2", f"cluster={cluster}")
    # 1. A user's default association removed alone, while another remains: ALLOWED, and
    #    the user is left without a default account on this cluster.
    mgr.run("add", "user", "cfu_x", "account=cfa_x1", f"cluster={cluster}")
    mgr.run("add", "user", "cfu_x", "account=cfa_x2", f"cluster={cluster}")
    mgr.run("remove", "user", "where", "name=cfu_x", "account=cfa_x1", f"cluster={cluster}")
    assert mgr.defaults(cluster)["cfu_x"] == ""
    # The next association added becomes the default again.
    mgr.run("add", "user", "cfu_x", "account=cfa_x1", f"cluster={cluster}")
    assert mgr.defaults(cluster)["cfu_x"] == "cfa_x1"
    # 2. Removing ALL of a user's associations in one call when one is non-default:
    #    REFUSED (stderr, rc 1, nothing removed).
    refused = mgr.fails("remove", "user", "where", "name=cfu_x", f"cluster={cluster}")
    assert refused.stdout == ""
    assert lines_of(refused.stderr) == [
        "Error with request: You can not remove the default account of a user",
        "C = cfdefrm A = cfa_x1 U = cfu_x",
        "You must change the default account of these users or remove the users completely "
        "from the affected clusters to allow these changes.",
        "Changes Discarded",
    ]
    assert len(mgr.user_assocs(cluster)) == 2
    # ... two calls, non-default rows first, work.
    mgr.run("remove", "user", "where", "name=cfu_x", "account=cfa_x2", f"cluster={cluster}")
    mgr.run("remove", "user", "where", "name=cfu_x", "account=cfa_x1", f"cluster={cluster}")
    assert mgr.user_assocs(cluster) == set()
    # 3. A batch across users: cfu_y1 loses a NON-default row, cfu_y2 its only (default)
    #    row. Each alone is fine; together REFUSED because y1 sorts before y2.
    mgr.run("add", "user", "cfu_y1", "account=cfa_x1", f"cluster={cluster}")
    mgr.run("add", "user", "cfu_y1,cfu_y2", "account=cfa_x2", f"cluster={cluster}")
    batch = ("remove", "user", "where", "name=cfu_y1,cfu_y2", "account=cfa_x2")
    refused = mgr.fails(*batch, f"cluster={cluster}")
    assert "A = cfa_x2 U = cfu_y2" in squeezed(refused.stderr)
    assert refused.stderr.rstrip().endswith("Changes Discarded")
    # Batches made only of default rows, or only of non-default rows, always pass.
    mgr.run("remove", "user", "where", "name=cfu_y2", "account=cfa_x2", f"cluster={cluster}")
    mgr.run("remove", "user", "where", "name=cfu_y1", "account=cfa_x2", f"cluster={cluster}")
    # 4. remove account cascades through the same check.
    mgr.run("add", "user", "cfu_z", "account=cfa_x2", f"cluster={cluster}")  # default x2
    mgr.run("add", "user", "cfu_y1", "account=cfa_x2", f"cluster={cluster}")  # non-default
    cascade = mgr.fails("remove", "account", "where", "name=cfa_x2", f"cluster={cluster}")
    assert "A = cfa_x2 U = cfu_z" in squeezed(cascade.stderr)
    # Re-pointing defaults (the same account re-flags all its rows) makes it pass.
    mgr.run("add", "user", "cfu_z", "account=cfa_x1", f"cluster={cluster}")
    mgr.run(
        "modify", "user", "where", "name=cfu_z", f"cluster={cluster}", "set",
        "defaultaccount=cfa_x1",
    )  # fmt: skip
    mgr.run("remove", "account", "where", "name=cfa_x2", f"cluster={cluster}")
    assert {row[0] for row in mgr.user_assocs(cluster)} == {"cfa_x1"}


def test_modify_default_account_to_same_flags_every_partition_row(mgr: Mgr) -> None:
    cluster = mgr.cluster("cfdefparts")
    mgr.run("add", "account", "cfa_dp", f"cluster={cluster}")
    for partition in ("pa", "pb"):
        mgr.run(
            "add", "user", "cfu_dp", "account=cfa_dp", f"partition={partition}",
            f"cluster={cluster}",
        )  # fmt: skip
    read = (
        "show", "assoc", "where", f"cluster={cluster}", "user=cfu_dp", "onlydefaults",
        "format=partition",
    )  # fmt: skip
    assert mgr.rows(*read) == [("pa",)]  # only the first association is the default row
    mgr.run(
        "modify", "user", "where", "name=cfu_dp", f"cluster={cluster}", "set",
        "defaultaccount=cfa_dp",
    )  # fmt: skip
    assert sorted(mgr.rows(*read)) == [("pa",), ("pb",)]


# ================================================================= coordinators


def test_coordinators(mgr: Mgr) -> None:
    c1, c2 = mgr.cluster("cfcoord1"), mgr.cluster("cfcoord2")
    mgr.run("add", "account", "cfa_co,cfa_co2", f"cluster={c1}")
    mgr.run("add", "user", "cfu_co_b,cfu_co_a,cfu_co_c", "account=cfa_co", f"cluster={c1}")
    mgr.run("add", "account", "cfa_co3", f"cluster={c2}")
    mgr.run("add", "user", "cfu_co_far", "account=cfa_co3", f"cluster={c2}")
    added = mgr.run("add", "coordinator", "account=cfa_co", "names=cfu_co_c,cfu_co_a")
    assert lines_of(added.stdout) == [
        "Adding Coordinator User(s)", "cfu_co_c", "cfu_co_a",
        "To Account(s) and all sub-accounts", "cfa_co",
    ]  # fmt: skip
    assert mgr.coordinators("cfa_co") == ["cfu_co_a", "cfu_co_c"]  # sorted
    # Idempotent; global (a user with associations only on another cluster is fine).
    mgr.run("add", "coordinator", "account=cfa_co", "names=cfu_co_a,cfu_co_far")
    assert mgr.coordinators("cfa_co") == ["cfu_co_a", "cfu_co_c", "cfu_co_far"]
    # Read per user as well.
    per_user = dict(mgr.rows("show", "user", "where", "name=cfu_co_a,cfu_co_b", "withcoord",
                             "format=user,coordinators"))
    assert per_user == {"cfu_co_a": "cfa_co", "cfu_co_b": ""}
    # The user must exist in slurmdbd (= have an association somewhere); so must the account.
    ghost = mgr.fails("add", "coordinator", "account=cfa_co", "names=cfu_co_b,cfu_co_ghost")
    assert ghost.stderr.strip() == "You specified a non-existent user 'cfu_co_ghost'."
    assert "cfu_co_b" not in mgr.coordinators("cfa_co")  # whole call failed
    nosuch = mgr.fails("add", "coordinator", "account=cfa_nosuch", "names=cfu_co_b")
    assert nosuch.stderr.strip() == "You specified a non-existent account 'cfa_nosuch'."
    # Remove one; removing a non-coordinator is rc 1 "Nothing removed".
    removed = mgr.run("remove", "coordinator", "account=cfa_co", "names=cfu_co_c")
    assert lines_of(removed.stdout)[-2:] == [
        "Removed Coordinators (sub accounts not listed)...",
        "U = cfu_co_c A = cfa_co",
    ]
    nothing = mgr.fails("remove", "coordinator", "account=cfa_co", "names=cfu_co_c")
    assert lines_of(nothing.stdout)[-1] == "Nothing removed"
    # Without account= it removes the user from EVERY account.
    mgr.run("add", "coordinator", "account=cfa_co2", "names=cfu_co_a")
    mgr.run("remove", "coordinator", "names=cfu_co_a")
    assert mgr.coordinators("cfa_co") == ["cfu_co_far"]
    assert mgr.coordinators("cfa_co2") == []
    # A user deleted by losing its last association loses its coordinator rows for good.
    mgr.run("remove", "user", "where", "name=cfu_co_far", f"cluster={c2}")
    assert mgr.coordinators("cfa_co") == []
    mgr.run("add", "user", "cfu_co_far", "account=cfa_co3", f"cluster={c2}")
    assert mgr.coordinators("cfa_co") == []
    # The full list, one row per account (every account in slurmdbd).
    every = dict(mgr.rows("show", "account", "withcoord", "format=account,coordinators"))
    assert every["cfa_co2"] == "" and "cfa_co" in every
