"""``did you mean`` hints for a name that matched nothing, shared by the user and group
lookups (each of which imports the other's queries, so the hint lives below both)."""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.client_session import AsyncClientSession


async def name_hint(model: Any, name: str, session: AsyncClientSession | None = None) -> str:
    """`` (did you mean …?)`` from the names of ``model`` (users or groups) closest to
    ``name``; only outside a transaction (a miss inside one aborts it anyway)."""
    from ..suggest import did_you_mean

    if session is not None or not name:
        return ""
    cursor = model.get_pymongo_collection().find({}, {"name": 1, "_id": 0}, batch_size=5000)
    return did_you_mean(name, [row["name"] async for row in cursor if row.get("name")])
