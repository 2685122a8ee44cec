"""Site lookups and the list of collections that hang off a site."""

from __future__ import annotations

from typing import Any

from beanie import Document
from pymongo.asynchronous.client_session import AsyncClientSession

from ..errors import NotFound
from ..models import Site

Session = AsyncClientSession | None

# label -> model name, in the order a site removal deletes them (dependents before what
# they point at). Every model here has a ``site`` field. Single source for cascade and
# counts. ``SITE_LINKED_MODELS`` (label -> model) imports them on first use: a command
# that only looks a site up should not build the other document classes (issue 31).
_SITE_LINKED: tuple[tuple[str, str], ...] = (
    ("user_site_info", "UserSiteInfo"),
    ("group_membership", "GroupMembership"),
    ("slurm_associations", "SlurmAssociation"),
    ("slurm_allocations", "SlurmAllocation"),
    ("slurm_qos", "SlurmQOS"),
    ("slurm_partitions", "SlurmPartition"),
    ("slurm_accounts", "SlurmAccount"),
    ("storages", "Storage"),
    ("static_mounts", "StaticMount"),
    ("storage_volumes", "StorageVolume"),
    ("automount_maps", "AutomountMap"),
    ("hippo_events", "HippoEvent"),
    ("usage_records", "UsageRecord"),
    ("usage_cursors", "UsageCursor"),
    ("gpu_factors", "GpuFactor"),
    ("quotas", "Quota"),
    ("quota_defaults", "QuotaDefaults"),
    ("quota_adjustments", "QuotaAdjustment"),
    ("quota_notices", "QuotaNotice"),
)


def site_linked_models() -> tuple[tuple[str, type[Document]], ...]:
    """``(label, model)`` for every collection that hangs off a site, in removal order."""
    from .. import models

    return tuple((label, getattr(models, name)) for label, name in _SITE_LINKED)


def __getattr__(name: str) -> Any:
    if name == "SITE_LINKED_MODELS":  # the constant callers import, built on first use
        linked = site_linked_models()
        globals()[name] = linked
        return linked
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


async def find_site_by_name(name: str, session: Session = None) -> Site | None:
    return await Site.find_one(Site.name == name, session=session)


async def find_site(value: str, session: Session = None) -> Site | None:
    """A site by name, fqdn or alias, case-insensitively (all three are stored lowercase)."""
    lowered = value.strip().lower()
    return await Site.find_one(
        {"$or": [{"name": lowered}, {"fqdn": lowered}, {"aliases": lowered}]},
        session=session)


async def get_site(name: str, session: Session = None) -> Site:
    """The site named ``name``, else the one with that fqdn or alias, in any case (the
    API's and the CLI's ``-s`` resolve alike); ``NotFound`` otherwise, with the closest
    names."""
    site = await find_site_by_name(name, session)
    if site is None:
        site = await find_site(name, session)
    if site is None:
        raise NotFound(f"site {name!r} does not exist" + await _site_hint(name, session))
    return site


async def resolve_site_name(value: str, session: Session = None) -> str:
    """The site name ``value`` means (a name, fqdn or alias in any case), or ``value``
    itself when no site matches (the command then says it does not exist, or creates
    it). The CLI runs every ``-s`` through this before the handler, so handlers and the
    operations they call see canonical names only."""
    site = await find_site_by_name(value, session) or await find_site(value, session)
    return site.name if site is not None else value


async def _site_hint(name: str, session: Session = None) -> str:
    from ..suggest import did_you_mean

    rows = await Site.get_pymongo_collection().find(
        {}, {"name": 1, "aliases": 1}, session=session).to_list(None)
    known = [r["name"] for r in rows] + [a for r in rows for a in r.get("aliases") or []]
    return did_you_mean(name.lower(), known)


async def list_sites(session: Session = None) -> list[Site]:
    return await Site.find_all(session=session).sort(+Site.name).to_list()


async def find_at_site[D: Document](model: type[D], site: str, name: str,
                                   session: Session = None) -> D | None:
    """A record identified by (name, site): partitions, QOS, volumes, maps, mounts."""
    from ..models.base import select_one

    return await select_one(model, session, name=name, site=site)


async def get_at_site[D: Document](model: type[D], kind: str, site: str, name: str,
                                  session: Session = None) -> D:
    found = await find_at_site(model, site, name, session)
    if found is None:
        raise NotFound(f"{kind} {name!r} does not exist at site {site!r}")
    return found


async def list_at_site[D: Document](model: type[D], site: str,
                                   session: Session = None) -> list[D]:
    return sorted(await model.find({"site": site}, session=session).to_list(),
                  key=lambda d: d.name)  # type: ignore[attr-defined]


async def count_site_dependents(site: str, session: Session = None) -> dict[str, int]:
    return {label: await model.find({"site": site}, session=session).count()
            for label, model in site_linked_models()}
