"""Slurm operations: partitions, QOS and their allocations, accounts, associations.

Everything is per site and refers to its neighbours by name at the same site, so a QOS
or partition named at the wrong site is simply "does not exist at site X". Duplicates are
checked up front for a readable error; unique indexes back that up.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, model_validator
from pymongo.asynchronous.client_session import AsyncClientSession

from ..errors import AlreadyExists, Conflict, InvalidInput, NotFound
from ..models import (
    Site,
    SlurmAccount,
    SlurmAllocation,
    SlurmAssociation,
    SlurmPartition,
    SlurmQOS,
)
from ..models.base import select
from ..models.fields import FreeText, PosixName, SiteName
from ..models.site import SlurmMode
from ..models.slurm import QOSFlag, SlurmAccountLimits, SlurmName, SlurmTRES, WallTime
from ..queries.group import get_group
from ..queries.site import get_site
from ..queries.slurm import (
    find_account,
    find_association,
    find_partition,
    find_qos,
    get_account,
    get_partition,
    get_qos,
    list_associations,
)
from ..queries.user import get_user
from .base import OpArgs, Operation

Bucket = Literal["group_limits", "user_limits", "job_limits"]


def _tres_dict(tres: SlurmTRES | None) -> dict[str, Any] | None:
    return None if tres is None else tres.model_dump()


class _SiteScoped(OpArgs):
    site: SiteName


# -- partitions ---------------------------------------------------------------------------


class CreateSlurmPartition(Operation):
    op_name = "create_slurm_partition"

    class Args(_SiteScoped):
        name: SlurmName

    async def execute(self, session: AsyncClientSession) -> SlurmPartition:
        await get_site(self.args.site, session)
        if await find_partition(self.args.site, self.args.name, session):
            raise AlreadyExists(f"partition {self.args.name!r} already exists at site "
                                f"{self.args.site!r}")
        partition = SlurmPartition(name=self.args.name, site=self.args.site)
        await partition.insert(session=session)
        return partition

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "partition": self.args.name}


class RemoveSlurmPartition(Operation):
    """Refuses while associations use the partition, unless ``force`` (which deletes them)."""

    op_name = "remove_slurm_partition"

    class Args(_SiteScoped):
        name: SlurmName
        force: bool = False

    async def execute(self, session: AsyncClientSession) -> int:
        a = self.args
        partition = await get_partition(a.site, a.name, session)
        using = await list_associations(a.site, partition=a.name, session=session)
        if using and not a.force:
            raise Conflict(f"partition {a.name!r} is used by {len(using)} association(s) "
                           f"({', '.join(x.account for x in using)}); use --force to remove them")
        for assoc in using:
            await assoc.delete(session=session)
        await partition.delete(session=session)
        self.removed_associations = len(using)
        return len(using)

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "partition": self.args.name,
                "removed_associations": self.removed_associations}


# -- QOS and allocations ------------------------------------------------------------------


class CreateSlurmQOS(Operation):
    """A QOS, with one allocation per bucket for the limits given."""

    op_name = "create_slurm_qos"

    class Args(_SiteScoped):
        name: SlurmName
        group_limits: SlurmTRES | None = None
        user_limits: SlurmTRES | None = None
        job_limits: SlurmTRES | None = None
        priority: int = Field(default=0, ge=0, le=2**32 - 1)
        flags: list[QOSFlag] | None = None
        comment: FreeText = "initial allocation"

    async def execute(self, session: AsyncClientSession) -> SlurmQOS:
        a = self.args
        if a.name == "normal":
            raise InvalidInput("'normal' is Slurm's built-in QOS and is not managed here")
        await get_site(a.site, session)
        if await find_qos(a.site, a.name, session):
            raise AlreadyExists(f"QOS {a.name!r} already exists at site {a.site!r}")
        qos = SlurmQOS(name=a.name, site=a.site, priority=a.priority,
                       **({} if a.flags is None else {"flags": a.flags}))
        await qos.insert(session=session)
        for bucket in ("group_limits", "user_limits", "job_limits"):
            tres: SlurmTRES | None = getattr(a, bucket)
            if tres is not None:
                await SlurmAllocation(site=a.site, qos=a.name, bucket=bucket, tres=tres,
                                      comment=a.comment).insert(session=session)
        self.qos = qos
        return qos

    def describe(self) -> dict[str, Any]:
        a = self.args
        return {"site": a.site, "qos": a.name, "priority": a.priority, "flags": self.qos.flags,
                "group_limits": _tres_dict(a.group_limits),
                "user_limits": _tres_dict(a.user_limits), "job_limits": _tres_dict(a.job_limits)}


class EditSlurmQOS(Operation):
    op_name = "edit_slurm_qos"

    class Args(_SiteScoped):
        name: SlurmName
        priority: int | None = Field(default=None, ge=0, le=2**32 - 1)
        flags: list[QOSFlag] | None = None

    async def execute(self, session: AsyncClientSession) -> SlurmQOS:
        a = self.args
        qos = await get_qos(a.site, a.name, session)
        if a.priority is not None:
            qos.priority = a.priority
        if a.flags is not None:
            qos.flags = a.flags
        await qos.save(session=session)
        return qos

    def describe(self) -> dict[str, Any]:
        a = self.args
        return {"site": a.site, "qos": a.name, "priority": a.priority, "flags": a.flags}


class RemoveSlurmQOS(Operation):
    """Deletes the QOS and its allocations. Refuses while associations use it, unless
    ``force``, which takes it out of their QOS lists (deleting any left without a QOS)."""

    op_name = "remove_slurm_qos"

    class Args(_SiteScoped):
        name: SlurmName
        force: bool = False

    async def execute(self, session: AsyncClientSession) -> int:
        a = self.args
        qos = await get_qos(a.site, a.name, session)
        using = await list_associations(a.site, qos=a.name, session=session)
        if using and not a.force:
            raise Conflict(f"QOS {a.name!r} is used by {len(using)} association(s); use "
                           "--force to take it out of them")
        for assoc in using:
            await _drop_qos(assoc, a.name, session)
        result = await SlurmAllocation.find({"site": a.site, "qos": a.name},
                                            session=session).delete(session=session)
        self.removed_allocations = result.deleted_count if result else 0
        self.touched_associations = len(using)
        await qos.delete(session=session)
        return len(using)

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "qos": self.args.name,
                "removed_allocations": self.removed_allocations,
                "touched_associations": self.touched_associations}


async def _drop_qos(assoc: SlurmAssociation, qos: str, session: AsyncClientSession) -> bool:
    """Remove one QOS from an association; delete it when none is left. True if deleted."""
    remaining = [q for q in assoc.qos if q != qos]
    if not remaining:
        await assoc.delete(session=session)
        return True
    default = assoc.default_qos if assoc.default_qos in remaining else remaining[0]
    await SlurmAssociation.get_pymongo_collection().update_one(
        {"_id": assoc.id}, {"$set": {"qos": remaining, "default_qos": default}},
        session=session)
    return False


class AddQOSAllocation(Operation):
    op_name = "add_qos_allocation"

    class Args(_SiteScoped):
        qos: SlurmName
        bucket: Bucket
        tres: SlurmTRES
        comment: FreeText = ""
        expires_at: datetime | None = None
        provisioned_at: datetime | None = None

    async def execute(self, session: AsyncClientSession) -> SlurmAllocation:
        a = self.args
        await get_qos(a.site, a.qos, session)
        self.allocation = SlurmAllocation(site=a.site, qos=a.qos, bucket=a.bucket, tres=a.tres,
                                          comment=a.comment, expires_at=a.expires_at,
                                          provisioned_at=a.provisioned_at)
        await self.allocation.insert(session=session)
        return self.allocation

    def describe(self) -> dict[str, Any]:
        a = self.args
        return {"site": a.site, "qos": a.qos, "bucket": a.bucket, "tres": a.tres.model_dump(),
                "allocation": self.allocation.id, "expires_at": a.expires_at}


class EditSlurmAllocation(Operation):
    """Patch an allocation: fields left None stay; ``clear_*`` removes a time."""

    op_name = "edit_slurm_allocation"

    class Args(OpArgs):
        allocation_id: str
        tres: SlurmTRES | None = None
        comment: FreeText | None = None
        expires_at: datetime | None = None
        clear_expires_at: bool = False
        provisioned_at: datetime | None = None
        clear_provisioned_at: bool = False

        @model_validator(mode="after")
        def _set_or_clear(self) -> EditSlurmAllocation.Args:
            if self.expires_at is not None and self.clear_expires_at:
                raise ValueError("give an expiry or clear it, not both")
            if self.provisioned_at is not None and self.clear_provisioned_at:
                raise ValueError("give a provisioning time or clear it, not both")
            return self

    async def execute(self, session: AsyncClientSession) -> SlurmAllocation:
        from ..queries.slurm import find_allocation

        a = self.args
        alloc = await find_allocation(a.allocation_id, session)
        if a.tres is not None:
            alloc.tres = a.tres
        if a.comment is not None:
            alloc.comment = a.comment
        if a.expires_at is not None or a.clear_expires_at:
            alloc.expires_at = a.expires_at
        if a.provisioned_at is not None or a.clear_provisioned_at:
            alloc.provisioned_at = a.provisioned_at
        await alloc.save(session=session)
        self.allocation = alloc
        return alloc

    def describe(self) -> dict[str, Any]:
        a = self.args
        return {"allocation": a.allocation_id, "site": self.allocation.site,
                "qos": self.allocation.qos, "tres": _tres_dict(a.tres), "comment": a.comment,
                "expires_at": self.allocation.expires_at}


class RemoveSlurmAllocation(Operation):
    op_name = "remove_slurm_allocation"

    class Args(OpArgs):
        allocation_id: str

    async def execute(self, session: AsyncClientSession) -> SlurmAllocation:
        from ..queries.slurm import find_allocation

        self.allocation = await find_allocation(self.args.allocation_id, session)
        await self.allocation.delete(session=session)
        return self.allocation

    def describe(self) -> dict[str, Any]:
        return {"allocation": self.allocation.id, "site": self.allocation.site,
                "qos": self.allocation.qos, "bucket": self.allocation.bucket,
                "tres": self.allocation.tres.model_dump()}


# -- accounts -----------------------------------------------------------------------------


class _AccountArgs(_SiteScoped):
    group: PosixName
    max_user_jobs: int | None = Field(default=None, ge=-1)
    max_group_jobs: int | None = Field(default=None, ge=-1)
    max_submit_jobs: int | None = Field(default=None, ge=-1)
    max_job_length: WallTime | None = None
    coordinators: list[PosixName] | None = None

    def limit_changes(self) -> dict[str, Any]:
        names = ("max_user_jobs", "max_group_jobs", "max_submit_jobs", "max_job_length")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}


async def _check_coordinators(names: list[str], session: AsyncClientSession) -> list[str]:
    for name in names:
        await get_user(name, session)
    return sorted(set(names))


class CreateSlurmAccount(Operation):
    """The group's account at a site; unset limits are unlimited (-1)."""

    op_name = "create_slurm_account"

    class Args(_AccountArgs):
        pass

    async def execute(self, session: AsyncClientSession) -> SlurmAccount:
        a = self.args
        await get_site(a.site, session)
        group = await get_group(a.group, session)
        if group.is_special:
            raise InvalidInput(f"{group.name!r} is an {group.type} group and cannot own a "
                               "Slurm account")
        if await find_account(a.site, a.group, session):
            raise AlreadyExists(f"group {a.group!r} already has a Slurm account at site "
                                f"{a.site!r}")
        coordinators = await _check_coordinators(a.coordinators or [], session)
        self.account = SlurmAccount(group=a.group, site=a.site,
                                    limits=SlurmAccountLimits(**a.limit_changes()),
                                    coordinators=coordinators)
        await self.account.insert(session=session)
        return self.account

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "account": self.args.group,
                "limits": self.account.limits.model_dump(),
                "coordinators": self.account.coordinators}


class EditSlurmAccount(Operation):
    """Only given limits change; ``coordinators`` None leaves them, [] clears them."""

    op_name = "edit_slurm_account"

    class Args(_AccountArgs):
        pass

    async def execute(self, session: AsyncClientSession) -> SlurmAccount:
        a = self.args
        account = await get_account(a.site, a.group, session)
        account.limits = account.limits.model_copy(update=a.limit_changes())
        SlurmAccountLimits.model_validate(account.limits.model_dump())
        if a.coordinators is not None:
            account.coordinators = await _check_coordinators(a.coordinators, session)
        await account.save(session=session)
        self.account = account
        return account

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "account": self.args.group,
                "changes": self.args.limit_changes(), "coordinators": self.args.coordinators}


class RemoveSlurmAccount(Operation):
    """Refuses while associations or the site's sticky list use it, unless ``force``
    (which deletes the associations and takes it off the sticky list)."""

    op_name = "remove_slurm_account"

    class Args(_SiteScoped):
        group: PosixName
        force: bool = False

    async def execute(self, session: AsyncClientSession) -> int:
        a = self.args
        account = await get_account(a.site, a.group, session)
        site = await get_site(a.site, session)
        using = await list_associations(a.site, account=a.group, session=session)
        sticky = a.group in site.slurm.sticky
        if (using or sticky) and not a.force:
            parts = [f"{len(using)} association(s)"] if using else []
            parts += ["the site's sticky accounts"] if sticky else []
            raise Conflict(f"account {a.group!r} is used by {' and '.join(parts)}; use "
                           "--force to remove them too")
        for assoc in using:
            await assoc.delete(session=session)
        if sticky:
            site.slurm.sticky = [s for s in site.slurm.sticky if s != a.group]
            if site.slurm.default_account == a.group:
                site.slurm.default_account = None
            await site.save(session=session)
        await account.delete(session=session)
        self.removed_associations = len(using)
        return len(using)

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "account": self.args.group,
                "removed_associations": self.removed_associations}


# -- associations -------------------------------------------------------------------------


class CreateSlurmAssociation(Operation):
    """Let the group's account run in a partition under a QOS. A second QOS on the same
    (account, partition) joins the association's QOS list; ``default`` makes it the
    default QOS."""

    op_name = "create_slurm_association"

    class Args(_SiteScoped):
        group: PosixName
        partition: SlurmName
        qos: SlurmName
        default: bool = False

    async def execute(self, session: AsyncClientSession) -> SlurmAssociation:
        a = self.args
        await get_site(a.site, session)
        await get_group(a.group, session)
        await get_account(a.site, a.group, session)
        await get_partition(a.site, a.partition, session)
        await get_qos(a.site, a.qos, session)
        assoc = await find_association(a.site, a.group, a.partition, session)
        if assoc is None:
            assoc = SlurmAssociation(site=a.site, account=a.group, partition=a.partition,
                                     qos=[a.qos], default_qos=a.qos)
            await assoc.insert(session=session)
        elif a.qos in assoc.qos:
            raise AlreadyExists(f"account {a.group!r} already has QOS {a.qos!r} in partition "
                                f"{a.partition!r} at site {a.site!r}")
        else:
            assoc.qos = [*assoc.qos, a.qos]
            if a.default:
                assoc.default_qos = a.qos
            await assoc.save(session=session)
        self.association = assoc
        return assoc

    def describe(self) -> dict[str, Any]:
        a = self.args
        return {"site": a.site, "account": a.group, "partition": a.partition, "qos": a.qos,
                "qos_list": self.association.qos, "default_qos": self.association.default_qos}


class RemoveSlurmAssociation(Operation):
    """Remove the account's associations (optionally only in one partition, or only one
    QOS from their lists). Returns how many associations were changed or deleted."""

    op_name = "remove_slurm_association"

    class Args(_SiteScoped):
        group: PosixName
        partition: SlurmName | None = None
        qos: SlurmName | None = None

    async def execute(self, session: AsyncClientSession) -> int:
        a = self.args
        await get_site(a.site, session)
        found = await list_associations(a.site, account=a.group, partition=a.partition,
                                        qos=a.qos, session=session)
        if not found:
            raise NotFound("no matching associations found")
        self.deleted = self.changed = 0
        for assoc in found:
            if a.qos is None:
                await assoc.delete(session=session)
                self.deleted += 1
            elif await _drop_qos(assoc, a.qos, session):
                self.deleted += 1
            else:
                self.changed += 1
        return len(found)

    def describe(self) -> dict[str, Any]:
        a = self.args
        return {"site": a.site, "account": a.group, "partition": a.partition, "qos": a.qos,
                "deleted": self.deleted, "changed": self.changed}


class ProvisionSlurmAllocation(Operation):
    """One step from nothing to "this group can run in this partition": creates the
    account, the QOS (``<group>-<partition>-qos`` by default, with one group-limits
    allocation) and the association as needed. Idempotent."""

    op_name = "provision_slurm_allocation"

    class Args(_SiteScoped):
        group: PosixName
        partition: SlurmName
        qos: SlurmName | None = None
        group_limits: SlurmTRES | None = None
        comment: FreeText = "initial allocation"
        priority: int = Field(default=0, ge=0)
        flags: list[QOSFlag] | None = None

    async def execute(self, session: AsyncClientSession) -> SlurmAssociation:
        a = self.args
        qos_name = a.qos or f"{a.group}-{a.partition}-qos"
        await get_site(a.site, session)
        await get_group(a.group, session)
        await get_partition(a.site, a.partition, session)
        self.created_account = self.created_qos = self.created_association = False
        if await find_account(a.site, a.group, session) is None:
            await CreateSlurmAccount.within(self, session, site=a.site, group=a.group)
            self.created_account = True
        if await find_qos(a.site, qos_name, session) is None:
            await CreateSlurmQOS.within(self, session, site=a.site, name=qos_name,
                                        group_limits=a.group_limits, priority=a.priority,
                                        flags=a.flags, comment=a.comment)
            self.created_qos = True
        assoc = await find_association(a.site, a.group, a.partition, session)
        if assoc is None or qos_name not in assoc.qos:
            assoc = await CreateSlurmAssociation.within(self, session, site=a.site,
                                                        group=a.group, partition=a.partition,
                                                        qos=qos_name)
            self.created_association = True
        self.qos_name = qos_name
        return assoc

    def describe(self) -> dict[str, Any]:
        a = self.args
        return {"site": a.site, "account": a.group, "partition": a.partition,
                "qos": self.qos_name, "created_account": self.created_account,
                "created_qos": self.created_qos,
                "created_association": self.created_association}


# -- the site's Slurm settings ----------------------------------------------------------


class _SiteAccountArgs(_SiteScoped):
    group: PosixName


async def _site_and_account(a: _SiteAccountArgs,
                            session: AsyncClientSession) -> tuple[Site, SlurmAccount]:
    site = await get_site(a.site, session)
    return site, await get_account(a.site, a.group, session)


class AddStickySlurmAccount(Operation):
    """Every Slurm-eligible user on the site gets the account's associations."""

    op_name = "add_sticky_slurm_account"

    class Args(_SiteAccountArgs):
        default: bool = False

    async def execute(self, session: AsyncClientSession) -> Site:
        site, _ = await _site_and_account(self.args, session)
        if self.args.group not in site.slurm.sticky:
            site.slurm.sticky = [*site.slurm.sticky, self.args.group]
        if self.args.default:
            site.slurm.default_account = self.args.group
        await site.save(session=session)
        return site

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "account": self.args.group,
                "default": self.args.default}


class RemoveStickySlurmAccount(Operation):
    op_name = "remove_sticky_slurm_account"

    class Args(_SiteAccountArgs):
        clear_default: bool = False

    async def execute(self, session: AsyncClientSession) -> Site:
        a = self.args
        site = await get_site(a.site, session)
        if site.slurm.default_account == a.group:
            if not a.clear_default:
                raise Conflict(f"{a.group!r} is the site's default Slurm account; pass "
                               "--clear-default to remove it anyway")
            site.slurm.default_account = None
        site.slurm.sticky = [s for s in site.slurm.sticky if s != a.group]
        await site.save(session=session)
        return site

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "account": self.args.group,
                "clear_default": self.args.clear_default}


class SetSiteDefaultSlurmAccount(Operation):
    """The default account of every associated user at the site (made sticky too)."""

    op_name = "set_site_default_slurm_account"

    class Args(_SiteAccountArgs):
        pass

    async def execute(self, session: AsyncClientSession) -> Site:
        site, _ = await _site_and_account(self.args, session)
        if self.args.group not in site.slurm.sticky:
            site.slurm.sticky = [*site.slurm.sticky, self.args.group]
        site.slurm.default_account = self.args.group
        await site.save(session=session)
        return site

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "account": self.args.group}


class ClearSiteDefaultSlurmAccount(Operation):
    op_name = "clear_site_default_slurm_account"

    class Args(_SiteScoped):
        pass

    async def execute(self, session: AsyncClientSession) -> Site:
        site = await get_site(self.args.site, session)
        self.previous = site.slurm.default_account
        if self.previous is not None:
            site.slurm.default_account = None
            await site.save(session=session)
        return site

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "previous": self.previous}


class SetSiteSlurmCluster(Operation):
    """The Slurm ClusterName the site syncs to (None: the site's own name)."""

    op_name = "set_site_slurm_cluster"

    class Args(_SiteScoped):
        cluster_name: SlurmName | None = None

    async def execute(self, session: AsyncClientSession) -> Site:
        site = await get_site(self.args.site, session)
        wanted = self.args.cluster_name
        if wanted is not None and wanted != site.name:
            clash = await Site.find_one({"slurm.cluster_name": wanted}, session=session)
            other = clash or await Site.find_one({"name": wanted, "slurm.cluster_name": None},
                                                 session=session)
            if other is not None and other.name != site.name:
                raise Conflict(f"cluster {wanted!r} is already site {other.name!r}'s cluster")
        self.previous = site.cluster_name
        site.slurm.cluster_name = None if wanted == site.name else wanted
        await site.save(session=session)
        return site

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "cluster_name": self.args.cluster_name,
                "previous": self.previous}


class SetSiteSlurmMode(Operation):
    """How the Slurm sync treats the site's cluster: ``managed`` (the store's accounts
    and associations) or ``quota_only`` (a slurm-quota site: only quota blocks on the
    users and accounts found there; docs/guides/operator.md, "Syncs")."""

    op_name = "set_site_slurm_mode"

    class Args(_SiteScoped):
        mode: SlurmMode

    async def execute(self, session: AsyncClientSession) -> Site:
        site = await get_site(self.args.site, session)
        self.previous = site.slurm.mode
        site.slurm.mode = self.args.mode
        await site.save(session=session)
        return site

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "mode": self.args.mode, "previous": self.previous}



async def rename_group_qos(old: str, new: str,
                           session: AsyncClientSession) -> dict[str, int]:
    """QOS named after a group (``<group>-…``, what ``provision`` creates) follow the
    group's rename at every site, with the allocations and association lists that name
    them; the Slurm sync then adds the new QOS and removes the old one. A QOS whose new
    name is already taken at its site keeps its name. Returns changed counts."""
    prefix = f"{old}-"
    found = [q for q in await SlurmQOS.find({}, session=session).to_list()
             if q.name.startswith(prefix)]
    if not found:
        return {}
    taken = {(q.site, q.name) for q in await SlurmQOS.find({}, session=session).to_list()}
    counts = {"slurm_qos.name": 0, "slurm_allocations.qos": 0, "slurm_associations.qos": 0}
    qos_coll = SlurmQOS.get_pymongo_collection()
    alloc_coll = SlurmAllocation.get_pymongo_collection()
    assoc_coll = SlurmAssociation.get_pymongo_collection()
    for qos in found:
        renamed = f"{new}-{qos.name[len(prefix):]}"
        if (qos.site, renamed) in taken:
            continue
        stamp = {"$currentDate": {"updated_at": True}}
        await qos_coll.update_one({"_id": qos.id}, {"$set": {"name": renamed}, **stamp},
                                  session=session)
        counts["slurm_qos.name"] += 1
        for alloc in await select(SlurmAllocation, session, site=qos.site, qos=qos.name):
            await alloc_coll.update_one({"_id": alloc.id},
                                        {"$set": {"qos": renamed}, **stamp}, session=session)
            counts["slurm_allocations.qos"] += 1
        for assoc in await select(SlurmAssociation, session, site=qos.site):
            if qos.name not in assoc.qos and assoc.default_qos != qos.name:
                continue
            changes: dict[str, Any] = {"qos": [renamed if q == qos.name else q
                                               for q in assoc.qos]}
            if assoc.default_qos == qos.name:
                changes["default_qos"] = renamed
            await assoc_coll.update_one({"_id": assoc.id}, {"$set": changes, **stamp},
                                        session=session)
            counts["slurm_associations.qos"] += 1
    return {k: v for k, v in counts.items() if v}
