"""LDAP adds encoded here and pipelined over plain asyncio sockets.

Why not bonsai for these: a full sync of a large site is ~34,000 adds, and bonsai's path
costs ~250 µs of client CPU per entry (an ``LDAPEntry`` whose value lists call back into
Python from C, a future per request, a timer per request); ``ldapadd`` of the same
LDIF costs ~35 µs. On a two-core head node that CPU is taken from slapd. An add request
is a few nested BER strings (RFC 4511 §4.7), so ``AddPipe`` encodes it in one pass,
keeps ``window`` requests in flight on each of its connections (within the pool's
bound), and reads the replies in bulk (one read hands every reply that arrived to its
waiter).

Only what adds need is here: connect (``ldap://`` with or without StartTLS,
``ldaps://``: the URLs ``LDAPConfig`` accepts), a simple bind, AddRequest/AddResponse,
the Notice of Disconnection, and unbind. Searches, modifies and deletes stay on bonsai
(``adapters/ldap.py``), which also does the first bind, so a wrong password or an
unreachable server has already been reported in its words before an add is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..config import LDAPConfig

STARTTLS_OID = b"1.3.6.1.4.1.1466.20037"
NOTICE_OF_DISCONNECTION = 0  # the message id of an unsolicited notification
MAX_REPLY = 1 << 20

# application tags (RFC 4511 §4.2–4.12)
_BIND_REQUEST, _BIND_RESPONSE = 0x60, 0x61
_UNBIND_REQUEST = 0x42
_ADD_REQUEST, _ADD_RESPONSE = 0x68, 0x69
_EXTENDED_REQUEST, _EXTENDED_RESPONSE = 0x77, 0x78
_SEQUENCE, _SET, _INTEGER, _OCTETS, _ENUMERATED = 0x30, 0x31, 0x02, 0x04, 0x0A

# result codes worth a name in a message (RFC 4511 Appendix A)
RESULT_NAMES = {
    0: "success", 1: "operationsError", 2: "protocolError", 3: "timeLimitExceeded",
    8: "strongerAuthRequired", 10: "referral", 11: "adminLimitExceeded",
    16: "noSuchAttribute", 17: "undefinedAttributeType", 18: "inappropriateMatching",
    19: "constraintViolation", 20: "attributeOrValueExists", 21: "invalidAttributeSyntax",
    32: "noSuchObject", 34: "invalidDNSyntax", 49: "invalidCredentials",
    50: "insufficientAccessRights", 51: "busy", 52: "unavailable", 53: "unwillingToPerform",
    64: "namingViolation", 65: "objectClassViolation", 66: "notAllowedOnNonLeaf",
    68: "entryAlreadyExists", 69: "objectClassModsProhibited", 80: "other",
}


class WireError(Exception):
    """The connection failed (refused, closed, TLS, a malformed reply): transient."""


class BindRefused(Exception):
    """The server refused the bind's credentials."""


@dataclass(frozen=True)
class Result:
    code: int
    message: str

    @property
    def text(self) -> str:
        name = RESULT_NAMES.get(self.code, "result")
        return f"{name} ({self.code})" + (f": {self.message}" if self.message else "")


# -- BER ------------------------------------------------------------------------------------


def _tlv(tag: int, body: bytes) -> bytes:
    n = len(body)
    if n < 0x80:
        return bytes((tag, n)) + body
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((tag, 0x80 | len(size))) + size + body


def _integer(value: int) -> bytes:
    return _tlv(_INTEGER, value.to_bytes(value.bit_length() // 8 + 1, "big", signed=True))


def _message(msg_id: int, op: bytes) -> bytes:
    return _tlv(_SEQUENCE, _integer(msg_id) + op)


def add_request(dn: str, attrs: Mapping[str, Iterable[str]]) -> bytes:
    """The protocolOp of an add (``[APPLICATION 8]``); attributes without values are left
    out, as an add may not carry an empty one."""
    parts = []
    for name, values in attrs.items():
        encoded = b"".join(_tlv(_OCTETS, str(v).encode()) for v in values)
        if encoded:
            parts.append(_tlv(_SEQUENCE, _tlv(_OCTETS, name.encode()) + _tlv(_SET, encoded)))
    return _tlv(_ADD_REQUEST, _tlv(_OCTETS, dn.encode()) + _tlv(_SEQUENCE, b"".join(parts)))


def _bind_request(dn: str, password: str) -> bytes:
    return _tlv(_BIND_REQUEST, _integer(3) + _tlv(_OCTETS, dn.encode())
                + _tlv(0x80, password.encode()))


def _header(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int, int] | None:
    """(tag, length, where the body starts) of the element at ``pos``, or None when the
    buffer does not hold its header yet."""
    if pos + 2 > len(buf):
        return None
    tag, first = buf[pos], buf[pos + 1]
    if first < 0x80:
        return tag, first, pos + 2
    count = first & 0x7F
    if count == 0 or count > 4:
        raise WireError(f"malformed LDAP reply (length of {count} bytes)")
    if pos + 2 + count > len(buf):
        return None
    length = int.from_bytes(buf[pos + 2:pos + 2 + count], "big")
    if length > MAX_REPLY:  # replies to adds are a few bytes: never buffer a server's GBs
        raise WireError(f"LDAP reply of {length} bytes refused")
    return tag, length, pos + 2 + count


def _element(buf: bytes, pos: int, tag: int) -> tuple[bytes, int]:
    got = _header(buf, pos)
    if got is None or got[2] + got[1] > len(buf) or got[0] != tag:
        raise WireError("malformed LDAP reply")
    return buf[got[2]:got[2] + got[1]], got[2] + got[1]


def parse_message(body: bytes) -> tuple[int, int, Result]:
    """(message id, protocolOp tag, the LDAPResult at its start) of one LDAPMessage's
    body; every response this module reads begins with an LDAPResult."""
    raw_id, pos = _element(body, 0, _INTEGER)
    msg_id = int.from_bytes(raw_id, "big", signed=True)
    got = _header(body, pos)
    if got is None:
        raise WireError("malformed LDAP reply")
    op_tag, op_len, start = got
    op = body[start:start + op_len]
    code, at = _element(op, 0, _ENUMERATED)
    _, at = _element(op, at, _OCTETS)  # matchedDN
    message, _ = _element(op, at, _OCTETS)
    return msg_id, op_tag, Result(int.from_bytes(code, "big"), _printable(message))


def _printable(raw: bytes) -> str:
    """Server text as one line of printable characters (it ends up in error lines)."""
    text = raw.decode("utf-8", "replace")
    return "".join(ch if ch.isprintable() else " " for ch in text).strip()


# -- one connection ------------------------------------------------------------------------


def tls_context(config: LDAPConfig) -> ssl.SSLContext:
    """The checks libldap makes for ``cert_policy``: ``demand`` and ``try`` verify the
    chain and the host name; ``allow`` and ``never`` take any certificate."""
    context = ssl.create_default_context(
        cafile=str(config.ca_file) if config.ca_file is not None else None)
    if config.cert_policy in ("allow", "never"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class WireConnection(asyncio.Protocol):
    """One bound connection, as an asyncio protocol: requests are written as they come
    and each reply is handed to its waiter from ``data_received`` (no reader task, no
    stream buffer: one callback per batch of replies)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiting: dict[int, asyncio.Future[Result]] = {}
        self.next_id = 1
        self.users = 0
        self.failed: str | None = None
        self._buf = b""

    @classmethod
    async def open(cls, url: str, config: LDAPConfig) -> WireConnection:
        """Connect, StartTLS when ``use_tls`` asks for it, bind; ``WireError`` when the
        server cannot be reached or spoken to, ``BindRefused`` on bad credentials."""
        loop = asyncio.get_running_loop()
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        host = parts.hostname or "localhost"
        port = parts.port or (636 if scheme == "ldaps" else 389)
        context = tls_context(config) if scheme == "ldaps" else None
        try:
            _, conn = await loop.create_connection(
                cls, host, port, ssl=context, server_hostname=host if context else None)
        except OSError as exc:  # ssl.SSLError included
            raise WireError(str(exc) or type(exc).__name__) from None
        try:
            if scheme == "ldap" and config.use_tls:
                result = await conn.send(_tlv(_EXTENDED_REQUEST, _tlv(0x80, STARTTLS_OID)))
                if result.code != 0:
                    raise WireError(f"StartTLS refused: {result.text}")
                assert conn.transport is not None
                conn.transport = await loop.start_tls(  # type: ignore[assignment]
                    conn.transport, conn, tls_context(config), server_hostname=host)
            password = config.password.get_secret_value() if config.password else ""
            result = await conn.send(_bind_request(config.login_dn or "", password))
        except (OSError, WireError) as exc:
            conn.close()
            raise WireError(str(exc) or type(exc).__name__) from None
        if result.code == 49:
            conn.close()
            raise BindRefused(result.text)
        if result.code != 0:
            conn.close()
            raise WireError(f"bind failed: {result.text}")
        return conn

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        pos = 0
        try:
            while (got := _header(buf, pos)) is not None and got[2] + got[1] <= len(buf):
                tag, length, start = got
                pos = start + length
                if tag != _SEQUENCE:
                    raise WireError("malformed LDAP reply")
                msg_id, _, result = parse_message(buf[start:pos])
                if msg_id == NOTICE_OF_DISCONNECTION:
                    raise WireError(f"the server disconnected: {result.text}")
                future = self.waiting.pop(msg_id, None)
                if future is not None and not future.done():
                    future.set_result(result)
        except WireError as exc:
            self._fail(str(exc))
            return
        self._buf = buf[pos:]

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(str(exc) if exc else "the server closed the connection")

    # -- requests

    def send(self, op: bytes) -> asyncio.Future[Result]:
        """Write one request now; the future gets its reply."""
        if self.failed is None and (self.transport is None or self.transport.is_closing()):
            self._fail("the connection is closing")  # lost before asyncio said so
        if self.failed is not None or self.transport is None:
            raise WireError(self.failed or "not connected")
        msg_id = self.next_id
        self.next_id = msg_id + 1 if msg_id < 2**31 - 1 else 1
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self.waiting[msg_id] = future
        self.transport.write(_message(msg_id, op))
        return future

    def _fail(self, why: str) -> None:
        self.failed = self.failed or why
        waiting, self.waiting = self.waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(WireError(why))
        if self.transport is not None:
            self.transport.close()

    def close(self) -> None:
        """Unbind (best effort) and drop the socket; whatever is in flight fails."""
        if self.failed is None and self.transport is not None:
            with contextlib.suppress(Exception):
                self.transport.write(_message(self.next_id, bytes((_UNBIND_REQUEST, 0))))
        self._fail("the connection was closed")


# -- the pool -------------------------------------------------------------------------------


class AddPipe:
    """Adds over wire connections, ``window`` in flight on each; one more connection is
    made while all are full and ``room()`` (the owner's bound on every connection it
    holds, bonsai's included) allows it. A connection that fails is dropped; ``add``
    retries a request that met a lost connection once on a fresh one (as bonsai's path
    does), and raises ``WireError`` or ``BindRefused`` for the caller to translate."""

    def __init__(self, config: LDAPConfig, *, room: Callable[[], bool], window: int,
                 servers: list[str]) -> None:
        self.config = config
        self.timeout = config.request_timeout_seconds
        self.room = room
        self.window = max(window, 1)
        self.servers = servers
        self.peak_in_flight = 0
        self._live: list[WireConnection] = []
        self._opening: asyncio.Lock = asyncio.Lock()
        self._making = 0
        self._closed = False

    async def _open(self) -> WireConnection:
        problems = []
        for url in self.servers:
            try:
                return await asyncio.wait_for(WireConnection.open(url, self.config),
                                              self.config.connect_timeout_seconds)
            except TimeoutError:
                problems.append(f"{url}: no answer within "
                                f"{self.config.connect_timeout_seconds:g}s")
            except WireError as exc:
                problems.append(f"{url}: {exc}")
        raise WireError(f"cannot reach any LDAP server ({'; '.join(problems)})")

    @property
    def connections(self) -> int:
        """Live connections, and the one being made."""
        return sum(1 for c in self._live if c.failed is None) + self._making

    async def _connection(self) -> WireConnection:
        """The least busy live connection with room in its window, else a new one while
        ``room()`` allows (made one at a time: the others wait and then share it), else
        the least busy one all the same (requests queue behind its window on the
        server)."""
        self._drop_failed()
        conn = min(self._live, key=lambda c: c.users, default=None)
        if conn is not None and (conn.users < self.window or not self.room()):
            return conn
        async with self._opening:
            self._drop_failed()
            if not self._live or (min(c.users for c in self._live) >= self.window
                                  and self.room()):
                self._making = 1
                try:
                    made = await self._open()
                finally:
                    self._making = 0
                self._live.append(made)
                return made
            return min(self._live, key=lambda c: c.users)

    def _drop_failed(self) -> None:
        self._live[:] = [c for c in self._live if c.failed is None]

    async def add(self, dn: str, attrs: Mapping[str, Iterable[str]]) -> Result:
        """The server's answer to one add (any result code); ``WireError`` when the
        connection is lost twice or the request times out."""
        if self._closed:
            raise WireError("the LDAP client is closed")
        op = add_request(dn, attrs)
        for attempt in (1, 2):
            conn = await self._connection()
            conn.users += 1
            self.peak_in_flight = max(self.peak_in_flight, conn.users)
            try:
                async with asyncio.timeout(self.timeout):
                    return await conn.send(op)
            except TimeoutError:
                conn.close()  # its state is unknown now; the others retry elsewhere
                raise
            except WireError:
                if attempt == 2:
                    raise
            finally:
                conn.users -= 1
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        self._closed = True
        for conn in self._live:
            conn.close()
        self._live.clear()
