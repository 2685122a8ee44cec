"""Helpers the benchmark scripts share: ports, progress lines and bulk seeding.

Benchmarks seed their data with bulk inserts rather than operations, because they
measure a reader or a reconciler, not the write path (bench/ops.py measures that).
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

BULK_CHUNK = 2000


def free_port() -> int:
    """A loopback port that was free a moment ago (for throwaway servers)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def throwaway_server(config: Any) -> Any:
    """An ``EmbeddedServer`` that stops when this bench process ends, even killed
    (``exit_with``); a baseline tree from before that option gets a plain one."""
    from cheeto_like.embedded import EmbeddedServer

    try:
        return EmbeddedServer(config, exit_with=os.getpid())
    except TypeError:
        return EmbeddedServer(config)


def progress(message: str) -> None:
    """Progress goes to stderr, so stdout carries only the JSON figures."""
    print(message, file=sys.stderr, flush=True)


async def bulk_insert(model: Any, docs: list[Any]) -> None:
    """Insert documents in chunks, bypassing beanie's per-document insert but running
    the one hook insert() would (the LDAP fingerprint), so the seeded rows look exactly
    like ones the operations wrote."""
    collection = model.get_pymongo_collection()
    for start in range(0, len(docs), BULK_CHUNK):
        chunk = docs[start:start + BULK_CHUNK]
        for doc in chunk:
            if hasattr(doc, "refresh_ldap_fingerprint"):
                doc.refresh_ldap_fingerprint()
        await collection.insert_many([d.model_dump(by_alias=True) for d in chunk])
