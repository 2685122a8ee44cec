"""Failed sign-ins, counted in the store so every API process shares them.

Why in the store: an in-memory table is per process (several API workers each counted
their own) and had to be bounded, and clearing it when full let a spray of junk names
unlock a locked user. Here each counter is one small document in the raw collection
``signin_failures``, so memory in the API process is nothing and no key is forgotten
before its window ends.

The rule (N = ``api.login_max_failures``, U = ``api.login_user_max_failures``,
A = ``api.login_address_max_failures``, all within ``api.login_window_seconds``):

- **(user, address)**: after N failures for one name from one address, that name is
  refused from that address. This is what makes guessing slow for one attacker.
- **user**: after U failures for one name across all addresses, the name is refused
  from every address *that has failures of its own for that name* in the window; an
  address with none is never refused because of the name. So nobody can keep a person
  (an admin) locked out by guessing: the person signs in from their own machine.
  An attacker with many addresses gets at most one more guess per fresh address.
- **address**: after A failures from one address (any names), it is refused for every
  name: the ceiling for sprays. It is high, so one person's typos behind a shared
  address (a login node, a NAT) never lock out colleagues, who have no failures of
  their own for their names there.

A success clears only its (user, address) counter: clearing the name's count would
let an attacker's addresses start again whenever the real person signs in.

Each counter document holds the store-clock times (epoch ms) of its latest failures,
at most as many as its limit (``$push`` with ``$slice``), so a key is limited exactly
while its limit-th latest failure is younger than the window. A refusal is counted in
``cheeto_auth_limiter_refusals_total`` by the limit that holds longest (``pair``,
``user`` or ``address``), a failure in ``cheeto_auth_signin_failures_total``. Failures are one
``bulk_write`` of single-document upserts outside any transaction: atomic per document,
no write conflicts between processes. Times come from the store's clock (``hello``'s
``localTime``), the same for every API host; the host's clock is used only if the store
does not answer one. Rows vanish after their window: an integer ``expires_ms`` swept
by this module (indexed; works on a store without a TTL monitor), plus a TTL index on
``last`` (``$currentDate``, the store's clock) at the largest window a config allows,
which a real MongoDB applies on its own. Reads are one ``$in`` on ``_id`` (three ids).

The check and the count are two steps: concurrent tries that all pass the check before
any has failed are each counted afterwards, so a burst of c parallel tries gets c - 1
more guesses at most, once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pymongo import UpdateOne

from .. import metrics

log = logging.getLogger("cheeto_like.api")
COLLECTION = "signin_failures"
MAX_KEY_TEXT = 64
TTL_SECONDS = 86_400  # the largest login_window_seconds a config may set
SWEEP_EVERY_SECONDS = 60.0


@dataclass(frozen=True)
class Policy:
    max_failures: int = 5            # per (user, address)
    user_max_failures: int = 20      # per user name, across addresses
    address_max_failures: int = 100  # per address, across names
    window: float = 300.0            # seconds

    @classmethod
    def from_config(cls, api: Any) -> Policy:
        """The config's limits; the name's and the address's never below the pair's (a
        config raising only login_max_failures keeps its meaning)."""
        pair = api.login_max_failures
        return cls(max_failures=pair,
                   user_max_failures=max(pair, api.login_user_max_failures),
                   address_max_failures=max(pair, api.login_address_max_failures),
                   window=api.login_window_seconds)


def _keys(user: str, address: str) -> tuple[str, str, str]:
    """Document ids: the pair, the name, the address (names lower-cased, both cut short:
    a junk name of any length is one key)."""
    name, addr = user.lower()[:MAX_KEY_TEXT], address[:MAX_KEY_TEXT]
    return f"p:{addr}|{name}", f"u:{name}", f"a:{addr}"


def _as_ms(when: datetime) -> int:
    if when.tzinfo is None:  # a plain command's answer is naive UTC
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


class LoginLimiter:
    """The sign-in limiter of one app; the counts live in ``store``'s database, passed
    to each call (the app's store may be connected only when it starts)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._ready: set[int] = set()  # databases whose indexes this process made
        self._swept = -SWEEP_EVERY_SECONDS

    @property
    def window_ms(self) -> int:
        return int(self.policy.window * 1000)

    async def now_ms(self, database: Any) -> int:
        """The store's clock (the same for every API host)."""
        try:
            hello = await database.command("hello")
        except Exception as exc:
            log.debug("no clock from the store (%s); using this host's", exc)
            return int(time.time() * 1000)
        when = hello.get("localTime")
        return _as_ms(when) if isinstance(when, datetime) else int(time.time() * 1000)

    async def _collection(self, database: Any) -> Any:
        collection = database[COLLECTION]
        if id(database) not in self._ready:
            await collection.create_index([("expires_ms", 1)], name="signin_expiry")
            await collection.create_index([("last", 1)], name="signin_ttl",
                                          expireAfterSeconds=TTL_SECONDS)
            self._ready.add(id(database))
        return collection

    def _recent(self, doc: dict[str, Any] | None, now: int) -> list[int]:
        if doc is None:
            return []
        return sorted(t for t in doc.get("t", []) if t > now - self.window_ms)

    async def retry_after(self, database: Any, user: str, address: str) -> float:
        """Seconds until ``user`` may try again from ``address`` (0: go ahead)."""
        collection = await self._collection(database)
        now = await self.now_ms(database)
        pair_id, user_id, addr_id = _keys(user, address)
        docs = {d["_id"]: d async for d in collection.find(
            {"_id": {"$in": [pair_id, user_id, addr_id]}})}
        pair = self._recent(docs.get(pair_id), now)
        by_user = self._recent(docs.get(user_id), now)
        by_addr = self._recent(docs.get(addr_id), now)
        p, w = self.policy, self.window_ms
        until, scope = now, None
        if len(pair) >= p.max_failures and pair[-p.max_failures] + w > until:
            until, scope = pair[-p.max_failures] + w, "pair"
        if len(by_addr) >= p.address_max_failures \
                and by_addr[-p.address_max_failures] + w > until:
            until, scope = by_addr[-p.address_max_failures] + w, "address"
        if pair and len(by_user) >= p.user_max_failures:
            # the name's lock holds here only while this address has failures for it
            held = min(by_user[-p.user_max_failures] + w, pair[-1] + w)
            if held > until:
                until, scope = held, "user"
        if scope is not None:  # the limit that holds longest: pair, user or address
            metrics.inc("cheeto_auth_limiter_refusals_total", scope=scope)
        return (until - now) / 1000

    async def failed(self, database: Any, user: str, address: str) -> None:
        """Count one failure for the pair, the name and the address (every caller counts
        a wrong password here: the token endpoint and the dashboard's sign-in form)."""
        metrics.inc("cheeto_auth_signin_failures_total", method="password")
        collection = await self._collection(database)
        now = await self.now_ms(database)
        pair_id, user_id, addr_id = _keys(user, address)
        p = self.policy

        def count(key: str, cap: int) -> UpdateOne:
            return UpdateOne({"_id": key}, {
                "$push": {"t": {"$each": [now], "$slice": -cap}},
                "$max": {"expires_ms": now + self.window_ms},
                "$currentDate": {"last": True}}, upsert=True)

        await collection.bulk_write([count(pair_id, p.max_failures),
                                     count(user_id, p.user_max_failures),
                                     count(addr_id, p.address_max_failures)], ordered=False)
        await self._sweep(collection, now)

    async def succeeded(self, database: Any, user: str, address: str) -> None:
        """A right password: this (user, address) starts afresh; the name's and the
        address's counts stay (see the module's rule)."""
        collection = await self._collection(database)
        await collection.delete_one({"_id": _keys(user, address)[0]})

    async def _sweep(self, collection: Any, now: int) -> None:
        """Drop rows whose window has ended (at most once a minute per process)."""
        if time.monotonic() - self._swept < SWEEP_EVERY_SECONDS:
            return
        self._swept = time.monotonic()
        await collection.delete_many({"expires_ms": {"$lt": now}})
