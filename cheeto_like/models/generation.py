"""Per-site data generations: numbers the write path moves so readers can tell, with one
tiny query, whether a site's exports may have changed since they last built them.

Why marks, not counters: a counter every operation ``$inc``s is one document every
transaction writes, so on a replica set any two overlapping operations conflict
(WriteConflict) and a long one starves. Instead each operation *inserts* one small
**mark** per key it touches, in its own transaction: inserts of distinct documents never
conflict. A key's generation is the sum of ``n`` over its documents in the
``generations`` collection:

- a mark ``{"_id": <uuid hex>, "key": "site:<name>" | "all", "n": 1, "at": <time>}``
  (written by ``operations.generations.mark_writes``, in the operation's transaction);
- a base ``{"_id": "base:<key>", "key": <key>, "n": <folded marks>}``, written only by
  the compaction (``operations.generations.compact``), which folds marks into their base
  and deletes them in one short transaction of its own. Operations only insert, so the
  compactor's deletes never conflict with them, and the sum is unchanged by a fold.

The sum moves by one whenever a mark commits, whatever the commit order (a count does; a
largest id would not), and is read in one aggregation (``queries.generations``), so a
reader never sees half a fold. ``{"_id": "all", "n": 42}`` documents without ``key`` are
the counters of stores from before the marks: ignored, dropped by the compaction.

A site's generation is the pair (all, site). Not a beanie model: nothing validates it,
and keeping it raw keeps the read at one small command.
"""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

COLLECTION = "generations"
ALL = "all"
BASE_PREFIX = "base:"


def site_key(site: str) -> str:
    return f"site:{site}"


def base_id(key: str) -> str:
    return f"{BASE_PREFIX}{key}"


def collection() -> AsyncCollection[dict[str, Any]]:
    """The marks' collection, in the database the models are bound to."""
    from .site import Site

    return Site.get_pymongo_collection().database[COLLECTION]
