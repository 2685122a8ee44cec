"""The ``ldap`` section: the directory the LDAP reconciler writes."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from .base import Block, UserPath


class LDAPConfig(Block):
    """The directory the LDAP reconciler writes (``cheeto ng ldap …``).

    Users are global entries under ``user_base``; each site gets ``ou=<site>`` under
    ``site_base`` with ``ou=<groups_ou>`` (posix groups) and ``ou=<automount_ou>`` (maps).
    ``servers`` are tried in order (failover); ``ldaps://`` URLs use TLS, ``ldap://`` ones
    StartTLS when ``use_tls`` is set, verified against ``ca_file``.
    """

    # ldap:// or ldaps:// server URLs, tried in order (failover)
    servers: list[str] = Field(min_length=1)
    searchbase: str = Field(min_length=1)  # the directory's base DN
    user_base: str | None = None  # default ou=users,<searchbase>
    site_base: str | None = None  # default <searchbase>
    # name of each site's ou holding its posix groups
    groups_ou: str = Field(default="groups", min_length=1)
    # name of each site's ou holding its automount maps
    automount_ou: str = Field(default="automount", min_length=1)
    login_dn: str | None = None  # DN to bind as (null: anonymous)
    password: SecretStr | None = None  # that DN's bind password
    request_timeout_seconds: float = Field(default=10.0, gt=0)  # seconds one LDAP request may take
    # seconds to wait for a connection to a server
    connect_timeout_seconds: float = Field(default=5.0, gt=0)
    # most connections the client pool opens at once (adds pipeline on connections of
    # their own within this bound, at least one besides the searches' one)
    pool_max_connections: int = Field(default=5, ge=1)
    # connections bound at start and kept open when idle
    pool_idle_connections: int = Field(default=2, ge=0)
    use_tls: bool = False  # StartTLS on ldap:// servers (ldaps:// always uses TLS)
    ca_file: UserPath | None = None  # CA bundle (PEM) to verify the servers' certificates
    # when the server's certificate must verify (OpenLDAP's TLS_REQCERT)
    cert_policy: Literal["demand", "allow", "try", "never"] = "demand"
    # automount: the master map's name, how a master entry names its map ({dn} or {name},
    # e.g. "ldap:{dn}"), extra master options per map (auto.group: --ghost), and the text
    # put after each NFS host (kept as the autofs variable the reference wrote).
    master_map: str = Field(default="auto.master", min_length=1)
    # how a master entry names its map: {dn} or {name}, e.g. ldap:{dn}
    master_entry_format: str = "{dn}"
    # extra master-map options per map, e.g. auto.group: --ghost
    master_options: dict[str, str] = Field(default_factory=dict)
    host_suffix: str = "${HOST_SUFFIX}"  # text put after each NFS host in automount entries
    # tag every sshPublicKey with environment="REMOTE_SSH_USER=<user>"
    ssh_user_prefix: bool = True
    # entries under user_base that a prune never deletes
    protected_users: list[str] = Field(default_factory=lambda: ["admin"])
    # removals (entries, memberUid/member/sshPublicKey values) per site in any 24 hours,
    # across runs (null: no budget); the per-run cap is --max-deletions
    max_deletions_per_day: int | None = Field(default=200, ge=0)
    lease_seconds: float = Field(default=60.0, ge=1)  # renewed while the run lives

    @field_validator("servers")
    @classmethod
    def _ldap_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if not re.match(r"^ldaps?://[^/\s]+/?$", url):
                raise ValueError(f"{url!r} is not an ldap:// or ldaps:// server URL")
        return value

    @field_validator("master_entry_format")
    @classmethod
    def _known_placeholders(cls, value: str) -> str:
        try:
            value.format(dn="", name="")
        except (KeyError, IndexError, ValueError):
            raise ValueError(f"master_entry_format {value!r} may only use {{dn}} and {{name}}"
                             ) from None
        return value

    @property
    def users_dn(self) -> str:
        return self.user_base or f"ou=users,{self.searchbase}"

    @property
    def sites_dn(self) -> str:
        return self.site_base or self.searchbase
