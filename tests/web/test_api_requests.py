"""``/api/v1/requests`` against the store: the CLI's workflow through the API (file,
approve step by step, deny with a reason, comment), who sees which rows, the triage
order and filters, and bad input as 4xx problems.

The world (tests/web/conftest.py): alice in lab, bob in proj, mona manages lab (grant),
sam sponsors proj, olga operator, adam admin.
"""

from __future__ import annotations

import time

import pytest

from cheeto_like.config import Config
from cheeto_like.models import GroupMembership, History, Quota, Request
from cheeto_like.operations.auth import CreateApiKey
from cheeto_like.operations.request import file_request
from cheeto_like.queries.request import request_queue
from tests.web.conftest import bearer

PROBLEM = "application/problem+json"
DAY = 86400


async def test_a_join_request_from_filing_to_done(http, app, world):  # type: ignore[no-untyped-def]
    alice = await bearer(app, "alice")
    r = await http.post("/api/v1/requests", headers=alice,
                        json={"kind": "join", "site": "farm", "group": "proj",
                              "reason": "a shared project"})
    assert r.status_code == 201, r.text
    filed = r.json()
    number = int(filed["id"])
    assert (filed["status"], filed["next_step"], filed["user"]) == ("pending", "sponsor",
                                                                    "alice")
    assert filed["requester"] == "alice" and filed["summary"] == "alice joins proj at farm"
    [row] = await History.find({"op": "file_request", "changes.number": number}).to_list()
    assert row.author == "alice"

    # the requester, a manager of another group, an operator at the sponsor's step
    assert (await http.post(f"/api/v1/requests/{number}/approve", headers=alice)
            ).status_code == 403
    assert (await http.post(f"/api/v1/requests/{number}/approve",
                            headers=await bearer(app, "mona"))).status_code == 403
    r = await http.post(f"/api/v1/requests/{number}/approve", headers=await bearer(app, "olga"))
    assert r.status_code == 403 and r.headers["content-type"] == PROBLEM
    assert "waits for a sponsor of proj at farm" in r.json()["detail"]
    assert await History.find({"op": "approve_request"}).count() == 0  # nothing written

    # who may see it: alice (hers), sam (proj's sponsor), not bob
    assert (await http.get(f"/api/v1/requests/{number}", headers=alice)).status_code == 200
    assert (await http.get(f"/api/v1/requests/{number}",
                           headers=await bearer(app, "bob"))).status_code == 403

    r = await http.post(f"/api/v1/requests/{number}/approve", headers=await bearer(app, "sam"),
                        json={"note": "welcome"})
    assert r.status_code == 200, r.text
    done = r.json()
    assert done["status"] == "done" and done["approvals"][0]["by"] == "sam"
    assert done["approvals"][0]["note"] == "welcome"
    assert {"op": "add_group_member",
            "args": {"group": "proj", "user": "alice", "site": "farm"}} in done["actions"]
    edge = await GroupMembership.find_one({"user": "alice", "group": "proj", "site": "farm"})
    assert edge is not None and "member" in edge.roles
    [row] = await History.find({"op": "approve_request"}).to_list()
    assert row.author == "sam"
    r = await http.post(f"/api/v1/requests/{number}/approve", headers=await bearer(app, "sam"))
    assert r.status_code == 409 and "already done" in r.json()["detail"]


async def test_a_quota_request_needs_an_operator_who_did_not_file_it(http, app, world):  # type: ignore[no-untyped-def]
    r = await http.post("/api/v1/requests", headers=await bearer(app, "bob"),
                        json={"kind": "quota", "site": "farm", "group": "proj",
                              "cpu_minutes": 1200})
    number = int(r.json()["id"])
    assert r.json()["user"] == "bob" and r.json()["next_step"] == "sponsor"
    r = await http.post(f"/api/v1/requests/{number}/approve", headers=await bearer(app, "sam"))
    assert r.json()["next_step"] == "operator" and r.json()["status"] == "pending"
    r = await http.post(f"/api/v1/requests/{number}/approve", headers=await bearer(app, "olga"))
    assert r.status_code == 200 and r.json()["status"] == "done"
    quota = await Quota.find_one({"site": "farm", "user": "bob"})
    assert quota is not None and quota.cpu_minutes == 1200

    # four eyes: olga files for bob (she may), sam vouches, olga may not finish it
    r = await http.post("/api/v1/requests", headers=await bearer(app, "olga"),
                        json={"kind": "quota", "site": "farm", "account": "proj",
                              "gpu_minutes": 60})
    assert r.status_code == 201, r.text
    number = int(r.json()["id"])
    assert r.json()["group"] == "proj" and r.json()["user"] is None
    await http.post(f"/api/v1/requests/{number}/approve", headers=await bearer(app, "sam"))
    r = await http.post(f"/api/v1/requests/{number}/approve", headers=await bearer(app, "olga"))
    assert r.status_code == 403 and "another operator must" in r.json()["detail"]
    r = await http.post(f"/api/v1/requests/{number}/approve", headers=await bearer(app, "adam"))
    assert r.status_code == 200 and r.json()["status"] == "done"


async def test_deny_needs_a_reason_and_comments_reach_the_request(http, app, world):  # type: ignore[no-untyped-def]
    r = await http.post("/api/v1/requests", headers=await bearer(app, "bob"),
                        json={"kind": "access", "site": "farm", "group": "proj",
                              "access": ["sudo"]})
    assert r.status_code == 201, r.text
    number = int(r.json()["id"])
    sam = await bearer(app, "sam")
    for body in (None, {}, {"reason": ""}, {"reason": "x", "by": "mallory"}):
        r = await http.post(f"/api/v1/requests/{number}/deny", headers=sam, json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.headers["content-type"] == PROBLEM
    r = await http.post(f"/api/v1/requests/{number}/comments", headers=await bearer(app, "bob"),
                        json={"text": "for the GPU driver work"})
    assert r.status_code == 201 and r.json()["comments"][0]["by"] == "bob"
    assert (await http.post(f"/api/v1/requests/{number}/comments",
                            headers=await bearer(app, "alice"), json={"text": "me too"})
            ).status_code == 403
    r = await http.post(f"/api/v1/requests/{number}/deny", headers=sam,
                        json={"reason": "ask the PI first"})
    assert r.status_code == 200
    assert (r.json()["status"], r.json()["denial_reason"]) == ("denied", "ask the PI first")
    [row] = await History.find({"op": "deny_request", "changes.number": number}).to_list()
    assert row.author == "sam" and row.changes["reason"] == "ask the PI first"
    r = await http.post(f"/api/v1/requests/{number}/deny", headers=sam, json={"reason": "x"})
    assert r.status_code == 409


async def test_the_queue_who_sees_what_triage_and_filters(http, app, world):  # type: ignore[no-untyped-def]
    await Request.get_pymongo_collection().delete_many({})
    now = int(time.time())
    config = Config()
    # three overdue (filed 10, 8 and 6 business-ish days ago), two fresh
    for author, kind, group, extra, age in (
            ("alice", "quota", "lab", {"user": "alice", "cpu_minutes": 60.0}, 10),
            ("bob", "join", "lab", {"user": "bob"}, 6),
            ("bob", "storage", "proj", {"quota": "1T"}, 8),
            ("alice", "access", "lab", {"user": "alice", "access": ["sudo"]}, 0),
            ("carl", "account", "proj", {"user": "carl"}, 0)):
        await file_request(world, author, config, kind=kind, site="farm", group=group,
                           created_epoch=now - age * DAY, **extra)
    expected = [r.id for r in await request_queue(config.requests, triage=True,
                                                  include_hippo=False)]
    olga = await bearer(app, "olga")
    r = await http.get("/api/v1/requests?triage=true&hippo=false", headers=olga)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [x["id"] for x in body["items"]] == expected and body["total"] == 5
    assert body["breached"] == 3 and [x["breached"] for x in body["items"]][:3] == [True] * 3
    dues = [x["due"] for x in body["items"][:3]]
    assert dues == sorted(dues)  # the oldest breach first

    def ids(response) -> list[str]:  # type: ignore[no-untyped-def]
        assert response.status_code == 200, response.text
        return sorted(x["id"] for x in response.json()["items"])

    by_number = {x["id"]: x for x in body["items"]}
    alices = sorted(i for i, x in by_number.items() if x["requester"] == "alice")
    assert ids(await http.get("/api/v1/requests", headers=await bearer(app, "alice"))) == alices
    # sam sponsors proj: its storage and carl's account; bob filed the join and storage
    proj = sorted(i for i, x in by_number.items() if x["group"] == "proj")
    assert ids(await http.get("/api/v1/requests", headers=await bearer(app, "sam"))) == proj
    bobs = sorted(i for i, x in by_number.items() if x["requester"] == "bob")
    assert ids(await http.get("/api/v1/requests", headers=await bearer(app, "bob"))) == bobs
    assert ids(await http.get("/api/v1/requests", headers=await bearer(app, "carl"))) == sorted(
        i for i, x in by_number.items() if x["user"] == "carl")
    # a machine with api:read reads the queue
    made = await CreateApiKey.run(world, "adam", name="queue-reader", scopes=["api:read"])
    assert len(ids(await http.get("/api/v1/requests",
                                  headers={"X-API-Key": made.secret}))) == 5

    # filters and pages
    assert len(ids(await http.get("/api/v1/requests?breached=true", headers=olga))) == 3
    assert len(ids(await http.get("/api/v1/requests?kind=quota", headers=olga))) == 1
    assert len(ids(await http.get("/api/v1/requests?group=proj", headers=olga))) == 2
    assert len(ids(await http.get("/api/v1/requests?user=alice", headers=olga))) == 2
    assert ids(await http.get("/api/v1/requests?status=done", headers=olga)) == []
    page = (await http.get("/api/v1/requests?triage=true&limit=2&offset=1",
                           headers=olga)).json()
    assert [x["id"] for x in page["items"]] == expected[1:3] and page["total"] == 5


@pytest.mark.parametrize(("method", "path", "body", "status"), [
    ("GET", "/api/v1/requests?status=open", None, 422),
    ("GET", "/api/v1/requests?kind=pony", None, 422),
    ("GET", "/api/v1/requests?site=nowhere", None, 404),
    ("GET", "/api/v1/requests?user=nobody", None, 404),
    ("GET", "/api/v1/requests/0", None, 422),
    ("GET", "/api/v1/requests/99999999999", None, 422),
    ("GET", "/api/v1/requests/424242", None, 404),
    ("POST", "/api/v1/requests/424242/approve", None, 404),
    ("POST", "/api/v1/requests", {"kind": "pony", "site": "farm", "group": "lab"}, 422),
    ("POST", "/api/v1/requests", {"kind": "storage", "site": "farm"}, 422),
    ("POST", "/api/v1/requests", {"kind": "storage", "site": "farm", "group": "lab"}, 422),
    ("POST", "/api/v1/requests", {"kind": "quota", "site": "farm", "group": "lab"}, 422),
    ("POST", "/api/v1/requests", {"kind": "join", "site": "mars", "group": "lab"}, 404),
    ("POST", "/api/v1/requests", {"kind": "join", "site": "farm", "group": "nosuch"}, 404),
    ("POST", "/api/v1/requests", {"kind": "join", "site": "farm", "group": "lab",
                                  "requester": "mallory"}, 422),
    ("POST", "/api/v1/requests", {"kind": "join", "site": "farm", "group": "lab",
                                  "reason": "two\nlines"}, 422),
    ("POST", "/api/v1/requests", {"kind": "join", "site": "farm", "group": "lab",
                                  "user": "bob"}, 403),  # alice files for someone else
])
async def test_bad_input_is_a_4xx_problem(http, app, world, method, path, body, status):  # type: ignore[no-untyped-def]
    before = await Request.find({}).count()
    r = await http.request(method, path, headers=await bearer(app, "alice"), json=body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM and r.json()["detail"]
    assert await Request.find({}).count() == before


async def test_hippo_rows_show_to_the_groups_managers_and_operators(http, app, world):  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime, timedelta

    from cheeto_like.models import HippoEvent

    await HippoEvent(hippo_id=501, hippo_endpoint="https://hippo", action="CreateAccount",
                     status="Pending", site="farm", target_username="zed",
                     target_groupnames=["lab", "proj"], sponsor_username="someone",
                     first_seen_at=datetime.now(UTC) - timedelta(days=1)).insert()

    async def sees(user: str) -> bool:
        r = await http.get("/api/v1/requests", headers=await bearer(app, user))
        return "h501" in [x["id"] for x in r.json()["items"]]

    assert await sees("olga") and await sees("sam") and await sees("mona")  # proj, lab
    assert not await sees("alice") and not await sees("bob")
    r = await http.get("/api/v1/requests?hippo=false", headers=await bearer(app, "olga"))
    assert "h501" not in [x["id"] for x in r.json()["items"]]
