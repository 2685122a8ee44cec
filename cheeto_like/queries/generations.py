"""Reading the data generations (``models/generation.py``): one small query for all."""

from __future__ import annotations

from typing import Any

from ..models.generation import ALL, collection, site_key

Session = Any
Generation = tuple[int, int]  # (every-site counter, this site's counter)


async def all_generations(session: Session = None) -> dict[str, int]:
    """Every counter: ``{"all": n, "site:<name>": n, …}`` (one document per site)."""
    found = await collection().find({}, session=session).to_list()
    return {str(doc["_id"]): int(doc.get("n", 0)) for doc in found}


def site_generation(generations: dict[str, int], site: str) -> Generation:
    """The generation of ``site`` out of ``all_generations()``; it moves whenever an
    operation that can change the site's exports commits."""
    return generations.get(ALL, 0), generations.get(site_key(site), 0)
