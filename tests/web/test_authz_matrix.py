"""The authorisation matrix: every route of the API app × every kind of caller -> the
expected status.

Callers: nobody, a user (alice), a manager (mona, of alice's group lab), an operator
(olga), an admin (adam), an expired token, a revoked token, and a machine key whose only
scope is ``puppet:read`` (the wrong scope for /api/v1). A route of the app that has no
row here fails ``test_every_route_has_a_row``, so a new route cannot ship unchecked.
Person tokens are minted fresh for every call, so ``/logout`` revokes nothing the
next row needs. A row's ``setup`` runs before each caller; when it returns a request
number, ``{n}`` in the path is that number (a fresh request per caller).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.routing import APIRoute
from starlette.routing import Mount, Route

from cheeto_like.auth.principal import subject_of
from cheeto_like.config import Config
from cheeto_like.models import History
from cheeto_like.operations.auth import CreateApiKey, RevokeToken
from cheeto_like.operations.quota import SetQuota
from tests.factories import AUTHOR
from tests.web.conftest import PASSWORDS, bearer

ACTORS = ("anon", "user", "manager", "operator", "admin", "expired", "revoked", "key")
PEOPLE = {"user": "alice", "manager": "mona", "operator": "olga", "admin": "adam"}
Setup = Callable[[Any], Awaitable[Any]]


@dataclass
class Row:
    method: str
    path: str  # ``{actor}`` is replaced by the caller's kind
    expect: dict[str, int]
    body: Any = None
    setup: Setup | None = None
    template: str | None = None  # the route's path, when ``path`` fills its parameters
    problem: bool = field(default=True)


def public(code: int) -> dict[str, int]:
    return dict.fromkeys(ACTORS, code)


def signed_in(user: int, manager: int, operator: int, admin: int, key: int) -> dict[str, int]:
    return {"anon": 401, "expired": 401, "revoked": 401, "user": user, "manager": manager,
            "operator": operator, "admin": admin, "key": key}


PERSONS_OK = signed_in(200, 200, 200, 200, 403)
OPERATORS = signed_in(403, 403, 200, 200, 403)
ADMINS = signed_in(403, 403, 403, 200, 403)


async def ensure_quotas(store: Any) -> None:
    await SetQuota.run(store, AUTHOR, site="farm", user="alice", cpu_minutes=600.0)
    await SetQuota.run(store, AUTHOR, site="farm", account="lab", cpu_minutes=600.0)


async def alice_asks(store: Any) -> int:
    """alice asks for a quota for herself (lab); it waits for lab's manager (mona)."""
    from cheeto_like.operations.request import file_request

    made = await file_request(store, "alice", Config(), kind="quota", site="farm",
                              group="lab", user="alice", cpu_minutes=60.0)
    return made.number


async def mona_vouched(store: Any) -> int:
    """mona (lab's manager) files for alice: the manager step is done, an operator's
    approval is next."""
    from cheeto_like.operations.request import file_request

    made = await file_request(store, "mona", Config(), kind="quota", site="farm",
                              group="lab", user="alice", cpu_minutes=90.0)
    assert made.next_step == "operator"
    return made.number


REQUEST = "/api/v1/requests/{number}"
ROWS: list[Row] = [
    Row("POST", "/api/v1/login", public(200),
        body={"username": "alice", "password": PASSWORDS["alice"]}),
    Row("POST", "/api/v1/logout", signed_in(204, 204, 204, 204, 422)),
    Row("GET", "/api/v1/me", signed_in(200, 200, 200, 200, 200)),
    Row("GET", "/api/v1/users", OPERATORS),
    Row("GET", "/api/v1/users/alice", PERSONS_OK, template="/api/v1/users/{name}"),
    Row("GET", "/api/v1/users/bob", OPERATORS, template="/api/v1/users/{name}"),
    Row("GET", "/api/v1/users/alice/slurm/farm", PERSONS_OK,
        template="/api/v1/users/{name}/slurm/{site}"),
    Row("GET", "/api/v1/why/farm/alice", PERSONS_OK, template="/api/v1/why/{site}/{user}"),
    Row("GET", "/api/v1/why/farm/bob", OPERATORS, template="/api/v1/why/{site}/{user}"),
    Row("GET", "/api/v1/groups", PERSONS_OK),
    Row("GET", "/api/v1/groups/lab", PERSONS_OK, template="/api/v1/groups/{name}"),
    Row("GET", "/api/v1/groups/proj", OPERATORS, template="/api/v1/groups/{name}"),
    Row("GET", "/api/v1/sites", PERSONS_OK),
    Row("GET", "/api/v1/sites/farm", PERSONS_OK, template="/api/v1/sites/{site}"),
    Row("GET", "/api/v1/usage/farm?user=alice", PERSONS_OK, template="/api/v1/usage/{site}"),
    Row("GET", "/api/v1/usage/farm?account=lab", PERSONS_OK, template="/api/v1/usage/{site}"),
    # no subject: a person who may not read the site is answered about themselves
    Row("GET", "/api/v1/usage/farm", PERSONS_OK, template="/api/v1/usage/{site}"),
    Row("GET", "/api/v1/usage/farm?user=bob", OPERATORS, template="/api/v1/usage/{site}"),
    Row("GET", "/api/v1/quotas/farm?user=alice", PERSONS_OK, template="/api/v1/quotas/{site}"),
    Row("GET", "/api/v1/quotas/farm?user=bob", OPERATORS, template="/api/v1/quotas/{site}"),
    Row("GET", "/api/v1/quotas/farm", PERSONS_OK, template="/api/v1/quotas/{site}"),
    Row("PUT", "/api/v1/quotas/farm/users/alice", OPERATORS, body={"cpu_minutes": 900},
        template="/api/v1/quotas/{site}/users/{name}"),
    Row("PUT", "/api/v1/quotas/farm/accounts/lab", OPERATORS, body={"gpu_minutes": 60},
        template="/api/v1/quotas/{site}/accounts/{name}"),
    Row("DELETE", "/api/v1/quotas/farm/users/alice", signed_in(403, 403, 204, 204, 403),
        setup=ensure_quotas, template="/api/v1/quotas/{site}/users/{name}"),
    Row("DELETE", "/api/v1/quotas/farm/accounts/lab", signed_in(403, 403, 204, 204, 403),
        setup=ensure_quotas, template="/api/v1/quotas/{site}/accounts/{name}"),
    Row("GET", "/api/v1/adjustments/farm?user=alice", PERSONS_OK,
        template="/api/v1/adjustments/{site}"),
    Row("POST", "/api/v1/adjustments/farm", signed_in(403, 403, 201, 201, 403),
        body={"user": "alice", "cpu_minutes": -60, "reason": "failed node"},
        template="/api/v1/adjustments/{site}"),
    Row("GET", "/api/v1/defaults/farm", PERSONS_OK, template="/api/v1/defaults/{site}"),
    Row("PUT", "/api/v1/defaults/farm", OPERATORS, body={"user_cpu_minutes": 6000},
        template="/api/v1/defaults/{site}"),
    Row("GET", "/api/v1/gpu-factors/farm", PERSONS_OK, template="/api/v1/gpu-factors/{site}"),
    Row("PUT", "/api/v1/gpu-factors/farm/t-{actor}", OPERATORS, body={"factor": 2.5},
        template="/api/v1/gpu-factors/{site}/{gpu_type}"),
    Row("GET", "/api/v1/roles", ADMINS),
    Row("POST", "/api/v1/roles", signed_in(403, 403, 403, 201, 403),
        body={"user": "carl", "role": "operator"}),
    Row("DELETE", "/api/v1/roles/dave/operator", signed_in(403, 403, 403, 204, 403),
        template="/api/v1/roles/{user}/{role}"),
    # carl's tokens end (carl is no caller here); an unknown user is a 404 (test_tokens.py)
    Row("POST", "/api/v1/users/carl/tokens/revoke", signed_in(403, 403, 403, 204, 403),
        template="/api/v1/users/{name}/tokens/revoke"),
    Row("GET", "/api/v1/api-keys", ADMINS),
    Row("GET", "/api/v1/api-keys/audit", ADMINS),
    Row("POST", "/api/v1/api-keys", signed_in(403, 403, 403, 201, 403),
        body={"name": "k-{actor}", "scopes": ["api:read"]}),
    Row("POST", "/api/v1/api-keys/victim/rotate", ADMINS,
        template="/api/v1/api-keys/{name}/rotate"),
    Row("DELETE", "/api/v1/api-keys/victim2", signed_in(403, 403, 403, 204, 403),
        template="/api/v1/api-keys/{name}"),
    Row("GET", "/api/v1/sync-runs", OPERATORS),
    Row("GET", "/api/v1/requests", signed_in(200, 200, 200, 200, 403)),
    Row("POST", "/api/v1/requests", signed_in(201, 201, 201, 201, 403),
        body={"kind": "quota", "site": "farm", "group": "lab", "cpu_minutes": 600}),
    Row("GET", "/api/v1/requests/{n}", PERSONS_OK, setup=alice_asks, template=REQUEST),
    # the manager's step: mona approves; the operators are refused by the step check
    Row("POST", "/api/v1/requests/{n}/approve", signed_in(403, 200, 403, 403, 403),
        setup=alice_asks, template=REQUEST + "/approve"),
    # the operator's step: olga or adam; mona has done hers, alice may not
    Row("POST", "/api/v1/requests/{n}/approve", signed_in(403, 403, 200, 200, 403),
        setup=mona_vouched, template=REQUEST + "/approve"),
    Row("POST", "/api/v1/requests/{n}/deny", signed_in(403, 200, 200, 200, 403),
        body={"reason": "not this quarter"}, setup=alice_asks, template=REQUEST + "/deny"),
    Row("POST", "/api/v1/requests/{n}/comments", signed_in(201, 201, 201, 201, 403),
        body={"text": "why?"}, setup=alice_asks, template=REQUEST + "/comments"),
    Row("GET", "/puppet/root-keys/farm", signed_in(403, 403, 200, 200, 200),
        template="/puppet/root-keys/{site}", problem=False),
    Row("GET", "/puppet/storage/farm", signed_in(403, 403, 200, 200, 200),
        template="/puppet/storage/{site}", problem=False),
    Row("GET", "/healthz", public(200), problem=False),
    Row("GET", "/openapi.json", public(200), problem=False),
    Row("GET", "/docs", public(200), problem=False),
    # Prometheus' scrape: open unless metrics.token is set (tests/metrics/test_api_metrics.py)
    Row("GET", "/metrics", public(200), problem=False),
]


@pytest.fixture(scope="module")
async def credentials(world, app) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    made = await CreateApiKey.run(world, AUTHOR, name="puppet-only", scopes=["puppet:read"])
    await CreateApiKey.run(world, AUTHOR, name="victim", scopes=["api:read"])
    await CreateApiKey.run(world, AUTHOR, name="victim2", scopes=["api:read"])
    issuer = app.state.auth.issuer
    expired, _ = issuer.issue(await subject_of("alice"), ttl_seconds=3600,
                              now=time.time() - 5 * 3600)
    revoked, claims = issuer.issue(await subject_of("olga"))
    await RevokeToken.run(world, "olga", jti=claims.jti, exp_epoch=claims.exp, user="olga")
    return {"key": {"X-API-Key": made.secret},
            "expired": {"Authorization": f"Bearer {expired}"},
            "revoked": {"Authorization": f"Bearer {revoked}"}}


async def headers_for(app, actor: str, credentials: dict[str, Any]) -> dict[str, str]:  # type: ignore[no-untyped-def]
    if actor == "anon":
        return {}
    if actor in PEOPLE:
        return await bearer(app, PEOPLE[actor])
    return credentials[actor]


def fill(value: Any, actor: str) -> Any:
    if isinstance(value, str):
        return value.replace("{actor}", actor)
    if isinstance(value, dict):
        return {k: fill(v, actor) for k, v in value.items()}
    return value


def endpoints(routes: Any) -> set[tuple[str, str]]:
    """(method, path) of every route, through included routers (FastAPI 0.12x keeps an
    included router as one entry whose ``effective_candidates()`` are its routes)."""
    found: set[tuple[str, str]] = set()
    for route in routes:
        if isinstance(route, Mount):
            continue
        if isinstance(route, Route | APIRoute):
            found |= {(m, route.path) for m in (route.methods or set()) - {"HEAD"}}
        elif callable(getattr(route, "effective_candidates", None)):
            found |= {(m, c.path) for c in route.effective_candidates()
                      for m in (c.methods or set()) - {"HEAD"}}
        else:  # a kind of route this test does not know: add it here
            raise AssertionError(f"unknown route type {type(route).__name__}")
    return found


def test_every_route_has_a_row(app):  # type: ignore[no-untyped-def]
    covered = {(r.method, r.template or r.path.split("?")[0]) for r in ROWS}
    # the dashboard's pages sign in by cookie: tests/web/dashboard/test_dashboard_authz.py
    found = endpoints(app.routes) - app.state.dashboard_routes
    openapi = {(m.upper(), p) for p, ops in app.openapi()["paths"].items() for m in ops}
    assert openapi <= found  # the walk sees at least what the document lists
    missing = sorted(f"{m} {p}" for m, p in found - covered)
    assert not missing, f"routes without a row in the authorisation matrix: {missing}"
    for row in ROWS:
        assert set(row.expect) == set(ACTORS), row.path


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.method} {r.path}")
async def test_matrix(row: Row, app, http, credentials, world):  # type: ignore[no-untyped-def]
    for actor in ACTORS:
        made = await row.setup(world) if row.setup is not None else None
        path = fill(row.path, actor).replace("{n}", str(made))
        response = await http.request(row.method, path,
                                       headers=await headers_for(app, actor, credentials),
                                       json=fill(row.body, actor))
        expected = row.expect[actor]
        assert response.status_code == expected, (actor, response.status_code, response.text)
        if row.problem and expected >= 400:
            assert response.headers["content-type"] == "application/problem+json"
            body = response.json()
            assert body["status"] == expected and body["title"] and body["type"]
        if row.path.startswith("/api/v1"):
            assert response.headers.get("x-content-type-options") == "nosniff"
            assert response.headers.get("cache-control") == "no-store"


async def test_api_writes_name_the_signed_in_person(app, http, credentials):  # type: ignore[no-untyped-def]
    """History's author is the token's person; a body cannot choose it."""
    r = await http.put("/api/v1/quotas/farm/users/bob", headers=await bearer(app, "olga"),
                       json={"cpu_minutes": 1234})
    assert r.status_code == 200, r.text
    rows = await History.find({"op": "set_quota"}).sort(-History.timestamp).to_list()
    assert rows[0].author == "olga" and rows[0].changes["user"] == "bob"
    r = await http.put("/api/v1/quotas/farm/users/bob", headers=await bearer(app, "olga"),
                       json={"cpu_minutes": 5, "author": "mallory"})
    assert r.status_code == 422
    assert r.headers["content-type"] == "application/problem+json"
    assert "author" in r.json()["detail"]
