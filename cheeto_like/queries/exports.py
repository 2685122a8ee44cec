"""Read-only exports of one site: root SSH keys, the Sympa member list, the storage map.

Exports are queries, not operations: they change nothing, so they write no History row
(scheduled exports would otherwise grow History without bound). Each one runs a fixed
number of queries whatever the size of the site.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from beanie.operators import In

from ..constants import DEFAULT_SYSTEM_EMAIL
from ..models import Site, SshKey, Storage, User, UserSiteInfo
from .site import get_site
from .storage import resolve_storages
from .user import effective_access, effective_status

DEFAULT_SYMPA_IGNORE = frozenset({DEFAULT_SYSTEM_EMAIL})
PERMISSIONS = {"home": "0770", "group": "2770", "share": "2775"}
EXPORT_CATEGORY = {"home": "user", "group": "group", "share": "share"}


@dataclass(frozen=True)
class RootKeyBlock:
    """One admin's root keys, each tagged ``environment="REMOTE_SSH_USER=<name>"``."""

    name: str
    email: str
    entries: tuple[str, ...]


async def root_key_blocks(site: str | None = None) -> list[RootKeyBlock]:
    """Admins with effective ``root-ssh`` (at ``site``, which they must be on; globally
    when no site is given) and at least one key, ordered by name."""
    admins = await User.find({"type": "admin"}).sort(+User.name).to_list()
    if site is not None:
        await get_site(site)
        usis = {u.user: u for u in await UserSiteInfo.find({"site": site}).to_list()}
        admins = [u for u in admins if u.name in usis
                  and "root-ssh" in effective_access(u, usis[u.name])]
    else:
        admins = [u for u in admins if "root-ssh" in u.access]
    keys: dict[str, list[SshKey]] = {}
    if admins:
        for key in await SshKey.find(In(SshKey.user, [u.name for u in admins])).sort(
                +SshKey.created_at).to_list():
            keys.setdefault(key.user, []).append(key)
    return [RootKeyBlock(u.name, u.email, tuple(k.authorized_keys_entry() for k in keys[u.name]))
            for u in admins if keys.get(u.name)]


def root_keys_text(blocks: Iterable[RootKeyBlock]) -> str:
    """root's authorized_keys: ``# <name> <<email>>`` then that admin's entries."""
    lines = []
    for block in blocks:
        lines.append(f"# {block.name} <{block.email}>")
        lines.extend(block.entries)
    return "".join(f"{line}\n" for line in lines)


def root_keys_list(blocks: Iterable[RootKeyBlock]) -> list[str]:
    return [entry for block in blocks for entry in block.entries]


async def sympa_emails(site: str, ignore: Iterable[str] = DEFAULT_SYMPA_IGNORE) -> list[str]:
    """Addresses of the site's people (types user and admin) whose effective status there
    is not inactive (disabled and offboarding people still get mail), sorted, unique."""
    await get_site(site)
    ignored = {e.lower() for e in ignore}
    usis = {u.user: u for u in await UserSiteInfo.find({"site": site}).to_list()}
    users = await User.find(In(User.name, list(usis))).to_list()
    return sorted({u.email for u in users
                   if u.type in ("user", "admin")
                   and effective_status(u, usis[u.name]) != "inactive"
                   and u.email.lower() not in ignored})


def sympa_text(emails: Iterable[str]) -> str:
    return "".join(f"{email}\n" for email in emails)


async def storage_export(site: str) -> dict[str, Any]:
    """The file servers' view: ``{zfs|nfs: {user|group|share: {host: [entry]}}}``.

    Whole ZFS datasets we manage go to ``zfs`` with their quota and permissions;
    subdirectories and unmanaged roots go to ``nfs``; non-ZFS (QuoByte) volumes are left
    out. Hosts and entries are sorted.
    """
    found: Site = await get_site(site)
    storages = await Storage.find({"site": found.name}).to_list()
    out: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {
        kind: {cat: {} for cat in ("user", "group", "share")} for kind in ("zfs", "nfs")}
    for r in sorted(await resolve_storages(storages), key=lambda r: r.storage.name):
        if r.volume.backend != "zfs":
            continue
        options, ranges = r.export_config()
        entry: dict[str, Any] = {"name": r.storage.name, "owner": r.storage.owner,
                                 "group": r.storage.group, "path": r.host_path,
                                 "export_options": options, "export_ranges": ranges}
        kind = "zfs" if r.is_managed_zfs else "nfs"
        if kind == "zfs":
            entry["quota"] = r.quota
            entry["permissions"] = PERMISSIONS[r.storage.category]
        out[kind][EXPORT_CATEGORY[r.storage.category]].setdefault(r.host, []).append(entry)
    return {kind: {cat: dict(sorted(hosts.items())) for cat, hosts in cats.items()}
            for kind, cats in out.items()}
