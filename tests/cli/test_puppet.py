"""`cheeto puppet validate`: merging, exit codes, file-and-field errors, where the dump goes.

These commands never touch the store; the ``cli`` fixture still brings this module's
database along (it runs the real entry point with a config that points at it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

COMMON = """\
user:
  alice:
    fullname: Alice Liddell
    email: alice@example.org
    uid: 0111111
    gid: 111111
    shell: /bin/bash
    groups: [lab]
"""
SITE = """\
user:
  alice:
    shell: /bin/zsh
    groups: [testgroup]
"""
GROUPS = """\
group:
  lab:
    gid: 5000
    sponsors: [alice]
  testgroup:
    gid: 5001
"""


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {}
    for name, text in (("farm.yaml", COMMON), ("farm.site.yaml", SITE),
                       ("testgroup.yaml", GROUPS)):
        paths[name] = tmp_path / name
        paths[name].write_text(text)
    return paths


def _s(*paths: Path) -> list[str]:
    return [str(p) for p in paths]


async def test_one_valid_file_is_dumped_to_stdout(cli, files):
    r = await cli("puppet", "validate", str(files["farm.yaml"]))
    assert r.code == 0, r.stderr
    alice = r.yaml()["user"]["alice"]
    assert alice["uid"] == 111111  # zero-prefixed: decimal
    assert "valid (1 user, 0 groups, 0 shares)" in r.stderr
    assert "user:" not in r.stderr  # no YAML decoration on stderr


async def test_merge_adds_groups_and_the_site_value_wins(cli, files):
    r = await cli("puppet", "validate", "--merge", "ALL",
                  *_s(files["farm.yaml"], files["farm.site.yaml"]))
    assert r.code == 0, r.stderr
    alice = r.yaml()["user"]["alice"]
    assert alice["groups"] == ["lab", "testgroup"]
    assert alice["shell"] == "/bin/zsh"
    assert "merged-all" in r.stderr


async def test_prefix_merge_and_lowercase_strategy(cli, files):
    r = await cli("puppet", "validate", "--merge", "prefix",
                  *_s(files["farm.yaml"], files["farm.site.yaml"], files["testgroup.yaml"]))
    assert r.code == 0, r.stderr
    docs = list(YAML(typ="safe").load_all(r.stdout))
    assert [sorted(d) for d in docs] == [["user"], ["group"]]
    assert docs[0]["user"]["alice"]["shell"] == "/bin/zsh"
    assert r.stdout.startswith("--- # farm\n")
    assert "--- # testgroup\n" in r.stdout


async def test_merge_none_validates_each_file_alone(cli, files):
    r = await cli("puppet", "validate", *_s(files["farm.yaml"], files["farm.site.yaml"]))
    assert r.code == 2
    assert f"{files['farm.site.yaml']}: user.alice.fullname: required but missing" in r.stderr
    assert r.stdout == ""
    r = await cli("puppet", "validate", "--partial",
                  *_s(files["farm.yaml"], files["farm.site.yaml"]))
    assert r.code == 0, r.stderr
    assert len(list(YAML(typ="safe").load_all(r.stdout))) == 2


async def test_a_bad_site_override_names_the_site_file_and_field(cli, files):
    files["farm.site.yaml"].write_text(SITE.replace("/bin/zsh", "/bin/fish"))
    r = await cli("puppet", "validate", "--merge", "ALL",
                  *_s(files["farm.yaml"], files["farm.site.yaml"]))
    assert r.code == 2
    assert r.stdout == ""
    # one error (the console folds lines longer than 200 columns off a terminal)
    assert r.stderr.replace("\n", "").startswith(
        f"error: {files['farm.site.yaml']}: user.alice.shell: shell '/bin/fish' is not allowed")
    assert r.stderr.count("error:") == 1


async def test_a_bad_uid_names_the_file_and_field(cli, tmp_path):
    path = tmp_path / "farm.yaml"
    path.write_text(COMMON.replace("uid: 0111111", "uid: 4294967296"))
    r = await cli("puppet", "validate", str(path))
    assert r.code == 2 and r.stdout == ""
    assert r.error_lines == [
        f"error: {path}: user.alice.uid: id 4294967296 is outside 0..4294967295"]


async def test_every_problem_is_listed(cli, tmp_path):
    path = tmp_path / "farm.yaml"
    path.write_text(COMMON.replace("uid: 0111111", "uid: x").replace("/bin/bash", "/bin/no"))
    r = await cli("puppet", "validate", str(path))
    assert r.code == 2
    assert "2 problems:" in r.stderr
    assert f"{path}: user.alice.shell: shell '/bin/no'" in r.stderr
    assert r.error_lines[-1].startswith(f"error: {path}: user.alice.uid: ")
    assert r.error_lines[-1].endswith("(and 1 more problem)")


async def test_strict_postload_failure_exits_2_and_writes_nothing(cli, files, tmp_path):
    dump = tmp_path / "out.yaml"
    r = await cli("puppet", "validate", "--merge", "ALL", "--strict", "--dump", str(dump),
                  *_s(files["farm.yaml"], files["farm.site.yaml"]))
    assert r.code == 2
    assert not dump.exists() and r.stdout == ""
    assert f"{files['farm.yaml']}: user.alice.groups: group 'lab' is not a known group" \
        in r.stderr
    assert f"{files['farm.site.yaml']}: user.alice.groups: group 'testgroup' is not a known " \
        "group" in r.stderr


async def test_postload_without_strict_warns_and_still_dumps(cli, files):
    r = await cli("puppet", "validate", "--merge", "ALL", "--postload-validate",
                  *_s(files["farm.yaml"], files["farm.site.yaml"]))
    assert r.code == 0
    assert "warning:" in r.stderr and "'testgroup' is not a known group" in r.stderr
    assert r.yaml()["user"]["alice"]["groups"] == ["lab", "testgroup"]


async def test_strict_postload_success_with_the_group_file(cli, files, tmp_path):
    dump = tmp_path / "merged.yaml"
    r = await cli("puppet", "validate", "--merge", "ALL", "--strict", "--dump", str(dump),
                  *_s(files["farm.yaml"], files["farm.site.yaml"], files["testgroup.yaml"]))
    assert r.code == 0, r.stderr
    assert r.stdout == ""
    merged = YAML(typ="safe").load(dump.read_text())
    assert sorted(merged["group"]) == ["lab", "testgroup"]
    assert merged["group"]["lab"]["sponsors"] == ["alice"]


async def test_unknown_sponsor_fails_strict(cli, files, tmp_path):
    files["testgroup.yaml"].write_text(GROUPS.replace("[alice]", "[carol]"))
    r = await cli("puppet", "validate", "--merge", "ALL", "--strict",
                  *_s(files["farm.yaml"], files["testgroup.yaml"]))
    assert r.code == 2
    assert r.error_lines[-1] == (f"error: {files['testgroup.yaml']}: group.lab.sponsors: "
                                 "sponsor 'carol' is not a known user")


async def test_echo_shows_the_dump_on_stderr(cli, files, tmp_path):
    dump = tmp_path / "echo.yaml"
    r = await cli("puppet", "validate", "--dump", str(dump), "--echo", str(files["farm.yaml"]))
    assert r.code == 0
    assert r.stdout == ""
    assert dump.read_text() in r.stderr


async def test_missing_and_malformed_files(cli, tmp_path):
    r = await cli("puppet", "validate", str(tmp_path / "nope.yaml"))
    assert r.code == 2 and r.error_lines == [f"error: {tmp_path / 'nope.yaml'}: no such file"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("user:\n  alice: {uid: 1\n")
    r = await cli("puppet", "validate", str(bad))
    assert r.code == 2 and len(r.error_lines) == 1
    assert r.error_lines[0].startswith(f"error: {bad}:3: malformed YAML")


async def test_usage_errors(cli, files):
    r = await cli("puppet", "validate", "--merge", "SOME", str(files["farm.yaml"]))
    assert r.code == 2 and "--merge" in r.stderr
    r = await cli("puppet", "validate")
    assert r.code == 2 and "FILE" in r.stderr
