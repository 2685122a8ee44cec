"""A small demo site, seeded through the real operations (``cheeto daemon demo-seed``,
``cheeto daemon up --seed-demo``, ``scripts/demo.sh``).

Idempotent: every step first checks whether its result is already there and skips
itself if so, so a second run writes nothing (not even History rows). The site has an
fqdn and an alias, a sticky group, an admin with a root SSH key (so the API's root-keys
route has something to serve), a sponsor group with a member and a Slurm user, an
inactive user, a system user, and ZFS home directories (so the storage route does too).
``demo_dashboard`` then adds what the web dashboard shows (logins, a partition bob can
submit to, quotas, pending requests, weeks of past jobs).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..models import (
    AutomountMap,
    Group,
    GroupMembership,
    Site,
    SshKey,
    Storage,
    StorageVolume,
    User,
    UserSiteInfo,
)
from ..operations import storage as storage_ops
from ..operations.base import Operation
from ..operations.group import CreateGroup, CreateGroupFromSponsor, SeedAccessStatusGroups
from ..operations.group_membership import AddGroupMember, AddGroupSlurmer
from ..operations.site import AddSiteAlias, AddStickyGroup, CreateSite
from ..operations.user import AddUserSshKey, CreateSystemUser, CreateUser, SetUserStatus
from ..operations.user_site import AddSiteUser
from ..store import Store

DEMO_SITE = "farm"
DEMO_KEY = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAcUIS47SFVib3yJlqOwvcrX5PH+CxglMj9MWWZzgI2a"
            " alice@laptop")

_PEOPLE: tuple[dict[str, Any], ...] = (
    {"name": "alice", "email": "alice@example.org", "fullname": "Alice Liddell", "uid": 2001,
     "type": "admin", "access": ["login-ssh", "slurm", "root-ssh"]},
    {"name": "bob", "email": "bob@example.org", "fullname": "Bob Builder", "uid": 2002,
     "access": ["login-ssh", "slurm"]},
    {"name": "carol", "email": "carol@example.org", "fullname": "Carol Danvers", "uid": 2003,
     "access": ["login-ssh"]},
    {"name": "dana", "email": "dana@example.org", "fullname": "Dana Scully", "uid": 2004,
     "access": ["login-ssh"]},
)


@dataclass(frozen=True)
class Step:
    label: str
    done: Callable[[], Awaitable[bool]]
    op: type[Operation]
    kwargs: dict[str, Any]


def _exists(model: Any, **fields: Any) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await model.find_one(fields) is not None
    return check


def _site_has(site: str, test: Callable[[Site], bool]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        found = await Site.find_one({"name": site})
        return found is not None and test(found)
    return check


def _has_role(user: str, group: str, site: str, role: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        edge = await GroupMembership.find_one({"user": user, "group": group, "site": site})
        return edge is not None and role in edge.roles
    return check


def demo_steps(site: str = DEMO_SITE) -> list[Step]:
    fqdn = f"{site}.hpc.example.org"
    steps = [
        Step("access and status groups", _exists(Group, type="status"),
             SeedAccessStatusGroups, {}),
        Step(f"site {site}", _exists(Site, name=site), CreateSite, {"name": site, "fqdn": fqdn}),
        Step(f"alias caes{site}", _site_has(site, lambda s: f"caes{site}" in s.aliases),
             AddSiteAlias, {"site": site, "alias": f"caes{site}"}),
        Step("group hpc-users", _exists(Group, name="hpc-users"), CreateGroup,
             {"name": "hpc-users", "gid": 5000}),
        Step("sticky hpc-users", _site_has(site, lambda s: "hpc-users" in s.group.sticky),
             AddStickyGroup, {"site": site, "group": "hpc-users"}),
    ]
    for person in _PEOPLE:
        steps.append(Step(f"user {person['name']}", _exists(User, name=person["name"]),
                          CreateUser, dict(person)))
    steps.append(Step("system user hpc-svc", _exists(User, name="hpc-svc"), CreateSystemUser,
                      {"name": "hpc-svc"}))
    for name in ("alice", "bob", "carol", "dana", "hpc-svc"):
        steps.append(Step(f"{name} on {site}", _exists(UserSiteInfo, user=name, site=site),
                          AddSiteUser, {"user": name, "site": site}))
    steps += [
        Step("alice's SSH key", _exists(SshKey, user="alice"), AddUserSshKey,
             {"name": "alice", "key": DEMO_KEY}),
        Step("group alicegrp", _exists(Group, name="alicegrp"), CreateGroupFromSponsor,
             {"sponsor": "alice", "site": site}),
        Step("bob in alicegrp", _has_role("bob", "alicegrp", site, "member"), AddGroupMember,
             {"group": "alicegrp", "user": "bob", "site": site}),
        Step("bob slurmer of alicegrp", _has_role("bob", "alicegrp", site, "slurmer"),
             AddGroupSlurmer, {"group": "alicegrp", "user": "bob", "site": site}),
        Step("carol inactive", _carol_inactive(site), SetUserStatus,
             {"name": "carol", "site": site, "status": "inactive", "reason": "left the lab"}),
        Step("automount map home", _exists(AutomountMap, name="home", site=site),
             storage_ops.CreateAutomountMap,
             {"site": site, "name": "home", "prefix": "/home", "options": ["rw", "fstype=nfs"]}),
        Step("volume homes", _exists(StorageVolume, name="homes", site=site),
             storage_ops.CreateStorageVolume,
             {"site": site, "name": "homes", "backend": "zfs", "host": "nas-1",
              "host_path": "/export/home", "export_options": "rw,no_root_squash",
              "export_ranges": ["10.0.0.0/16"]}),
        Step("home defaults", _site_has(site, lambda s: s.storage.default_home_volume == "homes"),
             storage_ops.SetSiteStorageDefaults,
             {"site": site, "home_volume": "homes", "home_quota": "20G",
              "home_automount_map": "home"}),
    ]
    for name in ("alice", "bob"):
        steps.append(Step(f"{name}'s home", _exists(Storage, name=name, site=site),
                          storage_ops.CreateHomeStorage, {"site": site, "user": name}))
    return steps


def _carol_inactive(site: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        usi = await UserSiteInfo.find_one({"user": "carol", "site": site})
        return usi is not None and usi.status == "inactive"
    return check


async def seed_demo(store: Store, author: str | None, site: str = DEMO_SITE) -> list[str]:
    """Run the steps whose result is missing; return their labels (empty: nothing to do)."""
    ran = []
    for step in demo_steps(site):
        if await step.done():
            continue
        await step.op.run(store, author, **step.kwargs)
        ran.append(step.label)
    from .demo_dashboard import seed_dashboard  # passwords, quotas and usage to show

    return ran + await seed_dashboard(store, author, site)
