"""The enforcement files without a cluster: the table and reservations on disk, the hook's
spool, sacct's tagged lines, the rendered plugin and hook, the live-config check."""

from __future__ import annotations

import contextlib
import os
import pwd
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest

from cheeto_like.adapters.sacct import parse_tagged
from cheeto_like.config.slurm import QuotaEnforcement
from cheeto_like.enforcement import table as qtable
from cheeto_like.enforcement.charge import read_spool, reservation_of
from cheeto_like.enforcement.layout import TAG, conf_lines, layout
from cheeto_like.enforcement.render import (
    install,
    missing_settings,
    parse_show_config,
    render_hook,
    render_lua,
)
from cheeto_like.errors import InvalidInput


def sample_table(used: float = 1.0) -> qtable.Table:
    return qtable.Table(
        site="farm",
        subjects=(qtable.SubjectRow("user", "alice", 10.0, None, used, 0.0),
                  qtable.SubjectRow("account", "lab", None, 5.0, 0.0, 2.5)),
        defaults=(("user", 1.0, None), ("account", None, None)),
        factors=(("a100", 2.0), ("default", 1.0)))


def test_the_table_is_replaced_whole_and_only_its_clock_moves_when_unchanged(tmp_path):
    path = tmp_path / "quota.db"
    qtable.write_table(path, sample_table(), now=1000)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    meta = qtable.read_meta(path)
    assert meta["written_at"] == "1000" and meta["site"] == "farm"
    assert meta["fingerprint"] == sample_table().fingerprint()
    inode = path.stat().st_ino
    assert qtable.touch_table(path, now=2000)
    assert qtable.read_meta(path)["written_at"] == "2000"
    assert qtable.read_meta(path)["fingerprint"] == sample_table().fingerprint()
    assert path.stat().st_ino != inode  # a copy renamed over: never a write in place
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    inode = path.stat().st_ino
    qtable.write_table(path, sample_table(used=3.0), now=3000)
    assert path.stat().st_ino != inode  # a new file renamed over the old one
    assert qtable.read_meta(path)["fingerprint"] != sample_table().fingerprint()
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT kind, name, cpu_quota, gpu_quota, cpu_used, gpu_used "
                          "FROM subjects ORDER BY kind").fetchall()
        assert rows == [("account", "lab", None, 5.0, 0.0, 2.5),
                        ("user", "alice", 10.0, None, 3.0, 0.0)]
        assert db.execute("SELECT kind, cpu_quota, gpu_quota FROM defaults ORDER BY kind"
                          ).fetchall() == [
            ("account", None, None), ("user", 1.0, None)]
    assert [p.name for p in tmp_path.iterdir()] == ["quota.db"]  # no temp file left
    assert not qtable.touch_table(tmp_path / "missing.db")
    assert qtable.read_meta(tmp_path / "missing.db") == {}


def test_releases_are_idempotent_per_job_and_drops_forget_whole_reservations(tmp_path):
    path = tmp_path / "reservations.db"
    with qtable.reservations(path) as db:
        db.execute("INSERT INTO reservations VALUES ('aa', 'alice', 'lab', 1.0, 0.0, 3, 10, 0.5)")
        db.execute("INSERT INTO reservations VALUES ('bb', 'bob', 'lab', 2.0, 1.0, 1, 20, 0.0)")
        assert qtable.release(db, [("aa", "7_0"), ("aa", "7_0"), ("aa", "7_1")], now=30) == 2
        assert qtable.release(db, [("aa", "7_1")], now=31) == 0  # the hook file again
        [left, other] = qtable.list_reservations(db)
        assert (left.id, left.count, left.cpu, left.cost) == ("aa", 1, 1.0, 0.5)
        assert (other.id, other.cpu, other.gpu) == ("bb", 2.0, 1.0)
        assert qtable.release(db, [("aa", "7_2"), ("zz", "9")], now=32) == 2
        assert [r.id for r in qtable.list_reservations(db)] == ["bb"]
        assert qtable.drop(db, ["bb", "nope"], released_before=31) == 1
        assert qtable.list_reservations(db) == []
        assert db.execute("SELECT count(*) FROM released").fetchone() == (2,)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_reservations_file_from_before_budgets_gets_its_cost_column(tmp_path):
    """A file the plugin made before budgets (no cost_each) is altered once, its rows
    kept at cost 0; opening it again alters nothing."""
    path = tmp_path / "reservations.db"
    with contextlib.closing(sqlite3.connect(path)) as old:
        old.execute("CREATE TABLE reservations (id TEXT PRIMARY KEY, user TEXT NOT NULL,"
                    " account TEXT NOT NULL, cpu_each REAL NOT NULL, gpu_each REAL NOT NULL,"
                    " count INTEGER NOT NULL, created INTEGER NOT NULL)")
        old.execute("INSERT INTO reservations VALUES ('aa', 'alice', 'lab', 1.0, 0.0, 2, 10)")
        old.commit()
    for _ in range(2):
        with qtable.reservations(path) as db:
            [row] = qtable.list_reservations(db)
            assert (row.id, row.cpu, row.cost) == ("aa", 2.0, 0.0)


def test_the_spool_yields_the_ids_sacct_prints_and_removes_foreign_files(tmp_path):
    (tmp_path / "5.job").write_text("JOBID=5\nARRAYJOBID=0\nARRAYTASKID=4294967294\n")
    (tmp_path / "9.job").write_text("JOBID=9\nARRAYJOBID=7\nARRAYTASKID=2\n")
    (tmp_path / ".11.123").write_text("JOBID=11\n")  # the hook's temporary file
    (tmp_path / "evil.job").write_text("JOBID=../../etc/passwd\n")
    os.utime(tmp_path / "5.job", (100, 100))
    entries = read_spool(tmp_path, now=200)
    assert [e.job_id for e in entries] == ["5", "7_2"]  # the oldest first
    assert entries[0].age == 100
    assert not (tmp_path / "evil.job").exists() and (tmp_path / ".11.123").exists()


def test_sacct_tagged_lines_and_reservation_ids():
    lines = [
        "12_0|farm|alice|lab|cpu|normal|COMPLETED|2026-12-05T10:00:00|2026-12-05T10:00:20|20|"
        f"billing=1,cpu=1,mem=100M,node=1|{TAG}abc123 note|with a pipe",
        "13|farm|alice|lab|cpu|normal|RUNNING|2026-12-05T10:00:00|Unknown|5|cpu=1|",
        "14|farm|alice|lab|cpu|normal|PENDING|None|Unknown|0||",
    ]
    lines += ["15_[0-3%2]|farm|alice|lab|cpu|normal|CANCELLED by 0|None|2026-12-05T10:00:00|0||",
              "16_[4-5]|farm|alice|lab|cpu|normal|PENDING|None|Unknown|0||"]
    tagged = parse_tagged("\n".join(lines) + "\n")
    assert tagged.never_ran == {"15_0", "15_1", "15_2", "15_3"}
    assert [j.job_id for j in tagged.jobs] == ["12_0"]
    assert tagged.comments["12_0"] == f"{TAG}abc123 note|with a pipe"
    assert tagged.unfinished == ("13", "14", "16_4", "16_5")
    assert reservation_of(tagged.comments["12_0"]) == "abc123"
    assert reservation_of("set by an admin") is None
    assert reservation_of(f"{TAG}not-hex") is None


def test_the_plugin_carries_the_site_settings_as_lua_literals(tmp_path):
    settings = QuotaEnforcement(state_dir=tmp_path / "st'a\\te", on_stale="fail_closed",
                                max_age_seconds=45)
    where = layout(settings, "farm", tmp_path / "etc" / "slurm.conf")
    text = render_lua(settings, where)
    assert "--@@CONFIG@@" not in text
    assert f'  table = "{tmp_path}/st\'a\\\\te/farm/quota.db",' in text
    assert '  on_stale = "fail_closed",' in text and "  max_age = 45," in text
    assert f'  tag = "{TAG}",' in text
    bad = QuotaEnforcement(state_dir=tmp_path / "bad\nname")
    with pytest.raises(InvalidInput, match="control character"):
        render_lua(bad, layout(bad, "farm", tmp_path / "etc" / "slurm.conf"))


def test_the_hook_writes_one_file_per_job_and_nothing_for_a_bad_id(tmp_path):
    where = layout(QuotaEnforcement(state_dir=tmp_path), "farm", tmp_path / "slurm.conf")
    where.spool.mkdir(parents=True)
    hook = tmp_path / "hook"
    hook.write_text(render_hook(where))
    hook.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "JOBID": "42", "ARRAYJOBID": "40",
           "ARRAYTASKID": "2", "JOBSTATE": "COMPLETED", "END": "1700000000"}
    subprocess.run([str(hook)], env=env, check=True)
    subprocess.run([str(hook)], env={**env, "JOBID": "1;rm -rf /"}, check=True)
    assert [p.name for p in where.spool.iterdir()] == ["42.job"]
    assert stat.S_IMODE((where.spool / "42.job").stat().st_mode) == 0o600
    assert [e.job_id for e in read_spool(where.spool)] == ["40_2"]


def test_install_writes_modes_and_is_idempotent(tmp_path):
    user = pwd.getpwuid(os.getuid()).pw_name
    settings = QuotaEnforcement(state_dir=tmp_path / "state", slurm_user=user)
    etc = tmp_path / "etc"
    etc.mkdir()
    where = layout(settings, "farm", etc / "slurm.conf")
    dry = install(settings, where, dry_run=True)
    assert {s.action for s in dry} == {"write", "mkdir", "create"}
    assert not where.lua.exists() and not where.state.exists()
    steps = install(settings, where)
    assert [s.action for s in steps] == ["write", "write", "mkdir", "mkdir", "create"]
    assert stat.S_IMODE(where.lua.stat().st_mode) == 0o644
    assert stat.S_IMODE(where.hook.stat().st_mode) == 0o755
    assert stat.S_IMODE(where.state.stat().st_mode) == 0o700
    assert stat.S_IMODE(where.reservations.stat().st_mode) == 0o600
    assert {s.action for s in install(settings, where)} == {"unchanged"}
    with pytest.raises(InvalidInput, match="does not exist"):
        install(QuotaEnforcement(state_dir=tmp_path, slurm_user="no-such-user-x"), where)
    with pytest.raises(InvalidInput, match="not a directory"):
        install(settings, layout(settings, "farm", tmp_path / "nowhere" / "slurm.conf"))


def test_the_live_check_names_what_slurmctld_lacks(tmp_path):
    where = layout(QuotaEnforcement(), "farm", Path("/etc/slurm/slurm.conf"))
    good = parse_show_config("\n".join(
        f"{line.split('=')[0]:<24}= {line.split('=', 1)[1]}" for line in conf_lines(where)))
    assert missing_settings(good, where.hook) == []
    bare = parse_show_config("AccountingStorageEnforce = associations,limits\n"
                             "JobSubmitPlugins        = (null)\n"
                             "JobCompType             = jobcomp/none\n")
    problems = missing_settings(bare, where.hook)
    assert len(problems) == 3
    assert "lacks 'safe'" in problems[0] and "'lua'" in problems[1]
    assert "jobcomp/script" in problems[2]
    other_hook = dict(good, JobCompLoc="/usr/local/bin/other")
    assert "not the hook" in missing_settings(other_hook, where.hook)[0]


def test_install_never_replaces_a_site_plugin_it_did_not_write_without_force(tmp_path):
    settings = QuotaEnforcement(state_dir=tmp_path / "state",
                                slurm_user=pwd.getpwuid(os.getuid()).pw_name)
    (tmp_path / "etc").mkdir()
    where = layout(settings, "farm", tmp_path / "etc" / "slurm.conf")
    where.lua.write_text("function slurm_job_submit() return slurm.SUCCESS end\n")
    with pytest.raises(InvalidInput, match="was not written by cheeto"):
        install(settings, where, dry_run=True)
    assert not where.state.exists()
    install(settings, where, force=True)
    assert "cheeto ng site enforcement install" in where.lua.read_text()
    assert {s.action for s in install(settings, where)} == {"unchanged"}
