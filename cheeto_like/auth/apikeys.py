"""Machine API keys: make one, recognise one, and remember when each was last used.

A key is ``ck_`` + 43 URL-safe characters (256 random bits). The store keeps its
SHA-256 fingerprint (hex) and its first 11 characters (``ck_`` + 8, enough to tell keys
apart in a listing, far too few to guess the rest). A lookup is one indexed equality on
the fingerprint (or, during a rotation's overlap, on the previous one).

Last use is recorded without a write per request: ``UsageRecorder`` keeps the newest
time per key in memory and writes them all every ``api.key_use_flush_seconds`` (and at
shutdown), one update per key used since. In one process; several API processes each
flush their own, and the newest wins (``$max``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import time
from dataclasses import dataclass

from ..models import ApiKey
from ..store import Store

log = logging.getLogger(__name__)
KEY_PREFIX = "ck_"
SHOWN = 11


@dataclass(frozen=True)
class NewKey:
    secret: str
    prefix: str
    fingerprint: str


def fingerprint(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def new_key() -> NewKey:
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    return NewKey(secret=secret, prefix=secret[:SHOWN], fingerprint=fingerprint(secret))


def looks_like_key(value: str) -> bool:
    return value.startswith(KEY_PREFIX) and 20 <= len(value) <= 128


async def find_key(secret: str, now: int | None = None) -> ApiKey | None:
    """The live key with this secret (current, or previous within its overlap window);
    None for unknown, revoked or expired keys."""
    if not looks_like_key(secret):
        return None
    now = int(time.time()) if now is None else now
    digest = fingerprint(secret)
    key = await ApiKey.find_one({"fingerprint": digest})
    if key is None:
        key = await ApiKey.find_one({"previous_fingerprint": digest})
        if key is None or (key.previous_valid_until or 0) <= now:
            return None
    if key.revoked_epoch is not None or (key.expires_epoch is not None
                                         and key.expires_epoch <= now):
        return None
    return key


class UsageRecorder:
    """Newest use per key id, written in batches."""

    def __init__(self, store: Store | None, interval: float) -> None:
        self.store = store
        self.interval = interval
        self._pending: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    def touch(self, key_id: str, when: int | None = None) -> None:
        stamp = int(time.time()) if when is None else when
        if self._pending.get(key_id, 0) < stamp:
            self._pending[key_id] = stamp

    async def flush(self) -> int:
        """Write what is pending; returns how many keys were updated."""
        pending, self._pending = self._pending, {}
        collection = ApiKey.get_pymongo_collection()
        for key_id, stamp in pending.items():
            await collection.update_one({"_id": key_id}, {"$max": {"last_used_epoch": stamp}})
        return len(pending)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.flush()
            except Exception as exc:  # the store is away: try again next round
                log.warning("recording API key use failed: %s", exc)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(Exception):
            await self.flush()
