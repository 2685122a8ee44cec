"""The audit log: one row per committed operation."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import bson
from beanie import Document
from beanie.odm.utils.encoder import Encoder
from bson.errors import InvalidDocument
from pydantic import Field

from .base import index
from .fields import new_id, utcnow

HISTORY_COLLECTION = "history"


def history_document(operation_id: str, op: str, author: str | None,
                     changes: dict[str, Any], timestamp: datetime) -> dict[str, Any]:
    """The stored form of a ``History`` row, built without the model: every operation
    writes one, and beanie's validation and encoding of it cost as much as a round trip
    on the embedded store. ``changes`` that BSON cannot hold as they are (an enum, a
    set, a pydantic model) go through beanie's encoder, as ``insert()`` would."""
    doc: dict[str, Any] = {"_id": operation_id, "op": op, "author": author,
                           "changes": changes, "timestamp": timestamp}
    try:
        bson.encode(doc)
    except (InvalidDocument, TypeError, OverflowError):
        doc["changes"] = Encoder().encode(changes)
    return doc


class History(Document):
    """``author`` is the acting admin's login name (``--author``, default ``$USER``);
    ``changes`` is the operation's ``describe()`` and never holds secrets."""

    id: str = Field(default_factory=new_id)  # type: ignore[assignment]
    op: str
    author: str | None = None
    changes: dict[str, Any] = Field(default_factory=dict)
    timestamp: datetime = Field(default_factory=utcnow)

    class Settings:
        name = HISTORY_COLLECTION
        indexes = [index("-timestamp"), index("op"), index("author")]
