"""Conformance: the sacctmgr behaviour the Slurm reconciler relies on, pinned against a real
slurmdbd (Debian 12 slurm-wlm 22.05.8) through raw sacctmgr calls, never project code.

docs/sacctmgr-notes.md is the prose version of this module; each section there names the
test here that proves it. A Slurm upgrade that changes any of these facts must fail here.

Ground rules (all tests share one slurmdbd per session):
* every test uses its own cluster(s) and its own globally unique account, user and QOS
  names (accounts, users, QOS and coordinators are global in slurmdbd, not per cluster);
* every call passes ``-i``: without it a write (and some reads) prompts, and with stdin at
  EOF sacctmgr loops forever printing "Y or N please" (see test_without_i_*);
* expected failures are few: each takes ~10-30 ms here, but they are not free.

The normalisers the reconciler uses (cheeto_like.sync.slurm.state, walltime_minutes) are
checked here against real output, so the parsers and the facts cannot drift apart.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from cheeto_like.models.slurm import walltime_minutes
from cheeto_like.sync.slurm.state import parse_mem, render_mem
from cheeto_like.sync.slurm.state import parse_tres as parse_tres_cell
from tests.services.slurm import SlurmAccounting

Proc = subprocess.CompletedProcess[str]

QOS_FORMAT = "format=name,description,priority,flags,grptres,maxtrespu,maxtres"
ASSOC_FORMAT = (
    "format=cluster,account,user,partition,qos,defaultqos,maxjobs,grpjobs,maxsubmit,maxwall,"
    "parentname"
)
NORMAL_QOS_ROW = ("normal", "Normal QOS default", "0", "", "", "", "")
ROOT_ROWS = {
    # cluster|account|user|partition|qos|defaultqos|maxjobs|grpjobs|maxsubmit|maxwall|parent
    ("root", "", "", "normal", "", "", "", "", "", ""),
    ("root", "root", "", "normal", "", "", "", "", "", ""),
}


# ----------------------------------------------------------------- normalisers under test
# The reconciler's own parsers, checked here against what sacctmgr really prints.


def parse_tres(text: str) -> dict[str, int]:
    return dict(parse_tres_cell(text))


def parse_wall(text: str) -> int | None:
    return walltime_minutes(text)


def parse_qos_list(text: str) -> frozenset[str]:
    return frozenset(filter(None, text.split(",")))


# ----------------------------------------------------------------- harness


class Mgr:
    """sacctmgr with ``-i`` on every call, plus helpers for ``-P -n`` reads."""

    def __init__(self, slurm: SlurmAccounting) -> None:
        self.slurm = slurm

    def run(self, *args: str, rc: int | None = 0, stderr_ok: bool = False) -> Proc:
        """Run `sacctmgr -i *args`; assert the exit status unless rc is None.

        A call that exits 0 must also leave stderr empty (the reconciler's success test),
        except where a test expects sacctmgr's rc-0 complaints (stderr_ok).
        """
        result = self.slurm.sacctmgr("-i", *args, check=False)
        detail = f"stdout: {result.stdout}\nstderr: {result.stderr}"
        if rc is not None:
            assert result.returncode == rc, (
                f"sacctmgr -i {' '.join(args)} exited {result.returncode}, expected {rc}\n"
                + detail
            )
        if result.returncode == 0 and not stderr_ok:
            assert result.stderr == "", f"sacctmgr -i {' '.join(args)}: rc 0 with stderr\n{detail}"
        return result

    def fails(self, *args: str) -> Proc:
        return self.run(*args, rc=1)

    def rows(self, *args: str) -> list[tuple[str, ...]]:
        """`sacctmgr -i -P -n *args` split into tuples of cells."""
        out = self.run("-P", "-n", *args).stdout
        return [tuple(line.split("|")) for line in out.splitlines()]

    def assocs(self, cluster: str, *extra: str) -> set[tuple[str, ...]]:
        """This cluster's associations in ASSOC_FORMAT order, cluster column dropped."""
        rows = self.rows("show", "assoc", "where", f"cluster={cluster}", *extra, ASSOC_FORMAT)
        assert all(row[0] == cluster for row in rows)
        return {row[1:] for row in rows}

    def user_assocs(self, cluster: str, fmt: str = "account,user,partition,qos,defaultqos"):
        rows = self.rows("show", "assoc", "where", f"cluster={cluster}", f"format={fmt}")
        return {row for row in rows if row[1] and row[0] != "root"}

    def qos(self, name: str) -> tuple[str, ...]:
        rows = self.rows("show", "qos", "where", f"name={name}", QOS_FORMAT)
        assert len(rows) == 1, rows
        return rows[0]

    def defaults(self, cluster: str) -> dict[str, str]:
        """user -> default account on `cluster` (blank for users with no association there)."""
        rows = self.rows(
            "show", "user", "where", f"cluster={cluster}", "format=user,defaultaccount"
        )
        return dict(rows)  # type: ignore[arg-type]

    def coordinators(self, account: str) -> list[str]:
        rows = self.rows("show", "account", account, "withcoord", "format=account,coordinators")
        assert len(rows) == 1, rows
        return [name for name in rows[0][1].split(",") if name]

    def cluster(self, name: str) -> str:
        self.slurm.add_cluster(name)
        return name


@pytest.fixture
def mgr(slurm_accounting: SlurmAccounting) -> Mgr:
    return Mgr(slurm_accounting)


def _lines(text: str) -> list[str]:
    """Non-blank lines with runs of blanks squeezed (sacctmgr pads its tables)."""
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def _squeezed(text: str) -> str:
    return "\n".join(_lines(text))


# ================================================================= QOS (global entity)


def test_qos_read_shape_normal_row_and_qos_are_global(mgr: Mgr) -> None:
    cluster = mgr.cluster("cfqread")
    # `normal` always exists: its description is NOT lowercased (slurmdbd wrote it itself).
    assert mgr.qos("normal") == NORMAL_QOS_ROW
    mgr.run("add", "qos", "cfq_read", "Description=cheeto:cfqread")
    rows = mgr.rows("show", "qos", QOS_FORMAT)
    assert ("cfq_read", "cheeto:cfqread", "0", "", "", "", "") in rows
    assert NORMAL_QOS_ROW in rows
    # QOS have no cluster: a cluster filter is not rejected, it just matches nothing.
    assert mgr.rows("show", "qos", "where", f"cluster={cluster}", QOS_FORMAT) == []
    assert mgr.rows("show", "qos", f"cluster={cluster}", QOS_FORMAT) == []
    # Headers (without -n) are abbreviated and must not be used as keys.
    header = mgr.run("-P", "show", "qos", "where", "name=cfq_read", QOS_FORMAT).stdout
    assert header.splitlines()[0] == "Name|Descr|Priority|Flags|GrpTRES|MaxTRESPU|MaxTRES"
    # A QOS name defaults the description when none is given.
    mgr.run("add", "qos", "cfq_read2")
    assert mgr.qos("cfq_read2")[1] == "cfq_read2"


def test_qos_add_tres_display(mgr: Mgr) -> None:
    created = mgr.run(
        "add", "qos", "cfq_tres",
        "GrpTRES=cpu=8,mem=16384,gres/gpu=2", "MaxTRESPerUser=cpu=4,mem=1500",
        "MaxTRESPerJob=mem=1536", "Priority=10", "Flags=DenyOnLimit", "Description=cheeto:farm",
    )  # fmt: skip
    assert created.stderr == ""
    assert " Adding QOS(s)" in created.stdout
    # TRES keys come back sorted as strings; mem is scaled by 1024 only when exact-ish.
    assert mgr.qos("cfq_tres") == (
        "cfq_tres", "cheeto:farm", "10", "DenyOnLimit",
        "cpu=8,gres/gpu=2,mem=16G", "cpu=4,mem=1500M", "mem=1.50G",
    )  # fmt: skip
    grp, user, job = mgr.qos("cfq_tres")[4:]
    assert parse_tres(grp) == {"cpu": 8, "gres/gpu": 2, "mem": 16384}
    assert parse_tres(user) == {"cpu": 4, "mem": 1500}
    assert parse_tres(job) == {"mem": 1536}
    # Counts are never scaled, and every known TRES can be limited.
    mgr.run(
        "add", "qos", "cfq_tres_big", "GrpTRES=cpu=2048,gres/gpu=1024,node=4,billing=100,mem=1024"
    )
    assert mgr.qos("cfq_tres_big")[4] == "billing=100,cpu=2048,gres/gpu=1024,mem=1G,node=4"


MEM_DISPLAY = [
    (0, "0"),
    (512, "512M"),
    (1023, "1023M"),
    (1024, "1G"),
    (1025, "1025M"),
    (1500, "1500M"),
    (1536, "1.50G"),
    (2560, "2.50G"),
    (16384, "16G"),
    (524800, "512.50G"),
    (1048576, "1T"),
    (1048577, "1048577M"),
    (1049088, "1.00T"),  # lossy: really 1024.5 G
    (1572864, "1.50T"),
    (1573376, "1.50T"),  # lossy: really 1536.5 G, same text as 1572864
    (1073741824, "1P"),
    (1610612736, "1.50P"),
    (5000000000, "4882812.50G"),
]


def test_mem_display_rule(mgr: Mgr) -> None:
    mgr.run("add", "qos", "cfq_mem")
    for mb, shown in MEM_DISPLAY:
        mgr.run("modify", "qos", "cfq_mem", "set", f"GrpTRES=mem={mb}")
        assert mgr.qos("cfq_mem")[4] == f"mem={shown}", mb
        assert render_mem(mb) == shown, mb
        # slurmdbd stores the exact MB ("<tres id>=<value>", mem is TRES id 2): only the
        # display is lossy.
        stored = mgr.slurm.sql("SELECT grp_tres FROM qos_table WHERE name='cfq_mem';").strip()
        assert stored == f"2={mb}", mb
    # Suffixed input is accepted (either case) and stored as MB.
    for given, shown in (("16G", "16G"), ("16g", "16G"), ("2560M", "2.50G"), ("2T", "2T")):
        mgr.run("modify", "qos", "cfq_mem", "set", f"GrpTRES=mem={given}")
        assert mgr.qos("cfq_mem")[4] == f"mem={shown}"
    # Reading back gives whole MB except for the lossy values: compare through render_mem.
    # The round trip is exact below 1 T, and for whole-GB values below 1 P.
    samples = [*range(0, 1048576, 97), *range(0, 1024**3, 1024 * 4099)]
    assert all(parse_mem(render_mem(mb)) == mb for mb in samples)
    assert parse_mem("1.50G") == 1536
    assert parse_mem(render_mem(1573376)) == 1572864 != 1573376


def test_fractional_or_garbage_tres_values_are_mangled_with_exit_0(mgr: Mgr) -> None:
    mgr.run("add", "qos", "cfq_garbage", "GrpTRES=cpu=4,mem=4096")
    frac = mgr.run("modify", "qos", "cfq_garbage", "set", "GrpTRES=mem=2.5G", stderr_ok=True)
    assert "Invalid unit type '.'" in frac.stderr
    assert mgr.qos("cfq_garbage")[4] == "cpu=4,mem=2M"  # 2.5G became 2 MB, rc 0
    word = mgr.run("modify", "qos", "cfq_garbage", "set", "GrpTRES=cpu=abc", stderr_ok=True)
    assert "Invalid unit type 'a'" in word.stderr
    assert mgr.qos("cfq_garbage")[4] == "cpu=0,mem=2M"  # cpu=abc became cpu=0, rc 0
    added = mgr.run("add", "qos", "cfq_garbage2", "MaxTRESPerUser=mem=1.5G", stderr_ok=True)
    assert "Invalid unit type" in added.stderr
    assert mgr.qos("cfq_garbage2")[5] == "mem=1M"


def test_qos_modify_tres_merges_and_minus_one_removes_a_key(mgr: Mgr) -> None:
    mgr.run("add", "qos", "cfq_merge", "GrpTRES=cpu=8,mem=16384,gres/gpu=2", "Priority=3")
    mgr.run("modify", "qos", "cfq_merge", "set", "GrpTRES=mem=1")
    assert mgr.qos("cfq_merge")[4] == "cpu=8,gres/gpu=2,mem=1M"  # merged, not replaced
    mgr.run("modify", "qos", "cfq_merge", "set", "GrpTRES=cpu=-1")
    assert mgr.qos("cfq_merge")[4] == "gres/gpu=2,mem=1M"
    mgr.run("modify", "qos", "cfq_merge", "set", "GrpTRES=cpu=-1,gres/gpu=-1,mem=-1")
    assert mgr.qos("cfq_merge")[4] == ""
    # Clearing already-unlimited keys is still "Modified" with rc 0.
    again = mgr.run("modify", "qos", "cfq_merge", "set", "GrpTRES=cpu=-1,gres/gpu=-1,mem=-1")
    assert again.stdout.startswith(" Modified qos...")
    # A bare -1 is not "clear all": rc 1, nothing changes.
    bare = mgr.fails("modify", "qos", "cfq_merge", "set", "GrpTRES=-1", "Priority=4")
    assert "no TRES id found for -1" in bare.stderr
    # An unknown TRES fails the whole call, other settings included.
    mgr.run("modify", "qos", "cfq_merge", "set", "GrpTRES=cpu=5")
    bad = mgr.fails("modify", "qos", "cfq_merge", "set", "GrpTRES=gres/nosuch=1", "Priority=9")
    assert bad.stdout == ""
    assert "no TRES known by type gres/nosuch" in bad.stderr
    assert mgr.qos("cfq_merge")[2:5] == ("3", "", "cpu=5")
    # ... and an unknown TRES on add creates nothing.
    mgr.fails("add", "qos", "cfq_merge_bad", "GrpTRES=gres/nosuch=1")
    assert mgr.rows("show", "qos", "where", "name=cfq_merge_bad", "format=name") == []


def test_typed_gres_keys_are_separate(mgr: Mgr) -> None:
    mgr.slurm.add_tres("gres", "gpu:a100")
    mgr.run(
        "add", "qos", "cfq_typed", "GrpTRES=gres/gpu:a100=2,gres/gpu=4,cpu=1",
        "MaxTRESPerUser=gres/gpu:a100=1",
    )  # fmt: skip
    grp, user = mgr.qos("cfq_typed")[4:6]
    assert grp == "cpu=1,gres/gpu:a100=2,gres/gpu=4"  # ':' sorts before '='
    assert parse_tres(grp) == {"cpu": 1, "gres/gpu:a100": 2, "gres/gpu": 4}
    assert user == "gres/gpu:a100=1"
    mgr.run("modify", "qos", "cfq_typed", "set", "GrpTRES=gres/gpu:a100=-1")
    assert mgr.qos("cfq_typed")[4] == "cpu=1,gres/gpu=4"


def test_qos_flags_priority_description(mgr: Mgr) -> None:
    mgr.run("add", "qos", "cfq_flags", "Flags=DenyOnLimit", "Description=Cheeto:CFQ Mixed")
    assert mgr.qos("cfq_flags")[1] == "cheeto:cfq mixed"  # lowercased on the way in
    # Flags=... replaces the set; display order is Slurm's fixed order, not ours.
    mgr.run("modify", "qos", "cfq_flags", "set", "Flags=NoDecay,DenyOnLimit,OverPartQOS")
    assert mgr.qos("cfq_flags")[3] == "DenyOnLimit,OverPartQOS,NoDecay"
    mgr.run("modify", "qos", "cfq_flags", "set", "Flags=DenyOnLimit")
    assert mgr.qos("cfq_flags")[3] == "DenyOnLimit"
    mgr.run("modify", "qos", "cfq_flags", "set", "Flags=-1")
    assert mgr.qos("cfq_flags")[3] == ""
    bad = mgr.fails("modify", "qos", "cfq_flags", "set", "Flags=Bogus")
    assert bad.stdout.startswith(" Unknown QOS flag used in:")  # stdout, not stderr
    mgr.run("modify", "qos", "cfq_flags", "set", "Priority=10", "Description=cheeto:c1")
    assert mgr.qos("cfq_flags")[1:3] == ("cheeto:c1", "10")
    # Setting identical values: still rc 0 "Modified qos...".
    same = mgr.run("modify", "qos", "cfq_flags", "set", "Priority=10")
    assert _lines(same.stdout) == ["Modified qos...", "cfq_flags"]
    missing = mgr.fails("modify", "qos", "cfq_nosuch", "set", "Priority=1")
    assert _lines(missing.stdout) == ["Nothing modified"]
    dup = mgr.fails("add", "qos", "cfq_flags")
    assert _lines(dup.stdout) == ["Nothing new added."]
    assert mgr.fails("add", "qos", "normal").stdout.strip() == "Nothing new added."


def test_names_are_lowercased(mgr: Mgr) -> None:
    cluster = mgr.cluster("cflower")
    assert "cfa_mixacct" in mgr.run("add", "account", "CFA_MixAcct", f"cluster={cluster}").stdout
    mgr.run("add", "qos", "CFQ_MixQos")
    mgr.run(
        "add", "user", "CFU_MixUser", "account=cfa_mixacct", "partition=MixPart",
        "qos=cfq_mixqos", f"cluster={cluster}",
    )  # fmt: skip
    assert mgr.user_assocs(cluster) == {
        ("cfa_mixacct", "cfu_mixuser", "mixpart", "cfq_mixqos", "")
    }
    # Filters are case-insensitive too.
    assert mgr.rows(
        "show", "assoc", "where", f"cluster={cluster}", "user=CFU_MIXUSER", "format=user"
    ) == [("cfu_mixuser",)]


# ================================================================= accounts and assoc reads


def test_assoc_read_shape_and_account_rows(mgr: Mgr) -> None:
    cluster = mgr.cluster("cfaread")
    assert mgr.assocs(cluster) == ROOT_ROWS  # a fresh cluster: root account + root user
    added = mgr.run(
        "add", "account", "cfa_r1,cfa_r2", f"cluster={cluster}", "Description=Lab One",
        "Organization=Org1", "MaxJobs=10", "GrpJobs=20", "MaxSubmit=30", "MaxWall=10080",
    )  # fmt: skip
    assert "A = cfa_r1 C = cfaread" in _lines(added.stdout)
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
    assert _lines(none.stdout) == ["Nothing modified"]


def test_add_account_is_per_cluster_but_the_record_is_global(mgr: Mgr) -> None:
    c1, c2 = mgr.cluster("cfacct1"), mgr.cluster("cfacct2")
    mgr.run("add", "account", "cfa_g", f"cluster={c1}", "Description=first", "MaxJobs=3")
    assert {row[0] for row in mgr.assocs(c2)} == {"root"}
    # Adding the existing account to c2: only the association is created; description and
    # organization given here are silently ignored (rc 0).
    second = mgr.run("add", "account", "cfa_g", f"cluster={c2}", "Description=second")
    assert "Adding Account(s)" not in second.stdout
    assert "A = cfa_g C = cfacct2" in _lines(second.stdout)
    assert mgr.rows("show", "account", "cfa_g", "format=account,descr") == [("cfa_g", "first")]
    # Limits are per association: c2's row has none.
    assert ("cfa_g", "", "", "normal", "", "", "", "", "", "root") in mgr.assocs(c2)
    dup = mgr.fails("add", "account", "cfa_g", f"cluster={c2}")
    assert _lines(dup.stdout) == ["Nothing new added."]
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
    assert _lines(not_here.stderr) == [
        "This account 'cfa_g4' doesn't exist on cluster cfacct2",
        "Contact your admin to add this account.",
        "No associations or wckeys created.",
    ]
    mgr.run("add", "user", "cfu_g", "account=cfa_g4", f"cluster={c1}")
    # (for a user that already exists, stdout also says "Nothing new added.")
    again = mgr.fails("add", "user", "cfu_g", "account=cfa_g4", f"cluster={c2}")
    assert _lines(again.stdout) == ["Nothing new added."]


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
    assert _lines(gone.stdout) == [
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
    assert _lines(again.stdout) == ["Nothing deleted"]
    mgr.run("remove", "account", "where", "name=cfa_rm")  # the record itself
    assert mgr.rows("show", "account", "cfa_rm", "format=account") == []
    assert mgr.fails("remove", "account", "cfa_rm").stdout.strip() == "Nothing deleted"


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
    assert "QOS = cfq_u1,cfq_u2" in _lines(added.stdout)
    row = ("cfa_u", "p", "cfq_u1,cfq_u2", "cfq_u1")
    assert mgr.user_assocs(cluster) == {
        (row[0], user, *row[1:]) for user in ("cfu_a", "cfu_b", "cfu_c")
    }
    # All already there: rc 1 "Nothing new added."
    dup = mgr.fails(
        "add", "user", "cfu_a,cfu_b,cfu_c", "account=cfa_u", "partition=p", f"cluster={cluster}"
    )
    assert _lines(dup.stdout) == ["Nothing new added."]
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
    assert _lines(none.stdout) == ["Nothing modified"]
    # Batched remove; unknown names are ignored; a user losing its last association is
    # deleted as a user too.
    removed = mgr.run(
        "remove", "user", "where", "name=cfu_c,cfu_d,cfu_nobody", "account=cfa_u",
        "partition=p", f"cluster={cluster}",
    )  # fmt: skip
    lines = _lines(removed.stdout)
    assert lines[0] == "Deleting user associations..."
    assert "C = cfusers A = cfa_u U = cfu_c P = p" in lines
    assert lines[-3:] == ["Deleting users (No Associations)...", "cfu_c", "cfu_d"]
    assert mgr.rows("show", "user", "cfu_c", "format=user") == []
    gone = mgr.fails(
        "remove", "user", "where", "name=cfu_c,cfu_d", "account=cfa_u", f"cluster={cluster}"
    )
    assert _lines(gone.stdout) == ["Nothing deleted"]


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
    assert _lines(bad_acct.stderr) == [
        "This account 'cfa_nosuch' doesn't exist.",
        "Contact your admin to add this account.",
        "No associations or wckeys created.",
    ]
    no_cluster = mgr.fails("add", "user", "cfu_err", "account=cfa_err", "cluster=cfnosuch")
    assert "This cluster 'cfnosuch' doesn't exist." in no_cluster.stderr
    assert mgr.user_assocs(c1) == set()
    unknown = mgr.fails("modify", "qos", "normal", "set", "NoSuchOption=3")
    assert _lines(unknown.stdout) == [
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
    assert _lines(changed.stdout) == ["Modified users...", "cfu_d"]
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
    assert _lines(refused.stdout) == [
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
    assert _lines(refused.stderr) == [
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
    assert "A = cfa_x2 U = cfu_y2" in _squeezed(refused.stderr)
    assert refused.stderr.rstrip().endswith("Changes Discarded")
    # Batches made only of default rows, or only of non-default rows, always pass.
    mgr.run("remove", "user", "where", "name=cfu_y2", "account=cfa_x2", f"cluster={cluster}")
    mgr.run("remove", "user", "where", "name=cfu_y1", "account=cfa_x2", f"cluster={cluster}")
    # 4. remove account cascades through the same check.
    mgr.run("add", "user", "cfu_z", "account=cfa_x2", f"cluster={cluster}")  # default x2
    mgr.run("add", "user", "cfu_y1", "account=cfa_x2", f"cluster={cluster}")  # non-default
    cascade = mgr.fails("remove", "account", "where", "name=cfa_x2", f"cluster={cluster}")
    assert "A = cfa_x2 U = cfu_z" in _squeezed(cascade.stderr)
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
    assert _lines(added.stdout) == [
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
    assert _lines(removed.stdout)[-2:] == [
        "Removed Coordinators (sub accounts not listed)...",
        "U = cfu_co_c A = cfa_co",
    ]
    nothing = mgr.fails("remove", "coordinator", "account=cfa_co", "names=cfu_co_c")
    assert _lines(nothing.stdout)[-1] == "Nothing removed"
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
    assert _lines(mgr.fails("modify", "user", "where", "name=cfu_ren_old", "set",
                            "newname=x").stdout) == ["Nothing modified"]
    taken = mgr.fails("modify", "user", "where", "name=cfu_ren_other", "set",
                      "newname=cfu_ren_new")
    assert _lines(taken.stdout) == ["Nothing modified"] and taken.stderr.strip()
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
    assert _lines(removed.stdout) == ["Deleting QOS(s)...", "cfq_rm_victim"]
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
    assert _lines(refused.stderr)[0] == "Associations listed below have these as their Default QOS."
    assert _lines(refused.stderr)[-1] == "Changes Discarded"
    mgr.run(
        "modify", "user", "where", "name=cfu_qrm3", f"cluster={cluster}", "set", "qos=normal",
        "defaultqos=-1",
    )  # fmt: skip
    mgr.run("remove", "qos", "where", "name=cfq_rm_def")
    assert _lines(mgr.fails("remove", "qos", "cfq_rm_def").stdout) == ["Nothing deleted"]


# ================================================================= process behaviour


def test_without_i_writes_and_some_reads_prompt(mgr: Mgr) -> None:
    """Never run sacctmgr without -i: it asks "(N/y)" and, with stdin at EOF, loops forever
    printing "Y or N please". Here we answer "n" to see the prompt safely."""
    cluster = mgr.cluster("cfprompt")
    env = mgr.slurm.client_env()

    def answer_no(*args: str) -> Proc:
        return subprocess.run(
            ["sacctmgr", *args], env=env, input="n\n", capture_output=True, text=True,
            timeout=20, check=False,
        )  # fmt: skip

    write = answer_no("add", "account", "cfa_prompt", f"cluster={cluster}")
    assert "Would you like to commit changes? (You have 30 seconds to decide)" in write.stdout
    assert write.stdout.rstrip().endswith("Changes Discarded")
    assert write.returncode == 0  # discarded, yet rc 0
    assert mgr.rows("show", "account", "cfa_prompt", "format=account") == []
    # `show account where cluster=X` without withassoc prompts too, and "n" aborts (rc 0).
    read = answer_no("-P", "-n", "show", "account", "where", f"cluster={cluster}")
    assert "only valid when querying with the withassoc option" in read.stdout
    assert read.stdout.rstrip().endswith("Aborted")
    assert read.returncode == 0
    # With -i: no prompt at all.
    ok = mgr.run("-P", "-n", "show", "account", "where", f"cluster={cluster}", "format=account")
    assert "(N/y)" not in ok.stdout
    assert "root" in ok.stdout.split()  # (the cluster filter is ignored: every account)
    # -Q changes none of these messages.
    quiet = mgr.run("-Q", "add", "account", "cfa_prompt", f"cluster={cluster}")
    assert quiet.stdout.startswith(" Adding Account(s)")
    assert _lines(mgr.fails("-Q", "add", "account", "cfa_prompt", f"cluster={cluster}").stdout) == [
        "Nothing new added."
    ]


def test_unreachable_slurmdbd_fails_fast_with_rc_1(
    slurm_accounting: SlurmAccounting,
    tmp_path: Path,
) -> None:
    conf = tmp_path / "slurm.conf"
    text = slurm_accounting.slurm_conf.read_text()
    conf.write_text(re.sub(r"(?m)^AccountingStoragePort=.*$", "AccountingStoragePort=1", text))
    env = {**slurm_accounting.client_env(), "SLURM_CONF": str(conf)}
    started = time.monotonic()
    read = subprocess.run(
        ["sacctmgr", "-i", "-P", "-n", "show", "qos", "format=name"], env=env,
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert read.returncode == 1  # an empty read with rc 1 is NOT an empty state
    assert read.stdout == ""
    assert "Connection refused" in read.stderr
    assert elapsed < 2.0


def test_call_latency_with_the_nodelay_shim(mgr: Mgr) -> None:
    assert mgr.slurm.env.get("LD_PRELOAD")
    def median(*args: str, rc: int) -> float:
        times = []
        for _ in range(5):
            started = time.monotonic()
            mgr.run(*args, rc=rc)
            times.append(time.monotonic() - started)
        return statistics.median(times)

    read = median("-P", "-n", "show", "qos", QOS_FORMAT, rc=0)
    failing = median("remove", "user", "where", "name=cfu_nobody", rc=1)
    # Typically 10-40 ms each; the bounds only catch a lost shim (~0.3 s) or auth retries (2 s).
    assert read < 0.25, read
    assert failing < 0.25, failing


def test_sudo_n_fails_fast_without_a_password(slurm_accounting: SlurmAccounting) -> None:
    sudo = shutil.which("sudo")
    if sudo is None:
        # Not installed: the reconciler sees FileNotFoundError and must report it as such.
        with pytest.raises(FileNotFoundError):
            subprocess.run(["sudo", "-n", "true"], check=False, capture_output=True)
        return
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root + setpriv to impersonate an unprivileged user")
    started = time.monotonic()
    result = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "sudo", "-n", "true"],
        capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == "sudo: a password is required"
    assert time.monotonic() - started < 2.0
    # sudo resets the environment: SLURM_CONF and LD_PRELOAD do not reach sacctmgr ...
    env = slurm_accounting.client_env()
    seen = subprocess.run(
        ["sudo", "-n", "env"], env=env, capture_output=True, text=True, timeout=10, check=True
    ).stdout
    assert "SLURM_CONF=" not in seen and "LD_PRELOAD=" not in seen
    # ... unless passed as VAR=value arguments (root, or a sudoers SETENV rule).
    direct = slurm_accounting.sacctmgr("-i", "-P", "-n", "show", "cluster", "format=cluster")
    passed = subprocess.run(
        ["sudo", "-n", f"SLURM_CONF={env['SLURM_CONF']}", "sacctmgr", "-i", "-P", "-n", "show",
         "cluster", "format=cluster"],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert passed.stdout == direct.stdout
