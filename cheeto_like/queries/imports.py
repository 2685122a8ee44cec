"""Unfinished imports: the ``migrations`` records that ``migrate from-cheeto`` and
``ng site adopt`` set before their first write and clear with their History row.

An import writes in chunks (``migrate/writer.py``), so between its first chunk and its
History row the store holds part of it. Whoever reads the store to act on it as a whole
asks here first: the outward syncs refuse to start (``sync.lease``), and ``db status``,
``db check`` and the import itself say that one was interrupted and how to finish it.
A plain read collection (no model): bookkeeping of the writer, like ``db_restores``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..store import Store

COLLECTION = "migrations"


def records(store: Store) -> Any:
    return store.database[COLLECTION]


async def unfinished_imports(store: Store, session: Any = None) -> list[dict[str, Any]]:
    """Every import that started writing and has not written its History row, oldest
    first (normally none; at most one per kind of import)."""
    return await records(store).find({}, session=session).sort("started_at", 1).to_list()


async def unfinished_import(store: Store, op: str, session: Any = None
                            ) -> dict[str, Any] | None:
    return await records(store).find_one({"_id": op}, session=session)


def describe(record: dict[str, Any]) -> str:
    """One line for an admin: what was being imported, since when, how far it got."""
    started = record.get("started_at")
    when = started.strftime("%Y-%m-%d %H:%M:%S UTC") if isinstance(started, datetime) else "?"
    written = sum(int(v) for v in (record.get("written") or {}).values())
    planned = int(record.get("planned") or 0)
    return (f"an import ({record.get('_id')}) from {record.get('source')} started {when} "
            f"was interrupted after {written} of {planned} new documents: run the same "
            "command again to finish it")
