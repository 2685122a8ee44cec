"""Per-site data generations: counters the write path bumps so readers can tell, with one
tiny query, whether a site's exports may have changed since they last built them.

One document per key in the ``generations`` collection: ``{"_id": "site:<name>", "n": 7}``
for an operation that names its site, ``{"_id": "all", "n": 42}`` for any other operation
(a user, group or key change can reach every site). A site's generation is the pair
(all, site). Bumped by ``operations.base.Operation`` in the operation's own transaction
(``$inc`` with ``upsert`` by ``_id``; tests/test_store_conformance.py), so a reader that
sees the new generation also sees the change. Not a beanie model: nothing validates or
indexes it, and keeping it raw keeps the read at one small command.
"""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

COLLECTION = "generations"
ALL = "all"


def site_key(site: str) -> str:
    return f"site:{site}"


def collection() -> AsyncCollection[dict[str, Any]]:
    """The counters' collection, in the database the models are bound to."""
    from .site import Site

    return Site.get_pymongo_collection().database[COLLECTION]
