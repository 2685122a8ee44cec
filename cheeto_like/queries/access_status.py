"""Access and status groups, addressed by their shorthands (``sudo``, ``active``)."""

from __future__ import annotations

from collections.abc import Iterable

from pymongo.asynchronous.client_session import AsyncClientSession

from ..errors import NotFound
from ..models import Group

Session = AsyncClientSession | None
SEED_HINT = "run `cheeto ng group seed-access-status` first"


async def special_groups(kind: str, session: Session = None) -> dict[str, Group]:
    """shorthand -> group for ``kind`` ``access`` or ``status``."""
    groups = await Group.find(Group.type == kind, session=session).to_list()
    return {g.shorthand: g for g in groups if g.shorthand}


async def access_groups(session: Session = None) -> dict[str, Group]:
    return await special_groups("access", session)


async def status_groups(session: Session = None) -> dict[str, Group]:
    return await special_groups("status", session)


async def require_access(names: Iterable[str], session: Session = None) -> list[str]:
    """Check every access shorthand has its group; return them de-duplicated in order."""
    wanted = list(dict.fromkeys(names))
    if not wanted:
        return []
    known = await access_groups(session)
    missing = [n for n in wanted if n not in known]
    if missing:
        raise NotFound(f"unknown access type {', '.join(missing)} "
                       f"(known: {', '.join(sorted(known)) or 'none'}; {SEED_HINT})")
    return wanted


async def require_status(name: str, session: Session = None) -> str:
    known = await status_groups(session)
    if name not in known:
        raise NotFound(f"unknown status {name!r} "
                       f"(known: {', '.join(sorted(known)) or 'none'}; {SEED_HINT})")
    return name


async def status_exists(name: str, session: Session = None) -> bool:
    return await Group.find_one({"type": "status", "shorthand": name},
                                session=session) is not None


def ldap_names(groups: dict[str, Group], shorthands: Iterable[str]) -> list[str]:
    """The posix group names carrying these shorthands (unknown ones are skipped)."""
    return [groups[s].name for s in shorthands if s in groups]
