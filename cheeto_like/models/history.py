"""The audit log: one row per committed operation."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from beanie import Document
from pydantic import Field

from .base import index
from .fields import new_id, utcnow


class History(Document):
    """``author`` is the acting admin's login name (``--author``, default ``$USER``);
    ``changes`` is the operation's ``describe()`` and never holds secrets."""

    id: str = Field(default_factory=new_id)  # type: ignore[assignment]
    op: str
    author: str | None = None
    changes: dict[str, Any] = Field(default_factory=dict)
    timestamp: datetime = Field(default_factory=utcnow)

    class Settings:
        name = "history"
        indexes = [index("-timestamp"), index("op"), index("author")]
