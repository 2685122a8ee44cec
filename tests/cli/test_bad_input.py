"""Issue 12, "Bad input: one line, exit 2, nothing written": each kind of input fuzzing
found escaping as an internal error (or accepted when it should not be), through the real
entry point. A refusal is exit 2, exactly one line on stderr, nothing on stdout, and the
store exactly as before (no document changed, no History row)."""

from __future__ import annotations

import io
import logging
import socket
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from cheeto_like.models import ALL_MODELS, SshKey, User
from cheeto_like.models.fields import new_id

from ..factories import make_group, make_site, make_user

ED25519 = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq8qZ0ZEn9m9oP3b8mZr3pM0w3a0c2jY2q8m8n3d7xK")


async def state() -> dict[str, list[dict[str, Any]]]:
    """Every document of every collection (the data is small): a refused command must
    leave all of it, History included, exactly as it was."""
    return {m.get_settings().name: sorted(
        [d async for d in m.get_pymongo_collection().find({})], key=lambda d: str(d["_id"]))
        for m in ALL_MODELS}


async def refused(cli, *argv: str, match: str, config: Path | None = None):
    before = await state()
    r = await cli(*argv, config=config) if config else await cli(*argv)
    assert r.code == 2, r.stderr
    assert len(r.error_lines) == 1, r.stderr
    assert match in r.stderr, r.stderr
    assert "internal error" not in r.stderr and "pydantic" not in r.stderr
    assert r.stdout == ""
    assert await state() == before
    return r


async def ok(cli, *argv: str):
    r = await cli(*argv)
    assert r.code == 0, r.stderr
    return r


@pytest.fixture
async def farm(db):
    await make_site(db, "farm")
    await make_user(db, "alice", uid=2001, site="farm")
    await make_group(db, "lab", gid=5001)
    return "farm"


def new_user(*extra: str) -> list[str]:
    return ["ng", "user", "new", "generic", "-u", "zed", "--email", "zed@example.org",
            "--fullname", "Zed Example", "--uid", "3001", *extra]


VOLUME = ["ng", "storage", "volume", "new", "-s", "farm", "vol1", "--backend", "zfs"]


# -- 1. out-of-range times -----------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    new_user("--expires-at", "+99999999y"),
    new_user("--expires-at=-99999999999d"),
    new_user("--expires-at", "+999999999999999999999999min"),
    ["ng", "history", "--since=-99999999999d"],
    ["ng", "history", "--since", "-99999999999d"],
    ["ng", "history", "--until", "0001-01-01T00:00+01:00"],
])
async def test_out_of_range_times(cli, farm, argv):
    await refused(cli, *argv, match="out of range")


# -- 2. integers past 64 bits ------------------------------------------------------------


@pytest.mark.parametrize(("argv", "match"), [
    ([*new_user()[:-1], "99999999999999999999"], "--uid: 99999999999999999999 is out of range"),
    (["ng", "group", "new", "generic", "-g", "big", "--gid", "9223372036854775808"],
     "out of range"),
    (["ng", "slurm", "qos", "new", "-s", "farm", "-n", "q1", "--group-limits",
      "cpus=9223372036854775808"], "cpus: Input should be less than or equal to"),
    (["ng", "slurm", "qos", "new", "-s", "farm", "-n", "q1", "--group-limits", "cpus=1",
      "--priority", "4294967296"], "priority"),
    (["ng", "history", "--limit", "9" * 5000], "invalid int value"),
])
async def test_integers_past_64_bits(cli, farm, argv, match):
    await refused(cli, *argv, match=match)


# -- 3. huge quotas and sizes --------------------------------------------------------------


@pytest.mark.parametrize(("quota", "match"), [
    ("1025P", "larger than the maximum, 1024P"),
    ("99999999999999999999999P", "invalid quota"),
    ("1." + "0" * 40 + "1T", "invalid quota"),
])
async def test_huge_quotas(cli, farm, quota, match):
    await refused(cli, *VOLUME, "--host", "nas1", "--host-path", "/export/a", "--quota", quota,
                  match=match)
    await refused(cli, "ng", "slurm", "qos", "new", "-s", "farm", "-n", "q1",
                  "--group-limits", f"mem={quota}", match=match)


# -- 4. rich markup and emoji codes in user data ------------------------------------------


async def test_markup_in_free_text_is_printed_literally(cli, farm):
    fullname = "[/] [bold red]x :smile: 12:34:56 \\[y]"
    await ok(cli, *new_user("--fullname", fullname))
    r = await ok(cli, "ng", "user", "show", "-u", "zed")
    assert fullname in r.stderr  # no markup applied, no emoji substituted
    await ok(cli, "ng", "storage", "volume", "new", "-s", "farm", "vol1", "--backend", "zfs",
             "--host", "nas1", "--host-path", "/export/a", "--quota", "1T")
    r = await ok(cli, "ng", "storage", "volume", "alloc", "add", "-s", "farm", "vol1",
                 "--quota", "1G", "--comment", "[/] :cd: 1:23")
    r = await ok(cli, "ng", "storage", "volume", "show", "-s", "farm", "vol1")
    assert "[/] :cd: 1:23" in r.stderr and "💿" not in r.stderr


async def test_markup_host_is_refused_before_any_write(cli, farm):
    await refused(cli, *VOLUME, "--host", "[/]", "--host-path", "/export/a",
                  match="is not a valid host name")


def test_output_never_reads_user_data_as_markup():
    from cheeto_like.cli.output import LogHandler, Output

    err = io.StringIO()
    out = Output(stderr=err)
    out.success("created [bold]x[/] at [/] :smile:")  # a value that missed esc()
    out.warn("[/")
    out.info("\x1b[2J")
    out.table([{"name": "[/]", "comment": "a\x1b]0;owned\x07b :smile:"}], title="[/] t")
    out.show({"[/]": "\x00", "k": ["[/]", "\x1b"]}, title="[/]")
    log = logging.getLogger("cheeto_like.test_bad_input")
    log.addHandler(LogHandler(console=out.console, show_path=False))
    log.warning("changes: %s", {"comment": "\x1b]0;owned\x07 [/]"})
    text = err.getvalue()
    assert "\x1b" not in text and "\x00" not in text and "\x07" not in text
    assert ":smile:" in text and "😄" not in text
    assert "[/]" in text


# -- 5. paths, CIDRs, hosts and options ----------------------------------------------------


@pytest.mark.parametrize(("argv", "match"), [
    (new_user("--home-directory", "/home/../etc"), "must not contain '.' or '..' segments"),
    (new_user("--home-directory", "/home/./zed"), "must not contain '.' or '..' segments"),
    (new_user("--home-directory", "/home//zed"), "is not normalised"),
    (new_user("--home-directory", "home/zed"), "must be absolute"),
    (new_user("--home-directory", "/home/zed\n/etc"), "may only contain"),
    (new_user("--home-directory", "/home/$(reboot)"), "may only contain"),
    (new_user("--fullname", "Zed\nroot::0:0"), "control characters"),
])
async def test_user_paths_and_text(cli, farm, argv, match):
    await refused(cli, *argv, match=match)


@pytest.mark.parametrize(("extra", "match"), [
    (["--host", "nas1", "--host-path", "/export/a", "--export-ranges", "not-a-cidr"],
     "is not a network in CIDR notation"),
    (["--host", "nas1", "--host-path", "/export/a", "--export-ranges", "10.0.0.1/8"],
     "has host bits set"),
    (["--host", "nas1\n/ *(rw)", "--host-path", "/export/a"], "not a valid host name"),
    (["--host", "nas1;reboot", "--host-path", "/export/a"], "not a valid host name"),
    (["--host", "fe80::1%$(reboot)", "--host-path", "/export/a"], "not a valid host name"),
    (["--host", "nas1", "--host-path", "/export/a *(rw,no_root_squash)"], "may only contain"),
    (["--host", "nas1", "--host-path", "/export/a\n/ *(rw)"], "may only contain"),
    (["--host", "nas1", "--host-path", "/export/../etc"], "'..' segments"),
    (["--host", "nas1", "--host-path", "/export/a", "--export-options", "rw\n/ *(rw)"],
     "may only contain"),
    (["--host", "nas1", "--host-path", "/export/a", "--export-options", "rw) *(rw"],
     "may only contain"),
])
async def test_volume_hosts_paths_and_exports(cli, farm, extra, match):
    await refused(cli, *VOLUME, *extra, match=match)


async def test_valid_volume_is_normalised(cli, farm):
    await ok(cli, *VOLUME, "--host", "NAS1.example.org", "--host-path", "/export/a/",
             "--export-options", "rw,no_root_squash,sec=sys", "--export-ranges", "10.0.0.0/8",
             "fd00::/8")
    r = await ok(cli, "ng", "storage", "volume", "show", "-s", "farm", "vol1", "--json")
    data = r.json()
    assert data["host"] == "nas1.example.org" and data["host_path"] == "/export/a"
    assert data["export_ranges"] == ["10.0.0.0/8", "fd00::/8"]


@pytest.mark.parametrize(("argv", "match"), [
    (["ng", "storage", "static-mount", "new", "-s", "farm", "m1", "--fstype", "nfs",
      "--mount-path", "/mnt/x", "--spec", "host:/a b"], "may only contain"),
    (["ng", "storage", "static-mount", "new", "-s", "farm", "m1", "--fstype", "cvmfs",
      "--mount-path", "/mnt/x", "--spec", "repo.example.org", "--options", "ro", "a;b"],
     "may only contain"),
    (["ng", "storage", "static-mount", "new", "-s", "farm", "m1", "--fstype", "cvmfs",
      "--mount-path", "/mnt/x\ny", "--spec", "repo.example.org"], "may only contain"),
    (["ng", "storage", "automount-map", "new", "-s", "farm", "auto.home", "--prefix", "/home",
      "--options", "rw", "rw\n* host:/&"], "may only contain"),
    (["ng", "storage", "automount-map", "new", "-s", "farm", "auto.home", "--prefix",
      "/home/../root"], "'..' segments"),
])
async def test_mount_paths_and_options(cli, farm, argv, match):
    await refused(cli, *argv, match=match)


# -- 6. key files and control characters in keys --------------------------------------------


async def test_key_file_that_is_a_binary(cli, farm):
    await refused(cli, *new_user("--key-file", "/bin/ls"), match="/bin/ls")


async def test_key_file_that_is_huge(cli, farm, tmp_path):
    big = tmp_path / "big.pub"
    with big.open("wb") as handle:
        handle.truncate(17 * 1024 * 1024)
    await refused(cli, *new_user("--key-file", str(big)), match="larger than 64 KiB")


async def test_key_file_that_is_not_utf8(cli, farm, tmp_path):
    path = tmp_path / "latin1.pub"
    path.write_bytes(f"{ED25519} caf\xe9".encode("latin-1"))
    await refused(cli, *new_user("--key-file", str(path)), match="is not UTF-8 text")


@pytest.mark.parametrize(("comment", "in_file"), [
    ("a\x1b[2Jb", "control characters"), ("nul\x00here", "is a binary file"),
    ("bell\x07", "control characters"), ("bidi\u202e", "control characters")])
async def test_key_comment_with_control_characters(cli, farm, tmp_path, comment, in_file):
    path = tmp_path / "k.pub"
    path.write_text(f"{ED25519} {comment}\n")
    await refused(cli, *new_user("--key-file", str(path)), match=in_file)
    await refused(cli, "ng", "user", "add", "ssh-key", "-u", "alice", "--key",
                  f"{ED25519} {comment}", match="control characters")


async def test_stored_escape_sequences_are_shown_escaped(cli, farm):
    """Data written before validation existed still never reaches the terminal raw."""
    await User.get_pymongo_collection().update_one(
        {"name": "alice"}, {"$set": {"comments": ["\x1b[31mred\x1b[0m \x1b]0;pwned\x07"],
                                     "fullname": "Alice\x1b[2J\x00"}})
    await SshKey.get_pymongo_collection().insert_one(
        {"_id": new_id(), "user": "alice", "key": f"{ED25519} x\x1b]0;pwned\x07y"})
    r = await ok(cli, "ng", "user", "show", "-u", "alice")
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr and "\x00" not in r.stderr
    assert "\\x1b[31mred" in r.stderr and "Alice\\x1b[2J\\x00" in r.stderr
    r = await ok(cli, "ng", "user", "list")
    assert "\x1b" not in r.stderr


# -- 7. e-mail length, --limit ---------------------------------------------------------------


async def test_email_length(cli, farm):
    local = "a" * 64
    domain = ".".join(["b" * 60] * 3) + ".org"  # 64 + 1 + 187 = 252: fits
    await ok(cli, "ng", "user", "new", "generic", "-u", "long", "--email", f"{local}@{domain}",
             "--fullname", "Long Mail", "--uid", "3002")
    await refused(cli, *new_user()[:6], "--email", "a" * 300 + "@example.org",
                  *new_user()[8:], match="longer than 254 characters")


@pytest.mark.parametrize("argv", [
    ["ng", "history", "--limit", "-1"],
    ["ng", "history", "-n", "0"],
    ["ng", "user", "list", "--limit", "-1"],
    ["ng", "hippo", "list", "--limit", "-5"],
])
async def test_limit_must_be_positive(cli, farm, argv):
    await refused(cli, *argv, match="limit must be at least 1")


# -- 8. pydantic errors: one line naming the field ------------------------------------------


@pytest.mark.parametrize(("argv", "match"), [
    (["ng", "slurm", "qos", "new", "-s", "farm", "-n", "q1", "--group-limits", "cpus=many"],
     "cpus: Input should be a valid integer"),
    (["ng", "slurm", "qos", "new", "-s", "farm", "-n", "q1", "--group-limits", "cpus=-2"],
     "cpus: Input should be greater than or equal to 0"),
    (new_user("--email", "not-an-email"), "email: 'not-an-email' is not a valid e-mail"),
])
async def test_validation_errors_are_one_line_naming_the_field(cli, farm, argv, match):
    r = await refused(cli, *argv, match=match)
    assert "errors.pydantic.dev" not in r.stderr and "validation error" not in r.stderr


# -- 9. configuration errors ---------------------------------------------------------------


def write_config(path: Path, mongo: dict[str, Any]) -> Path:
    buffer = io.StringIO()
    YAML(typ="safe").dump({"mongo": {"default": mongo}}, buffer)
    path.write_text(buffer.getvalue())
    return path


@pytest.mark.parametrize(("mongo", "match"), [
    ({"uri": "mongodb://a:b:c@@host"}, "mongo.uri: "),
    ({"uri": "mongodb://host:notaport"}, "mongo.uri: Port contains non-digit characters"),
    ({"uri": "mongodb://"}, "mongo.uri: Must provide at least one hostname"),
    ({"uri": "http://host:27017"}, "must start with mongodb://"),
])
async def test_malformed_mongo_uri(cli, farm, tmp_path, mongo, match):
    config = write_config(tmp_path / "c.yaml", mongo)
    await refused(cli, "ng", "site", "list", match=match, config=config)


async def test_embedded_path_that_is_a_file(cli, farm, tmp_path):
    a_file = tmp_path / "store"
    a_file.write_text("not a directory")
    for path in (a_file, a_file / "sub"):
        config = write_config(tmp_path / "c.yaml", {"embedded": {"path": str(path)}})
        await refused(cli, "ng", "site", "list", match=f"{a_file} exists and is not a directory",
                      config=config)


async def test_unreachable_store_is_one_short_line(cli, farm, tmp_path):
    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = write_config(tmp_path / "c.yaml", {
            "uri": f"mongodb://127.0.0.1:{port}/?replicaSet=rs0",
            "timeout_seconds": 0.5})
        r = await cli("ng", "site", "list", config=config)
    assert r.code == 1  # the request is fine; the store is down
    assert len(r.error_lines) == 1, r.stderr
    line = r.error_lines[0]
    assert f"127.0.0.1:{port}" in line
    assert "refused" in line.lower() or "connect call failed" in line.lower()
    assert "Topology" not in line and len(line) < 300


# -- 10. filters naming nobody ---------------------------------------------------------------


@pytest.mark.parametrize(("argv", "match"), [
    (["ng", "group", "list", "--member", "nobody"], "user 'nobody' does not exist"),
    (["ng", "group", "list", "--member", "nobody", "-s", "farm"], "user 'nobody' does not exist"),
    (["ng", "group", "list", "--type", "bogus"], "group type 'bogus' is not one of"),
    (["ng", "user", "list", "--type", "bogus"], "user type 'bogus' is not one of"),
    (["ng", "user", "list", "--group", "nogroup"], "group 'nogroup' does not exist"),
    (["ng", "storage", "list", "-s", "farm", "--user", "nobody"], "user 'nobody' does not exist"),
    (["ng", "storage", "list", "-s", "farm", "--group", "nogroup"],
     "group 'nogroup' does not exist"),
    (["ng", "slurm", "association", "list", "-s", "farm", "--group", "lab"],
     "Slurm account 'lab' does not exist at site 'farm'"),
    (["ng", "slurm", "association", "list", "-s", "farm", "--partition", "nope"],
     "partition 'nope' does not exist at site 'farm'"),
    (["ng", "slurm", "allocation", "list", "-s", "farm", "--qos", "nope"],
     "QOS 'nope' does not exist at site 'farm'"),
])
async def test_filters_naming_nobody(cli, farm, argv, match):
    await refused(cli, *argv, match=match)


async def test_known_member_still_lists(cli, farm):
    await ok(cli, "ng", "group", "add", "member", "-g", "lab", "-u", "alice", "-s", "farm")
    r = await ok(cli, "ng", "group", "list", "--member", "alice", "--json")
    assert "lab" in [g["name"] for g in r.json()]


# -- 11. output files in a directory that does not exist -----------------------------------


@pytest.mark.parametrize("export", ["puppet-legacy", "root-keys", "sympa", "storage"])
async def test_export_to_a_missing_directory(cli, farm, tmp_path, export):
    target = tmp_path / "nonexistent" / "dir" / "x.yaml"
    await refused(cli, "ng", "site", "export", export, "-s", "farm", "-o", str(target),
                  match="No such file or directory")
    await refused(cli, "ng", "site", "export", export, "-s", "farm", "-o", str(tmp_path),
                  match="cannot write")


async def test_other_output_files_in_bad_places(cli, farm, tmp_path):
    a_file = tmp_path / "plain"
    a_file.write_text("")
    await refused(cli, "config", "write", str(a_file / "config.yaml"), match="cannot write")
    accounts = tmp_path / "accounts.yaml"
    accounts.write_text("user: {}\ngroup: {}\n")
    await refused(cli, "puppet", "validate", str(accounts), "--dump",
                  str(tmp_path / "missing" / "out.yaml"), match="No such file or directory")
    site_dir = tmp_path / "site"
    (site_dir / "hosts").mkdir(parents=True)
    (site_dir / "hosts" / "h1.j2").write_text("#cloud-config\n")
    keys = tmp_path / "root.pub"
    keys.write_text(f"{ED25519} root@x\n")
    await refused(cli, "nocloud", "render", "--site-dir", str(site_dir), "-k", str(keys),
                  "-o", str(a_file / "out"), match="cannot write")


# -- 12. floats -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
async def test_non_finite_numbers(cli, farm, value):
    await refused(cli, "ng", "slurm", "sync", "-s", "farm", f"--timeout={value}",
                  match="is not a finite number")


@pytest.mark.parametrize("days", [-1, 36501, 2**62])
def test_iam_day_overrides_are_bounded(days):
    """``--grace-days``/``--expiry-offset-days`` reach date arithmetic (year 9999)."""
    from cheeto_like.errors import InvalidInput
    from cheeto_like.operations.iam import IAMSettings

    with pytest.raises(InvalidInput, match=r"must be 0\.\.36500"):
        IAMSettings(grace_days=days)
    with pytest.raises(InvalidInput, match=r"must be 0\.\.36500"):
        IAMSettings(expiry_offset_days=days)
