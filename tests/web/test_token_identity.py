"""A token (and a dashboard session, the same token in a cookie) names the person it was
issued to by their user id, never by a login another user can take over; and it ends
when their password changes or an admin revokes their tokens.

Against the in-process API app with its dashboard (``tests/web/conftest.py``); people
sign in through ``POST /api/v1/login`` and the dashboard's form, with the passwords the
store holds.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from itertools import count

import httpx
import jwt
import pytest

from cheeto_like.auth.principal import subject_of
from cheeto_like.models import History, User
from cheeto_like.operations.user import RenameUser, SetUserPassword
from tests.factories import AUTHOR, make_user
from tests.web.conftest import bearer

_address = count(1)


@pytest.fixture
async def client(app) -> AsyncIterator[httpx.AsyncClient]:  # type: ignore[no-untyped-def]
    """A client from an address of its own: sign-ins here never meet another test's
    failures in the login limiter."""
    transport = httpx.ASGITransport(app=app, client=(f"10.23.0.{next(_address)}", 4242))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        yield http


async def person(store, name: str, password: str) -> None:  # type: ignore[no-untyped-def]
    await make_user(store, name, site="farm")
    await SetUserPassword.run(store, AUTHOR, name=name, password=password)


async def api_token(http: httpx.AsyncClient, name: str, password: str) -> dict[str, str]:
    r = await http.post("/api/v1/login", json={"username": name, "password": password})
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


async def dashboard_session(http: httpx.AsyncClient, name: str, password: str) -> str:
    """Sign in through the dashboard's form; the session cookie it sets."""
    form = await http.get("/login")
    csrf = _cookie(form, "cheeto_login_csrf")  # Secure: httpx keeps none over http
    r = await http.post("/login", data={"csrf": csrf, "username": name, "password": password},
                        headers={"Cookie": f"cheeto_login_csrf={csrf}"})
    assert r.status_code == 303 and r.headers["location"].endswith("/me"), r.text[:300]
    return _cookie(r, "cheeto_session")


def _cookie(response: httpx.Response, name: str) -> str:
    for header in response.headers.get_list("set-cookie"):
        key, _, rest = header.partition("=")
        if key == name:
            return rest.split(";", 1)[0]
    raise AssertionError(f"no {name} cookie set")


async def me(http: httpx.AsyncClient, headers: dict[str, str]) -> httpx.Response:
    return await http.get("/api/v1/me", headers=headers)


async def page(http: httpx.AsyncClient, session: str) -> httpx.Response:
    return await http.get("/me", headers={"Cookie": f"cheeto_session={session}"})


async def test_a_token_follows_its_person_through_a_rename_never_the_name(
        client, world) -> None:  # type: ignore[no-untyped-def]
    await person(world, "rita", "rita-pw")
    token = await api_token(client, "rita", "rita-pw")
    session = await dashboard_session(client, "rita", "rita-pw")
    await RenameUser.run(world, AUTHOR, name="rita", new_name="ritab")
    r = await me(client, token)
    assert r.status_code == 200 and r.json()["name"] == "ritab"
    shown = await page(client, session)
    assert shown.status_code == 200 and "ritab" in shown.text
    # a new person under the old name: the old token and session never become theirs
    await person(world, "rita", "new-rita-pw")
    r = await me(client, token)
    assert r.status_code == 200 and r.json()["name"] == "ritab"
    assert (await client.get("/api/v1/users/rita", headers=token)).status_code == 403
    assert (await client.get("/api/v1/users/ritab", headers=token)).status_code == 200
    shown = await page(client, session)
    assert shown.status_code == 200 and "ritab" in shown.text
    # the new rita's own sign-in is hers
    theirs = await api_token(client, "rita", "new-rita-pw")
    assert (await me(client, theirs)).json()["name"] == "rita"
    old, new = await subject_of("ritab"), await subject_of("rita")
    assert old.id != new.id


async def test_a_token_for_a_user_id_no_one_holds_is_refused(app, client, world) -> None:  # type: ignore[no-untyped-def]
    from cheeto_like.auth.tokens import Subject

    token, _ = app.state.auth.issuer.issue(Subject(id="f" * 32, version=0))
    r = await me(client, {"Authorization": f"Bearer {token}"})
    assert r.status_code == 401 and r.json()["detail"] == "the token names no current user"


async def test_tokens_from_before_user_ids_are_refused(app, client, app_config) -> None:  # type: ignore[no-untyped-def]
    """The previous release's tokens (``sub`` a login, no ``ver``): sign in again."""
    key = app_config.api.jwt_key_file.read_bytes()
    now = int(time.time())
    old = jwt.encode({"iss": "cheeto", "aud": "cheeto-api", "sub": "adam", "iat": now,
                      "exp": now + 600, "jti": "an-old-token-id"}, key, algorithm="HS256")
    r = await me(client, {"Authorization": f"Bearer {old}"})
    assert r.status_code == 401
    assert r.json()["detail"] == "the token is from an older release: sign in again"
    r = await page(client, old)
    assert r.status_code == 303 and r.headers["location"].endswith("/login")


async def test_a_password_reset_ends_tokens_and_sessions(app, cli, client, world) -> None:  # type: ignore[no-untyped-def]
    await person(world, "pia", "pia-pw")
    token = await api_token(client, "pia", "pia-pw")
    session = await dashboard_session(client, "pia", "pia-pw")
    issued = await bearer(app, "pia")
    assert (await me(client, token)).status_code == 200
    assert (await page(client, session)).status_code == 200
    r = await cli("ng", "user", "password", "-u", "pia", "--stdin", stdin="pia-new-pw\n")
    assert r.code == 0, r.stderr
    for headers in (token, issued):
        r = await me(client, headers)
        assert r.status_code == 401 and r.json()["detail"] == "the token has been revoked"
    r = await page(client, session)
    assert r.status_code == 303 and r.headers["location"].endswith("/login")
    # signing in again (with the new password) works, in both places
    assert (await me(client, await api_token(client, "pia", "pia-new-pw"))).status_code == 200
    fresh = await dashboard_session(client, "pia", "pia-new-pw")
    assert (await page(client, fresh)).status_code == 200
    rows = await History.find({"op": "set_user_password"}).to_list()
    assert rows and all("password" not in row.changes for row in rows)


async def test_the_admin_route_ends_a_persons_tokens(app, client, world) -> None:  # type: ignore[no-untyped-def]
    await person(world, "ned", "ned-pw")
    token = await api_token(client, "ned", "ned-pw")
    session = await dashboard_session(client, "ned", "ned-pw")
    path = "/api/v1/users/ned/tokens/revoke"
    for who in ("alice", "olga", "ned"):  # a user, an operator, the person themself
        r = await client.post(path, headers=await bearer(app, who))
        assert r.status_code == 403, (who, r.text)
    assert (await me(client, token)).status_code == 200
    before = await History.find({"op": "revoke_user_tokens"}).count()
    admin = await bearer(app, "adam")
    r = await client.post(path, headers=admin)
    assert r.status_code == 204 and r.content == b""
    r = await me(client, token)
    assert r.status_code == 401 and r.json()["detail"] == "the token has been revoked"
    assert (await page(client, session)).status_code == 303
    rows = await History.find({"op": "revoke_user_tokens"}).to_list()
    assert len(rows) == before + 1
    assert rows[-1].author == "adam" and rows[-1].changes == {"user": "ned",
                                                              "token_version": 2}
    # a token issued afterwards works; the admin's own token was not touched
    assert (await me(client, await api_token(client, "ned", "ned-pw"))).status_code == 200
    assert (await me(client, admin)).status_code == 200
    # an unknown user: 404 for an admin (nothing written), 403 for anyone else
    r = await client.post("/api/v1/users/nobody/tokens/revoke", headers=admin)
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
    r = await client.post("/api/v1/users/nobody/tokens/revoke",
                          headers=await bearer(app, "alice"))
    assert r.status_code == 403
    assert await History.find({"op": "revoke_user_tokens"}).count() == before + 1


async def test_a_revoke_moves_no_ldap_input(app, client, world) -> None:  # type: ignore[no-untyped-def]
    """The version is auth bookkeeping: the user's ``updated_at`` and LDAP fingerprint
    stay, and neither the API's view of the user nor LDAP's projection shows it."""
    from cheeto_like.web.api_v1 import user_view

    before = await User.find_one({"name": "bob"})
    assert before is not None
    r = await client.post("/api/v1/users/bob/tokens/revoke", headers=await bearer(app, "adam"))
    assert r.status_code == 204
    after = await User.find_one({"name": "bob"})
    assert after is not None and after.token_version == before.token_version + 1
    assert after.updated_at == before.updated_at
    assert after.ldap.modified_at == before.ldap.modified_at
    assert after.ldap.fingerprint == before.ldap.fingerprint
    assert "token_version" not in User.ldap_fields
    assert "token_version" not in user_view(after)
