"""Beanie documents. ``ALL_MODELS`` is what the store registers (and indexes) at start-up."""

from __future__ import annotations

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

ALL_MODELS: tuple[type[Document], ...] = (
    Site, User, SshKey, Group, UserSiteInfo, GroupMembership,
    SlurmAccount, SlurmAllocation, SlurmPartition, SlurmQOS, SlurmAssociation,
    AutomountMap, StorageVolume, StaticMount, Storage,
    History, HippoEvent, SyncRun, SyncRunItem, SyncStep, SyncLease, NameClaim,
    UsageRecord, UsageCursor, GpuFactor, UsageRate, Quota, QuotaDefaults, QuotaAdjustment,
    QuotaNotice, QuotaTotal, QuotaTotalsMark,
    RoleGrant, ApiKey, RevokedToken, Request, AuditRun, AuditFinding,
    JobSnapshot, SnapshotJob,
)

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
