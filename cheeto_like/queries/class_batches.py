"""Unfinished class batches: the ``class_batches`` records ``ng user new class`` sets
with its first chunk and clears with its History row (``operations/class_users.py``).

A batch of up to 2000 accounts is written in short chunks, so between its first chunk
and its last the store holds some of its accounts, inactive and with passwords nobody
was shown. ``db status``, ``db check`` and the batch command itself ask here and say
how to finish it. A plain collection (no model): bookkeeping, like ``migrations``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..store import Store

COLLECTION = "class_batches"


def batch_records(store: Store) -> Any:
    return store.database[COLLECTION]


async def unfinished_class_batches(store: Store, session: Any = None) -> list[dict[str, Any]]:
    """Every batch that wrote its first chunk and not its History row, oldest first."""
    return await batch_records(store).find({}, session=session).sort(
        "started_at", 1).to_list()


async def unfinished_class_batch(store: Store, batch_id: str, session: Any = None
                                 ) -> dict[str, Any] | None:
    return await batch_records(store).find_one({"_id": batch_id}, session=session)


def reserved_uid_blocks(records: list[dict[str, Any]]) -> list[range]:
    """The uid blocks unfinished batches hold (their accounts not all created yet)."""
    return [range(int(r["first_uid"]), int(r["first_uid"]) + int(r["count"]))
            for r in records if r.get("first_uid") is not None]


def describe_batch(record: dict[str, Any]) -> str:
    """One line for an admin: which batch, since when, how far it got, how to finish."""
    started = record.get("started_at")
    when = started.strftime("%Y-%m-%d %H:%M:%S UTC") if isinstance(started, datetime) else "?"
    count = int(record.get("count") or 0)
    width = len(str(count))
    return (f"a class batch ({record.get('prefix')}-{1:0{width}d}…{record.get('prefix')}-"
            f"{count} at site {record.get('site')}) started {when} was interrupted after "
            f"{int(record.get('created') or 0)} of {count} accounts (inactive, their "
            "passwords void): run the same `ng user new class` command again to finish it")
