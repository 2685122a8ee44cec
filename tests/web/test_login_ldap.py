"""Sign-in against a real directory (the session's slapd): the API binds as the user
under the LDAP profile's user base, so the directory's password decides, not the
store's hash; ``api.login_groups`` admits only members; a directory that cannot be
reached is a 503, never a successful or a failed sign-in."""

from __future__ import annotations

import itertools

import httpx
import pytest

from cheeto_like.config import ApiConfig, Config, LDAPConfig, MongoConfig
from cheeto_like.web.app import create_api
from tests.services.ldap import Slapd, ssha
from tests.web.conftest import PASSWORDS

_n = itertools.count(1)


@pytest.fixture
def directory(slapd: Slapd, world) -> tuple[Slapd, str]:  # type: ignore[no-untyped-def]
    """A fresh user base with alice (directory password ``dir-pw``) and olga."""
    base = f"ou=login{next(_n)},{slapd.suffix}"
    entries = [f"dn: {base}\nobjectClass: organizationalUnit\nou: {base[3:].split(',')[0]}\n"]
    for uid, password in (("alice", "dir-pw"), ("olga", "olga-dir-pw")):
        entries.append(f"dn: uid={uid},{base}\nobjectClass: inetOrgPerson\nuid: {uid}\n"
                       f"cn: {uid}\nsn: {uid}\nuserPassword: {ssha(password)}\n")
    slapd.ldapadd("\n".join(entries))
    return slapd, base


def app_for(world, tmp_path, server: Slapd, base: str, **api: object):  # type: ignore[no-untyped-def]
    ldap = LDAPConfig(servers=[server.uri], searchbase=server.suffix, user_base=base,
                      login_dn=server.root_dn, password=server.root_password, use_tls=True,
                      ca_file=server.ca_file)
    config = Config(mongo=MongoConfig(), ldap=ldap,
                    api=ApiConfig(jwt_key_file=tmp_path / "jwt.key", **api))  # type: ignore[arg-type]
    app = create_api(config, store=world)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")


async def test_login_binds_as_the_user(directory, world, tmp_path):  # type: ignore[no-untyped-def]
    server, base = directory
    async with app_for(world, tmp_path, server, base) as http:
        r = await http.post("/api/v1/login", json={"username": "alice", "password": "dir-pw"})
        assert r.status_code == 200, r.text
        token = r.json()["access_token"]
        me = await http.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
        assert me.json()["name"] == "alice"
        # the store's hash does not count when a directory is configured
        r = await http.post("/api/v1/login",
                            json={"username": "alice", "password": PASSWORDS["alice"]})
        assert r.status_code == 401
        # in the directory but not in the store (bob has no entry; mona none in LDAP)
        for user, password in (("mona", "x"), ("ghost", "dir-pw")):
            r = await http.post("/api/v1/login", json={"username": user, "password": password})
            assert r.status_code == 401
            assert r.json()["detail"] == "invalid user name or password"


async def test_login_groups_restrict(directory, world, tmp_path):  # type: ignore[no-untyped-def]
    server, base = directory
    async with app_for(world, tmp_path, server, base, login_groups=["lab"]) as http:
        ok = await http.post("/api/v1/login", json={"username": "alice", "password": "dir-pw"})
        assert ok.status_code == 200  # alice is a member of lab
        no = await http.post("/api/v1/login",
                             json={"username": "olga", "password": "olga-dir-pw"})
        assert no.status_code == 401  # right password, not in a listed group


async def test_unreachable_directory_is_503(world, tmp_path, slapd):  # type: ignore[no-untyped-def]
    from tests.services._proc import free_port

    ldap = LDAPConfig(servers=[f"ldap://127.0.0.1:{free_port()}"], searchbase=slapd.suffix,
                      connect_timeout_seconds=1)
    config = Config(mongo=MongoConfig(), ldap=ldap,
                    api=ApiConfig(jwt_key_file=tmp_path / "jwt.key"))
    app = create_api(config, store=world)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api") as http:
        r = await http.post("/api/v1/login", json={"username": "alice", "password": "dir-pw"})
        assert r.status_code == 503, r.text
        assert r.headers["content-type"] == "application/problem+json"


async def test_an_unknown_name_costs_one_bind_like_a_known_one(directory, world, tmp_path,  # type: ignore[no-untyped-def]
                                                               monkeypatch):
    """Timing tells no names apart: a name the store does not hold is bound against the
    real directory too (its DN under the user base, which slapd refuses like a wrong
    password), so both paths do one store lookup and one bind with the same answer.
    Counted by a wrapper that calls the real ``check_bind``."""
    from cheeto_like.adapters.ldap import DirectoryError, rdn
    from cheeto_like.auth import login as login_module

    server, base = directory
    real = login_module.check_bind
    binds: list[tuple[str, str]] = []

    async def counting(config, dn, password):  # type: ignore[no-untyped-def]
        try:
            found = await real(config, dn, password)
        except DirectoryError as exc:
            binds.append((dn, exc.code))
            raise
        binds.append((dn, "ok"))
        return found

    monkeypatch.setattr(login_module, "check_bind", counting)
    async with app_for(world, tmp_path, server, base) as http:
        for user in ("alice", "nobody-here"):
            r = await http.post("/api/v1/login", json={"username": user, "password": "guess"})
            assert r.status_code == 401
    assert binds == [(f"{rdn('uid', 'alice')},{base}", "auth"),
                     (f"{rdn('uid', 'nobody-here')},{base}", "auth")]
