"""The LDAP reconciler tests' lab: one test's corner of the session's slapd (its own user
base and site names), a fixture-free population of users, groups and mounts, and an
LDIF reader for the independent ``ldapsearch`` the assertions read through."""

from __future__ import annotations

import base64
import itertools
import struct
from datetime import UTC, datetime
from typing import Any

from cheeto_like.config import LDAPConfig
from cheeto_like.models import AutomountMap, Storage, StorageVolume
from cheeto_like.operations.group_membership import AddGroupMember
from cheeto_like.operations.site import AddStickyGroup
from cheeto_like.operations.user import SetUserStatus
from cheeto_like.sync.ldap import run as sync
from tests.factories import (
    AUTHOR,
    ED25519_KEY,
    ED25519_KEY_2,
    make_group,
    make_site,
    make_user,
)
from tests.services.ldap import Slapd

_n = itertools.count(1)


def ed25519_key(seed: int, comment: str) -> str:
    """A well-formed ssh-ed25519 public key line (32 bytes derived from ``seed``)."""
    kind = b"ssh-ed25519"
    blob = struct.pack(">I", len(kind)) + kind + struct.pack(">I", 32) + seed.to_bytes(32, "big")
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}"


EVERYTHING = frozenset({"users", "groups", "automounts", "prune"})


def parse_ldif(text: str) -> dict[str, dict[str, list[str]]]:
    """``ldapsearch -LLL -o ldif-wrap=no`` output -> {dn: {attr: [values]}}."""
    entries: dict[str, dict[str, list[str]]] = {}
    for block in text.strip().split("\n\n"):
        dn = None
        attrs: dict[str, list[str]] = {}
        for line in block.splitlines():
            if not line or line.startswith("#"):
                continue
            name, _, rest = line.partition(":")
            if rest.startswith(":"):
                value = base64.b64decode(rest[1:].strip()).decode()
            else:
                value = rest[1:] if rest.startswith(" ") else rest
            if name == "dn":
                dn = value
            else:
                attrs.setdefault(name, []).append(value)
        if dn is not None:
            entries[dn] = attrs
    return entries


class Lab:
    """One test's corner of the directory: its own user base and site names."""

    def __init__(self, store: Any, server: Slapd, *, sites: int = 1, **config: Any) -> None:
        k = next(_n)
        self.store, self.slapd, self.k = store, server, k
        self.sites = [f"ls{k}x{i}" for i in range(sites)]
        self.site = self.sites[0]
        self.users_dn = f"ou=people{k},{server.suffix}"
        fields: dict[str, Any] = dict(
            servers=[server.uri], searchbase=server.suffix, user_base=self.users_dn,
            login_dn=server.root_dn, password=server.root_password, use_tls=True,
            ca_file=server.ca_file, master_options={"auto.group": "--ghost"})
        fields.update(config)
        self.config = LDAPConfig(**fields)

    def name(self, base: str) -> str:
        return f"{base}{self.k}"

    def site_dn(self, site: str | None = None) -> str:
        return f"ou={site or self.site},{self.slapd.suffix}"

    def user_dn(self, user: str) -> str:
        return f"uid={user},{self.users_dn}"

    def group_dn(self, group: str, site: str | None = None) -> str:
        return f"cn={group},ou=groups,{self.site_dn(site)}"

    def map_dn(self, name: str, site: str | None = None) -> str:
        return f"automountMapName={name},ou=automount,{self.site_dn(site)}"

    async def make_sites(self) -> None:
        for site in self.sites:
            await make_site(self.store, site)

    async def sync(self, site: str | None = None, *, dry_run: bool = False,
                   max_deletions: int | None = 50, concurrency: int = 1,
                   **scope: Any) -> sync.Report:
        scope.setdefault("kinds", EVERYTHING)
        return await sync.run(self.store, self.config, site or self.site,
                              scope=sync.scope_for(self.config, **scope), dry_run=dry_run,
                              max_deletions=max_deletions, concurrency=concurrency,
                              author=AUTHOR)

    def search(self, base: str, filter: str = "(objectClass=*)", *attrs: str,
               scope: str = "sub") -> dict[str, dict[str, list[str]]]:
        try:
            return parse_ldif(self.slapd.ldapsearch(base, filter, *attrs, scope=scope))
        except Exception as exc:  # a missing base
            if "No such object" in str(exc) or "(32)" in str(exc):
                return {}
            raise

    def entry(self, dn: str) -> dict[str, list[str]] | None:
        found = self.search(dn, "(objectClass=*)", "*", "+", scope="base")
        return next(iter(found.values()), None)

    def members(self, group: str, site: str | None = None) -> list[str]:
        found = self.entry(self.group_dn(group, site))
        assert found is not None, f"group {group} missing"
        return sorted(found.get("memberUid", []))

    def dump(self, *sites: str) -> str:
        """Every entry (with operational attributes: entryCSN, modifyTimestamp) of the
        user base and the sites."""
        parts = [self.slapd.ldapsearch(self.users_dn, "(objectClass=*)", "*", "+")
                 if self.entry(self.users_dn) else ""]
        for site in sites or self.sites:
            if self.entry(self.site_dn(site)):
                parts.append(self.slapd.ldapsearch(self.site_dn(site), "(objectClass=*)",
                                                   "*", "+"))
        return "\n".join(parts)

    def ldapadd(self, ldif: str) -> None:
        self.slapd.ldapadd(ldif)

    def ldapdelete(self, dn: str) -> None:
        self.slapd.ldap("ldapdelete", dn)

    def ldapmodify(self, ldif: str) -> None:
        self.slapd.ldapmodify(ldif)


async def add_mount(lab: Lab, name: str, category: str, owner: str, group: str, map_name: str,
                    prefix: str, *, site: str | None = None, mount_name: str = "",
                    options: tuple[str, ...] = ("rw", "nosuid"), host: str = "nfs1") -> Storage:
    """An automount map (if new), a volume and a storage, inserted directly."""
    site = site or lab.site
    if await AutomountMap.find_one({"name": map_name, "site": site}) is None:
        await AutomountMap(name=map_name, site=site, prefix=prefix,
                           options=list(options)).insert()
    volume = StorageVolume(name=f"vol-{category}-{name}", site=site, backend="zfs", host=host,
                           host_path=f"/export/{category}/{name}")
    await volume.insert()
    storage = Storage(name=name, site=site, category=category, owner=owner, group=group,
                      volume=volume.name, automount_map=map_name, mount_name=mount_name)
    await storage.insert()
    return storage


async def populate(lab: Lab) -> dict[str, str]:
    """alice (keys, password, expiry, a comma in her name), bob (inactive at the site),
    a lab group, a sticky group, a system user with an admin's root keys, and storages
    in auto.home, auto.group and auto.share (a key with a plus sign)."""
    store, site = lab.store, lab.site
    names = {k: lab.name(k) for k in ("alice", "bob", "root", "svc", "lab", "all")}
    await make_user(store, names["alice"], site=site, fullname="Doe, Alice Q",
                    access=["login-ssh", "slurm"], ssh_key=ED25519_KEY, password="pw",
                    expires_at=datetime(2030, 1, 1, tzinfo=UTC))
    await make_user(store, names["bob"], site=site, access=["login-ssh"])
    await SetUserStatus.run(store, AUTHOR, name=names["bob"], status="inactive",
                            reason="t", site=site)
    await make_user(store, names["root"], site=site, type="admin",
                    access=["login-ssh", "root-ssh"], ssh_key=ED25519_KEY_2)
    await make_user(store, names["svc"], site=site, type="system")
    await make_group(store, names["lab"])
    await make_group(store, names["all"])
    for user in ("alice", "bob"):
        await AddGroupMember.run(store, AUTHOR, group=names["lab"], user=names[user],
                                 site=site)
    await AddStickyGroup.run(store, AUTHOR, site=site, group=names["all"])
    await add_mount(lab, names["alice"], "home", names["alice"], names["alice"], "auto.home",
                    "/home")
    await add_mount(lab, names["lab"], "group", names["alice"], names["lab"], "auto.group",
                    "/group", options=())
    await add_mount(lab, f"data{lab.k}", "share", names["alice"], names["lab"], "auto.share",
                    "/share", mount_name=f"data+raw{lab.k}", options=("ro",))
    return names
