"""Bumping the data generations (``models/generation.py``) inside an operation's
transaction. Called by ``Operation._run`` only; an operation says which sites it touches
through ``Operation.touched_sites()``."""

from __future__ import annotations

from collections.abc import Iterable

from pymongo.asynchronous.client_session import AsyncClientSession

from ..models.generation import ALL, collection, site_key


async def bump(session: AsyncClientSession, sites: Iterable[str] | None) -> None:
    """Add one to each named site's counter, or to the every-site counter when ``sites``
    is None (the operation may reach any site)."""
    keys = [ALL] if sites is None else sorted({site_key(s) for s in sites})
    for key in keys:
        await collection().update_one({"_id": key}, {"$inc": {"n": 1}}, upsert=True,
                                      session=session)
