"""The adds' own LDAP client (``adapters/ldap_wire.py``): its BER against hand-encoded
bytes, and against a real slapd: StartTLS, LDAPS and plain LDAP, a refused bind, a wrong CA,
result codes as ``DirectoryError`` codes, a server that hangs (timeout, then the pipe
recovers) and a server restarted under the pipe (the add is retried on a new
connection)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import pytest

from cheeto_like.adapters.ldap import Directory, DirectoryError
from cheeto_like.adapters.ldap_wire import (
    BindRefused,
    WireConnection,
    WireError,
    _header,
    _tlv,
    add_request,
    parse_message,
)
from tests.adapters.test_ldap import config_for, hung
from tests.services.ldap import Slapd

_n = itertools.count(1)

# -- BER (pure) ------------------------------------------------------------------------------


def test_add_request_bytes_are_the_rfc_4511_encoding():
    # AddRequest ::= [APPLICATION 8] SEQUENCE { entry LDAPDN, attributes AttributeList }
    got = add_request("cn=a", {"cn": ["a"], "empty": [], "objectClass": ["top", "x"]})
    attrs = (b"\x30\x09" + b"\x04\x02cn" + b"\x31\x03\x04\x01a"
             + b"\x30\x17" + b"\x04\x0bobjectClass" + b"\x31\x08\x04\x03top\x04\x01x")
    assert got == b"\x68" + bytes([6 + 2 + len(attrs)]) + b"\x04\x04cn=a" \
        + b"\x30" + bytes([len(attrs)]) + attrs


@pytest.mark.parametrize("size", [0, 1, 127, 128, 255, 256, 65_535, 65_536, 1_000_000])
def test_lengths_use_the_short_form_below_128_and_the_long_form_above(size: int):
    encoded = _tlv(0x04, b"x" * size)
    tag, length, start = _header(encoded, 0) or (0, 0, 0)
    assert (tag, length, len(encoded) - start) == (0x04, size, size)
    assert (encoded[1] < 0x80) == (size < 0x80)


def test_a_reply_is_read_only_when_whole_and_its_result_parsed():
    result = b"\x0a\x01\x44" + b"\x04\x00" + _tlv(0x04, "déjà là".encode())
    body = b"\x02\x02\x01\x2c" + _tlv(0x69, result)  # message id 300
    message = _tlv(0x30, body)
    assert _header(message[:1], 0) is None
    msg_id, op, parsed = parse_message(body)
    assert (msg_id, op, parsed.code, parsed.message) == (300, 0x69, 68, "déjà là")
    assert parsed.text == "entryAlreadyExists (68): déjà là"
    with pytest.raises(WireError):
        parse_message(b"\x02\x01\x01\x69\x05\x0a\x01")  # cut short


def test_a_length_of_more_than_four_bytes_or_a_huge_reply_is_refused():
    with pytest.raises(WireError):
        _header(b"\x30\x85\x01\x00\x00\x00\x00", 0)
    with pytest.raises(WireError):
        _header(b"\x30\x84\x40\x00\x00\x00", 0)  # 1 GiB


def test_server_text_is_one_printable_line():
    result = b"\x0a\x01\x41" + b"\x04\x00" + _tlv(0x04, b"bad\n\x1b[31mred\x07")
    _, _, parsed = parse_message(b"\x02\x01\x05" + _tlv(0x69, result))
    assert parsed.message == "bad  [31mred"


# -- against slapd ---------------------------------------------------------------------------


@pytest.fixture
async def base(slapd: Slapd) -> AsyncIterator[str]:
    """A fresh OU for this test."""
    name = f"wire{next(_n)}"
    async with Directory(config_for(slapd)) as d:
        await d.add(f"ou={name},{slapd.suffix}", {"objectClass": ["organizationalUnit"],
                                                  "ou": [name]})
    yield f"ou={name},{slapd.suffix}"


@pytest.fixture
async def directory(slapd: Slapd) -> AsyncIterator[Directory]:
    async with Directory(config_for(slapd)) as d:
        yield d


def group(name: str) -> dict[str, list[str]]:
    return {"objectClass": ["top", "groupOfMembers", "posixGroup"], "cn": [name],
            "gidNumber": ["5000"], "description": ["x" * 300]}  # a long-form length


async def test_adds_over_starttls_ldaps_and_plain_ldap_land_in_the_directory(slapd: Slapd,
                                                                        base: str):
    configs = {"starttls": config_for(slapd),
               "ldaps": config_for(slapd, servers=[slapd.ldaps_uri], use_tls=False),
               "plain": config_for(slapd, use_tls=False)}
    for label, config in configs.items():
        async with Directory(config, max_connections=3, window=4) as d:
            names = [f"{label}{i}" for i in range(25)]
            await asyncio.gather(*(d.add(f"cn={n},{base}", group(n)) for n in names))
            found = await d.search(base, "one", f"(cn={label}*)", ["cn", "description"])
            assert sorted(e.first("cn") or "" for e in found) == sorted(names)
            assert {e.first("description") for e in found} == {"x" * 300}
            assert d.writes == {"add": 25} and d.connections <= 3


async def test_result_codes_become_directory_error_codes(directory: Directory, base: str):
    await directory.add(f"cn=dup,{base}", group("dup"))
    cases = {
        "exists": (f"cn=dup,{base}", group("dup")),
        "not_found": (f"cn=orphan,ou=missing,{base}", group("orphan")),
        "schema": (f"cn=bad,{base}", {"objectClass": ["posixGroup"], "cn": ["bad"]}),
    }
    for code, (dn, attrs) in cases.items():
        with pytest.raises(DirectoryError) as caught:
            await directory.add(dn, attrs)
        assert caught.value.code == code and caught.value.dn == dn
        assert caught.value.message.startswith(f"LDAP add {dn} failed: ")
        assert "\n" not in caught.value.message
    with pytest.raises(DirectoryError) as caught:
        await directory.add("not a dn", group("x"))
    assert caught.value.code == "other"
    assert directory.writes == {"add": 1}


async def test_a_wrong_password_or_ca_fails_the_connection_in_one_line(slapd: Slapd):
    with pytest.raises(BindRefused):
        await WireConnection.open(slapd.uri, config_for(slapd, password="wrong"))
    strange = config_for(slapd, ca_file=None)  # the system CAs do not know slapd's
    with pytest.raises(WireError) as caught:
        await WireConnection.open(slapd.uri, strange)
    assert "certificate" in str(caught.value).lower()
    trusting = config_for(slapd, ca_file=None, cert_policy="never")
    conn = await WireConnection.open(slapd.uri, trusting)
    conn.close()


async def test_adds_to_a_hung_server_time_out_and_the_pipe_recovers(tmp_path):
    with Slapd(tmp_path, organizational_units=()) as server:
        config = config_for(server, request_timeout_seconds=0.5, connect_timeout_seconds=0.5)
        async with Directory(config, max_connections=2, window=4) as d:
            await d.add(f"cn=before,{server.suffix}", group("before"))
            async with hung(server):
                outcomes = await asyncio.gather(
                    *(d.add(f"cn=hung{i},{server.suffix}", group(f"hung{i}")) for i in range(4)),
                    return_exceptions=True)
            assert all(isinstance(o, DirectoryError) and o.code == "timeout" and o.transient
                       for o in outcomes), outcomes
            await d.add(f"cn=after,{server.suffix}", group("after"))
            assert await d.exists(f"cn=after,{server.suffix}")


async def test_an_add_on_a_dropped_connection_is_retried_on_a_new_one(slapd: Slapd,
                                                                        base: str):
    """The socket goes away under the pipe before it notices (a server restart, a
    firewall): the add meets the dead connection, fails over to a fresh one, lands once."""
    async with Directory(config_for(slapd), max_connections=2, window=2) as d:
        await d.add(f"cn=one,{base}", group("one"))
        assert d._pipe is not None
        [conn] = d._pipe._live
        assert conn.transport is not None
        conn.transport.abort()
        await d.add(f"cn=two,{base}", group("two"))
        assert conn.failed is not None and conn not in d._pipe._live
        assert await d.exists(f"cn=two,{base}") and d.writes == {"add": 2}
