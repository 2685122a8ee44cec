"""Every dashboard route x every kind of visitor -> the expected status, in process
(no browser): nobody, an expired or revoked session, a user, a manager, an operator and
an admin (sessions are the cookie a sign-in sets, minted by the app's issuer). A route
without a row fails ``test_every_dashboard_route_has_a_row``. Forms are posted with a
valid CSRF token and empty fields, so an allowed visitor gets the form's 422 (field
errors) and a refused one the 403 page, before anything is read or written. Also:
a bearer token or an API key opens no page (the dashboard signs in by cookie only), and
user data is escaped."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from cheeto_like.auth.principal import subject_of
from cheeto_like.operations.auth import RevokeToken
from cheeto_like.web.dashboard.session import csrf_for
from tests.factories import AUTHOR

ACTORS = ("anon", "expired", "revoked", "user", "manager", "operator", "admin")
PEOPLE = {"user": "alice", "manager": "mona", "operator": "olga", "admin": "adam",
          "expired": "alice", "revoked": "alice"}


def page(user: int, manager: int, operator: int, admin: int) -> dict[str, int]:
    return {"anon": 303, "expired": 303, "revoked": 303, "user": user, "manager": manager,
            "operator": operator, "admin": admin}


EVERYONE = page(200, 200, 200, 200)
MANAGERS = page(403, 200, 200, 200)
OPERATORS = page(403, 403, 200, 200)
ADMINS = page(403, 403, 403, 200)
OPERATOR_FORMS = page(403, 403, 422, 422)
ADMIN_FORMS = page(403, 403, 403, 422)
ROWS: list[tuple[str, str, dict[str, int]]] = [
    ("GET", "/", page(303, 303, 303, 303)),
    ("GET", "/login", page(303, 303, 303, 303) | {"anon": 200, "expired": 200,
                                                  "revoked": 200}),
    ("POST", "/login", dict.fromkeys(ACTORS, 403)),  # no login CSRF cookie
    ("POST", "/logout", page(303, 303, 303, 303)),
    ("GET", "/me", EVERYONE),
    ("GET", "/me/usage.csv", EVERYONE),
    ("GET", "/requests", EVERYONE),
    ("GET", "/requests/new", EVERYONE),
    ("POST", "/requests/new", page(422, 422, 422, 422)),
    ("GET", "/requests/{number}", EVERYONE),  # request 1: alice's, for mona's lab
    ("POST", "/requests/{number}/comment", page(422, 422, 422, 422)),
    ("POST", "/requests/{number}/approve", page(403, 422, 422, 422)),  # no step named
    ("POST", "/requests/{number}/deny", page(403, 422, 422, 422)),
    ("GET", "/members", page(403, 200, 400, 400)),  # operators name the group
    ("POST", "/members/add", page(403, 422, 422, 422)),
    ("POST", "/members/remove", page(403, 422, 422, 422)),
    ("GET", "/accounts", MANAGERS),
    ("GET", "/accounts/usage.csv", page(403, 422, 422, 422)),  # no account named
    ("POST", "/accounts/requests/approve", page(403, 422, 422, 422)),
    ("POST", "/accounts/requests/deny", page(403, 422, 422, 422)),
    ("GET", "/operator", OPERATORS),
    ("GET", "/operator/runs", OPERATORS),
    ("GET", "/operator/history", OPERATORS),
    ("POST", "/operator/quota", OPERATOR_FORMS),
    ("POST", "/operator/defaults", OPERATOR_FORMS),
    ("POST", "/operator/gpu-factor", OPERATOR_FORMS),
    ("POST", "/operator/adjust", OPERATOR_FORMS),
    ("GET", "/admin", ADMINS),
    ("POST", "/admin/roles/grant", ADMIN_FORMS),
    ("POST", "/admin/roles/revoke", ADMIN_FORMS),
    ("POST", "/admin/keys/create", ADMIN_FORMS),
    ("POST", "/admin/keys/rotate", ADMIN_FORMS),
    ("POST", "/admin/keys/revoke", ADMIN_FORMS),
]


@pytest.fixture(scope="module")
def app(dash_world, dash_config):  # type: ignore[no-untyped-def]
    from cheeto_like.web.app import create_api

    return create_api(dash_config, store=dash_world)


async def session_cookie(app: Any, store: Any, actor: str) -> str | None:
    if actor == "anon":
        return None
    issuer = app.state.auth.issuer
    subject = await subject_of(PEOPLE[actor])
    if actor == "expired":
        token, _ = issuer.issue(subject, ttl_seconds=60, now=time.time() - 3600)
        return token
    token, claims = issuer.issue(subject)
    if actor == "revoked":
        await RevokeToken.run(store, AUTHOR, skip_history=True, jti=claims.jti,
                              exp_epoch=claims.exp, user=PEOPLE[actor])
    return token


def test_every_dashboard_route_has_a_row(app) -> None:  # type: ignore[no-untyped-def]
    covered = {(m, p) for m, p, _ in ROWS}
    assert app.state.dashboard_routes == covered
    for _, _, expect in ROWS:
        assert set(expect) == set(ACTORS)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r[0]} {r[1]}")
async def test_matrix(row, app, dash_world) -> None:  # type: ignore[no-untyped-def]
    method, path, expect = row
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://dash") as http:
        for actor in ACTORS:
            token = await session_cookie(app, dash_world, actor)
            headers = {"Cookie": f"cheeto_session={token}"} if token else {}
            data = None
            if method == "POST":
                data = {"csrf": csrf_for(token)} if token else {"username": "x"}
            r = await http.request(method, path.format(number=1), headers=headers,
                                   data=data)
            assert r.status_code == expect[actor], (actor, r.status_code, r.text[:300])
            if r.status_code == 403 and method == "GET":
                assert "text/html" in r.headers["content-type"]
            if r.status_code in (200, 403, 422):
                assert r.headers["cache-control"] == "no-store"
                assert "default-src 'none'" in r.headers["content-security-policy"]
            if r.status_code == 303 and expect[actor] == 303 and actor in (
                    "anon", "expired", "revoked") and path not in ("/", "/login"):
                assert r.headers["location"].endswith("/login")


async def test_bearer_tokens_and_keys_open_no_page(app, dash_world) -> None:  # type: ignore[no-untyped-def]
    from cheeto_like.operations.auth import CreateApiKey

    token, _ = app.state.auth.issuer.issue(await subject_of("adam"))
    made = await CreateApiKey.run(dash_world, AUTHOR, name="dash-matrix",
                                  scopes=["api:read", "quota:write"])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://dash") as http:
        for headers in ({"Authorization": f"Bearer {token}"}, {"X-API-Key": made.secret}):
            r = await http.get("/operator", headers=headers)
            assert r.status_code == 303 and r.headers["location"].endswith("/login")


async def test_user_data_is_escaped(app, dash_world) -> None:  # type: ignore[no-untyped-def]
    from cheeto_like.models import User

    user = await User.find_one({"name": "alice"})
    assert user is not None
    old = user.fullname
    await user.set({"fullname": "<script>alert(1)</script>"})  # a hand-made bad value
    try:
        token, _ = app.state.auth.issuer.issue(await subject_of("alice"))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://dash") as http:
            r = await http.get("/me", headers={"Cookie": f"cheeto_session={token}"})
        assert r.status_code == 200
        assert "<script>" not in r.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in r.text
    finally:
        await user.set({"fullname": old})


async def test_a_refused_session_cookie_counts_as_a_failure_an_expired_one_does_not(
        app, dash_world) -> None:  # type: ignore[no-untyped-def]
    """A forged or revoked cookie is a rejected credential (``method="session"``), once
    per request; a session that ran out is the normal way back to the sign-in page."""
    from tests.metrics.recorded import recording, sample

    def failures() -> float:
        return sample("cheeto_auth_signin_failures_total", method="session")

    with recording("api"):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://dash") as http:
            before = failures()
            for actor, counted in (("expired", 0), ("revoked", 1), ("user", 0)):
                token = await session_cookie(app, dash_world, actor)
                r = await http.get("/me", headers={"Cookie": f"cheeto_session={token}"})
                assert r.status_code == (200 if actor == "user" else 303)
                assert failures() == before + counted, actor
                before = failures()
            r = await http.get("/me", headers={"Cookie": "cheeto_session=a.b.c"})
            assert r.status_code == 303 and failures() == before + 1
