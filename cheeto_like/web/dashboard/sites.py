"""Which site a page shows: the sites there are and the one asked for, shared by the
account, operator and request pages (which import each other's views, so this lives
below them, issue 32)."""

from __future__ import annotations

from .session import Refused


async def site_names() -> list[str]:
    """Every site's name, sorted."""
    from ...queries.site import list_sites

    return sorted(s.name for s in await list_sites())


def choose(sites: list[str], asked: str | None) -> str | None:
    """The site asked for (404 when there is none of that name), else the first."""
    if asked:
        if asked not in sites:
            raise Refused(f"site {asked!r} does not exist", 404)
        return asked
    return sites[0] if sites else None
