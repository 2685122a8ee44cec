"""``Idempotency-Key`` on ``/api/v1`` POSTs (web/idempotency.py): a client's retry of a
quota adjustment, a new request or a comment applies once and gets the first answer; a
different key applies again; a bad key is a 422 problem; the same key for another
request is a 409."""

from __future__ import annotations

from cheeto_like.models import History, QuotaAdjustment
from cheeto_like.models import Request as RequestDoc

from .conftest import bearer

PROBLEM = "application/problem+json"
ADJUST = {"user": "alice", "cpu_minutes": 30, "reason": "rerun"}


async def adjusted() -> int:
    return await QuotaAdjustment.find({"site": "farm", "user": "alice",
                                       "reason": "rerun"}).count()


async def test_the_same_adjustment_twice_applies_once_with_the_same_answer(http, app):
    h = await bearer(app, "olga")
    before, histories = await adjusted(), await History.find({"op": "adjust_usage"}).count()
    keyed = {**h, "Idempotency-Key": "adjust-0001"}
    first = await http.post("/api/v1/adjustments/farm", headers=keyed, json=ADJUST)
    again = await http.post("/api/v1/adjustments/farm", headers=keyed, json=ADJUST)
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json() and first.json()["cpu_minutes"] == 30
    assert await adjusted() == before + 1
    assert await History.find({"op": "adjust_usage"}).count() == histories + 1
    other = await http.post("/api/v1/adjustments/farm",
                            headers={**h, "Idempotency-Key": "adjust-0002"}, json=ADJUST)
    assert other.status_code == 201 and await adjusted() == before + 2
    plain = await http.post("/api/v1/adjustments/farm", headers=h, json=ADJUST)
    assert plain.status_code == 201 and await adjusted() == before + 3  # no key: no replay
    assert set(plain.json()) == set(first.json())


async def test_a_key_is_the_callers_and_names_one_request(http, app):
    olga, adam = await bearer(app, "olga"), await bearer(app, "adam")
    key = {"Idempotency-Key": "shared-key"}
    before = await adjusted()
    assert (await http.post("/api/v1/adjustments/farm", headers={**olga, **key},
                            json=ADJUST)).status_code == 201
    # another caller's same token is their own key
    assert (await http.post("/api/v1/adjustments/farm", headers={**adam, **key},
                            json=ADJUST)).status_code == 201
    assert await adjusted() == before + 2
    reused = await http.post("/api/v1/adjustments/farm", headers={**olga, **key},
                             json={**ADJUST, "cpu_minutes": 99})
    assert reused.status_code == 409 and reused.headers["content-type"] == PROBLEM
    assert "different request" in reused.json()["detail"]
    assert await adjusted() == before + 2


async def test_bad_keys_are_422_problems_and_write_nothing(http, app):
    h = await bearer(app, "olga")
    before = await adjusted()
    for bad in (b"", b"x" * 129, b"has space", b"semi;colon", "ünïcode".encode()):
        r = await http.post("/api/v1/adjustments/farm", json=ADJUST,
                            headers={**h, "Idempotency-Key": bad})
        assert r.status_code == 422, (bad, r.text)
        assert r.headers["content-type"] == PROBLEM and "idempotency" in r.text.lower()
    assert await adjusted() == before


async def test_a_new_request_and_a_comment_retried_apply_once(http, app):
    alice = await bearer(app, "alice")
    body = {"kind": "join", "site": "farm", "group": "proj", "reason": "retry me"}
    keyed = {**alice, "Idempotency-Key": "join-proj-1"}
    count = await RequestDoc.find({"reason": "retry me"}).count()
    first = await http.post("/api/v1/requests", headers=keyed, json=body)
    again = await http.post("/api/v1/requests", headers=keyed, json=body)
    assert (first.status_code, again.status_code) == (201, 201), first.text
    assert again.json() == first.json()
    assert await RequestDoc.find({"reason": "retry me"}).count() == count + 1
    number = (await RequestDoc.find_one({"reason": "retry me"})).number
    comment = {**alice, "Idempotency-Key": "comment-1"}
    replies = [await http.post(f"/api/v1/requests/{number}/comments", headers=comment,
                               json={"text": "any news?"}) for _ in range(2)]
    assert [r.status_code for r in replies] == [201, 201]
    assert replies[0].json() == replies[1].json()
    found = await RequestDoc.find_one({"number": number})
    assert [c.text for c in found.comments] == ["any news?"]
