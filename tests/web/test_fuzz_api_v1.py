"""Hostile input on the newer ``/api/v1`` routes (sign-in, roles, API keys, usage and
quotas, requests): malformed JSON, wrong types, missing fields, control characters, huge
and non-numeric numbers, bad dates, unknown names. Every one is a 4xx RFC 9457 problem
(never a 500, never a traceback) and leaves the store exactly as it was."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from cheeto_like.models import ALL_MODELS
from tests.web.conftest import bearer

PROBLEM = "application/problem+json"
LONG = "x" * 10_000
# names no route accepts (percent-encoded where they go into a URL)
HOSTILE_NAMES = [LONG, "\u202eevil", "a\x00b", "\x1b[31mred", "[red]x[/]", "../../etc/passwd"]


async def state() -> dict[str, list[dict[str, Any]]]:
    """Every document the routes could write (api keys' last use is batched in memory,
    so it cannot move here)."""
    return {m.get_settings().name: sorted(
        [d async for d in m.get_pymongo_collection().find({})], key=lambda d: str(d["_id"]))
        for m in ALL_MODELS}


async def problem(http, app, method: str, url: str, *, user: str = "adam",
                  **kwargs: Any) -> dict[str, Any]:
    before = await state()
    r = await http.request(method, url, headers={**await bearer(app, user),
                                                 **kwargs.pop("headers", {})}, **kwargs)
    assert 400 <= r.status_code < 500, (method, url, r.status_code, r.text[:500])
    assert r.headers["content-type"] == PROBLEM, r.headers["content-type"]
    body = r.json()
    assert body["status"] == r.status_code and body.get("title"), body
    assert "Traceback" not in r.text and "internal error" not in r.text.lower()
    assert await state() == before
    return body


JSON = {"headers": {"content-type": "application/json"}}
WRITES = [("POST", "/api/v1/requests"), ("PUT", "/api/v1/quotas/farm/users/alice"),
          ("POST", "/api/v1/adjustments/farm"), ("PUT", "/api/v1/defaults/farm"),
          ("PUT", "/api/v1/gpu-factors/farm/a100"), ("POST", "/api/v1/roles"),
          ("POST", "/api/v1/api-keys"), ("POST", "/api/v1/login")]

BODY_CASES: list[tuple[str, str, Any]] = [
    # malformed JSON, wrong top-level types, missing fields
    *[(m, u, raw) for m, u in WRITES
      for raw in ["{", "[]", "null", '"x"', "1e400", "{\"a\": NaN}"]],
    ("POST", "/api/v1/requests", {}),
    ("POST", "/api/v1/requests", {"kind": "join"}),
    ("POST", "/api/v1/requests", {"kind": "nope", "site": "farm", "group": "lab"}),
    ("POST", "/api/v1/requests", {"kind": "join", "site": 7, "group": "lab"}),
    ("POST", "/api/v1/requests", {"kind": "join", "site": "farm", "group": ["lab"]}),
    ("POST", "/api/v1/requests", {"kind": "join", "site": "nowhere", "group": "lab"}),
    ("POST", "/api/v1/requests", {"kind": "join", "site": "farm", "group": "nogroup"}),
    ("POST", "/api/v1/requests", {"kind": "join", "site": "farm", "group": "lab",
                                  "reason": LONG}),
    ("POST", "/api/v1/requests", {"kind": "quota", "site": "farm", "account": "lab",
                                  "cpu_minutes": -5}),
    ("POST", "/api/v1/requests", {"kind": "quota", "site": "farm", "account": "lab",
                                  "cpu_minutes": "lots"}),
    ("POST", "/api/v1/requests", {"kind": "quota", "site": "farm", "account": "lab",
                                  "cpu_minutes": 1e300}),
    ("POST", "/api/v1/requests", {"kind": "storage", "site": "farm", "group": "lab",
                                  "quota": "1Q"}),
    ("POST", "/api/v1/requests", {"kind": "storage", "site": "farm", "group": "lab",
                                  "quota": "-1T"}),
    ("POST", "/api/v1/requests", {"kind": "access", "site": "farm", "group": "lab",
                                  "user": "alice", "access": ["\x1b[31m"]}),
    ("PUT", "/api/v1/quotas/farm/users/alice", {"cpu_minutes": -1}),
    ("PUT", "/api/v1/quotas/farm/users/alice", {"cpu_minutes": "10h"}),
    ("PUT", "/api/v1/quotas/farm/users/alice", {"cpu_minutes": 1e13}),
    ("PUT", "/api/v1/quotas/farm/users/alice", {"period": "weekly"}),
    ("PUT", "/api/v1/quotas/farm/users/alice", {"period": "explicit", "start": "2026-13-45",
                                                "end": "2027-01-01"}),
    ("PUT", "/api/v1/quotas/farm/users/alice", {"period": "explicit",
                                                "start": "yesterday-ish"}),
    ("PUT", "/api/v1/quotas/farm/users/alice", {"period": "explicit", "start": "2027-01-01",
                                                "end": "2026-01-01"}),
    ("PUT", "/api/v1/quotas/farm/users/alice", {"period": "explicit"}),
    ("PUT", "/api/v1/quotas/farm/users/nobody", {"cpu_minutes": 60}),
    ("PUT", "/api/v1/quotas/nowhere/users/alice", {"cpu_minutes": 60}),
    ("PUT", "/api/v1/quotas/farm/accounts/nogroup", {"cpu_minutes": 60}),
    ("POST", "/api/v1/adjustments/farm", {"user": "alice", "cpu_minutes": 60}),
    ("POST", "/api/v1/adjustments/farm", {"user": "alice", "cpu_minutes": 60, "reason": ""}),
    ("POST", "/api/v1/adjustments/farm", {"user": "alice", "cpu_minutes": "x",
                                          "reason": "r"}),
    ("POST", "/api/v1/adjustments/farm", {"user": "nobody", "cpu_minutes": 60,
                                          "reason": "r"}),
    ("POST", "/api/v1/adjustments/farm", {"cpu_minutes": 60, "reason": "r"}),
    ("POST", "/api/v1/adjustments/farm", {"user": "alice", "account": "lab",
                                          "cpu_minutes": 60, "reason": "r"}),
    ("POST", "/api/v1/adjustments/farm", {"user": "alice", "cpu_minutes": 60,
                                          "reason": LONG}),
    ("PUT", "/api/v1/defaults/farm", {"user_cpu_minutes": -1}),
    ("PUT", "/api/v1/defaults/farm", {"period": "explicit", "start": "2026-13-45"}),
    ("PUT", "/api/v1/gpu-factors/farm/a100", {}),
    ("PUT", "/api/v1/gpu-factors/farm/a100", {"factor": -1}),
    ("PUT", "/api/v1/gpu-factors/farm/a100", {"factor": "double"}),
    ("PUT", "/api/v1/gpu-factors/farm/a100", {"factor": 1e6}),
    ("PUT", "/api/v1/gpu-factors/farm/a100", {"factor": 2, "effective_from": "2020-01-01"}),
    ("PUT", "/api/v1/gpu-factors/farm/a100", {"factor": 2,
                                              "effective_from": "2020-01-01T00:00:00"}),
    ("PUT", "/api/v1/quotas/farm/users/alice", {"period": "monthly", "start": "2027-01-01"}),
    ("PUT", "/api/v1/gpu-factors/farm/a100", {"factor": 2, "effective_from": "2026-13-45"}),
    ("PUT", "/api/v1/gpu-factors/nowhere/a100", {"factor": 2}),
    ("POST", "/api/v1/roles", {}),
    ("POST", "/api/v1/roles", {"user": "alice", "role": "god"}),
    ("POST", "/api/v1/roles", {"user": "nobody", "role": "operator"}),
    ("POST", "/api/v1/roles", {"user": "alice", "role": "manager"}),
    ("POST", "/api/v1/roles", {"user": "alice", "role": "manager", "accounts": ["nogroup"]}),
    ("POST", "/api/v1/roles", {"user": "alice", "role": "manager", "accounts": "lab"}),
    ("POST", "/api/v1/roles", {"user": "\x1b[31mred", "role": "operator"}),
    ("POST", "/api/v1/api-keys", {}),
    ("POST", "/api/v1/api-keys", {"name": "k", "scopes": []}),
    ("POST", "/api/v1/api-keys", {"name": "k", "scopes": ["root"]}),
    ("POST", "/api/v1/api-keys", {"name": "\u202ek", "scopes": ["api:read"]}),
    ("POST", "/api/v1/api-keys", {"name": LONG, "scopes": ["api:read"]}),
    ("POST", "/api/v1/api-keys", {"name": "k", "scopes": ["api:read"],
                                  "expires_in_days": -1}),
    ("POST", "/api/v1/api-keys", {"name": "k", "scopes": ["api:read"],
                                  "expires_in_days": "forever"}),
    ("POST", "/api/v1/api-keys/nokey/rotate", {}),
    ("POST", "/api/v1/api-keys/nokey/rotate", {"overlap_hours": -1}),
    ("POST", "/api/v1/requests/999/approve", {}),
    ("POST", "/api/v1/requests/999/deny", {"reason": "no"}),
    ("POST", "/api/v1/requests/999/comments", {"text": "hi"}),
    ("POST", "/api/v1/requests/1/deny", {}),
    ("POST", "/api/v1/requests/1/comments", {"text": ""}),
    ("POST", "/api/v1/requests/1/comments", {"text": LONG}),
    ("POST", "/api/v1/requests/x/approve", {}),
    ("POST", "/api/v1/requests/-1/approve", {}),
    ("POST", "/api/v1/requests/99999999999999999999999/approve", {}),
]


@pytest.fixture(scope="module")
async def filed(world, app):  # type: ignore[no-untyped-def]
    """One pending request (number 1) for the routes that act on one."""
    import httpx

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api") as client:
        r = await client.post("/api/v1/requests", headers=await bearer(app, "alice"),
                              json={"kind": "join", "site": "farm", "group": "proj"})
        assert r.status_code == 201, r.text
        return int(r.json()["id"])


@pytest.mark.parametrize(("method", "url", "body"), BODY_CASES,
                         ids=[f"{m} {u} {str(b)[:40]!r}" for m, u, b in BODY_CASES])
async def test_bad_bodies_are_problems(http, app, filed, method, url, body):  # type: ignore[no-untyped-def]
    if isinstance(body, str):
        await problem(http, app, method, url, content=body, **JSON)
    else:
        await problem(http, app, method, url, json=body)


QUERY_CASES: list[str] = [
    *[f"/api/v1/usage/farm?user={quote(n)}" for n in HOSTILE_NAMES],
    "/api/v1/usage/farm?start=2026-13-45&end=2027-01-01",
    "/api/v1/usage/farm?start=yesterday-ish&end=2027-01-01",
    "/api/v1/usage/farm?start=2027-01-01",
    "/api/v1/usage/farm?start=2027-01-01&end=2026-01-01",
    "/api/v1/usage/farm?period=weekly",
    "/api/v1/usage/farm?by=color",
    "/api/v1/usage/farm?user=alice&by=week",
    "/api/v1/usage/farm?start=2027-01-01T00:00:00&end=2026-01-01T00:00:00%2B00:00",
    "/api/v1/usage/nowhere",
    *[f"/api/v1/quotas/farm?account={quote(n)}" for n in HOSTILE_NAMES],
    "/api/v1/quotas/farm?account=nobody",  # no made-up defaults for a name nobody holds
    "/api/v1/quotas/farm?user=nobody",
    "/api/v1/quotas/farm?limit=-1",
    "/api/v1/quotas/farm?limit=99999999999999999999999",
    "/api/v1/quotas/farm?offset=x",
    "/api/v1/quotas/nowhere",
    "/api/v1/adjustments/nowhere",
    "/api/v1/defaults/nowhere",
    "/api/v1/gpu-factors/nowhere",
    "/api/v1/roles?user=%1b%5b31m",
    "/api/v1/requests?status=weird",
    "/api/v1/requests?kind=weird",
    "/api/v1/requests?limit=0",
    "/api/v1/requests/x",
    "/api/v1/requests/999",
    "/api/v1/requests/-1",
    "/api/v1/requests/99999999999999999999999",
    "/api/v1/users/%1b%5b31mred",
    "/api/v1/users/" + "x" * 5000,
    "/api/v1/why/farm/%00",
]


@pytest.mark.parametrize("url", QUERY_CASES, ids=[u[:60] for u in QUERY_CASES])
async def test_bad_queries_are_problems(http, app, filed, url):  # type: ignore[no-untyped-def]
    await problem(http, app, "GET", url)


@pytest.mark.parametrize("body", [
    {"username": "", "password": "x"}, {"username": LONG, "password": "x"},
    {"username": "alice", "password": "x" * 5000}, {"username": "alice"},
    {"username": ["alice"], "password": "x"}, {"username": "\x1b[31m", "password": "x"},
    {"username": "a\x00b", "password": "x"}, {"username": "alice", "password": "wrong"},
])
async def test_bad_logins_are_problems(http, app, body):  # type: ignore[no-untyped-def]
    before = await state()
    r = await http.post("/api/v1/login", json=body)
    assert r.status_code in (401, 422), r.text
    assert r.headers["content-type"] == PROBLEM and "Traceback" not in r.text
    assert await state() == before


@pytest.mark.parametrize("headers", [
    {"Authorization": "Bearer "}, {"Authorization": "Bearer \x1b[31m"},
    {"Authorization": "Bearer " + LONG}, {"Authorization": "Basic YWxpY2U6eA=="},
    {"X-API-Key": ""}, {"X-API-Key": "ck_" + LONG}, {"X-API-Key": "[red]x[/]"},
])
async def test_bad_credentials_are_401(http, headers):  # type: ignore[no-untyped-def]
    r = await http.get("/api/v1/me", headers=headers)
    assert r.status_code == 401, r.text
    assert r.headers["content-type"] == PROBLEM


@pytest.mark.parametrize(("method", "url", "body"), [
    ("PUT", "/api/v1/gpu-factors/farm/t4", {"factor": 2, "effective_from": "2099-01-01"}),
    ("PUT", "/api/v1/quotas/farm/users/bob", {"cpu_minutes": 60, "period": "explicit",
                                              "start": "2026-01-01T00:00:00",
                                              "end": "2099-01-01T00:00:00+00:00"}),
    ("PUT", "/api/v1/defaults/farm", {"user_cpu_minutes": 60, "period": "explicit",
                                      "start": "2026-01-01", "end": "2099-01-01"}),
    ("GET", "/api/v1/usage/farm?start=2026-01-01T00:00:00&end=2099-01-01T00:00:00%2B00:00",
     None),
])
async def test_times_without_an_offset_are_utc(http, app, method, url, body):  # type: ignore[no-untyped-def]
    """A naive ISO time is UTC (as on the command line), never a 500 from comparing it
    with the store's aware times."""
    r = await http.request(method, url, headers=await bearer(app, "adam"), json=body)
    assert r.status_code == 200, r.text
    for key in ("effective_from", "start"):
        if key in r.json():
            assert r.json()[key].endswith(("Z", "+00:00")), r.json()
