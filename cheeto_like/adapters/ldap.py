"""The LDAP edge: a small async client over bonsai, plus RFC 4514/4515 escaping.

``Directory`` is what the reconciler talks to. It keeps a pool of bound connections,
tries the configured servers in order (and moves on when one cannot be reached), uses
LDAPS or StartTLS checked against ``ca_file``, binds with a simple bind, and puts a
timeout on every request. Results come back as plain ``Entry`` values (attribute names
lower-cased, every value a string), so nothing above this module sees bonsai types.

Errors are ``DirectoryError`` (an ``ExternalError``): one sentence naming the server or
the entry. Connection problems (no server answers, a request timed out) are transient;
a refused bind is not, and is never retried on the next server (the replicas share the
credentials).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import bonsai
from bonsai import LDAPClient, LDAPEntry, LDAPModOp, LDAPSearchScope
from bonsai._bonsai import ldapconnection
from bonsai.asyncio import AIOLDAPConnection
from pydantic import SecretStr

from ..config import LDAPConfig
from ..errors import ExternalError
from .ldap_wire import AddPipe, BindRefused, WireError

log = logging.getLogger(__name__)

Scope = Literal["base", "one", "sub"]
_SCOPES = {"base": LDAPSearchScope.BASE, "one": LDAPSearchScope.ONELEVEL,
           "sub": LDAPSearchScope.SUBTREE}
PAGE_SIZE = 500
ErrorCode = Literal["unreachable", "auth", "timeout", "not_found", "exists", "schema",
                    "refused", "other"]


# -- escaping (RFC 4514 DNs, RFC 4515 filters) -------------------------------------------

_DN_SPECIAL = frozenset('"+,;<>\\=')
_DN_PLAIN = re.compile(r'[^"+,;<>\\=\x00]*')  # none of the above, no NUL
_ATTR_TYPE = re.compile(r"^(?:[A-Za-z][A-Za-z0-9-]*|[0-9]+(?:\.[0-9]+)*)$")
_FILTER_SPECIAL = {"\\": r"\5c", "*": r"\2a", "(": r"\28", ")": r"\29", "\0": r"\00"}


def escape_dn_value(value: str) -> str:
    """An attribute value made safe for a DN (RFC 4514 §2.4): ``" + , ; < > \\ =`` get a
    backslash, so do a leading ``#`` or space and a trailing space; NUL becomes ``\\00``.
    Names and member DNs are nearly always plain: those return as they are, without the
    walk (a full sync escapes ~150,000 values)."""
    if value and _DN_PLAIN.fullmatch(value) and value[0] not in "# " and value[-1] != " ":
        return value
    out = []
    last = len(value) - 1
    for i, ch in enumerate(value):
        if ch == "\0":
            out.append("\\00")
        elif ch in _DN_SPECIAL or (i == 0 and ch in "# ") or (i == last and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def escape_filter_value(value: str) -> str:
    """An assertion value made safe for a search filter (RFC 4515 §3)."""
    return "".join(_FILTER_SPECIAL.get(ch, ch) for ch in value)


def rdn(attr: str, value: str) -> str:
    return f"{attr}={escape_dn_value(value)}"


def parse_dn(dn: str) -> list[list[tuple[str, str]]]:
    """A DN as RDNs, each a list of (attribute type, unescaped value) pairs.

    Understands backslash escapes of a character or of a hex byte (UTF-8 sequences are
    reassembled) and multi-valued RDNs (``+``). Raises ``ValueError`` on a malformed DN.
    """
    if not dn.strip():
        return []
    if "\\" not in dn:  # the common case: nothing escaped, split directly
        fast = [[_ava(dn, part) for part in rdn_text.split("+")] for rdn_text in dn.split(",")]
        return fast
    rdns: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] = []
    i, n = 0, len(dn)
    while True:
        eq = dn.find("=", i)
        if eq < 0:
            raise ValueError(f"malformed DN {dn!r}: missing '=' after {dn[i:]!r}")
        attr = dn[i:eq].strip()
        if not _ATTR_TYPE.match(attr):
            raise ValueError(f"malformed DN {dn!r}: bad attribute type {attr!r}")
        i = eq + 1
        raw = bytearray()
        while i < n and dn[i] not in ",+":
            ch = dn[i]
            if ch == "\\":
                if i + 1 >= n:
                    raise ValueError(f"malformed DN {dn!r}: dangling backslash")
                pair = dn[i + 1:i + 3]
                if len(pair) == 2 and all(c in "0123456789abcdefABCDEF" for c in pair):
                    raw.append(int(pair, 16))
                    i += 3
                    continue
                raw.extend(dn[i + 1].encode())
                i += 2
                continue
            raw.extend(ch.encode())
            i += 1
        current.append((attr, raw.decode("utf-8", errors="replace")))
        if i >= n:
            rdns.append(current)
            return rdns
        if dn[i] == ",":
            rdns.append(current)
            current = []
        i += 1


def _ava(dn: str, text: str) -> tuple[str, str]:
    attr, eq, value = text.partition("=")
    attr = attr.strip()
    if not eq or not _ATTR_TYPE.match(attr):
        raise ValueError(f"malformed DN {dn!r}: bad attribute type {attr!r}")
    return attr, value


@functools.lru_cache(maxsize=65536)
def normalize_dn(dn: str) -> str:
    """A comparable form: attribute types and values lower-cased, spaces trimmed, AVAs of
    a multi-valued RDN sorted, values re-escaped canonically. Good for the
    case-insensitive attributes DNs are built from here (uid, cn, ou, dc)."""
    return ",".join(
        "+".join(sorted(f"{t.lower()}={escape_dn_value(v.strip().lower())}" for t, v in r))
        for r in parse_dn(dn))


def first_rdn_value(dn: str) -> str:
    return parse_dn(dn)[0][0][1]


def parent_dn(dn: str) -> str:
    """The DN without its first RDN, in the original spelling."""
    i = 0
    while i < len(dn):
        if dn[i] == "\\":
            i += 2
            continue
        if dn[i] == ",":
            return dn[i + 1:]
        i += 1
    return ""


def dn_depth(dn: str) -> int:
    return len(parse_dn(dn))


# -- values --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One entry as read: attribute names lower-cased, values as strings."""

    dn: str
    attrs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def get(self, name: str) -> tuple[str, ...]:
        return self.attrs.get(name.lower(), ())

    def first(self, name: str) -> str | None:
        values = self.get(name)
        return values[0] if values else None

    @property
    def object_classes(self) -> frozenset[str]:
        return frozenset(v.lower() for v in self.get("objectClass"))


@dataclass(frozen=True)
class Mod:
    """One modification of a modify request; ``delete`` without values drops the attribute."""

    op: Literal["add", "delete", "replace"]
    attr: str
    values: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.op} {self.attr}" + (f" ({len(self.values)})" if self.values else "")


_MOD_OPS = {"add": LDAPModOp.ADD, "delete": LDAPModOp.DELETE, "replace": LDAPModOp.REPLACE}


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="surrogateescape")
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return str(value)


def _entry(raw: Any) -> Entry:
    attrs: dict[str, tuple[str, ...]] = {}
    for name, values in raw.items(exclude_dn=True):
        attrs[name.lower()] = tuple(_text(v) for v in values)
    return Entry(str(raw.dn), attrs)


# -- errors --------------------------------------------------------------------------------


class DirectoryError(ExternalError):
    """A failed LDAP request or connection; ``code`` says which kind."""

    def __init__(self, message: str, *, code: ErrorCode = "other", transient: bool = False,
                 dn: str | None = None) -> None:
        super().__init__(message, transient=transient)
        self.code = code
        self.dn = dn


# LDAP result codes (RFC 4511) the callers tell apart; bonsai's errors carry theirs as
# ``code``, and ``ldap_wire`` reads them off the reply
_RESULT_CODES: dict[int, ErrorCode] = {32: "not_found", 68: "exists", 65: "schema",
                                       50: "refused", 53: "refused", 66: "refused"}


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.replace("\n", " ")


def _translate(exc: Exception, what: str, dn: str | None) -> DirectoryError:
    code = _RESULT_CODES.get(getattr(exc, "code", -1), "other")
    where = f" {dn}" if dn else ""
    return DirectoryError(f"LDAP {what}{where} failed: {_reason(exc)}", code=code, dn=dn)


_CONNECTION_ERRORS = (bonsai.ConnectionError, bonsai.ClosedConnection, OSError)
_TIMEOUTS = (bonsai.TimeoutError, asyncio.TimeoutError)


# -- the client ------------------------------------------------------------------------------


class _Connection(AIOLDAPConnection):
    """bonsai's asyncio connection without the busy loop, carrying several requests.

    The stock class waits for a result by registering both a reader and a *writer*
    callback per request; a socket is almost always writable, so every pending request
    re-runs its callback on every turn of the event loop. With a few connections busy that
    spins a core and starves slapd on the same host (adds fell from ~2,000/s to ~300/s at
    concurrency 8). Once bound, this class keeps one reader per connection while any
    request is in flight and, when the socket turns readable, asks libldap for each of
    them (``ldap_result`` reads every message that arrived and keeps the others' for
    their turn), so requests pipeline on one connection (LDAP allows several outstanding
    operations; slapd runs them on its thread pool). A timer backing off from 2 ms to
    50 ms polls as well while anything is in flight: it lets libldap finish sending a
    request too large for the socket buffer (it flushes the rest whenever a result is
    polled); one ``ldap_result`` call reads everything already buffered (TLS included),
    so the reader path alone never leaves a reply unseen.
    """

    bound = False  # set by Directory after the connect/bind, which needs the writer

    def __init__(self, client: LDAPClient, loop: asyncio.AbstractEventLoop | None = None
                 ) -> None:
        super().__init__(client, loop)
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.users = 0  # requests handed this connection by Directory and not yet done
        self.alone = False  # a search holds it: nothing else may join
        self._watched = -1
        self._timer: asyncio.TimerHandle | None = None
        self._delay = 0.002

    def _track(self, msg_id: int) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = self._loop.create_future()
        self.waiting[msg_id] = fut
        if self._watched < 0:
            self._watched = self.fileno()
            self._loop.add_reader(self._watched, self._drain)
        if self._timer is None:
            self._delay = 0.002
            self._timer = self._loop.call_later(self._delay, self._tick)
        return fut

    def _tick(self) -> None:
        """The fallback poll: 2 ms after the connection turned busy, then backing off to
        50 ms while it stays busy (results normally arrive through the reader)."""
        self._timer = None
        self._drain()
        if self.waiting:
            self._delay = min(self._delay * 2, 0.05)
            self._timer = self._loop.call_later(self._delay, self._tick)

    def _drain(self) -> None:
        """Hand every request whose result arrived its result (or error)."""
        for msg_id, fut in list(self.waiting.items()):
            if fut.done():  # cancelled (a timeout): the caller drops this connection
                del self.waiting[msg_id]
                continue
            try:
                result = ldapconnection.get_result(self, msg_id)
            except bonsai.LDAPError as exc:
                del self.waiting[msg_id]
                fut.set_exception(exc)
                continue
            if result is not None:
                del self.waiting[msg_id]
                fut.set_result(result)
        if not self.waiting:
            self._idle_watch()

    def _idle_watch(self) -> None:
        if self._watched >= 0:
            self._loop.remove_reader(self._watched)
            self._watched = -1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def _poll(self, msg_id: int, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        if not self.bound:
            return await super()._poll(msg_id, timeout)
        fut = self._track(msg_id)
        if timeout is None:
            return await fut
        return await asyncio.wait_for(fut, timeout)

    def close(self) -> None:
        self._idle_watch()
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(bonsai.ClosedConnection("the connection was closed"))
        self.waiting.clear()
        super().close()


class Directory:
    """Pooled, failing-over access to the configured directory.

    Use as ``async with Directory(config) as d:``; entering binds once, so a wrong
    password or an unreachable directory fails right there with one clear line.
    ``writes`` counts the adds, modifies and deletes that succeeded.
    """

    def __init__(self, config: LDAPConfig, *, max_connections: int | None = None,
                 window: int = 1) -> None:
        self.config = config
        self.timeout = config.request_timeout_seconds
        self.connect_timeout = config.connect_timeout_seconds
        self.max_connections = max_connections or config.pool_max_connections
        self.window = max(window, 1)  # requests in flight per connection
        self.warm = min(config.pool_idle_connections, self.max_connections)
        self._slots = asyncio.Semaphore(self.max_connections * self.window)
        self._live: list[_Connection] = []  # bound connections, busy or idle
        self._opening = 0
        self._preferred = 0
        self._closed = False
        self.writes: Counter[str] = Counter()
        self.server: str | None = None  # the server the last connection went to
        self._peak = 0  # most requests one bonsai connection carried at once
        self._pipe: AddPipe | None = None  # the adds' own connections, made on the first

    @property
    def connections(self) -> int:
        """Bound connections open now (the adds' included)."""
        return len(self._live) + (self._pipe.connections if self._pipe else 0)

    @property
    def peak_in_flight(self) -> int:
        """Most requests one connection carried at once."""
        return max(self._peak, self._pipe.peak_in_flight if self._pipe else 0)

    def _room(self) -> bool:
        """Whether one more connection keeps the total within ``max_connections``."""
        return self.connections + self._opening < self.max_connections

    async def __aenter__(self) -> Directory:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Bind now (``pool_idle_connections`` connections, at least one), so that
        configuration problems surface before any work."""
        async with self._connection():
            pass
        while len(self._live) < self.warm:
            self._live.append(await self._connect())

    async def close(self) -> None:
        self._closed = True
        if self._pipe is not None:
            await self._pipe.close()
        while self._live:
            conn = self._live.pop()
            try:
                conn.close()
            except Exception:  # pragma: no cover - closing a broken socket
                log.debug("closing an idle LDAP connection failed", exc_info=True)

    # -- connections -----------------------------------------------------------------------

    def _client(self, url: str) -> LDAPClient:
        starttls = self.config.use_tls and url.lower().startswith("ldap://")
        client = LDAPClient(url, tls=starttls)
        client.set_async_connection_class(_Connection)
        if self.config.ca_file is not None:
            client.set_ca_cert(str(self.config.ca_file))
        client.set_cert_policy(self.config.cert_policy)
        client.set_auto_page_acquire(True)
        if self.config.login_dn:
            password = self.config.password.get_secret_value() if self.config.password else ""
            client.set_credentials("SIMPLE", user=self.config.login_dn, password=password)
        return client

    async def _connect(self) -> _Connection:
        servers = self.config.servers
        order = [(self._preferred + k) % len(servers) for k in range(len(servers))]
        problems = []
        for index in order:
            url = servers[index]
            try:
                conn: _Connection = await asyncio.wait_for(
                    self._client(url).connect(is_async=True, timeout=self.connect_timeout),
                    self.connect_timeout + 1)
                conn.bound = True
            except bonsai.AuthenticationError:
                who = self.config.login_dn or "anonymous"
                raise DirectoryError(f"LDAP bind as {who} refused by {url}: invalid credentials",
                                     code="auth") from None
            except _TIMEOUTS:
                problems.append(f"{url}: no answer within {self.connect_timeout:g}s")
            except (*_CONNECTION_ERRORS, bonsai.LDAPError) as exc:
                problems.append(f"{url}: {_reason(exc)}")
            else:
                if index != self._preferred:
                    log.warning("LDAP: failed over to %s (%s)", url, "; ".join(problems))
                self._preferred = index
                self.server = url
                return conn
        raise DirectoryError(f"cannot reach any LDAP server ({'; '.join(problems)})",
                             code="unreachable", transient=True)

    @asynccontextmanager
    async def _connection(self, *, alone: bool = False) -> AsyncIterator[_Connection]:
        """A bound connection for one request: the least busy one with room in its
        window, else a new one while fewer than ``max_connections`` exist or are being
        made. ``alone`` (searches): a connection nothing else is in flight on, kept to
        this request (a search's reply was seen to go missing when writes shared its
        connection), made for it when every connection is busy and closed after it if
        the pool is then over size. A connection that failed (lost, timed out) is closed
        and forgotten; its other requests in flight fail with it and are retried by
        their own ``_run``."""
        if self._closed:
            raise DirectoryError("the LDAP client is closed")
        async with self._slots:
            if alone:
                conn = next((c for c in self._live if not c.users), None)
            else:
                conn = min((c for c in self._live if not c.alone), key=lambda c: c.users,
                           default=None)
            if conn is None or (conn.users >= self.window and self._room()):
                self._opening += 1
                try:
                    conn = await self._connect()
                finally:
                    self._opening -= 1
                self._live.append(conn)
            conn.users += 1
            conn.alone = alone
            self._peak = max(self._peak, conn.users)
            healthy = False
            try:
                yield conn
                healthy = True
            except bonsai.LDAPError as exc:
                # a result code (no such object, …) leaves the connection usable
                healthy = not isinstance(exc, (*_CONNECTION_ERRORS, *_TIMEOUTS))
                raise
            finally:
                conn.users -= 1
                conn.alone = False
                spare = alone and len(self._live) > self.max_connections
                if not healthy or conn.closed or self._closed or spare:
                    if conn in self._live:
                        self._live.remove(conn)
                    try:
                        conn.close()
                    except Exception:  # pragma: no cover
                        log.debug("closing an LDAP connection failed", exc_info=True)

    async def _run[T](self, what: str, dn: str | None,
                      call: Callable[[_Connection], Awaitable[T]], *, alone: bool = False) -> T:
        """One request on a pooled connection. A connection that turns out dead (pooled
        connections go stale unnoticed) is dropped and the request retried once on a fresh
        one, which may be another server."""
        for attempt in (1, 2):
            try:
                async with self._connection(alone=alone) as conn:
                    return await asyncio.wait_for(call(conn), self.timeout + 1)
            except _TIMEOUTS:
                where = f" {dn}" if dn else ""
                raise DirectoryError(f"LDAP {what}{where} timed out after {self.timeout:g}s",
                                     code="timeout", transient=True, dn=dn) from None
            except _CONNECTION_ERRORS as exc:
                if attempt == 1:
                    log.info("LDAP %s: connection lost (%s); retrying", what, _reason(exc))
                    continue
                raise DirectoryError(f"LDAP {what} {dn or ''}: connection lost: {_reason(exc)}",
                                     code="unreachable", transient=True, dn=dn) from None
            except bonsai.LDAPError as exc:
                raise _translate(exc, what, dn) from None
        raise AssertionError("unreachable")  # pragma: no cover

    # -- requests --------------------------------------------------------------------------

    async def whoami(self) -> str:
        return str(await self._run("whoami", None, lambda conn: conn.whoami(self.timeout),
                                   alone=True))

    async def search(self, base: str, scope: Scope = "sub", filter: str = "(objectClass=*)",
                     attrs: Sequence[str] | None = None, *,
                     missing_ok: bool = True) -> list[Entry]:
        """Entries under ``base`` (paged, so server size limits do not truncate); a
        missing base gives ``[]`` unless ``missing_ok`` is false."""
        attrlist = list(attrs) if attrs is not None else None

        async def call(conn: _Connection) -> list[Entry]:
            if scope == "base":
                found = await conn.search(base, _SCOPES[scope], filter, attrlist,
                                          timeout=self.timeout)
                return [_entry(e) for e in found]
            pages = await conn.paged_search(base, _SCOPES[scope], filter, attrlist,
                                            timeout=self.timeout, page_size=PAGE_SIZE)
            return [_entry(e) async for e in pages]

        try:
            return await self._run("search", base, call, alone=True)
        except DirectoryError as exc:
            if missing_ok and exc.code == "not_found":
                return []
            raise

    async def get(self, dn: str, attrs: Sequence[str] | None = None) -> Entry | None:
        found = await self.search(dn, "base", "(objectClass=*)", attrs)
        return found[0] if found else None

    async def exists(self, dn: str) -> bool:
        return await self.get(dn, ["1.1"]) is not None

    async def add(self, dn: str, attrs: Mapping[str, Iterable[str]]) -> None:
        """Adds go over ``ldap_wire.AddPipe`` (encoded once, pipelined; see its module
        for why), to the servers in the order the bonsai pool would try them now."""
        if self._closed:
            raise DirectoryError("the LDAP client is closed")
        if self._pipe is None:
            servers = self.config.servers
            first = self._preferred % len(servers)
            self._pipe = AddPipe(self.config, room=self._room, window=self.window,
                                 servers=servers[first:] + servers[:first])
        try:
            async with self._slots:  # the pool's bound on requests in flight, shared
                result = await self._pipe.add(dn, attrs)
        except TimeoutError:
            raise DirectoryError(f"LDAP add {dn} timed out after {self.timeout:g}s",
                                 code="timeout", transient=True, dn=dn) from None
        except BindRefused:
            who = self.config.login_dn or "anonymous"
            raise DirectoryError(f"LDAP bind as {who} refused: invalid credentials",
                                 code="auth") from None
        except WireError as exc:
            raise DirectoryError(f"LDAP add {dn}: connection lost: {exc}",
                                 code="unreachable", transient=True, dn=dn) from None
        if result.code:
            raise DirectoryError(f"LDAP add {dn} failed: {result.text}",
                                 code=_RESULT_CODES.get(result.code, "other"), dn=dn)
        self.writes["add"] += 1

    async def modify(self, dn: str, mods: Sequence[Mod]) -> None:
        if not mods:
            return

        async def call(conn: _Connection) -> None:
            entry = LDAPEntry(dn, conn)
            for mod in mods:
                entry.change_attribute(mod.attr, _MOD_OPS[mod.op], *mod.values)
            await entry.modify()

        await self._run("modify", dn, call)
        self.writes["modify"] += 1

    async def delete(self, dn: str, *, missing_ok: bool = False) -> bool:
        """Delete one (leaf) entry; with ``missing_ok`` an absent entry is not an error.
        Returns whether something was deleted."""
        try:
            await self._run("delete", dn, lambda conn: conn.delete(dn))
        except DirectoryError as exc:
            if missing_ok and exc.code == "not_found":
                return False
            raise
        self.writes["delete"] += 1
        return True


async def check_bind(config: LDAPConfig, dn: str, password: str) -> str:
    """Bind as ``dn`` with ``password`` over the configured servers; returns whoami.
    (For checking that a projected password works.)"""
    as_user = config.model_copy(update={"login_dn": dn, "password": SecretStr(password)})
    async with Directory(as_user, max_connections=1) as directory:
        return await directory.whoami()
