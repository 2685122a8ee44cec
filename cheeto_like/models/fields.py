"""Validated scalar types shared by documents, operation arguments and config.

Each type is an ``Annotated`` pydantic type whose validator raises ``ValueError`` with a
sentence an admin can act on; ``cheeto_like.validation`` turns those into one line.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
import uuid
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from ..constants import GROUP_TYPES, ID_MAX, NAME_MAX_LEN, SHELLS, USER_TYPES
from ..text import has_control

POSIX_NAME_RE = re.compile(r"^[a-z_][a-z0-9_.-]*$")
SHORTHAND_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
SITE_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
ALIAS_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,252}$")
FQDN_RE = re.compile(r"^(?=.{1,253}$)([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)"
                     r"(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$")
EMAIL_RE = re.compile(r"^[A-Za-z0-9._%+'-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}$")
# Anchored on both ends (the reference's unanchored pattern let "10X"-like junk through).
QUOTA_RE = re.compile(r"^(?P<num>[0-9]{1,16}(\.[0-9]{1,6})?|\.[0-9]{1,6})(?P<unit>[MGTP])$",
                      re.IGNORECASE)
QUOTA_UNIT_MB = {"M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}
# 1 EiB: far beyond any file server, small enough that sums stay exact in Decimal.
QUOTA_MAX_MB = 1024**4
EMAIL_MAX_LEN = 254  # RFC 5321: a forward-path holds at most 256 octets including <>
INT64_MAX = 2**63 - 1  # the store (BSON) and sacctmgr both stop at signed 64 bits
PATH_MAX = 4096
# Paths, hosts and options end up in /etc/exports, autofs maps and shell-run tools: a
# conservative set with no whitespace, quotes or shell metacharacters.
SAFE_PATH_RE = re.compile(r"^/[A-Za-z0-9._+@%=,:~/-]*$")
OPTION_RE = re.compile(r"^[A-Za-z0-9._+@%=,:/-]{1,255}$")


def new_id() -> str:
    """A fresh document id: UUID hex, because the embedded store mishandles ObjectIds."""
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


def _posix_name(value: str) -> str:
    if not value:
        raise ValueError("name must not be empty")
    if len(value) > NAME_MAX_LEN:
        raise ValueError(f"name {value!r} is longer than {NAME_MAX_LEN} characters")
    if not POSIX_NAME_RE.fullmatch(value):
        raise ValueError(f"name {value!r} is not a valid POSIX name (lowercase letters, digits,"
                         " '_', '.', '-'; must start with a letter or '_')")
    return value


def _site_name(value: str) -> str:
    if not SITE_NAME_RE.fullmatch(value):
        raise ValueError(f"site name {value!r} must be lowercase letters, digits and '-',"
                         " starting with a letter (at most 63 characters)")
    return value


def _site_alias(value: str) -> str:
    value = value.lower()
    if not ALIAS_RE.fullmatch(value):
        raise ValueError(f"site alias {value!r} must be letters, digits, '.', '_' or '-'")
    return value


def _fqdn(value: str) -> str:
    if not FQDN_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid host name")
    return value.lower()


def _unix_id(value: int) -> int:
    if isinstance(value, bool):
        raise ValueError("id must be an integer")
    if not 0 <= value <= ID_MAX:
        raise ValueError(f"id {value} is outside 0..{ID_MAX}")
    return value


def _email(value: str) -> str:
    if len(value) > EMAIL_MAX_LEN:
        raise ValueError(f"e-mail address is longer than {EMAIL_MAX_LEN} characters")
    if not EMAIL_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid e-mail address")
    return value


def _shell(value: str) -> str:
    if value not in SHELLS:
        raise ValueError(f"shell {value!r} is not allowed (choose from {', '.join(SHELLS)})")
    return value


def _choice(kind: str, allowed: tuple[str, ...]):
    def check(value: str) -> str:
        if value not in allowed:
            raise ValueError(f"{kind} {value!r} is not one of {', '.join(allowed)}")
        return value
    return check


def _shorthand(value: str) -> str:
    if not SHORTHAND_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid access or status name")
    return value


def _quota(value: str) -> str:
    parse_quota_mb(value)
    return value.upper()


def parse_quota_mb(value: str) -> Decimal:
    """Size string such as ``1.5T`` -> exact megabytes (binary units, like the reference).

    At most 1024P and six decimals, so every sum and rendering stays exact."""
    m = QUOTA_RE.fullmatch(value.strip()) if isinstance(value, str) else None
    if m is None:
        raise ValueError(f"invalid quota {value!r}: expected a size like 500G, 1.5T or 10M")
    try:
        num = Decimal(m.group("num"))
    except InvalidOperation as exc:  # pragma: no cover - the regex already guarantees a number
        raise ValueError(f"invalid quota {value!r}") from exc
    total = num * QUOTA_UNIT_MB[m.group("unit").upper()]
    if total > QUOTA_MAX_MB:
        raise ValueError(f"quota {value!r} is larger than the maximum, 1024P")
    return total


def _single_line(value: str) -> str:
    if has_control(value):
        raise ValueError("must not contain control characters (newlines, tabs, escapes)")
    return value


def _absolute_path(value: str) -> str:
    """An absolute, normalised path from a safe character set (it reaches /etc/exports,
    autofs maps and LDAP): no ``.``/``..`` segments and no ``//``. A trailing ``/`` (an
    admin's habit for directories) is dropped, the one normalisation done silently."""
    if len(value) > 1:
        value = value.removesuffix("/")
    if len(value) > PATH_MAX:
        raise ValueError(f"path is longer than {PATH_MAX} characters")
    if not value.startswith("/"):
        raise ValueError(f"path {value!r} must be absolute")
    if not SAFE_PATH_RE.fullmatch(value):
        raise ValueError(f"path {value!r} may only contain letters, digits and . _ + @ % = , :"
                         " ~ - /")
    if {".", ".."} & set(value.split("/")):
        raise ValueError(f"path {value!r} must not contain '.' or '..' segments")
    if "//" in value or (posixpath.normpath(value) != value and value != "/"):
        raise ValueError(f"path {value!r} is not normalised (write "
                         f"{re.sub('/+', '/', posixpath.normpath(value))!r})")
    return value


def _host(value: str) -> str:
    """A host name or an IP address, as file servers are named in exports and mounts."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        pass
    else:  # a scoped IPv6 address (fe80::1%eth0) carries free text after the '%'
        if "%" not in value:
            return str(address)
    if not FQDN_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid host name or IP address")
    return value.lower()


def _option(value: str) -> str:
    if not OPTION_RE.fullmatch(value):
        raise ValueError(f"option {value!r} may only contain letters, digits and"
                         " . _ + @ % = , : / - (at most 255 characters)")
    return value


def _options_or_empty(value: str) -> str:
    return value if value == "" else _option(value)


def _cidr(value: str) -> str:
    if "%" in value:  # a scoped IPv6 network carries free text after the '%'
        raise ValueError(f"{value!r} is not a network in CIDR notation (like 10.0.0.0/8)")
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as exc:
        if "host bits" in str(exc):
            raise ValueError(f"{value!r} has host bits set (the network is "
                             f"{ipaddress.ip_network(value, strict=False)})") from None
        raise ValueError(f"{value!r} is not a network in CIDR notation (like 10.0.0.0/8)"
                         ) from None


def _strip(value: object) -> object:
    return value.strip() if isinstance(value, str) else value


PosixName = Annotated[str, BeforeValidator(_strip), AfterValidator(_posix_name)]
SiteName = Annotated[str, BeforeValidator(_strip), AfterValidator(_site_name)]
SiteAlias = Annotated[str, BeforeValidator(_strip), AfterValidator(_site_alias)]
Fqdn = Annotated[str, BeforeValidator(_strip), AfterValidator(_fqdn)]
UnixId = Annotated[int, AfterValidator(_unix_id)]
Email = Annotated[str, BeforeValidator(_strip), AfterValidator(_email)]
Shell = Annotated[str, AfterValidator(_shell)]
UserType = Annotated[str, AfterValidator(_choice("user type", USER_TYPES))]
GroupType = Annotated[str, AfterValidator(_choice("group type", GROUP_TYPES))]
# Access and status shorthands are valid when their group exists (checked by the ops);
# the type only pins their shape.
Shorthand = Annotated[str, BeforeValidator(_strip), AfterValidator(_shorthand)]
Quota = Annotated[str, BeforeValidator(_strip), AfterValidator(_quota)]
# Stored free text (documents): not blank. Text an admin types (Args) is NonEmptyStr: also
# one line without control characters; stored rows stay loadable and are shown escaped.
NonBlankStr = Annotated[str, BeforeValidator(_strip),
                        AfterValidator(lambda v: v if v else _raise("value must not be empty"))]
NonEmptyStr = Annotated[NonBlankStr, AfterValidator(_single_line)]
# Free text (comments): anything printable on one line, possibly empty.
FreeText = Annotated[str, BeforeValidator(_strip), AfterValidator(_single_line)]
AbsolutePath = Annotated[str, BeforeValidator(_strip), AfterValidator(_absolute_path)]
HostName = Annotated[str, BeforeValidator(_strip), AfterValidator(_host)]
MountOption = Annotated[str, BeforeValidator(_strip), AfterValidator(_option)]
# A comma-separated option string such as NFS export options; '' means none.
OptionString = Annotated[str, BeforeValidator(_strip), AfterValidator(_options_or_empty)]
Cidr = Annotated[str, BeforeValidator(_strip), AfterValidator(_cidr)]


def _raise(msg: str):
    raise ValueError(msg)
