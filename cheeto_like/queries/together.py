"""Several small reads of an operation in one store command.

Why: the write path's cost is mostly round trips (``bench/ops.py``), and an operation
such as ``AddGroupMember`` needs a user, a group, a site and an edge before it may
write: four ``find`` commands. One ``aggregate`` whose parts are chained with
``$unionWith`` answers them together; each part is an equality on one indexed field (the
embedded store serves that from its index inside a ``$unionWith`` too) and is tagged
with its position, so the answer splits back into one list per part. Rows are raw
documents (projected when the part names fields): no model is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.database import AsyncDatabase

PART = "_together_part"


@dataclass(frozen=True, slots=True)
class Part:
    """One read: the documents of ``collection`` whose ``field`` equals ``value``
    (one field, so the store uses its index), with only ``fields`` when named."""

    collection: str
    field: str
    value: Any
    fields: tuple[str, ...] = ()


def _stages(index: int, part: Part) -> list[dict[str, Any]]:
    stages: list[dict[str, Any]] = [{"$match": {part.field: part.value}}]
    if part.fields:
        stages.append({"$project": dict.fromkeys(part.fields, 1)})
    stages.append({"$addFields": {PART: index}})
    return stages


async def read_together(database: AsyncDatabase[Any], parts: list[Part],
                        session: AsyncClientSession | None = None) -> list[list[dict[str, Any]]]:
    """The documents of each part, in the order of ``parts``, read by one command."""
    first, *rest = parts
    pipeline = _stages(0, first)
    for i, part in enumerate(rest, start=1):
        pipeline.append({"$unionWith": {"coll": part.collection,
                                        "pipeline": _stages(i, part)}})
    cursor = await database[first.collection].aggregate(pipeline, session=session)
    found: list[list[dict[str, Any]]] = [[] for _ in parts]
    async for row in cursor:
        found[row.pop(PART)].append(row)
    return found
