"""`cheeto ng storage …`, `ng site storage set-defaults` and `ng user new class` through
the real entry point: machine output on stdout, human output on stderr, and one error
line with exit code 2 (and no write) for each bad input of the issue."""

from __future__ import annotations

import stat

import pytest

from cheeto_like.constants import LAB_GROUP_BAND
from cheeto_like.credentials import verify_password
from cheeto_like.models import History, Storage, StorageVolume, User

from ..factories import (
    home_defaults,
    make_group,
    make_site,
    make_static_mount,
    make_user,
    snapshot,
)


async def ok(cli, *argv: str):
    r = await cli(*argv)
    assert r.code == 0, r.stderr
    return r


async def fails(cli, *argv: str, match: str):
    """Exit 2, one error line containing ``match``, nothing on stdout, nothing written."""
    before = await snapshot()
    r = await cli(*argv)
    assert r.code == 2, r.stderr
    assert len(r.error_lines) == 1, r.stderr
    assert match in r.stderr, r.stderr
    assert r.stdout == ""
    assert await snapshot() == before
    return r


@pytest.fixture
async def farm(cli, db):
    await make_site(db, "farm")
    await make_user(db, "alice", site="farm")
    await make_group(db, "lab")
    return db


# -- a site built from the command line ---------------------------------------------------


async def test_build_and_inspect_a_site(cli, farm):
    r = await ok(cli, "ng", "storage", "volume", "new", "home", "-s", "farm", "--backend",
                 "zfs", "--host", "nas1", "--host-path", "/export/home", "--quota", "10T",
                 "--export-options", "rw", "--export-ranges", "10.0.0.0/8", "10.1.0.0/16")
    assert r.stdout == "" and "created volume home at nas1:/export/home" in r.stderr
    await ok(cli, "ng", "storage", "volume", "new", "group", "-s", "farm", "--backend",
             "quobyte", "--host", "qb1", "--host-path", "/group")
    await ok(cli, "ng", "storage", "volume", "new", "group/big", "-s", "farm", "--parent",
             "group", "--quota", "40T")
    await ok(cli, "ng", "storage", "automount-map", "new", "home", "-s", "farm", "--prefix",
             "/home", "--options", "rw", "nosuid")
    await ok(cli, "ng", "storage", "static-mount", "new", "groups", "-s", "farm", "--fstype",
             "nfs4", "--mount-path", "/group", "--volume", "group", "--options", "hard")
    await ok(cli, "ng", "storage", "static-mount", "new", "sw", "-s", "farm", "--fstype",
             "cvmfs", "--mount-path", "/cvmfs/sw", "--spec", "sw.example.org")
    r = await ok(cli, "ng", "site", "storage", "set-defaults", "-s", "farm", "--home-volume",
                 "home", "--home-quota", "20G", "--home-automount-map", "home")
    assert "volume home, quota 20G, mount home" in r.stderr
    await ok(cli, "ng", "storage", "new", "home", "-s", "farm", "-u", "alice")
    await ok(cli, "ng", "group", "add", "sponsor", "-g", "lab", "-u", "alice", "-s", "farm")
    r = await ok(cli, "ng", "storage", "new", "group", "-s", "farm", "-g", "lab", "--quota",
                 "5T", "--parent-volume", "group", "--static-mount", "groups", "--globus")
    assert "owner alice" in r.stderr
    await ok(cli, "ng", "storage", "new", "share", "-s", "farm", "-n", "data", "--owner",
             "alice", "-g", "lab", "--host", "nas3", "--path", "/tank/data", "--no-mount")

    r = await ok(cli, "ng", "storage", "list", "-s", "farm", "--json")
    assert r.stderr == ""
    rows = {row["name"]: row for row in r.json()}
    assert sorted(rows) == ["alice", "data", "lab"]
    assert {k: rows["alice"][k] for k in ("category", "owner", "volume", "host", "host_path",
                                          "quota", "mount", "mount_path", "mount_options")} \
        == {"category": "home", "owner": "alice", "volume": "home/alice", "host": "nas1",
            "host_path": "/export/home/alice", "quota": "20G", "mount": "automount:home",
            "mount_path": "/home/alice", "mount_options": ["nosuid", "rw"]}
    assert (rows["lab"]["mount_path"], rows["lab"]["globus"]) == ("/group/lab", True)
    assert (rows["data"]["host_path"], rows["data"]["mount_path"]) == ("/tank/data", None)
    assert rows["alice"]["export_options"] == "rw"  # a child volume exports like its parent
    assert rows["alice"]["export_ranges"] == ["10.0.0.0/8", "10.1.0.0/16"]

    r = await ok(cli, "ng", "storage", "list", "-s", "farm", "--category", "home", "--yaml")
    assert [row["name"] for row in r.yaml()] == ["alice"]
    r = await ok(cli, "ng", "storage", "list", "-s", "farm", "-g", "lab", "--host", "qb1",
                 "--json")
    assert [row["name"] for row in r.json()] == ["lab"]
    r = await ok(cli, "ng", "storage", "list", "-s", "farm", "-u", "alice", "--json")
    assert [row["name"] for row in r.json()] == ["lab", "alice", "data"]
    r = await ok(cli, "ng", "storage", "list", "-s", "farm")
    assert r.stdout == "" and "Storages at farm (count=3)" in r.stderr and "alice" in r.stderr
    for argv in (("volume", "list"), ("volume", "show", "group"), ("static-mount", "list"),
                 ("automount-map", "list"), ("automount-map", "show", "home")):
        r = await ok(cli, "ng", "storage", *argv, "-s", "farm")
        assert r.stdout == "" and r.stderr.strip(), argv

    r = await ok(cli, "ng", "storage", "show", "lab", "-s", "farm", "--yaml")
    shown = r.yaml()
    assert shown["volume"]["name"] == "group/lab" and shown["volume"]["quota"] == "5T"
    assert shown["static_mount"] == {"name": "groups", "site": "farm", "fstype": "nfs4",
                                     "mount_path": "/group", "volume": "group", "subpath": "",
                                     "spec": "", "options": ["hard"]}
    r = await ok(cli, "ng", "storage", "show", "alice", "-s", "farm")
    assert r.stdout == "" and "/home/alice" in r.stderr

    r = await ok(cli, "ng", "storage", "volume", "show", "home", "-s", "farm", "--json")
    assert r.json() == {"name": "home", "site": "farm", "backend": "zfs", "host": "nas1",
                        "host_path": "/export/home", "parent": None, "quota": "10T",
                        "allocations": [{"index": 0, "quota": "10T",
                                         "comment": "initial allocation"}],
                        "export_options": "rw", "export_ranges": ["10.0.0.0/8", "10.1.0.0/16"],
                        "children": 1}
    r = await ok(cli, "ng", "storage", "volume", "list", "-s", "farm", "--json")
    assert [v["name"] for v in r.json()] == ["group", "group/big", "group/lab", "home",
                                             "home/alice", "share/data"]
    r = await ok(cli, "ng", "storage", "automount-map", "show", "home", "-s", "farm",
                 "--json")
    assert r.json() == {"name": "home", "site": "farm", "prefix": "/home",
                        "options": ["rw", "nosuid"], "storages": 1,
                        "entries": [{"key": "alice", "storage": "alice", "host": "nas1",
                                     "path": "/export/home/alice",
                                     "options": ["nosuid", "rw"]}]}
    r = await ok(cli, "ng", "storage", "automount-map", "list", "-s", "farm", "--yaml")
    assert [(m["name"], m["storages"]) for m in r.yaml()] == [("home", 1)]
    r = await ok(cli, "ng", "storage", "static-mount", "list", "-s", "farm", "--json")
    assert [(m["name"], m["spec"]) for m in r.json()] == [("groups", ""),
                                                          ("sw", "sw.example.org")]


async def test_allocations_edit_set_mount_rehome_and_remove(cli, farm):
    await home_defaults(farm)
    await make_static_mount(farm, "homes", "/mnt/home", volume="home")
    await ok(cli, "ng", "storage", "new", "home", "-s", "farm", "-u", "alice")

    r = await ok(cli, "ng", "storage", "volume", "alloc", "add", "home/alice", "-s", "farm",
                 "--quota", "25.8T", "--comment", "grant")
    assert "volume home/alice quota is now 26439.2G" in r.stderr  # 20G + 25.8T
    await ok(cli, "ng", "storage", "volume", "alloc", "edit", "home/alice", "-s", "farm",
             "--index", "0", "--quota", "20T")
    v = await StorageVolume.find_one({"name": "home/alice"})
    assert [(a.quota, a.comment) for a in v.allocations] == [
        ("20T", "initial allocation"), ("25.8T", "grant")]
    assert v.quota == "45.8T"
    await ok(cli, "ng", "storage", "volume", "alloc", "rm", "home/alice", "-s", "farm",
             "--index", "1")
    await fails(cli, "ng", "storage", "volume", "alloc", "remove", "home/alice", "-s", "farm",
                "--index", "5", match="out of range")

    await ok(cli, "ng", "storage", "edit", "alice", "-s", "farm", "--quota", "1T",
             "--globus")
    s = await Storage.find_one({"name": "alice"})
    assert s.globus
    assert (await StorageVolume.find_one({"name": "home/alice"})).quota == "1T"

    await ok(cli, "ng", "storage", "set-mount", "-s", "farm", "-n", "alice", "--static-mount",
             "homes")
    s = await Storage.find_one({"name": "alice"})
    assert (s.static_mount, s.automount_map, s.mount_name) == ("homes", None, "")
    await ok(cli, "ng", "storage", "set-mount", "-s", "farm", "-n", "alice",
             "--automount-map", "home", "--mount-name", "al")
    r = await ok(cli, "ng", "storage", "show", "alice", "-s", "farm", "--json")
    assert r.json()["mount_path"] == "/home/al"

    r = await cli("ng", "storage", "rehome", "-s", "farm", "-u", "alice")
    assert r.code == 2 and "pass --force" in r.stderr
    r = await cli("ng", "storage", "rehome", "-s", "farm", "-u", "alice", "--force")
    assert r.code == 2 and "already under 'home'" in r.stderr

    r = await ok(cli, "ng", "storage", "remove", "alice", "-s", "farm", "--force")
    assert "volume home/alice is kept" in r.stderr
    assert await Storage.count() == 0
    assert await StorageVolume.find_one({"name": "home/alice"}) is not None


async def test_volume_set_mounts_reports_warnings(cli, farm):
    await home_defaults(farm)
    await make_user(farm, "bob", site="farm")
    for user in ("alice", "bob"):
        await ok(cli, "ng", "storage", "new", "home", "-s", "farm", "-u", user)
    await make_static_mount(farm, "alice-only", "/mnt/alice", volume="home",
                            subpath="alice")
    r = await cli("ng", "storage", "volume", "set-mounts", "home", "-s", "farm",
                  "--static-mount", "alice-only")
    assert r.code == 1 and r.stdout == ""
    assert "1 storage(s) now use static:alice-only" in r.stderr
    assert "warning:" in r.stderr and "storage 'bob'" in r.stderr
    r = await ok(cli, "ng", "storage", "volume", "set-mounts", "home", "-s", "farm",
                 "--no-mount")
    assert "2 storage(s) now use none" in r.stderr


# -- bad input: one line, exit 2, nothing written -------------------------------------------


@pytest.mark.parametrize("quota", ["10X", "-5G"])
async def test_bad_quota(cli, farm, quota):
    await fails(cli, "ng", "storage", "volume", "new", "v", "-s", "farm", "--backend", "zfs",
                "--host", "nas1", "--host-path", "/v", f"--quota={quota}",
                match="invalid quota")
    await home_defaults(farm)
    await fails(cli, "ng", "storage", "new", "home", "-s", "farm", "-u", "alice",
                f"--quota={quota}", match="invalid quota")
    await fails(cli, "ng", "site", "storage", "set-defaults", "-s", "farm",
                f"--home-quota={quota}", match="invalid quota")


async def test_both_static_and_automount(cli, farm):
    await home_defaults(farm)
    await make_static_mount(farm, "homes", "/mnt/home", volume="home")
    await fails(cli, "ng", "storage", "new", "home", "-s", "farm", "-u", "alice",
                "--automount-map", "home", "--static-mount", "homes", match="not allowed with")
    await fails(cli, "ng", "site", "storage", "set-defaults", "-s", "farm",
                "--home-automount-map", "home", "--home-static-mount", "homes",
                match="not allowed with")


async def test_subpath_without_volume(cli, farm):
    await fails(cli, "ng", "storage", "static-mount", "new", "sw", "-s", "farm", "--fstype",
                "cvmfs", "--mount-path", "/cvmfs/sw", "--spec", "sw.example.org",
                "--subpath", "a", match="a subpath needs a volume")


async def test_static_mount_that_does_not_cover_the_path(cli, farm):
    await home_defaults(farm)
    await ok(cli, "ng", "storage", "new", "home", "-s", "farm", "-u", "alice")
    await make_static_mount(farm, "bobs", "/mnt/bob", volume="home", subpath="bob")
    await fails(cli, "ng", "storage", "set-mount", "-s", "farm", "-n", "alice",
                "--static-mount", "bobs", match="does not cover")
    await fails(cli, "ng", "storage", "set-mount", "-s", "farm", "-n", "alice",
                "--automount-map", "home", "--mount-name", "bad name",
                match="not a valid mount name")


async def test_remove_while_mounted_needs_force(cli, farm):
    await home_defaults(farm)
    await ok(cli, "ng", "storage", "new", "home", "-s", "farm", "-u", "alice")
    await fails(cli, "ng", "storage", "remove", "alice", "-s", "farm",
                match="is mounted (automount:home)")
    assert await Storage.count() == 1


async def test_other_lookups_fail_in_one_line(cli, farm):
    await fails(cli, "ng", "storage", "show", "nope", "-s", "farm",
                match="storage 'nope' does not exist")
    await fails(cli, "ng", "storage", "list", "-s", "hive", match="site 'hive'")
    await fails(cli, "ng", "storage", "volume", "show", "nope", "-s", "farm",
                match="volume 'nope'")
    await fails(cli, "ng", "storage", "automount-map", "show", "nope", "-s", "farm",
                match="automount map 'nope'")
    await fails(cli, "ng", "storage", "new", "home", "-s", "farm", "-u", "alice",
                match="no parent volume")


# -- class accounts -------------------------------------------------------------------------


@pytest.fixture
async def course(farm):
    await home_defaults(farm)
    return farm


async def test_class_batch_to_a_private_file(cli, course, tmp_path):
    path = tmp_path / "cs101.txt"
    r = await ok(cli, "ng", "user", "new", "class", "-s", "farm", "--prefix", "cs101",
                 "--count", "2", "--expires-at", "+30d", "--file", str(path), "-g", "lab")
    assert r.stdout == "" and "created 2 class account(s)" in r.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = path.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["cs101-1", "cs101-2"]
    for line in lines:
        name, password = line.split()
        user = await User.find_one({"name": name})
        assert user.type == "class" and verify_password(password, user.password)
        assert password not in r.stderr
    assert await Storage.find({"category": "home"}).count() == 2
    # an existing file is never overwritten
    before = path.read_text()
    await fails(cli, "ng", "user", "new", "class", "-s", "farm", "--prefix", "cs102",
                "--count", "1", "--expires-at", "+30d", "--file", str(path),
                match="already exists")
    assert path.read_text() == before


async def test_class_batch_prints_passwords_on_stdout(cli, course):
    r = await ok(cli, "ng", "user", "new", "class", "-s", "farm", "--prefix", "bio",
                 "--count", "2", "--expires-at", "+4mo", "--access", "login-ssh")
    lines = r.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["bio-1", "bio-2"]
    for line in lines:
        name, password = line.split()
        assert verify_password(password, (await User.find_one({"name": name})).password)
        assert password not in r.stderr
    [row] = await History.find({"op": "create_class_users"}).to_list()
    assert row.changes["users"] == ["bio-1", "bio-2"]
    assert not any(line.split()[1] in str(row.changes) for line in lines)


async def test_class_batch_crossing_the_lab_band_is_refused_and_leaves_no_file(
        cli, course, tmp_path):
    await make_user(course, "edge", uid=LAB_GROUP_BAND.start - 2)
    path = tmp_path / "batch.txt"
    await fails(cli, "ng", "user", "new", "class", "-s", "farm", "--prefix", "cs",
                "--count", "2", "--expires-at", "+30d", "--file", str(path),
                match="lab-group band")
    assert not path.exists()
    await fails(cli, "ng", "user", "new", "class", "-s", "farm", "--prefix", "cs",
                "--count", "2", "--expires-at", "+30d", match="lab-group band")


async def test_class_batch_bad_input(cli, course, tmp_path):
    path = tmp_path / "x.txt"
    await fails(cli, "ng", "user", "new", "class", "-s", "farm", "--prefix", "cs",
                "--count", "2", "--expires-at", "+30d", "-g", "nope", "--file", str(path),
                match="group 'nope'")
    assert not path.exists()
    await fails(cli, "ng", "user", "new", "class", "-s", "farm", "--prefix", "cs",
                "--count", "0", "--expires-at", "+30d", "--file", str(path), match="count")
    assert not path.exists()
    await fails(cli, "ng", "user", "new", "class", "-s", "farm", "--prefix", "cs",
                "--count", "2", "--expires-at=-1d", match="in the future")
    await fails(cli, "ng", "user", "new", "class", "-s", "farm", "--prefix", "CS",
                "--count", "2", "--expires-at", "+1d", match="prefix")
    await fails(cli, "ng", "user", "new", "class", "-s", "farm", "--prefix", "cs",
                "--count", "2", "--expires-at", "+1d", "--file",
                str(tmp_path / "missing" / "x.txt"), match="cannot create")
