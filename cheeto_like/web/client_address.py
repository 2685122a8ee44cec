"""Who is asking: the client address the sign-in limiter counts and the log names.

``X-Forwarded-For`` is anyone's to write, so it is believed only from a peer listed in
``api.trusted_proxies`` (addresses or CIDR networks; empty by default, so nothing is
believed). Then the client is the right-most address in the header that is not itself
a trusted proxy: each proxy appends the peer it saw, so that is the last one written by
a proxy we trust; anything to its left the client may have made up. If every entry is
a trusted proxy, the left-most one is the client (a proxy asking for itself).

uvicorn's own proxy handling is configured from the same list (``web.app.
uvicorn_options``), so behind uvicorn the peer arrives already resolved by this rule;
this function applies it again (idempotent) for every other server and the in-process
tests.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import Any

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_ADDRESS_TEXT = 64


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback address literals (127.0.0.0/8, ::1):
    a bind there is reachable from this host only (the API's and Flower's checks)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def networks(values: Iterable[str]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(v, strict=False) for v in values)


def _host(value: str) -> str:
    """``1.2.3.4:5678`` / ``[::1]:80`` / ``::1`` -> the address, canonical when it is one
    (anything else is kept as text, cut short)."""
    value = value.strip()
    if value.startswith("[") and "]" in value:
        value = value[1:value.index("]")]
    elif value.count(":") == 1:
        value = value.split(":", 1)[0]
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return value[:MAX_ADDRESS_TEXT]


def _trusted(host: str, trusted: Sequence[Network]) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in net for net in trusted)


def resolve(peer: str | None, forwarded_for: Sequence[str],
            trusted: Sequence[Network]) -> str:
    """The client address from the TCP peer and the ``X-Forwarded-For`` values."""
    if not peer:
        return "unknown"
    peer = _host(peer)
    if not trusted or not _trusted(peer, trusted):
        return peer
    hops = [_host(h) for value in forwarded_for for h in value.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, trusted):
            return hop
    return hops[0] if hops else peer


def client_address(request: Any, trusted: Sequence[Network]) -> str:
    """``resolve`` for a Starlette request."""
    peer = request.client.host if request.client else None
    return resolve(peer, request.headers.getlist("x-forwarded-for"), trusted)
