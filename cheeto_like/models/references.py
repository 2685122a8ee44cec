"""Every field that refers to a user or a group by name.

References are natural keys (DESIGN §5), so renaming a user or a group rewrites each of
these fields in the rename's transaction. A test checks that no name-typed field is
missing from these lists.
"""

from __future__ import annotations

from dataclasses import dataclass

from beanie import Document

from .audit import AuditRun
from .auth import RevokedToken, RoleGrant
from .group import GroupMembership
from .hippo import HippoEvent
from .history import History
from .quota import Quota, QuotaAdjustment
from .quota_totals import QuotaTotal
from .request import Request
from .site import Site
from .slurm import SlurmAccount, SlurmAssociation
from .storage import Storage
from .sync import SyncRun
from .usage import UsageRecord
from .user import SshKey, UserSiteInfo


@dataclass(frozen=True)
class Reference:
    model: type[Document]
    field: str  # dotted path
    is_list: bool = False

    @property
    def label(self) -> str:
        return f"{self.model.get_settings().name}.{self.field}"


USER_REFERENCES: tuple[Reference, ...] = (
    Reference(SshKey, "user"),
    Reference(UserSiteInfo, "user"),
    Reference(GroupMembership, "user"),
    Reference(SlurmAccount, "coordinators", is_list=True),
    Reference(Storage, "owner"),
    Reference(HippoEvent, "target_user"),
    Reference(History, "author"),
    Reference(SyncRun, "author"),
    Reference(AuditRun, "author"),
    Reference(UsageRecord, "user"),
    Reference(Quota, "user"),
    Reference(QuotaAdjustment, "user"),
    Reference(QuotaTotal, "user"),
    Reference(RoleGrant, "user"),
    Reference(RevokedToken, "user"),
    Reference(Request, "user"),
    Reference(Request, "requester"),
)

GROUP_REFERENCES: tuple[Reference, ...] = (
    Reference(GroupMembership, "group"),
    Reference(SlurmAccount, "group"),
    Reference(SlurmAssociation, "account"),
    Reference(Site, "group.sticky", is_list=True),
    Reference(Site, "slurm.sticky", is_list=True),
    Reference(Site, "slurm.default_account"),
    Reference(Storage, "group"),
    Reference(HippoEvent, "target_groups", is_list=True),
    Reference(UsageRecord, "account"),
    Reference(Quota, "account"),
    Reference(QuotaAdjustment, "account"),
    Reference(QuotaTotal, "account"),
    Reference(RoleGrant, "accounts", is_list=True),
    Reference(Request, "group"),
)
