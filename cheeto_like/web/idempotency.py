"""``Idempotency-Key`` for ``/api/v1`` POSTs that would apply twice if a client retried
them (a quota adjustment, a new request, a comment).

A client that lost the answer to a POST (a timeout, a failover, a 503 after a commit
that did apply) retries with the same key: the operation is applied once, and every
retry gets the first answer back (the same status and body). The key is the client's
token (1-128 characters of ``A-Za-z0-9._:-``; anything else is a 422 problem); it is
scoped to the caller (``who.author``) and stored only hashed, as the operation id of
``Operation.run_once`` (``models/applied.py``, kept 24 hours). The same key with another
route or body is a 409 problem: a key names one request.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Header
from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel

from ..auth.principal import Principal
from ..operations.base import Once, Operation, Outcome

HEADER = "Idempotency-Key"
KEY_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"

IdempotencyKey = Annotated[str | None, Header(
    alias=HEADER, pattern=KEY_PATTERN, max_length=128,
    description="a token of your choice (1-128 of A-Za-z0-9._:-): a retry with the same "
                "key applies once and answers as the first time (kept 24 hours)")]


def once_for(who: Principal, key: str, route: str, body: BaseModel | dict[str, Any],
             view: Callable[[Any], dict[str, Any]]) -> Once:
    """The ``Once`` for ``key`` sent by ``who`` to ``route`` with ``body``: the id is a
    hash of the caller and the key (no client text in the store's ids), the fingerprint
    one of the route and the body."""
    operation_id = "idem:" + hashlib.sha256(
        f"{who.author}\0{key}".encode()).hexdigest()
    shown = body.model_dump(mode="json") if isinstance(body, BaseModel) else body
    fingerprint = hashlib.sha256(json.dumps([route, shown], sort_keys=True,
                                            default=str).encode()).hexdigest()
    return Once(operation_id, fingerprint, lambda result: jsonable_encoder(view(result)))


async def run_keyed(op: type[Operation], store: Any, who: Principal, key: str | None,
                    route: str, body: BaseModel, view: Callable[[Any], dict[str, Any]],
                    **kwargs: Any) -> dict[str, Any]:
    """Run ``op`` (once per ``key`` when one was sent) and answer ``view(result)``."""
    if key is None:
        return jsonable_encoder(view(await op.run(store, who.author, **kwargs)))
    outcome = await op.run_once(store, who.author, once_for(who, key, route, body, view),
                                **kwargs)
    return outcome.summary


async def keyed(key: str | None, who: Principal, route: str, body: BaseModel,
                view: Callable[[Any], dict[str, Any]],
                plain: Callable[[], Awaitable[Any]],
                once: Callable[[Once], Awaitable[Outcome]]) -> dict[str, Any]:
    """For routes that run an operation through a helper (``file_request``): ``plain()``
    without a key, ``once(Once)`` with one."""
    if key is None:
        return jsonable_encoder(view(await plain()))
    return (await once(once_for(who, key, route, body, view))).summary
