"""Golden files for every export format, on one seeded site with home, group and share
storages, sticky groups, sponsors, Slurm accounts, root-ssh admins and a static mount.

Regenerate after an intended format change with ``UPDATE_GOLDEN=1 pytest tests/exports``
and review the diff.
"""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cheeto_like.constants import DEFAULT_SYSTEM_EMAIL
from cheeto_like.models import User
from cheeto_like.operations import slurm as slurm_ops
from cheeto_like.operations import storage as storage_ops
from cheeto_like.operations.group import CreateGroupFromSponsor
from cheeto_like.operations.group_membership import (
    AddGroupMember,
    AddGroupSlurmer,
    AddGroupSudoer,
)
from cheeto_like.operations.site import AddStickyGroup
from cheeto_like.operations.user import AddUserSshKey, CreateSystemUser, SetUserStatus
from tests.factories import AUTHOR, make_group, make_site, make_user, put_on_site

GOLDEN = Path(__file__).parent / "golden"
HASH = "$y$j9T$goldengoldengoldengold$Ndx4cFv5Mcu5a4F7d6cAUzUmYB3RtWw0N6rPVQYbKx/"
KEYS = {
    "alice": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAcUIS47SFVib3yJlqOwvcrX5PH+CxglMj9MWWZzgI2a "
             "alice@laptop",
    "dave": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA4bKDVCT1xpdoOQnaq3xNHe6/gFEh8sOUZTYG16h5Sh "
            "dave@desk",
}


async def seed(store) -> None:
    site = "farm"
    await make_site(store, site, "farm.hpc.example.org")
    await make_user(store, "alice", uid=2001, site=site, type="admin",
                    access=["login-ssh", "root-ssh", "sudo", "slurm"])
    await make_user(store, "bob", uid=2002, site=site, access=["login-ssh", "slurm"],
                    expires_at=datetime(2027, 6, 30, tzinfo=UTC))
    await make_user(store, "carol", uid=2003, site=site, access=["login-ssh", "compute-ssh"])
    await make_user(store, "dave", uid=2004, site=site, type="admin",
                    access=["login-ssh", "root-ssh"], shell="/bin/zsh")
    await make_user(store, "erin", uid=2005, access=["login-ssh"])  # not on the site
    await make_user(store, "hpcsupport", uid=2006, site=site, type="admin",
                    email=DEFAULT_SYSTEM_EMAIL, access=["login-ssh"])
    await CreateSystemUser.run(store, AUTHOR, name="svc")
    await put_on_site(store, "svc", site)
    await SetUserStatus.run(store, AUTHOR, name="carol", site=site, status="inactive",
                            reason="left")
    for name, key in KEYS.items():
        await AddUserSshKey.run(store, AUTHOR, name=name, key=key)
    await User.get_pymongo_collection().update_many({}, {"$set": {"password": HASH}})

    await make_group(store, "hpc-users", gid=5000)
    await AddStickyGroup.run(store, AUTHOR, site=site, group="hpc-users")
    await CreateGroupFromSponsor.run(store, AUTHOR, sponsor="alice", site=site)
    await AddGroupMember.run(store, AUTHOR, group="alicegrp", user="bob", site=site)
    await AddGroupSlurmer.run(store, AUTHOR, group="alicegrp", user="bob", site=site)
    await AddGroupSudoer.run(store, AUTHOR, group="alicegrp", user="carol", site=site)
    await AddGroupMember.run(store, AUTHOR, group="alicegrp", user="erin", site=site)

    await slurm_ops.CreateSlurmPartition.run(store, AUTHOR, site=site, name="high")
    await slurm_ops.ProvisionSlurmAllocation.run(store, AUTHOR, site=site, group="alicegrp",
                                                 partition="high", group_limits={"cpus": 32})
    await slurm_ops.ProvisionSlurmAllocation.run(store, AUTHOR, site=site, group="hpc-users",
                                                 partition="high")
    await slurm_ops.AddStickySlurmAccount.run(store, AUTHOR, site=site, group="hpc-users",
                                              default=True)

    await storage_ops.CreateAutomountMap.run(store, AUTHOR, site=site, name="home",
                                             prefix="/home", options=["rw", "fstype=nfs"])
    await storage_ops.CreateAutomountMap.run(store, AUTHOR, site=site, name="group",
                                             prefix="/group", options=["rw", "nosuid",
                                                                       "fstype=nfs"])
    await storage_ops.CreateAutomountMap.run(store, AUTHOR, site=site, name="share",
                                             prefix="/share", options=["ro"])
    await storage_ops.CreateStorageVolume.run(store, AUTHOR, site=site, name="homes",
                                              backend="zfs", host="nas-1",
                                              host_path="/export/home",
                                              export_options="rw,no_root_squash",
                                              export_ranges=["10.0.0.0/16"])
    await storage_ops.SetSiteStorageDefaults.run(store, AUTHOR, site=site, home_volume="homes",
                                                 home_quota="20G", home_automount_map="home")
    for user in ("alice", "bob", "dave"):
        await storage_ops.CreateHomeStorage.run(store, AUTHOR, site=site, user=user)
    await storage_ops.CreateStorageVolume.run(store, AUTHOR, site=site, name="groups",
                                              backend="zfs", host="nas-2",
                                              host_path="/export/group")
    await storage_ops.CreateGroupStorage.run(store, AUTHOR, site=site, group="alicegrp",
                                             quota="10T", parent_volume="groups", globus=True)
    await storage_ops.CreateStorageVolume.run(store, AUTHOR, site=site, name="datasets",
                                              backend="zfs", host="nas-3",
                                              host_path="/export/datasets", quota="50T")
    await storage_ops.CreateShareStorage.run(store, AUTHOR, site=site, name="genomes",
                                             owner="alice", group="hpc-users",
                                             parent_volume="datasets")
    await storage_ops.CreateStorageVolume.run(store, AUTHOR, site=site, name="scratch",
                                              backend="zfs", host="nas-4",
                                              host_path="/export/scratch")
    await storage_ops.CreateStaticMount.run(store, AUTHOR, site=site, name="scratch",
                                            fstype="nfs4", mount_path="/scratch",
                                            volume="scratch", options=["rw", "hard"])
    await storage_ops.CreateShareStorage.run(store, AUTHOR, site=site, name="tmpdata",
                                             owner="bob", group="alicegrp", host="nas-4",
                                             host_path="/export/scratch/tmpdata",
                                             static_mount="scratch")


@pytest.fixture(scope="module")
async def seeded(store):
    from tests.conftest import seed_access_status, wipe

    await wipe()
    await seed_access_status()
    await seed(store)
    return store


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from its golden file"


@pytest.mark.parametrize(("export", "golden"), [
    ("puppet-legacy", "farm.puppet.yaml"),
    ("root-keys", "farm.root.pub"),
    ("sympa", "farm.sympa.txt"),
    ("storage", "farm.storage.yaml"),
])
async def test_export_matches_golden(seeded, cli, export, golden, tmp_path):
    r = await cli("ng", "site", "export", export, "-s", "farm")
    assert r.code == 0, r.stderr
    assert r.stderr == ""
    check_golden(golden, r.stdout)
    out = tmp_path / golden
    r = await cli("ng", "site", "export", export, "-s", "farm", "-o", str(out))
    assert r.code == 0 and r.stdout == ""
    assert out.read_text() == (GOLDEN / golden).read_text()
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


async def test_export_replaces_a_world_readable_file_with_a_0600_one(seeded, cli, tmp_path):
    """puppet-legacy holds yescrypt hashes: even over an existing 0644 file (and under a
    permissive umask) the result is 0600 and no temporary file is left behind."""
    out = tmp_path / "all.yaml"
    out.write_text("old\n")
    out.chmod(0o644)
    old_umask = os.umask(0)
    try:
        r = await cli("ng", "site", "export", "puppet-legacy", "-s", "farm", "-o", str(out))
    finally:
        os.umask(old_umask)
    assert r.code == 0, r.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert "$y$" in out.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["all.yaml"]


async def test_unknown_site_is_one_line(seeded, cli):
    r = await cli("ng", "site", "export", "sympa", "-s", "nowhere")
    assert r.code == 2 and r.error_lines == ["error: site 'nowhere' does not exist"]
