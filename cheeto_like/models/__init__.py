"""Beanie documents. ``ALL_MODELS`` is what the store registers (and indexes) at start-up.

The package imports its modules lazily (PEP 562 ``__getattr__``): ``from ..models import
User`` imports ``models/user.py`` only, so a command that reads users does not pay for
building the other ~35 document classes (~35-50 ms of a CLI start-up, issue 31).
``ALL_MODELS`` imports every module the first time it is asked for. A new document goes
into ``_MODULE_OF`` (name -> module) and, if the store binds it, ``_ALL_MODEL_NAMES``.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from beanie import Document

    from .audit import AuditFinding, AuditRun
    from .auth import ApiKey, RevokedToken, RoleGrant
    from .group import Group, GroupMembership
    from .hippo import HippoEvent
    from .history import History
    from .job_snapshot import JobSnapshot, SnapshotJob
    from .names import NameClaim
    from .quota import Quota, QuotaAdjustment, QuotaDefaults, QuotaNotice
    from .quota_totals import QuotaTotal, QuotaTotalsMark
    from .request import Request
    from .site import Site
    from .slurm import (
        SlurmAccount,
        SlurmAllocation,
        SlurmAssociation,
        SlurmPartition,
        SlurmQOS,
    )
    from .storage import AutomountMap, StaticMount, Storage, StorageVolume
    from .sync import SyncLease, SyncRun, SyncRunItem, SyncStep
    from .usage import GpuFactor, UsageCursor, UsageRate, UsageRecord
    from .user import SshKey, User, UserSiteInfo

    ALL_MODELS: tuple[type[Document], ...]

# Every document the store binds, in binding order.
_ALL_MODEL_NAMES: tuple[str, ...] = (
    "Site", "User", "SshKey", "Group", "UserSiteInfo", "GroupMembership",
    "SlurmAccount", "SlurmAllocation", "SlurmPartition", "SlurmQOS", "SlurmAssociation",
    "AutomountMap", "StorageVolume", "StaticMount", "Storage",
    "History", "HippoEvent", "SyncRun", "SyncRunItem", "SyncStep", "SyncLease", "NameClaim",
    "UsageRecord", "UsageCursor", "GpuFactor", "UsageRate", "Quota", "QuotaDefaults",
    "QuotaAdjustment", "QuotaNotice", "QuotaTotal", "QuotaTotalsMark",
    "RoleGrant", "ApiKey", "RevokedToken", "Request", "AuditRun", "AuditFinding",
    "JobSnapshot", "SnapshotJob",
)

# name -> the module (under this package) that defines it.
_MODULE_OF: dict[str, str] = {
    "AuditFinding": "audit", "AuditRun": "audit",
    "ApiKey": "auth", "RevokedToken": "auth", "RoleGrant": "auth",
    "Group": "group", "GroupMembership": "group",
    "HippoEvent": "hippo",
    "History": "history",
    "JobSnapshot": "job_snapshot", "SnapshotJob": "job_snapshot",
    "NameClaim": "names",
    "Quota": "quota", "QuotaAdjustment": "quota", "QuotaDefaults": "quota",
    "QuotaNotice": "quota",
    "QuotaTotal": "quota_totals", "QuotaTotalsMark": "quota_totals",
    "Request": "request",
    "Site": "site",
    "SlurmAccount": "slurm", "SlurmAllocation": "slurm", "SlurmAssociation": "slurm",
    "SlurmPartition": "slurm", "SlurmQOS": "slurm",
    "AutomountMap": "storage", "StaticMount": "storage", "Storage": "storage",
    "StorageVolume": "storage",
    "SyncLease": "sync", "SyncRun": "sync", "SyncRunItem": "sync", "SyncStep": "sync",
    "GpuFactor": "usage", "UsageCursor": "usage", "UsageRate": "usage",
    "UsageRecord": "usage",
    "SshKey": "user", "User": "user", "UserSiteInfo": "user",
}


def _load(name: str) -> Any:
    module = importlib.import_module(f".{_MODULE_OF[name]}", __name__)
    value = getattr(module, name)
    globals()[name] = value  # the next lookup is a plain module attribute
    return value


def __getattr__(name: str) -> Any:
    if name == "ALL_MODELS":
        models = tuple(_load(n) for n in _ALL_MODEL_NAMES)
        globals()["ALL_MODELS"] = models
        return models
    if name in _MODULE_OF:
        return _load(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


def loaded_models() -> list[type[Document]]:
    """The documents of ``ALL_MODELS`` whose modules are imported already, in binding
    order: what a read-only command can reach (``Store.bind(only_loaded=True)``)."""
    return [_load(name) for name in _ALL_MODEL_NAMES
            if f"{__name__}.{_MODULE_OF[name]}" in sys.modules]


__all__ = [
    "ALL_MODELS",
    "ApiKey",
    "AuditFinding",
    "AuditRun",
    "AutomountMap",
    "GpuFactor",
    "Group",
    "GroupMembership",
    "HippoEvent",
    "History",
    "JobSnapshot",
    "NameClaim",
    "Quota",
    "QuotaAdjustment",
    "QuotaDefaults",
    "QuotaNotice",
    "QuotaTotal",
    "QuotaTotalsMark",
    "Request",
    "RevokedToken",
    "RoleGrant",
    "Site",
    "SlurmAccount",
    "SlurmAllocation",
    "SlurmAssociation",
    "SlurmPartition",
    "SlurmQOS",
    "SnapshotJob",
    "SshKey",
    "StaticMount",
    "Storage",
    "StorageVolume",
    "SyncLease",
    "SyncRun",
    "SyncRunItem",
    "SyncStep",
    "UsageCursor",
    "UsageRate",
    "UsageRecord",
    "User",
    "UserSiteInfo",
]
