"""At most one run per (target, site) at a time, whoever starts it (DESIGN §4).

A lease is a ``SyncLease`` document with ``_id = "<target>:<site>"``, a holder and an
expiry. Taking it is an insert (the unique ``_id`` decides races); a lease past its
expiry may be replaced. Leases are short (``DEFAULT_TTL``, a minute) and a heartbeat
task renews them while the holder lives, so a holder killed with SIGKILL blocks the
next run for at most one TTL instead of an hour. A holder whose renewal finds the lease
taken by someone else (its event loop stalled past the expiry) marks it ``lost``; the
apply loops call ``Held.check()`` before every outside write and stop there.

Whole-document writes only: the embedded store mishandles ``$set`` of datetimes.

The syncs that write outward (``OUTWARD``: LDAP, Slurm, puppet) do not start while an
import (``migrate from-cheeto``, ``ng site adopt``) is unfinished: it writes in chunks, and
half an import must not reach another system. The check comes after the lease is taken
and the import checks the leases after setting its record, so one of the two always sees
the other (``queries/imports.py``, ``migrate/writer.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pymongo import WriteConcern
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError, PyMongoError

from ..errors import Busy, CheetoError, ExternalError
from ..models import SyncLease
from ..models.fields import new_id, utcnow
from ..models.sync import epoch_ms
from ..processes import process_gone
from ..store import Store

DEFAULT_TTL = timedelta(seconds=60)
OUTWARD = frozenset({"ldap", "slurm", "puppet"})  # = migrate.writer.OUTWARD_TARGETS
log = logging.getLogger("cheeto_like.sync")


def _leases() -> AsyncCollection[Any]:
    """Leases are written ``w: majority`` (whatever the client's default): a lease the
    primary alone acknowledged can vanish in an election, and two runs would both
    hold it."""
    return SyncLease.get_pymongo_collection().with_options(
        write_concern=WriteConcern("majority"))


class LeaseLost(ExternalError):
    """Another run took this run's lease (it expired while this one was stalled)."""


def holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{new_id()[:8]}"


def holder_is_gone(holder: str, *, own_pid_is_gone: bool = False) -> bool:
    """True when ``holder`` (``host:pid:nonce``) names a process on this host that no
    longer runs (or is a zombie). A holder elsewhere is never presumed dead. A worker
    that starts a task passes ``own_pid_is_gone``: a lease naming its own pid then
    belongs to an earlier incarnation (pids are reused), not to this run."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return own_pid_is_gone
    return process_gone(pid)


@dataclass
class Held:
    """A lease this process holds; ``lost`` says why it no longer does."""

    key: str
    holder: str
    ttl: timedelta
    lost: str | None = None
    renewals: int = field(default=0)

    def check(self) -> None:
        """Raise ``LeaseLost`` when another run took the lease: stop before writing."""
        if self.lost is not None:
            raise LeaseLost(self.lost)


def _doc(key: str, holder: str, ttl: timedelta) -> dict[str, object]:
    now = utcnow()
    return SyncLease(id=key, holder=holder, acquired_at=now,
                     expires_at=now + ttl).model_dump(by_alias=True)


async def _take(store: Store, key: str, holder: str, ttl: timedelta, target: str,
                site: str) -> None:
    collection = _leases()
    doc = _doc(key, holder, ttl)
    async with store.exclusive():
        try:
            await collection.insert_one(doc)
            return
        except DuplicateKeyError:
            taken = await collection.find_one_and_replace(
                {"_id": key, "expires_ms": {"$lt": epoch_ms(utcnow())}}, doc)
            if taken is not None:
                log.warning("took over the expired lease %s of %s", key, taken["holder"])
                return
            current = await collection.find_one({"_id": key})
            if current is not None and "expires_ms" not in current \
                    and current["expires_at"] < utcnow():  # a lease from an older release
                await collection.delete_one({"_id": key, "holder": current["holder"]})
                await collection.insert_one(doc)
                return
    who = f" by {current['holder']} until {current['expires_at']:%H:%M:%S}" if current else ""
    raise Busy(f"another {target} sync for {site} is running{who}; retry when it ends "
               f"(a crashed run's lease expires within {int(ttl.total_seconds())} s)")


async def _heartbeat(store: Store, held: Held) -> None:
    """Renew every third of the TTL; give up (``lost``) when someone else holds it, or
    when no renewal succeeded before the lease would have expired."""
    collection = _leases()
    period = held.ttl.total_seconds() / 3
    last_ok = asyncio.get_running_loop().time()
    while held.lost is None:
        await asyncio.sleep(period)
        try:
            async with store.exclusive():
                renewed = await collection.find_one_and_replace(
                    {"_id": held.key, "holder": held.holder},
                    _doc(held.key, held.holder, held.ttl))
        except (PyMongoError, CheetoError) as exc:  # the store is down: retry until expiry
            if asyncio.get_running_loop().time() - last_ok >= held.ttl.total_seconds():
                held.lost = f"could not renew the lease {held.key}: {exc}"
            continue
        if renewed is None:
            current = await collection.find_one({"_id": held.key})
            by = f" by {current['holder']}" if current else " (it was removed)"
            held.lost = f"the lease {held.key} was taken over{by}; this run stopped"
            log.error("%s", held.lost)
            return
        held.renewals += 1
        last_ok = asyncio.get_running_loop().time()


async def _refuse_during_import(store: Store, key: str, holder: str) -> None:
    from ..queries.imports import describe, unfinished_imports

    pending = await unfinished_imports(store)
    if pending:
        async with store.exclusive():
            await _leases().delete_one({"_id": key, "holder": holder})
        raise Busy(f"not syncing while part of an import is in the store: "
                   f"{describe(pending[0])}")


@asynccontextmanager
async def lease(store: Store, target: str, site: str, *,
                ttl: timedelta = DEFAULT_TTL) -> AsyncIterator[Held]:
    """Hold the (target, site) lease for the body, renewed in the background; ``Busy``
    if someone else has it."""
    key = f"{target}:{site}"
    held = Held(key, holder_name(), ttl)
    await _take(store, key, held.holder, ttl, target, site)
    if target in OUTWARD:
        await _refuse_during_import(store, key, held.holder)
    beat = asyncio.create_task(_heartbeat(store, held), name=f"lease {key}")
    try:
        yield held
    finally:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat
        async with store.exclusive():
            await _leases().delete_one(
                {"_id": key, "holder": held.holder})


@asynccontextmanager
async def maybe_lease(store: Store, target: str, site: str, active: bool, *,
                      ttl: timedelta = DEFAULT_TTL) -> AsyncIterator[Held | None]:
    """The lease when ``active`` (an apply), else nothing (a dry run takes no lease)."""
    if not active:
        yield None
        return
    async with lease(store, target, site, ttl=ttl) as held:
        yield held
