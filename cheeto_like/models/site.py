"""Sites (clusters) and their settings: sticky groups, sticky Slurm accounts, storage defaults.

Settings reference other records by name: Slurm accounts by their group name, storage
volumes, automount maps and static mounts by their name at this site.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from .base import BaseDoc, Embedded, unique
from .fields import Fqdn, PosixName, Quota, SiteAlias, SiteName


def _unique_names(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


SlurmMode = Literal["managed", "quota_only"]


class SiteSlurmSettings(Embedded):
    """``cluster_name`` is the Slurm ClusterName; None means "same as the site name".

    ``mode``: ``managed`` (the store's accounts, associations, QOS and limits are what
    the Slurm sync makes of the cluster) or ``quota_only`` (a slurm-quota site: the sync
    leaves accounts and associations as it finds them and only writes quota blocks on
    the users and accounts it finds there; sync/slurm/quota.py ``quota_only_state``)."""

    cluster_name: str | None = None
    sticky: list[PosixName] = Field(default_factory=list)
    default_account: PosixName | None = None
    mode: SlurmMode = "managed"

    @field_validator("sticky")
    @classmethod
    def _dedupe(cls, value: list[str]) -> list[str]:
        return _unique_names(value)

    @model_validator(mode="after")
    def _default_is_sticky(self) -> SiteSlurmSettings:
        if self.default_account is not None and self.default_account not in self.sticky:
            raise ValueError(f"default Slurm account {self.default_account!r} must be sticky")
        return self


class SiteGroupSettings(Embedded):
    sticky: list[PosixName] = Field(default_factory=list)

    @field_validator("sticky")
    @classmethod
    def _dedupe(cls, value: list[str]) -> list[str]:
        return _unique_names(value)


class SiteStorageSettings(Embedded):
    """Where new home directories go: a parent volume, a quota and one mount mechanism."""

    default_home_volume: str | None = None
    default_home_quota: Quota | None = None
    home_automount_map: str | None = None
    home_static_mount: str | None = None

    @model_validator(mode="after")
    def _one_mount_mechanism(self) -> SiteStorageSettings:
        if self.home_automount_map and self.home_static_mount:
            raise ValueError("a site's homes use an automount map or a static mount, not both")
        return self


class Site(BaseDoc):
    name: SiteName
    fqdn: Fqdn
    aliases: list[SiteAlias] = Field(default_factory=list)
    slurm: SiteSlurmSettings = Field(default_factory=SiteSlurmSettings)
    group: SiteGroupSettings = Field(default_factory=SiteGroupSettings)
    storage: SiteStorageSettings = Field(default_factory=SiteStorageSettings)

    @property
    def cluster_name(self) -> str:
        return self.slurm.cluster_name or self.name

    class Settings(BaseDoc.Settings):
        name = "sites"
        indexes = [unique("name")]
