"""The ``request_escalate`` task body: escalate requests past their SLA, once each.

Why a task of its own (not part of the digest): escalating is a write (each request is
stamped, so it is escalated once however often the task runs); the digest only reads
the ``SyncRun`` it leaves (``extra.escalations``) and mails whatever is new.
"""

from __future__ import annotations

from typing import Any

from ..config import Config
from ..store import Store


async def request_escalate_body(store: Store, config: Config, block: Any, site: str,
                                author: str) -> dict[str, Any]:
    from ..operations.request import escalate_breaches

    escalated = await escalate_breaches(store, author, config)
    return {"escalated": escalated}
