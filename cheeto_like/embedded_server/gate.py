"""The transaction gate: one transaction at a time across all connections; every other data
command waits for it server-side.

Part of the embedded store's server (the package docstring says why it exists).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

from .ddl import forget_stale_collections
from .protocol import COMMITTED_MEMORY, DEFAULT_TRANSACTION_LIFETIME_S

logger = logging.getLogger("cheeto_like.embedded_server")


def transaction_database(msg: dict[str, Any], cmd: dict[str, Any]) -> str:
    """The database a transaction's command works in: its ``$db``, except for a client
    ``bulkWrite`` (always sent to ``admin``), whose ``nsInfo`` names it (one database:
    nx-27017 refuses a transaction across databases); that one's ``$db`` becomes it."""
    if "bulkWrite" in cmd:
        infos = cmd.get("nsInfo") or next(
            (doc["nsInfo"] for kind, doc in msg["sections"]
             if kind == "payload" and isinstance(doc, dict) and "nsInfo" in doc), [])
        names = {str(info.get("ns", "")).partition(".")[0] for info in infos
                 if isinstance(info, dict)}
        if len(names) == 1:
            cmd["$db"] = name = names.pop()  # nx-27017 opens its session on ``$db``
            return name
    return str(cmd.get("$db", "test"))


def _lsid(cmd: dict[str, Any]) -> str | None:
    from nx_27017.wire_protocol import _extract_session_id

    lsid = cmd.get("lsid")
    if not isinstance(lsid, dict):
        return None
    return _extract_session_id(lsid)


class TransactionGate:
    """One transaction (or one ungrouped command) on the store at a time.

    ``owner`` is the lsid whose transaction holds the gate and ``txn_number`` its
    transaction number; commands of other lsids wait (FIFO) for the gate. A transaction
    whose client is connected but silent (stopped, hung) for longer than ``timeout``
    while others wait is rolled back, like MongoDB's transaction lifetime limit; one
    that keeps sending commands is never cut short, and its waiters get ``LockTimeout``.
    """

    def __init__(self, handler: Any, timeout: float) -> None:
        self.handler = handler
        self.timeout = timeout
        self._lock = asyncio.Lock()
        self.owner: str | None = None
        self.txn_number: Any = None
        self.busy = 0  # owner commands running now
        self.last_active = 0.0
        self.owner_conns: set[str] = set()  # connections that carried the transaction
        self.committed: OrderedDict[str, Any] = OrderedDict()
        self.lifetime: float = DEFAULT_TRANSACTION_LIFETIME_S  # transactionLifetimeLimitSeconds
        self.started = 0.0  # when the owner's transaction began (loop time)

    async def acquire(self) -> bool:
        if not self._lock.locked() and not getattr(self._lock, "_waiters", None):
            await self._lock.acquire()  # the common case: free, so no timer is needed
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while True:
            remaining = deadline - loop.time()
            try:
                await asyncio.wait_for(self._lock.acquire(), max(0.001, min(remaining, 0.5)))
                return True
            except TimeoutError:
                pass
            now = loop.time()
            if (self.owner is not None and not self.busy
                    and now - self.last_active >= self.timeout):
                await self.abort_owner(f"silent for {self.timeout:g}s while another client "
                                       "waited")
            elif now >= deadline:
                return False

    @contextlib.asynccontextmanager
    async def owner_command(self) -> AsyncIterator[None]:
        """Mark an owner's command as running (a running transaction is never idle)."""
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1
            self.last_active = asyncio.get_running_loop().time()

    def take(self, lsid: str, txn_number: Any, conn_id: str) -> None:
        self.owner = lsid
        self.txn_number = txn_number
        self.owner_conns = {conn_id}
        self.last_active = self.started = asyncio.get_running_loop().time()

    def expired(self) -> bool:
        """The owner's transaction is older than transactionLifetimeLimitSeconds."""
        return (self.owner is not None
                and asyncio.get_running_loop().time() - self.started >= self.lifetime)

    async def reap(self) -> None:
        """mongod's transaction reaper: abort a transaction older than its lifetime, so
        it never keeps the gate from others (one running a command is aborted once that
        command ends: its next command, or this loop's next turn)."""
        while True:
            await asyncio.sleep(max(0.05, min(1.0, self.lifetime / 10)))
            if self.expired() and not self.busy:
                await self.abort_owner(f"older than transactionLifetimeLimitSeconds "
                                       f"({self.lifetime:g}s)")

    def release(self) -> None:
        self.owner = None
        self.txn_number = None
        self.owner_conns = set()
        self._lock.release()

    def remember_commit(self, lsid: str, txn_number: Any) -> None:
        """A retried commit of a transaction that did commit must answer ok."""
        self.committed[lsid] = txn_number
        self.committed.move_to_end(lsid)
        while len(self.committed) > COMMITTED_MEMORY:
            self.committed.popitem(last=False)

    def abort_open(self, lsid: str) -> int:
        """Roll back every open transaction of ``lsid`` (runs in a worker thread)."""
        handler = self.handler
        with handler._sessions_lock:
            open_ = [(db, sess) for (sid, db), sess in handler._sessions.items()
                     if sid == lsid and sess.in_transaction]
        for db_name, sess in open_:
            with handler._lock_for(db_name):
                try:
                    sess.abort_transaction()
                except Exception:  # the connection may be gone; never keep the gate
                    logger.exception("rolling back a transaction of %s failed", lsid)
                    sess._in_transaction = False
                with contextlib.suppress(Exception):  # a closed database has no cache
                    if (db := handler.databases.get(db_name)) is not None:
                        forget_stale_collections(db)
        return len(open_)

    def in_transaction(self, lsid: str) -> bool:
        handler = self.handler
        with handler._sessions_lock:
            return any(sid == lsid and sess.in_transaction
                       for (sid, _db), sess in handler._sessions.items())

    async def abort_owner(self, why: str) -> None:
        """Roll back the owner's transaction and open the gate (the gate is held). The
        owner is forgotten first, so a command of it arriving meanwhile is refused
        (NoSuchTransaction) rather than run outside its transaction."""
        lsid = self.owner
        if lsid is None:
            return
        self.owner = None
        self.txn_number = None
        self.owner_conns = set()
        count = await asyncio.to_thread(self.abort_open, lsid)
        logger.warning("rolled back the open transaction of session %s (%s; %d database(s))",
                       lsid, why, count)
        self._lock.release()
