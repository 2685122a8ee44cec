"""At most one run per (target, site) at a time, whoever starts it (DESIGN §4).

A lease is a ``SyncLease`` document with ``_id = "<target>:<site>"``, a holder and an
expiry. Taking it is an insert (the unique ``_id`` decides races); a lease past its
expiry may be replaced. Leases are short (``DEFAULT_TTL``, a minute) and a heartbeat
task renews them while the holder lives, so a holder killed with SIGKILL blocks the
next run for at most one TTL instead of an hour.

Times are the store's, never a host's (issue 25: a host 40 s fast stole live leases).
Each take and renewal asks the store for its clock (``hello``'s ``localTime``,
``store_time``) and writes ``expires_ms`` = that + TTL; whether a lease has expired is
judged by the store's clock too. Between readings a holder counts on from its last
reading with this host's boot-time clock (``CLOCK_BOOTTIME``: elapsed time, suspend
included, unmoved by setting the wall clock), from the moment the question was *sent*,
so its idea of the store's time is never behind it; a taker uses the store's answer
itself, never ahead of it. So the holder stops (``Held.gone``) before any taker can
see the lease expired, whatever either host's wall clock says.

Fencing: a holder whose heartbeat hangs, or whose event loop is blocked (a long plan, a
slow call in the loop) keeps no flag that could say so in time. So before every outside
command an apply calls ``Held.fence`` (through ``sync.runs.RunJournal.steps``, the
write that journals the command): one conditional write on the lease document that
matches only while it still names this holder and expires more than ``margin`` from now
by the store's clock, and refuses with ``LeaseLost`` otherwise; the command starts only
after that write and the journal write succeeded and the deadline still holds. A
renewal, likewise, matches only an unexpired lease of this holder: a lease that expired
is never kept, even if nobody took it (a closer may already have judged its run
crashed).

The holder's name (``holder_name``) is ``host:pid:nonce:identity``: the nonce makes it
unique per lease held; ``identity`` (``processes.process_identity``: boot, pid
namespace, start time) says which process it is. ``holder_is_gone`` judges only a
holder of this very pid namespace; any other's liveness is its lease's renewals alone.

Whole-document writes (insert, replace) for taking and renewing: the embedded store
mishandles ``$set`` of datetimes; the fence's ``$inc`` touches one integer.

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
import math
import os
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import WriteConcern
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError, PyMongoError

from ..errors import Busy, CheetoError, ExternalError
from ..models import SyncLease
from ..models.fields import new_id
from ..models.sync import epoch_ms
from ..processes import holder_process_gone, process_identity
from ..store import Store

DEFAULT_TTL = timedelta(seconds=60)
OUTWARD = frozenset({"ldap", "slurm", "puppet"})  # = migrate.writer.OUTWARD_TARGETS
MAX_MARGIN = timedelta(seconds=5)
log = logging.getLogger("cheeto_like.sync")
_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)
# the holder names of the leases this process holds right now: alive, whatever a caller
# of ``holder_is_gone(own_pid_is_gone=True)`` presumes about its own pid
_HOLDING: set[str] = set()


def _leases() -> AsyncCollection[Any]:
    """Leases are written ``w: majority`` (whatever the client's default): a lease the
    primary alone acknowledged can vanish in an election, and two runs would both
    hold it."""
    return SyncLease.get_pymongo_collection().with_options(
        write_concern=WriteConcern("majority"))


class LeaseLost(ExternalError):
    """This run's lease is no longer its own (taken over, removed, or not renewed in
    time by the store's clock): it stops before its next outside write."""


def elapsed() -> float:
    """Seconds on this host's boot-time clock: only differences are used, never the
    value as a time of day (so a wrong wall clock changes nothing)."""
    return time.clock_gettime(_CLOCK)


@dataclass(frozen=True)
class StoreTime:
    """One reading of the store's clock: ``ms`` (epoch milliseconds, the store's) and
    ``sent`` (``elapsed()`` just before the question left this host)."""

    ms: int
    sent: float

    def upper_ms(self) -> int:
        """The store's time now, never behind it: the reading plus what elapsed here
        since the question was sent (the answer was made after that)."""
        return self.ms + math.ceil((elapsed() - self.sent) * 1000)


def _as_ms(when: datetime) -> int:
    if when.tzinfo is None:  # a plain command's answer is naive UTC
        when = when.replace(tzinfo=UTC)
    return epoch_ms(when)


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


async def store_time(store: Store) -> StoreTime:
    """The store's clock (``hello``'s ``localTime``: on a replica set, the primary's).
    No fallback to this host's clock: a lease judged by two clocks is what broke."""
    sent = elapsed()
    try:
        hello = await store.database.command("hello")
    except PyMongoError as exc:
        raise ExternalError(f"could not read the store's clock: {exc}") from exc
    when = hello.get("localTime")
    if not isinstance(when, datetime):
        raise ExternalError("the store did not report its clock (hello: no localTime); "
                            "leases need the store's time")
    return StoreTime(_as_ms(when), sent)


def holder_name() -> str:
    """``host:pid:nonce:identity``, unique per call (the nonce); ``identity`` is empty
    where the process cannot be identified (no ``/proc`` of its own namespace)."""
    return f"{socket.gethostname()}:{os.getpid()}:{new_id()[:8]}:{process_identity() or ''}"


def holder_is_gone(holder: str, *, own_pid_is_gone: bool = False) -> bool:
    """True when ``holder`` names a process of this pid namespace, on this kernel boot,
    that no longer runs (or is a zombie, or whose pid another process now has). A holder
    of another namespace or host, or named by an older release (``host:pid:nonce``), is
    never presumed dead: its lease's expiry decides. A worker that starts a task passes
    ``own_pid_is_gone``: a lease naming this very process belongs to an earlier task of
    it (a worker child runs one task at a time), not to this run, unless this process
    holds it right now (a lease it took and has not released)."""
    parts = holder.split(":")
    if len(parts) != 4 or not parts[1].isdigit() or not parts[3]:
        return False
    pid = int(parts[1])
    if pid == os.getpid() and parts[3] == process_identity():
        return own_pid_is_gone and holder not in _HOLDING
    return holder_process_gone(parts[3], pid) is True


def _margin(ttl: timedelta) -> int:
    """How much of the lease must be left, in ms, for a command to start: the time from
    the fence to the command's start (a journal write) must fit in it."""
    return max(int(min(ttl / 6, MAX_MARGIN).total_seconds() * 1000), 0)


@dataclass
class Held:
    """A lease this process holds: ``expires_ms`` as the store last confirmed it (the
    store's clock), ``clock`` the reading it was computed from; ``lost`` says why it no
    longer holds it."""

    key: str
    holder: str
    ttl: timedelta
    expires_ms: int = 0
    clock: StoreTime = field(default_factory=lambda: StoreTime(0, elapsed()))
    acquired_ms: int = 0
    lost: str | None = None
    renewals: int = 0
    fences: int = 0

    @property
    def margin_ms(self) -> int:
        return _margin(self.ttl)

    def gone(self) -> str | None:
        """Why this lease is no longer ours, or None: taken over (seen by a renewal or a
        fence) or, counting on from the store's last clock reading, too close to its
        expiry for another command to start. No round trip."""
        if self.lost is None and self.expires_ms - self.clock.upper_ms() <= self.margin_ms:
            self.lost = (f"the lease {self.key} was not renewed in time (by the store's "
                         f"clock it expires within {self.margin_ms / 1000:g} s); this run "
                         "stopped")
            log.error("%s", self.lost)
        return self.lost

    def check(self) -> None:
        """Raise ``LeaseLost`` when the lease is no longer ours: stop before writing."""
        if self.gone() is not None:
            raise LeaseLost(self.lost or "")

    async def fence(self, store: Store) -> None:
        """Prove in the store that the lease is still ours before a command: one
        conditional write that matches only the lease naming this holder with more than
        ``margin`` left by the store's clock. ``LeaseLost`` (and ``lost`` set) otherwise."""
        self.check()
        floor = self.clock.upper_ms() + self.margin_ms
        try:
            async with store.exclusive():
                done = await _leases().update_one(
                    {"_id": self.key, "holder": self.holder, "expires_ms": {"$gt": floor}},
                    {"$inc": {"fences": 1}})
        except PyMongoError as exc:
            self.lost = f"could not check the lease {self.key} in the store ({exc}); " \
                "this run stopped"
            raise LeaseLost(self.lost) from exc
        if not done.matched_count:
            current = await _leases().find_one({"_id": self.key})
            self.lost = _lost_reason(self.key, self.holder, current)
            log.error("%s", self.lost)
            raise LeaseLost(self.lost)
        self.fences += 1
        self.check()  # the write's own time counts against the deadline


def _lost_reason(key: str, holder: str, current: dict[str, Any] | None) -> str:
    if current is None:
        return f"the lease {key} was removed; this run stopped"
    if current.get("holder") != holder:
        return f"the lease {key} was taken over by {current.get('holder')}; this run stopped"
    return f"the lease {key} expired by the store's clock before it was renewed; this run stopped"


def _doc(key: str, holder: str, ttl: timedelta, now_ms: int,
         acquired_ms: int | None = None) -> dict[str, object]:
    expires = now_ms + int(ttl.total_seconds() * 1000)
    return SyncLease(id=key, holder=holder, acquired_at=from_ms(acquired_ms or now_ms),
                     expires_at=from_ms(expires), expires_ms=expires).model_dump(by_alias=True)


async def _take(store: Store, held: Held, target: str, site: str) -> None:
    collection = _leases()
    key = held.key
    clock = await store_time(store)
    doc = _doc(key, held.holder, held.ttl, clock.ms)
    current: dict[str, Any] | None = None

    def taken() -> None:
        held.clock, held.expires_ms, held.acquired_ms = clock, int(doc["expires_ms"]), clock.ms

    async with store.exclusive():
        try:
            await collection.insert_one(doc)
            return taken()
        except DuplicateKeyError:
            # expired by the store's clock as read above: never ahead of the store
            old = await collection.find_one_and_replace(
                {"_id": key, "expires_ms": {"$lt": clock.ms}}, doc)
            if old is not None:
                log.warning("took over the expired lease %s of %s", key, old["holder"])
                return taken()
            current = await collection.find_one({"_id": key})
            if current is not None and "expires_ms" not in current \
                    and _as_ms(current["expires_at"]) < clock.ms:  # from an older release
                await collection.delete_one({"_id": key, "holder": current["holder"]})
                await collection.insert_one(doc)
                return taken()
    who = f" by {current['holder']} until {current['expires_at']:%H:%M:%S}" if current else ""
    raise Busy(f"another {target} sync for {site} is running{who}; retry when it ends "
               f"(a crashed run's lease expires within {int(held.ttl.total_seconds())} s)")


async def _renew(store: Store, held: Held) -> bool:
    """One renewal; False when the lease is no longer ours (``lost`` set)."""
    clock = await store_time(store)
    doc = _doc(held.key, held.holder, held.ttl, clock.ms, held.acquired_ms)
    async with store.exclusive():
        renewed = await _leases().find_one_and_replace(
            {"_id": held.key, "holder": held.holder,
             "expires_ms": {"$gt": clock.upper_ms()}}, doc)
    if renewed is None:
        current = await _leases().find_one({"_id": held.key})
        held.lost = _lost_reason(held.key, held.holder, current)
        log.error("%s", held.lost)
        return False
    held.clock, held.expires_ms = clock, int(doc["expires_ms"])
    held.renewals += 1
    return True


async def _heartbeat(store: Store, held: Held) -> None:
    """Renew every third of the TTL; give up (``lost``) when the lease is no longer
    ours, or when no renewal succeeded before, by the store's clock, it would expire."""
    period = max(held.ttl.total_seconds() / 3, 0.05)
    while held.lost is None:
        await asyncio.sleep(period)
        if held.gone() is not None:
            return
        try:
            if not await _renew(store, held):
                return
        except (PyMongoError, CheetoError) as exc:  # the store is down: retry until expiry
            log.warning("could not renew the lease %s: %s", held.key, exc)
            if held.gone() is not None:
                held.lost = f"{held.lost} (renewing failed: {exc})"
                return


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
    await _take(store, held, target, site)
    if target in OUTWARD:
        await _refuse_during_import(store, key, held.holder)
    _HOLDING.add(held.holder)
    beat = asyncio.create_task(_heartbeat(store, held), name=f"lease {key}")
    try:
        yield held
    finally:
        _HOLDING.discard(held.holder)
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
