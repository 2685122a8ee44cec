"""A site projected into the legacy puppet account format (``user``/``group``/``share``).

The format and its rules follow the reference's v2 export (spec §3.3): users on the site
with their groups, sudo groups, tags, expiry, Slurm accounts and automounted home; the
groups they use plus every access and status group; automounted shares. Static-mount
storages are not projected (the legacy format only knows autofs). Slurm accounts come from
slurmer roles and sticky sources, as in the reference (the Slurm sync also counts plain
members; the legacy consumer never did). A fixed number of queries, whatever the size.
"""

from __future__ import annotations

import asyncio
import posixpath
from datetime import UTC, datetime
from typing import Any

from ..constants import DEFAULT_SHELL
from ..models import Group, GroupMembership, SlurmAccount, User, UserSiteInfo
from ..models.base import columns, rows
from . import access_policy
from .site import get_site
from .storage import ResolvedStorage, site_storages

ACCESS_TAGS = {"compute-ssh": "ssh-tag", "root-ssh": "root-ssh-tag", "sudo": "sudo-tag"}


def _zfs(resolved: ResolvedStorage) -> dict[str, str] | bool:
    if resolved.is_managed_zfs and resolved.quota:
        return {"quota": resolved.quota}
    return False


def _group_storage(r: ResolvedStorage) -> dict[str, Any]:
    options = sorted((o for o in r.mount_options if o != "fstype=nfs"), reverse=True)
    return {"name": r.storage.name, "owner": r.storage.owner, "group": r.storage.group,
            "autofs": {"nas": r.host, "path": r.host_path, "options": ",".join(options)},
            "zfs": _zfs(r), "globus": r.storage.globus}


USER_FIELDS = ("name", "fullname", "email", "uid", "gid", "password", "shell",
               "home_directory", "type", "access", "expires_at", "status")


def _user_record(user: dict[str, Any], usi: dict[str, Any], *, groups: list[str],
                 sudo: list[str], accounts: list[str],
                 home: ResolvedStorage | None, now: datetime) -> dict[str, Any]:
    """One user's entry from projected rows (``models.base.columns``; raw rows hold
    bson's ``Int64`` for ids past 2**31, hence the ``int()``).

    The access tags (``ssh-tag``, ``sudo-tag``, ``root-ssh-tag``) and the group sudo
    rights grant access, so they follow ``queries.access_policy`` at the site: none for
    an inactive, disabled or expired person, no privileged ones (sudo, root-ssh, group
    sudo) while offboarding. The stored lists are untouched."""
    listed = usi.get("access") or user.get("access") or ()  # queries.user.effective_access
    status = usi.get("status") or user.get("status")  # queries.user.effective_status
    expiries = (user.get("expires_at"), usi.get("expires_at"))
    access = access_policy.granted(status, listed, expiries, now)
    if not access_policy.granted(status, ["sudo"], expiries, now):
        sudo = []  # a group's sudo rights are privileged access too
    tags = sorted({ACCESS_TAGS[a] for a in access if a in ACCESS_TAGS}
                  | ({"system-tag"} if user.get("type") == "system" else set()))
    expiry = usi.get("expires_at") or user.get("expires_at")
    record: dict[str, Any] = {
        "fullname": user["fullname"], "email": user["email"], "uid": int(user["uid"]),
        "gid": int(user["gid"]), "password": user.get("password"),
        "shell": user.get("shell") or DEFAULT_SHELL, "home": user["home_directory"],
        "groups": groups, "group_sudo": sudo, "tag": tags,
        "expiry": expiry.date().isoformat() if expiry else None,
        "slurm": {"account": accounts} if accounts else None,
    }
    if home is not None:
        record["storage"] = {"autofs": {"nas": home.host,
                                        "path": posixpath.dirname(home.host_path)},
                             "zfs": _zfs(home)}
    return record


async def site_to_puppet_legacy(site_name: str) -> dict[str, Any]:
    """``{"user": {...}, "group": {...}, "share": {...}}`` as plain data (see module doc);
    empty values are left in: ``puppet.yamlio.dumps`` drops them.

    Site-wide reads are projected columns, not models (a 20k-user site parsed ~100k
    documents into beanie models: ~30 s; now a few seconds, mostly the YAML)."""
    site = await get_site(site_name)
    # independent reads, sent together: the store answers one while this process decodes
    # another (the embedded store serves each connection's commands in a thread)
    usi_rows, user_rows, edges, account_rows, all_storages, group_rows = await asyncio.gather(
        columns(UserSiteInfo, {"site": site.name}, "user", "access", "expires_at", "status"),
        columns(User, {}, *USER_FIELDS),
        columns(GroupMembership, {"site": site.name}, "user", "group", "roles"),
        rows(SlurmAccount, {"site": site.name}, "group"),
        site_storages(site.name),
        columns(Group, {}, "name", "gid", "type"))
    usis = {u["user"]: u for u in usi_rows}
    users = {u["name"]: u for u in user_rows if u["name"] in usis}
    accounts = {a["group"] for a in account_rows}
    storages = [r for r in all_storages if r.automount_map is not None]
    homes = {r.storage.owner: r for r in storages if r.storage.category == "home"}
    group_storages = [r for r in storages if r.storage.category == "group"]
    sticky = list(site.group.sticky)
    now = datetime.now(UTC)

    members: dict[str, list[str]] = {}
    sudoers: dict[str, list[str]] = {}
    slurmers: dict[str, list[str]] = {}
    sponsors: dict[str, list[str]] = {}
    for edge in edges:
        roles = edge["roles"] or ()
        for role, table in (("member", members), ("sudoer", sudoers), ("slurmer", slurmers),
                            ("sponsor", sponsors)):
            if role in roles:
                table.setdefault(edge["user"], []).append(edge["group"])
    sponsors_of: dict[str, list[str]] = {}
    for user, groups in sponsors.items():
        for group in groups:
            sponsors_of.setdefault(group, []).append(user)

    user_records = {}
    for name in sorted(users):
        user = users[name]
        groups = sorted({*members.get(name, []), *sticky} - {name})
        reach = ({g for g in slurmers.get(name, []) if g in accounts}
                 | {g for g in sticky if g in accounts} | set(site.slurm.sticky))
        user_records[name] = _user_record(user, usis[name], groups=groups,
                                          sudo=sorted(set(sudoers.get(name, []))),
                                          accounts=sorted(reach), home=homes.get(name),
                                          now=now)

    wanted = ({e["group"] for e in edges} | set(sticky) | accounts
              | {r.storage.group for r in group_storages})
    groups = [g for g in group_rows if g["name"] in wanted or g["type"] in ("access", "status")]
    personal = {(u["name"], u["gid"]) for u in users.values()}
    storages_of: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(group_storages, key=lambda r: r.storage.name):
        storages_of.setdefault(r.storage.group, []).append(_group_storage(r))
    group_records = {}
    for group in sorted(groups, key=lambda g: g["name"]):
        name = group["name"]
        if (name, group["gid"]) in personal:
            continue
        group_records[name] = {
            "gid": int(group["gid"]), "sponsors": sorted(set(sponsors_of.get(name, []))),
            "storage": storages_of.get(name, [])}

    shares = {r.storage.name: {"storage": {
        "owner": r.storage.owner, "group": r.storage.group,
        "autofs": {"nas": r.host, "path": r.host_path}, "zfs": _zfs(r)}}
        for r in sorted(storages, key=lambda r: r.storage.name)
        if r.storage.category == "share"}
    return {"user": user_records, "group": group_records, "share": shares}

