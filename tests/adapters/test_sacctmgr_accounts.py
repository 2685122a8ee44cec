"""Conformance of sacctmgr against a real slurmdbd, continued: accounts and association
reads: shapes, inherited limits, MaxWall forms, per-cluster adds and scoped removals.

Ground rules and the normalisers under test: test_sacctmgr_qos.py and
sacctmgr_harness.py; the prose is docs/sacctmgr-notes.md.
"""

from __future__ import annotations

from tests.adapters.sacctmgr_harness import (
    ASSOC_FORMAT,
    ROOT_ROWS,
    Mgr,
    lines_of,
    parse_wall,
)

# ================================================================= accounts and assoc reads


def test_assoc_read_shape_and_account_rows(mgr: Mgr) -> None:
    cluster = mgr.cluster("cfaread")
    assert mgr.assocs(cluster) == ROOT_ROWS  # a fresh cluster: root account + root user
    added = mgr.run(
        "add", "account", "cfa_r1,cfa_r2", f"cluster={cluster}", "Description=Lab One",
        "Organization=Org1", "MaxJobs=10", "GrpJobs=20", "MaxSubmit=30", "MaxWall=10080",
    )  # fmt: skip
    assert "A = cfa_r1 C = cfaread" in lines_of(added.stdout)
    account_row = ("", "", "normal", "", "10", "20", "30", "7-00:00:00", "root")
    assert mgr.assocs(cluster) == ROOT_ROWS | {
        ("cfa_r1", *account_row),
        ("cfa_r2", *account_row),
    }
    # `cluster=X` without `where` is the same filter.
    rows = mgr.rows("show", "assoc", f"cluster={cluster}", ASSOC_FORMAT)
    assert {row[1:] for row in rows} == mgr.assocs(cluster)
    # Account rows only: `user=` (empty) selects rows whose user is blank.
    only = mgr.rows(
        "show", "assoc", "where", f"cluster={cluster}", "account=cfa_r1", "user=",
        "format=account,user,maxwall",
    )  # fmt: skip
    assert only == [("cfa_r1", "", "7-00:00:00")]
    # Description and organization live on the global account record, lowercased.
    assert mgr.rows(
        "show", "account", "where", "name=cfa_r1", "format=account,description,organization"
    ) == [("cfa_r1", "lab one", "org1")]
    # Without Description/Organization both default to the account name.
    mgr.run("add", "account", "cfa_r3", f"cluster={cluster}")
    assert mgr.rows("show", "account", "cfa_r3", "format=account,descr,org") == [
        ("cfa_r3", "cfa_r3", "cfa_r3")
    ]
    # Field names are validated; headers are abbreviated.
    bad = mgr.fails("-P", "-n", "show", "assoc", f"cluster={cluster}", "format=account,bogus")
    assert bad.stderr.strip() == "Unknown field 'bogus'"
    header = mgr.run("-P", "show", "assoc", f"cluster={cluster}", ASSOC_FORMAT).stdout
    assert header.splitlines()[0] == (
        "Cluster|Account|User|Partition|QOS|Def QOS|MaxJobs|GrpJobs|MaxSubmit|MaxWall|ParentName"
    )
    # An unknown cluster is not an error for reads: it is just empty.
    assert mgr.rows("show", "assoc", "where", "cluster=cfnosuch", ASSOC_FORMAT) == []
    assert mgr.rows("show", "cluster", "where", f"name={cluster},cfnosuch", "format=cluster") == [
        (cluster,)
    ]


def test_user_rows_show_inherited_limits_unless_woplimits(mgr: Mgr) -> None:
    cluster = mgr.cluster("cfinherit")
    mgr.run(
        "add", "account", "cfa_inh", f"cluster={cluster}", "MaxJobs=9", "GrpJobs=3",
        "MaxWall=60",
    )  # fmt: skip
    mgr.run("add", "user", "cfu_inh", "account=cfa_inh", "partition=p", f"cluster={cluster}")
    fmt = "format=account,user,partition,qos,maxjobs,grpjobs,maxsubmit,maxwall"
    rows = set(mgr.rows("show", "assoc", "where", f"cluster={cluster}", "account=cfa_inh", fmt))
    # MaxJobs/MaxWall/QOS are shown as inherited on the user row; GrpJobs is not inherited.
    assert rows == {
        ("cfa_inh", "", "", "normal", "9", "3", "", "01:00:00"),
        ("cfa_inh", "cfu_inh", "p", "normal", "9", "", "", "01:00:00"),
    }
    raw = mgr.rows(
        "show", "assoc", "where", f"cluster={cluster}", "account=cfa_inh", "WOPLimits", fmt
    )
    assert set(raw) == {
        ("cfa_inh", "", "", "", "9", "3", "", "01:00:00"),
        ("cfa_inh", "cfu_inh", "p", "", "", "", "", ""),
    }
    # Modifying the account lists the (inheriting) user associations as touched, but only
    # the account row gets the value; a user row with its own value keeps it.
    mgr.run(
        "modify", "user", "where", "name=cfu_inh", f"cluster={cluster}", "set", "MaxJobs=2"
    )
    changed = mgr.run(
        "modify", "account", "where", "name=cfa_inh", f"cluster={cluster}", "set", "MaxJobs=11"
    )
    assert "A = cfa_inh of root" in changed.stdout
    rows = set(mgr.rows("show", "assoc", "where", f"cluster={cluster}", "account=cfa_inh", fmt))
    assert ("cfa_inh", "cfu_inh", "p", "normal", "2", "", "", "01:00:00") in rows
    assert ("cfa_inh", "", "", "normal", "11", "3", "", "01:00:00") in rows


MAXWALL_DISPLAY = [
    ("10080", "7-00:00:00"),
    ("7-00:00:00", "7-00:00:00"),
    ("168:00:00", "7-00:00:00"),
    ("7-0", "7-00:00:00"),
    ("59", "00:59:00"),
    ("60", "01:00:00"),
    ("90", "01:30:00"),
    ("1440", "1-00:00:00"),
    ("1441", "1-00:01:00"),
    ("1-12", "1-12:00:00"),
    ("00:30:00", "00:30:00"),
    ("2:30", "00:03:00"),  # MM:SS, seconds round UP to a whole minute
    ("00:00:30", "00:01:00"),
    ("0", "00:00:00"),
    ("144000", "100-00:00:00"),
    ("-1", ""),
    ("UNLIMITED", ""),
]


def test_account_maxwall_forms_and_clearing_limits(mgr: Mgr) -> None:
    cluster = mgr.cluster("cfwall")
    mgr.run("add", "account", "cfa_wall", f"cluster={cluster}", "MaxJobs=5", "MaxSubmit=7")
    where = ("where", "name=cfa_wall", f"cluster={cluster}", "set")
    read = ("show", "assoc", "where", f"cluster={cluster}", "account=cfa_wall", "user=")
    for given, shown in MAXWALL_DISPLAY:
        mgr.run("modify", "account", *where, f"MaxWall={given}")
        assert mgr.rows(*read, "format=maxwall") == [(shown,)], given
    assert parse_wall("7-00:00:00") == 10080
    assert parse_wall("1-00:01:00") == 1441
    assert parse_wall("00:59:00") == 59
    assert parse_wall("") is None
    # -1 clears any limit; several in one call.
    mgr.run("modify", "account", *where, "MaxWall=10080", "GrpJobs=4")
    assert mgr.rows(*read, "format=maxjobs,grpjobs,maxsubmit,maxwall") == [
        ("5", "4", "7", "7-00:00:00")
    ]
    mgr.run("modify", "account", *where, "MaxJobs=-1", "GrpJobs=-1", "MaxSubmit=-1", "MaxWall=-1")
    assert mgr.rows(*read, "format=maxjobs,grpjobs,maxsubmit,maxwall") == [("", "", "", "")]
    # Other spellings of the same modify.
    mgr.run("modify", "account", "cfa_wall", f"cluster={cluster}", "set", "MaxJobs=6")
    mgr.run("modify", "account", "name=cfa_wall", f"cluster={cluster}", "set", "GrpJobs=6")
    assert mgr.rows(*read, "format=maxjobs,grpjobs") == [("6", "6")]
    # Identical value: rc 0; no such association on that cluster: rc 1 "Nothing modified".
    mgr.run("modify", "account", *where, "MaxJobs=6")
    none = mgr.fails(
        "modify", "account", "where", "name=cfa_wall", "cluster=cfnosuch", "set", "MaxJobs=1"
    )
    assert lines_of(none.stdout) == ["Nothing modified"]


def test_add_account_is_per_cluster_but_the_record_is_global(mgr: Mgr) -> None:
    c1, c2 = mgr.cluster("cfacct1"), mgr.cluster("cfacct2")
    mgr.run("add", "account", "cfa_g", f"cluster={c1}", "Description=first", "MaxJobs=3")
    assert {row[0] for row in mgr.assocs(c2)} == {"root"}
    # Adding the existing account to c2: only the association is created; description and
    # organization given here are silently ignored (rc 0).
    second = mgr.run("add", "account", "cfa_g", f"cluster={c2}", "Description=second")
    assert "Adding Account(s)" not in second.stdout
    assert "A = cfa_g C = cfacct2" in lines_of(second.stdout)
    assert mgr.rows("show", "account", "cfa_g", "format=account,descr") == [("cfa_g", "first")]
    # Limits are per association: c2's row has none.
    assert ("cfa_g", "", "", "normal", "", "", "", "", "", "root") in mgr.assocs(c2)
    dup = mgr.fails("add", "account", "cfa_g", f"cluster={c2}")
    assert lines_of(dup.stdout) == ["Nothing new added."]
    # A batch with one existing name: the others are added, rc 0.
    mixed = mgr.run("add", "account", "cfa_g,cfa_g2", f"cluster={c2}")
    assert "cfa_g2" in mixed.stdout
    assert {row[0] for row in mgr.assocs(c2)} == {"root", "cfa_g", "cfa_g2"}
    # modify account ... set Description is global whatever cluster= says.
    mgr.run("modify", "account", "where", "name=cfa_g", f"cluster={c2}", "set", "Description=X")
    assert mgr.rows("show", "account", "cfa_g", "format=descr") == [("x",)]
    missing = mgr.fails("add", "account", "cfa_g3", "cluster=cfnosuch")
    assert "This cluster 'cfnosuch' doesn't exist." in missing.stderr
    # A user association needs the account's association on THAT cluster.
    mgr.run("add", "account", "cfa_g4", f"cluster={c1}")
    not_here = mgr.fails("add", "user", "cfu_g", "account=cfa_g4", f"cluster={c2}")
    assert not_here.stdout == ""
    assert lines_of(not_here.stderr) == [
        "This account 'cfa_g4' doesn't exist on cluster cfacct2",
        "Contact your admin to add this account.",
        "No associations or wckeys created.",
    ]
    mgr.run("add", "user", "cfu_g", "account=cfa_g4", f"cluster={c1}")
    # (for a user that already exists, stdout also says "Nothing new added.")
    again = mgr.fails("add", "user", "cfu_g", "account=cfa_g4", f"cluster={c2}")
    assert lines_of(again.stdout) == ["Nothing new added."]


def test_add_account_without_cluster_hits_every_cluster(mgr: Mgr) -> None:
    mgr.cluster("cfall")
    try:
        mgr.run("add", "account", "cfa_everywhere")
        everywhere = mgr.rows("show", "assoc", "where", "account=cfa_everywhere", "format=cluster")
        clusters = mgr.rows("show", "cluster", "format=cluster")
        assert {row[0] for row in everywhere} == {row[0] for row in clusters}
    finally:
        mgr.run("remove", "account", "cfa_everywhere", rc=None)  # global: every cluster


def test_remove_account_is_scoped_and_cascades_to_user_associations(mgr: Mgr) -> None:
    c1, c2 = mgr.cluster("cfrmacct1"), mgr.cluster("cfrmacct2")
    for cluster in (c1, c2):
        mgr.run("add", "account", "cfa_rm", f"cluster={cluster}")
        mgr.run("add", "user", "cfu_rm", "account=cfa_rm", f"cluster={cluster}")
    gone = mgr.run("remove", "account", "where", "name=cfa_rm", f"cluster={c1}")
    assert lines_of(gone.stdout) == [
        "Deleting account associations...",
        "C = cfrmacct1 A = cfa_rm of root",
        "C = cfrmacct1 A = cfa_rm U = cfu_rm",
    ]
    assert {row[0] for row in mgr.assocs(c1)} == {"root"}
    assert ("cfa_rm", "cfu_rm") in {row[:2] for row in mgr.assocs(c2)}
    # The global account record survives the removal of its last association, too.
    mgr.run("remove", "account", "cfa_rm", f"cluster={c2}")
    assert mgr.rows("show", "account", "cfa_rm", "format=account") == [("cfa_rm",)]
    again = mgr.fails("remove", "account", "where", "name=cfa_rm", f"cluster={c2}")
    assert lines_of(again.stdout) == ["Nothing deleted"]
    mgr.run("remove", "account", "where", "name=cfa_rm")  # the record itself
    assert mgr.rows("show", "account", "cfa_rm", "format=account") == []
    assert mgr.fails("remove", "account", "cfa_rm").stdout.strip() == "Nothing deleted"
