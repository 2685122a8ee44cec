"""Conformance: the sacctmgr behaviour the Slurm reconciler relies on, pinned against a real
slurmdbd (Debian 12 slurm-wlm 22.05.8) through raw sacctmgr calls, never project code.

docs/sacctmgr-notes.md is the prose version of these modules (test_sacctmgr_*.py); each
section there names the test that proves it. A Slurm upgrade that changes any of these
facts must fail one of them.

Ground rules (all tests share one slurmdbd per session):
* every test uses its own cluster(s) and its own globally unique account, user and QOS
  names (accounts, users, QOS and coordinators are global in slurmdbd, not per cluster);
* every call passes ``-i``: without it a write (and some reads) prompts, and with stdin at
  EOF sacctmgr loops forever printing "Y or N please" (see test_without_i_*);
* expected failures are few: each takes ~10-30 ms here, but they are not free.

The normalisers the reconciler uses (cheeto_like.sync.slurm.state, walltime_minutes) are
checked here against real output, so the parsers and the facts cannot drift apart.

This module: QOS (a global entity): read shape, TRES display and merging, flags, names.
The others: test_sacctmgr_accounts, _associations, _limits and _process.
"""

from __future__ import annotations

from cheeto_like.sync.slurm.state import parse_mem, render_mem
from tests.adapters.sacctmgr_harness import (
    NORMAL_QOS_ROW,
    QOS_FORMAT,
    Mgr,
    lines_of,
    parse_tres,
)

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
    assert lines_of(same.stdout) == ["Modified qos...", "cfq_flags"]
    missing = mgr.fails("modify", "qos", "cfq_nosuch", "set", "Priority=1")
    assert lines_of(missing.stdout) == ["Nothing modified"]
    dup = mgr.fails("add", "qos", "cfq_flags")
    assert lines_of(dup.stdout) == ["Nothing new added."]
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
