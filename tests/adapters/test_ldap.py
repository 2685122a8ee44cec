"""The LDAP adapter: RFC 4514/4515 escaping (pure), and the bonsai client against a real
slapd: TLS (StartTLS and LDAPS with the CA file), failover, one-line errors for an
unreachable directory and a refused bind, timeouts, paging, and the write primitives."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from pydantic import SecretStr

from cheeto_like.adapters.ldap import (
    Directory,
    DirectoryError,
    Mod,
    check_bind,
    dn_depth,
    escape_dn_value,
    escape_filter_value,
    first_rdn_value,
    normalize_dn,
    parent_dn,
    parse_dn,
    rdn,
)
from cheeto_like.config import LDAPConfig
from cheeto_like.credentials import hash_password
from tests.services.ldap import Slapd

_n = itertools.count(1)


# -- escaping (pure) -------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "escaped"), [
    ("alice", "alice"),
    ("Doe, Jane", "Doe\\, Jane"),
    ("a+b", "a\\+b"),
    ('say "hi"', 'say \\"hi\\"'),
    ("back\\slash", "back\\\\slash"),
    ("<tag>;x=1", "\\<tag\\>\\;x\\=1"),
    ("#hash", "\\#hash"),
    ("mid#hash", "mid#hash"),
    (" lead", "\\ lead"),
    ("trail ", "trail\\ "),
    (" ", "\\ "),
    ("in side", "in side"),
    ("nul\0x", "nul\\00x"),
    ("", ""),
    ("Ünïcødé", "Ünïcødé"),
])
def test_dn_value_escaping(raw: str, escaped: str):
    assert escape_dn_value(raw) == escaped
    # and it parses back to the same value
    if raw:
        assert parse_dn(rdn("cn", raw) + ",dc=example")[0] == [("cn", raw)]


@pytest.mark.parametrize(("raw", "escaped"), [
    ("alice", "alice"),
    ("a*b", "a\\2ab"),
    ("(x)", "\\28x\\29"),
    ("back\\slash", "back\\5cslash"),
    ("nul\0", "nul\\00"),
    ("a+b,c=d", "a+b,c=d"),  # not special in a filter value
])
def test_filter_value_escaping(raw: str, escaped: str):
    assert escape_filter_value(raw) == escaped


def test_parse_dn_handles_hex_escapes_multi_valued_rdns_and_spaces():
    assert parse_dn("cn=J\\C3\\BCrgen,ou=people, dc=example") == [
        [("cn", "Jürgen")], [("ou", "people")], [("dc", "example")]]
    assert parse_dn("cn=a+uid=b,dc=x") == [[("cn", "a"), ("uid", "b")], [("dc", "x")]]
    assert parse_dn("") == []
    with pytest.raises(ValueError):
        parse_dn("novalue,dc=x")
    with pytest.raises(ValueError):
        parse_dn("cn=dangling\\")


def test_normalize_dn_ignores_case_spacing_and_escaping_style():
    assert normalize_dn("UID=Alice, OU=People,DC=Example") == "uid=alice,ou=people,dc=example"
    assert normalize_dn("cn=a\\2bb,dc=x") == normalize_dn("CN=a\\+b,dc=x") == "cn=a\\+b,dc=x"
    assert normalize_dn("uid=b+cn=a,dc=x") == "cn=a+uid=b,dc=x"


def test_dn_helpers():
    dn = "automountKey=a\\,b,automountMapName=auto.share,ou=automount,dc=x"
    assert parent_dn(dn) == "automountMapName=auto.share,ou=automount,dc=x"
    assert first_rdn_value(dn) == "a,b"
    assert dn_depth(dn) == 4
    assert parent_dn("dc=x") == ""


# -- against slapd -----------------------------------------------------------------------------


def config_for(server: Slapd, **overrides: object) -> LDAPConfig:
    fields: dict[str, object] = dict(
        servers=[server.uri], searchbase=server.suffix, login_dn=server.root_dn,
        password=server.root_password, use_tls=True, ca_file=server.ca_file,
        request_timeout_seconds=5, connect_timeout_seconds=2)
    fields.update(overrides)
    return LDAPConfig(**fields)


@pytest.fixture
def base(slapd: Slapd) -> str:
    """A fresh OU for this test."""
    dn = f"ou=adapter{next(_n)},{slapd.suffix}"
    slapd.ldapadd(f"dn: {dn}\nobjectClass: organizationalUnit\nou: {dn[3:dn.index(',')]}\n")
    return dn


@pytest.fixture
async def directory(slapd: Slapd) -> AsyncIterator[Directory]:
    async with Directory(config_for(slapd)) as d:
        yield d


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP port that accepts connections (the kernel's backlog) but never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"ldap://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


async def test_starttls_and_ldaps_with_the_ca_file(slapd: Slapd):
    for cfg in (config_for(slapd), config_for(slapd, servers=[slapd.ldaps_uri], use_tls=False)):
        async with Directory(cfg) as d:
            assert await d.whoami() == f"dn:{slapd.root_dn}"


async def test_tls_without_the_ca_is_refused_in_one_line(slapd: Slapd):
    cfg = config_for(slapd, servers=[slapd.ldaps_uri], use_tls=False, ca_file=None)
    with pytest.raises(DirectoryError) as caught:
        async with Directory(cfg):
            pass
    assert caught.value.code == "unreachable"
    assert slapd.ldaps_uri in caught.value.message
    assert "\n" not in caught.value.message


async def test_fails_over_to_the_next_server(slapd: Slapd):
    dead = f"ldap://127.0.0.1:{_closed_port()}"
    async with Directory(config_for(slapd, servers=[dead, slapd.uri])) as d:
        assert d.server == slapd.uri
        assert await d.whoami() == f"dn:{slapd.root_dn}"


async def test_unreachable_servers_are_one_transient_error(silent_server: str):
    dead = f"ldap://127.0.0.1:{_closed_port()}"
    cfg = LDAPConfig(servers=[dead, silent_server], searchbase="dc=x", login_dn="cn=admin,dc=x",
                     password="x", connect_timeout_seconds=0.5)
    with pytest.raises(DirectoryError) as caught:
        async with Directory(cfg):
            pass
    err = caught.value
    assert err.code == "unreachable" and err.transient and err.exit_code == 1
    assert err.message.startswith("cannot reach any LDAP server (")
    assert dead in err.message and f"{silent_server}: no answer within 0.5s" in err.message
    assert "\n" not in err.message


async def test_a_wrong_password_is_one_permanent_error_and_no_failover(slapd: Slapd):
    cfg = config_for(slapd, password="wrong", servers=[slapd.uri, slapd.ldaps_uri])
    with pytest.raises(DirectoryError) as caught:
        async with Directory(cfg):
            pass
    err = caught.value
    assert err.code == "auth" and not err.transient
    assert err.message == (f"LDAP bind as {slapd.root_dn} refused by {slapd.uri}: "
                           "invalid credentials")


def _all_threads_stopped(pid: int) -> bool:
    tasks = Path(f"/proc/{pid}/task")
    states = {(tasks / t / "stat").read_text().rsplit(")", 1)[1].split()[0]
              for t in os.listdir(tasks)}
    return states <= {"T", "t"}


@asynccontextmanager
async def hung(server: Slapd) -> AsyncIterator[None]:
    """slapd stopped (SIGSTOP: connections stay open, nothing answers) for the block,
    once every thread of it has stopped (SIGSTOP is not synchronous)."""
    pid = server._proc.pid  # type: ignore[union-attr]
    os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(200):
            if _all_threads_stopped(pid):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError(f"slapd {pid} did not stop")
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def test_a_request_to_a_hung_server_times_out(tmp_path):
    with Slapd(tmp_path, organizational_units=()) as server:
        async with Directory(config_for(server, request_timeout_seconds=0.5,
                                        connect_timeout_seconds=0.5)) as d:
            async with hung(server):
                with pytest.raises(DirectoryError) as caught:
                    await d.search(server.suffix, "base")
            assert caught.value.code in ("timeout", "unreachable")
            assert caught.value.transient
            # the pool dropped the stuck connection; the next request works
            assert await d.exists(server.suffix)


async def test_requests_pipeline_on_one_connection(slapd: Slapd, base: str):
    """A window of requests shares one connection; each gets its own result or error,
    and a result error (an existing entry) leaves the connection and the others alone."""
    async with Directory(config_for(slapd), max_connections=1, window=8) as d:
        names = [f"p{i:02d}" for i in range(40)]
        await d.add(f"cn=p00,{base}", {"objectClass": ["groupOfMembers"], "cn": ["p00"]})
        outcomes = await asyncio.gather(
            *(d.add(f"cn={n},{base}", {"objectClass": ["groupOfMembers"], "cn": [n]})
              for n in names),
            d.search(base, "one", "(objectClass=groupOfMembers)", ["cn"]),
            return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        assert [(e.code, e.dn) for e in errors if isinstance(e, DirectoryError)] \
            == [("exists", f"cn=p00,{base}")] and len(errors) == 1
        # one connection for the search and the bind, one the adds pipelined on
        assert d.connections == 2 and d.peak_in_flight > 1
        found = await d.search(base, "one", "(objectClass=groupOfMembers)", ["cn"])
        assert sorted(e.first("cn") or "" for e in found) == names
        assert d.writes == {"add": 40}


async def test_pipelined_requests_to_a_hung_server_fail_and_the_pool_recovers(tmp_path):
    with Slapd(tmp_path, organizational_units=()) as server:
        async with Directory(config_for(server, request_timeout_seconds=0.5,
                                        connect_timeout_seconds=0.5),
                             max_connections=1, window=4) as d:
            async with hung(server):
                outcomes = await asyncio.gather(
                    *(d.search(server.suffix, "base") for _ in range(4)),
                    return_exceptions=True)
            assert all(isinstance(o, DirectoryError) and o.transient for o in outcomes)
            assert await d.exists(server.suffix)
            assert d.connections == 1


async def test_add_get_modify_delete(directory: Directory, base: str):
    dn = f"cn={escape_dn_value('Doe, Jane + co')},{base}"
    await directory.add(dn, {"objectClass": ["top", "groupOfMembers", "posixGroup"],
                             "cn": ["Doe, Jane + co"], "gidNumber": ["4242"]})
    found = await directory.get(dn, ["cn", "gidNumber", "objectClass"])
    assert found is not None
    assert found.get("cn") == ("Doe, Jane + co",) and found.first("gidNumber") == "4242"
    assert found.object_classes == {"top", "groupofmembers", "posixgroup"}
    await directory.modify(dn, [Mod("add", "memberUid", ("a", "b")),
                                Mod("replace", "gidNumber", ("4243",))])
    await directory.modify(dn, [Mod("delete", "memberUid", ("a",))])
    found = await directory.get(dn, ["memberUid", "gidNumber"])
    assert found is not None and found.get("memberUid") == ("b",)
    assert found.first("gidNumber") == "4243"
    assert directory.writes == {"add": 1, "modify": 2}
    assert await directory.delete(dn)
    assert not await directory.delete(dn, missing_ok=True)
    assert await directory.get(dn) is None


async def test_result_errors_carry_a_code_and_the_dn(directory: Directory, base: str):
    dn = f"cn=dup,{base}"
    attrs = {"objectClass": ["top", "groupOfMembers"], "cn": ["dup"]}
    await directory.add(dn, attrs)
    with pytest.raises(DirectoryError) as caught:
        await directory.add(dn, attrs)
    assert caught.value.code == "exists" and caught.value.dn == dn
    assert not caught.value.transient
    with pytest.raises(DirectoryError) as caught:
        await directory.delete(f"cn=missing,{base}")
    assert caught.value.code == "not_found"
    with pytest.raises(DirectoryError) as caught:  # shadowExpire needs shadowAccount
        await directory.modify(dn, [Mod("add", "gidNumber", ("1",))])
    assert caught.value.code == "schema"
    assert directory.writes == {"add": 1}


async def test_search_pages_past_the_page_size_and_escapes_filters(directory: Directory,
                                                                   base: str, slapd: Slapd):
    names = [f"g{i:03d}" for i in range(520)] + ["star*(paren)"]
    slapd.ldapadd("\n".join(f"dn: cn={escape_dn_value(n)},{base}\nobjectClass: groupOfMembers\n"
                            f"cn: {n}\n" for n in names))
    found = await directory.search(base, "one", "(objectClass=groupOfMembers)", ["cn"])
    assert len(found) == len(names)
    exact = await directory.search(base, "one", f"(cn={escape_filter_value('star*(paren)')})",
                                   ["cn"])
    assert [e.first("cn") for e in exact] == ["star*(paren)"]
    assert await directory.search(f"ou=nowhere,{base}", "one") == []
    with pytest.raises(DirectoryError):
        await directory.search(f"ou=nowhere,{base}", "one", missing_ok=False)


async def test_check_bind_with_a_yescrypt_password(directory: Directory, base: str,
                                                   slapd: Slapd):
    dn = f"uid=binder,{base}"
    await directory.add(dn, {
        "objectClass": ["top", "inetOrgPerson", "posixAccount"], "uid": ["binder"],
        "cn": ["B"], "sn": ["B"], "uidNumber": ["7001"], "gidNumber": ["7001"],
        "homeDirectory": ["/home/binder"],
        "userPassword": ["{CRYPT}" + hash_password("correct horse")]})
    cfg = config_for(slapd)
    assert await check_bind(cfg, dn, "correct horse") == f"dn:{dn}"
    with pytest.raises(DirectoryError) as caught:
        await check_bind(cfg, dn, "wrong")
    assert caught.value.code == "auth"


async def test_config_password_is_a_secret(slapd: Slapd):
    cfg = config_for(slapd)
    assert isinstance(cfg.password, SecretStr) and "secret" not in repr(cfg)
