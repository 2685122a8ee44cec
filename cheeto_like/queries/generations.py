"""Reading the data generations (``models/generation.py``): one aggregation for all.

A generation is the sum of ``n`` over a key's marks and its base, grouped in one
command, so a compaction (which moves marks into the base in one transaction) is seen
either wholly or not at all and never changes the value.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..models.generation import ALL, collection, site_key

Session = Any
Generation = tuple[int, int]  # (every-site generation, this site's generation)


async def all_generations(session: Session = None) -> dict[str, int]:
    """Every generation: ``{"all": n, "site:<name>": n, …}``."""
    return await _sums(None, session)


async def generations_of(keys: Iterable[str], session: Session = None) -> dict[str, int]:
    """The generations of ``keys`` only (a key without marks is left out)."""
    return await _sums(sorted(set(keys)), session)


async def _sums(keys: list[str] | None, session: Session) -> dict[str, int]:
    pipeline: list[dict[str, Any]] = []
    if keys is not None:
        pipeline.append({"$match": {"key": {"$in": keys}}})
    pipeline.append({"$group": {"_id": "$key", "n": {"$sum": "$n"}}})
    cursor = await collection().aggregate(pipeline, session=session)
    found = await cursor.to_list()
    # documents without ``key`` (the counters of stores from before the marks) group
    # under None and are not a generation
    return {str(doc["_id"]): int(doc.get("n") or 0) for doc in found
            if isinstance(doc.get("_id"), str)}


def site_generation(generations: dict[str, int], site: str) -> Generation:
    """The generation of ``site`` out of ``all_generations()``; it moves whenever an
    operation that can change the site's exports commits."""
    return generations.get(ALL, 0), generations.get(site_key(site), 0)
