"""The LDAP side of a site, in one normalised shape for desired and actual.

Every entry the reconciler manages is an ``EntryState``: its DN, its object classes and
the managed attributes as sets of strings, so that equal means equal (numbers as decimal
text, values unordered). Attributes the reconciler does not manage are never read into
the state, so hand-added attributes are left alone.

DN layout (``Layout``), all values RFC 4514-escaped:
- users (global):      ``uid=<name>,<user_base>``
- a site:              ``ou=<site>,<site_base>``
- groups of a site:    ``cn=<group>,ou=<groups_ou>,ou=<site>,…``
- automount of a site: ``ou=<automount_ou>,ou=<site>,…``; maps
  ``automountMapName=<map>,ou=<automount_ou>,…``; keys ``automountKey=<key>,<map dn>``
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from ...adapters.ldap import normalize_dn, parse_dn, rdn
from ...config import LDAPConfig

USER_CLASSES = ("top", "inetOrgPerson", "posixAccount", "ldapPublicKey", "shadowAccount")
GROUP_CLASSES = ("top", "groupOfMembers", "posixGroup")
OU_CLASSES = ("top", "organizationalUnit")
MAP_CLASSES = ("top", "automountMap")
KEY_CLASSES = ("top", "automount")
# A structural class cannot be added to an existing entry; one that lacks it is recreated.
STRUCTURAL = {"user": "inetOrgPerson", "group": "groupOfMembers", "ou": "organizationalUnit",
              "map": "automountMap", "automount": "automount"}

USER_ATTRS = ("uid", "cn", "displayName", "sn", "mail", "uidNumber", "gidNumber",
              "homeDirectory", "loginShell", "sshPublicKey", "userPassword", "shadowExpire")
GROUP_ATTRS = ("cn", "gidNumber", "memberUid", "member")
AUTOMOUNT_ATTRS = ("automountKey", "automountInformation")
MAP_ATTRS = ("automountMapName",)
OU_ATTRS = ("ou",)
# Attributes compared and changed value by value (large sets: one member joining a group
# of 10,000 is a one-value add, not a rewrite); the rest are replaced whole.
INCREMENTAL_ATTRS = frozenset({"memberUid", "member"})
# Attributes whose values are DNs, compared in normalised form.
DN_ATTRS = frozenset({"member"})

Kind = Literal["user", "group", "automount", "map", "ou"]
RecordKey = tuple[str, str]  # ("user", name) | ("group", name) | ("storage", "<map>/<key>")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def attr_names(kind: Kind) -> tuple[str, ...]:
    return {"user": USER_ATTRS, "group": GROUP_ATTRS, "automount": AUTOMOUNT_ATTRS,
            "map": MAP_ATTRS, "ou": OU_ATTRS}[kind]


def compare_key(attr: str, value: str) -> str:
    """How two values of ``attr`` are compared (DNs normalised, the rest exactly)."""
    if attr in DN_ATTRS:
        try:
            return normalize_dn(value)
        except ValueError:
            return value
    return value


@dataclass(frozen=True)
class EntryState:
    """One entry: DN, object classes (as written) and managed attributes -> values."""

    kind: Kind
    dn: str
    classes: tuple[str, ...]
    attrs: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def get(self, attr: str) -> frozenset[str]:
        return self.attrs.get(attr, frozenset())

    def first(self, attr: str) -> str | None:
        values = sorted(self.get(attr))
        return values[0] if values else None

    @property
    def class_set(self) -> frozenset[str]:
        return frozenset(c.lower() for c in self.classes)

    def as_ldap(self) -> dict[str, list[str]]:
        """Attributes for an add request: objectClass first, empty attributes left out."""
        out: dict[str, list[str]] = {"objectClass": list(self.classes)}
        for name in attr_names(self.kind):
            values = self.get(name)
            if values:
                out[name] = sorted(values)
        return out

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"dn": self.dn, "objectClass": list(self.classes)}
        for name in attr_names(self.kind):
            values = sorted(self.get(name))
            if name == "userPassword" and values:
                values = ["(set)"]
            if values:
                data[name] = values[0] if len(values) == 1 and name not in INCREMENTAL_ATTRS \
                    else values
        return data


def entry(kind: Kind, dn: str, classes: Iterable[str],
          attrs: Mapping[str, Iterable[str | int | None]]) -> EntryState:
    """Build an entry, dropping empty and None values and normalising to strings."""
    clean: dict[str, frozenset[str]] = {}
    for name, values in attrs.items():
        kept = frozenset(str(v) for v in values if v is not None and str(v) != "")
        if kept:
            clean[name] = kept
    return EntryState(kind, dn, tuple(classes), clean)


# -- layout ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where a site's entries live; every DN the reconciler writes comes from here."""

    site: str
    users: str
    site_dn: str
    groups: str
    automount: str
    master_map: str

    @classmethod
    def for_site(cls, config: LDAPConfig, site: str) -> Layout:
        site_dn = f"{rdn('ou', site)},{config.sites_dn}"
        return cls(site=site, users=config.users_dn, site_dn=site_dn,
                   groups=f"{rdn('ou', config.groups_ou)},{site_dn}",
                   automount=f"{rdn('ou', config.automount_ou)},{site_dn}",
                   master_map=config.master_map)

    def user_dn(self, name: str) -> str:
        return f"{rdn('uid', name)},{self.users}"

    def group_dn(self, name: str) -> str:
        return f"{rdn('cn', name)},{self.groups}"

    def map_dn(self, name: str) -> str:
        return f"{rdn('automountMapName', name)},{self.automount}"

    def key_dn(self, map_name: str, key: str) -> str:
        return f"{rdn('automountKey', key)},{self.map_dn(map_name)}"

    def containers(self, kinds: Iterable[str]) -> list[str]:
        """The OUs the given kinds need, parents first (the user base only when it is an
        ``ou=``; anything else must exist already)."""
        kinds = set(kinds)
        found: list[str] = []
        if "users" in kinds and parse_dn(self.users)[0][0][0].lower() == "ou":
            found.append(self.users)
        if kinds & {"groups", "automounts"}:
            found.append(self.site_dn)
        if "groups" in kinds:
            found.append(self.groups)
        if "automounts" in kinds:
            found.append(self.automount)
        return found


def ou_entry(dn: str) -> EntryState:
    return entry("ou", dn, OU_CLASSES, {"ou": [parse_dn(dn)[0][0][1]]})


def map_entry(layout: Layout, name: str) -> EntryState:
    return entry("map", layout.map_dn(name), MAP_CLASSES, {"automountMapName": [name]})


# -- value rules -----------------------------------------------------------------------------


def crypt_value(password_hash: str) -> str:
    """``userPassword``: a crypt(3) hash (``$y$…``) gets the ``{CRYPT}`` scheme; a value
    that already names a scheme (``{SSHA}…``) passes unchanged."""
    return password_hash if password_hash.startswith("{") else f"{{CRYPT}}{password_hash}"


def shadow_expire(when: datetime | None) -> int | None:
    """Whole days since 1970-01-01 (UTC; a naive datetime is taken as UTC)."""
    if when is None:
        return None
    aware = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    return (aware - EPOCH).days


def automount_info(host: str, path: str, options: Iterable[str], host_suffix: str) -> str:
    """``[-opt1,opt2 ]<host><suffix>:<path>``."""
    opts = ",".join(options)
    return f"{'-' + opts + ' ' if opts else ''}{host}{host_suffix}:{path}"
