"""The request forms without a browser (the app in process, sessions minted by its
issuer): each kind files through ``file_request`` with the signed-in person as the
requester and the History author; bad input is a 422 with the error next to its field
and nothing written; forms without the CSRF token and people acting on someone else's
request are refused (403) before anything is written; a sponsor's member changes are
made at once, or filed for an operator where the site's policy wants one."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from cheeto_like.auth.principal import subject_of
from cheeto_like.config import ApiConfig, Config, MongoConfig, RequestsConfig
from cheeto_like.models import GroupMembership, History
from cheeto_like.models import Request as RequestDoc
from cheeto_like.web.dashboard.session import csrf_for


@pytest.fixture(scope="module")
def app(dash_world, tmp_path_factory):  # type: ignore[no-untyped-def]
    from cheeto_like.web.app import create_api

    config = Config(mongo=MongoConfig(),
                    api=ApiConfig(jwt_key_file=tmp_path_factory.mktemp("rq") / "jwt.key"))
    return create_api(config, store=dash_world)


@pytest.fixture(scope="module")
def strict_app(dash_world, tmp_path_factory):  # type: ignore[no-untyped-def]
    """A site whose policy wants an operator for membership changes too."""
    from cheeto_like.web.app import create_api

    config = Config(mongo=MongoConfig(),
                    api=ApiConfig(jwt_key_file=tmp_path_factory.mktemp("rq") / "jwt.key"),
                    requests=RequestsConfig(kinds={"join": {"operator": True},
                                                   "leave": {"operator": True}}))
    return create_api(config, store=dash_world)


class Visitor:
    def __init__(self, http: httpx.AsyncClient, token: str) -> None:
        self.http, self.token = http, token
        self.headers = {"Cookie": f"cheeto_session={token}"}

    async def get(self, path: str) -> httpx.Response:
        return await self.http.get(path, headers=self.headers)

    async def post(self, path: str, data: dict[str, Any], *, csrf: bool = True,
                   ) -> httpx.Response:
        body = dict(data) | ({"csrf": csrf_for(self.token)} if csrf else {})
        return await self.http.post(path, headers=self.headers, data=body)


async def visit(app: Any, user: str) -> Visitor:
    token, _ = app.state.auth.issuer.issue(await subject_of(user))
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dash")
    return Visitor(http, token)


async def count() -> int:
    return len(await RequestDoc.find({}).to_list())


def number_of(r: httpx.Response) -> int:
    assert r.status_code == 303, r.text[:500]
    found = re.search(r"[?&]n=(\d+)", r.headers["location"])
    assert found, r.headers["location"]
    return int(found.group(1))


GOOD = [
    ({"kind": "quota", "subject": "me", "group": "lab", "cpu": "100", "gpu": "",
      "reason": "thesis runs"}, {"user": "alice", "group": "lab",
                                 "params": {"cpu_minutes": 6000.0, "subject": "user"}}),
    ({"kind": "quota", "subject": "account", "group": "lab", "cpu": "", "gpu": "90m",
      "reason": "a shared GPU project"}, {"user": None, "group": "lab",
                                          "params": {"gpu_minutes": 90.0,
                                                     "subject": "account"}}),
    ({"kind": "access", "group": "lab", "access": "sudo", "reason": "install software"},
     {"user": "alice", "group": "lab", "params": {"access": ["sudo"]}}),
    ({"kind": "join", "group": "proj", "reason": "a new collaboration"},
     {"user": "alice", "group": "proj", "params": {}}),
    ({"kind": "account", "group": "lab", "reason": "an account here"},
     {"user": "alice", "group": "lab", "params": {}}),
    ({"kind": "storage", "group": "lab", "quota": "2T", "reason": "the data set"},
     {"user": None, "group": "lab", "params": {"quota": "2T"}}),
]


@pytest.mark.parametrize(("form", "expect"), GOOD, ids=[g[0]["kind"] + "-" + str(i)
                                                         for i, g in enumerate(GOOD)])
async def test_each_kind_is_filed_as_the_signed_in_person(app, form, expect) -> None:  # type: ignore[no-untyped-def]
    alice = await visit(app, "alice")
    r = await alice.post("/requests/new", {"site": "farm", **form})
    number = number_of(r)
    assert r.headers["location"].startswith("/requests?done=filed")
    made = await RequestDoc.find_one({"number": number})
    assert made is not None and made.requester == "alice" and made.kind == form["kind"]
    assert (made.user, made.group, made.params) == (expect["user"], expect["group"],
                                                    expect["params"])
    assert made.reason == form["reason"] and made.status == "pending"
    rows = await History.find({"op": "file_request"}).to_list()
    assert rows[-1].author == "alice"
    listing = await alice.get("/requests")
    assert listing.status_code == 200 and f'id="mine-{number}"' in listing.text
    assert f"Request {number} filed" not in listing.text  # the notice is the redirect's
    shown = await alice.get(f"/requests/{number}")
    assert shown.status_code == 200 and form["reason"] in shown.text


async def test_the_list_speaks_to_you(app) -> None:  # type: ignore[no-untyped-def]
    alice = await visit(app, "alice")
    r = await alice.post("/requests/new", {"site": "farm", "kind": "quota", "subject": "me",
                                           "group": "lab", "cpu": "250", "reason": "more"})
    number = number_of(r)
    page = (await alice.get(f"/requests?done=filed&n={number}")).text
    assert f"Request {number} filed: you can follow it here." in page
    assert "a quota of CPU 250 h for you at farm" in page
    assert "a sponsor of lab at farm" in page  # whose turn


BAD = [
    ({"kind": "quota", "subject": "me", "group": "lab", "cpu": "lots"}, "cpu",
     "is not a number of hours"),
    ({"kind": "quota", "subject": "me", "group": "lab"}, "cpu", "give the CPU hours"),
    ({"kind": "quota", "subject": "account", "group": "proj", "cpu": "5"}, "group",
     "not one of yours"),
    ({"kind": "join", "group": "no-such-group"}, "group", "does not exist"),
    ({"kind": "join", "group": "bad name!"}, "group", "not a valid name"),
    ({"kind": "access", "group": "lab"}, "access", "pick the access"),
    ({"kind": "access", "group": "lab", "access": "no-such-access"}, "access",
     "no-such-access"),
    ({"kind": "storage", "group": "lab", "quota": "huge"}, "quota", ""),
    ({"kind": "storage", "group": "lab"}, "quota", "required"),
    ({"kind": "join", "group": "proj", "site": "nowhere"}, "site", "does not exist"),
    ({"kind": "join", "group": "proj", "reason": ""}, "reason", "required"),
    ({"kind": "join", "group": "proj", "reason": "x" * 2001}, "reason", "at most 2000"),
]


@pytest.mark.parametrize(("form", "field", "words"), BAD,
                         ids=[f"{b[0]['kind']}-{b[1]}-{i}" for i, b in enumerate(BAD)])
async def test_bad_input_is_shown_next_to_its_field(app, form, field, words) -> None:  # type: ignore[no-untyped-def]
    alice = await visit(app, "alice")
    before = await count()
    r = await alice.post("/requests/new", {"site": "farm", "reason": "because", **form})
    assert r.status_code == 422, r.text[:300]
    error = re.search(rf'<span class="field-error" id="error-{field}" role="alert">([^<]*)',
                      r.text)
    assert error, (field, r.text[r.text.find("field-error") - 200:][:600])
    assert words in error.group(1).replace("&#39;", "'"), error.group(1)
    assert 'id="failure"' in r.text
    assert await count() == before  # nothing filed


async def test_forms_without_the_csrf_token_are_refused(app) -> None:  # type: ignore[no-untyped-def]
    alice, mona = await visit(app, "alice"), await visit(app, "mona")
    before = await count()
    for who, path, data in (
            (alice, "/requests/new", {"kind": "join", "site": "farm", "group": "proj",
                                      "reason": "x"}),
            (alice, "/requests/1/comment", {"text": "hello"}),
            (mona, "/members/add", {"account": "lab", "site": "farm", "m_user": "bob"}),
            (mona, "/members/remove", {"account": "lab", "site": "farm",
                                       "m_user": "alice"})):
        r = await who.post(path, data, csrf=False)
        assert r.status_code == 403 and "did not come from this site" in r.text, path
        r = await who.http.post(path, headers=who.headers,
                                data=data | {"csrf": csrf_for("someone else's token")})
        assert r.status_code == 403, path
    assert await count() == before
    assert (await RequestDoc.find_one({"number": 1})).comments == []  # type: ignore[union-attr]
    assert await GroupMembership.find_one({"user": "bob", "group": "lab"}) is None


async def test_nobody_acts_on_someone_elses_request(app) -> None:  # type: ignore[no-untyped-def]
    """Request 1 is alice's, for lab: bob (a plain user) and sam (proj's sponsor) may
    neither read it nor comment on it, nor decide it."""
    for name in ("bob", "sam"):
        other = await visit(app, name)
        r = await other.get("/requests/1")
        assert r.status_code == 403 and "text/html" in r.headers["content-type"]
        assert "open your own from the Requests page" in r.text
        r = await other.post("/requests/1/comment", {"text": "mine now"})
        assert r.status_code == 403 and "not yours" in r.text
        r = await other.post("/accounts/requests/approve", {"q_number": "1"})
        assert r.status_code == 403
        assert 'id="mine-1"' not in (await other.get("/requests")).text
    found = await RequestDoc.find_one({"number": 1})
    assert found is not None and found.comments == [] and found.status == "pending"


async def test_comments_from_the_requester_and_the_sponsor(app) -> None:  # type: ignore[no-untyped-def]
    alice, mona = await visit(app, "alice"), await visit(app, "mona")
    r = await alice.post("/requests/1/comment", {"text": ""})
    assert r.status_code == 422 and 'id="error-text"' in r.text
    r = await alice.post("/requests/1/comment", {"text": "the deadline is Friday"})
    assert r.status_code == 303 and r.headers["location"] == "/requests/1?done=comment"
    r = await mona.post("/requests/1/comment", {"text": "<b>which</b> runs?"})
    assert r.status_code == 303
    found = await RequestDoc.find_one({"number": 1})
    assert found is not None
    assert [(c.by, c.text) for c in found.comments] == [
        ("alice", "the deadline is Friday"), ("mona", "<b>which</b> runs?")]
    page = (await alice.get("/requests/1")).text
    assert "<b>which</b>" not in page and "&lt;b&gt;which&lt;/b&gt; runs?" in page
    assert "you</strong> commented" in page
    accounts = (await mona.get("/accounts")).text  # the sponsor sees them before deciding
    assert 'id="comments-1"' in accounts and "2 comments" in accounts
    assert 'id="why-1"' in accounts and "thesis runs" in accounts


async def test_sponsors_add_and_remove_members_at_once(app) -> None:  # type: ignore[no-untyped-def]
    mona = await visit(app, "mona")
    page = await mona.get("/members?account=lab&site=farm")
    assert page.status_code == 200 and 'id="member-alice"' in page.text
    assert '<datalist id="site-users">' in page.text and '<option value="bob">' in page.text
    r = await mona.post("/members/add", {"account": "lab", "site": "farm", "m_user": "bob"})
    assert r.status_code == 303 and "done=join-done" in r.headers["location"]
    edge = await GroupMembership.find_one({"user": "bob", "group": "lab", "site": "farm"})
    assert edge is not None and edge.roles == ["member"]
    made = await RequestDoc.find_one({"number": number_of(r)})
    assert made is not None and made.status == "done" and made.requester == "mona"
    r = await mona.post("/members/remove", {"account": "lab", "site": "farm",
                                            "m_user": "bob"})
    assert "done=leave-done" in r.headers["location"]
    assert await GroupMembership.find_one({"user": "bob", "group": "lab"}) is None
    # bad input: next to the name, nothing written
    before = await count()
    for path, user, words in (("/members/add", "nobody-here", "does not exist"),
                              ("/members/add", "bad name!", "not a valid name"),
                              ("/members/remove", "bob", "bob is not a member of lab")):
        r = await mona.post(path, {"account": "lab", "site": "farm", "m_user": user})
        side = "add" if path.endswith("add") else "remove"
        assert r.status_code == 422 and f'id="error-{side}-m_user"' in r.text, r.text[:300]
        assert words in r.text
    assert await count() == before


async def test_only_a_groups_sponsors_change_its_members(app) -> None:  # type: ignore[no-untyped-def]
    for name, status in (("bob", 403), ("sam", 403)):  # a user; proj's sponsor
        other = await visit(app, name)
        assert (await other.get("/members?account=lab&site=farm")).status_code == status
        r = await other.post("/members/add", {"account": "lab", "site": "farm",
                                              "m_user": "bob"})
        assert r.status_code == status
        assert "ask" in r.text  # a next step
    assert await GroupMembership.find_one({"user": "bob", "group": "lab"}) is None


async def test_where_the_policy_wants_an_operator_a_change_is_a_request(strict_app) -> None:  # type: ignore[no-untyped-def]
    mona, olga = await visit(strict_app, "mona"), await visit(strict_app, "olga")
    r = await mona.post("/members/add", {"account": "lab", "site": "farm", "m_user": "carl",
                                         "m_reason": "new postdoc"})
    assert "done=join-waiting" in r.headers["location"]
    number = number_of(r)
    page = (await mona.get(r.headers["location"])).text
    assert f"Request {number} filed" in page
    assert await GroupMembership.find_one({"user": "carl", "group": "lab"}) is None
    made = await RequestDoc.find_one({"number": number})
    assert made is not None and made.next_step == "operator" and made.reason == "new postdoc"
    shown = (await olga.get(f"/requests/{number}")).text
    assert f'id="approve-{number}"' in shown  # the operator decides from its page
    r = await olga.post("/accounts/requests/approve", {"q_number": str(number),
                                                       "site": "farm"})
    assert r.status_code == 303
    edge = await GroupMembership.find_one({"user": "carl", "group": "lab", "site": "farm"})
    assert edge is not None and "member" in edge.roles


async def test_your_requests_sort_search_and_page(app) -> None:  # type: ignore[no-untyped-def]
    alice = await visit(app, "alice")
    page = (await alice.get("/requests?q=storage")).text
    assert "of storage for lab" in page and "a quota of" not in page
    numbers = [int(n) for n in re.findall(r'id="mine-(\d+)"',
                                          (await alice.get("/requests")).text)]
    assert numbers == sorted(numbers, reverse=True) and len(numbers) > 3  # newest first
    ascending = re.findall(r'id="mine-(\d+)"',
                           (await alice.get("/requests?sort=number&dir=asc")).text)
    assert [int(n) for n in ascending] == sorted(numbers)
    assert (await alice.get("/requests?sort=nothing")).status_code == 400
    members = (await (await visit(app, "mona")).get("/members?account=lab&q=ali")).text
    assert 'id="member-alice"' in members


async def test_deciding_from_the_requests_page(app) -> None:  # type: ignore[no-untyped-def]
    """mona decides alice's request on its own page: a denial needs a reason (next to
    its field), a stale page (another step named) decides nothing, alice may not decide
    her own; the denial and its reason are what alice then sees."""
    alice, mona = await visit(app, "alice"), await visit(app, "mona")
    r = await alice.post("/requests/new", {"site": "farm", "kind": "storage", "group": "lab",
                                           "quota": "5T", "reason": "imaging data"})
    number = number_of(r)
    page = (await mona.get(f"/requests/{number}")).text
    assert f'id="deny-{number}"' in page and 'name="step" value="sponsor"' in page
    assert f'id="deny-{number}"' not in (await alice.get(f"/requests/{number}")).text
    r = await alice.post(f"/requests/{number}/approve", {"step": "sponsor"})
    assert r.status_code == 403 and "you can comment on it instead" in r.text
    r = await mona.post(f"/requests/{number}/deny", {"step": "sponsor", "note": ""})
    assert r.status_code == 422 and 'id="error-deny-note"' in r.text
    r = await mona.post(f"/requests/{number}/approve", {"step": "operator"})
    assert r.status_code == 422 and "has moved on since you opened it" in r.text
    assert (await RequestDoc.find_one({"number": number})).status == "pending"  # type: ignore[union-attr]
    r = await mona.post(f"/requests/{number}/deny", {"step": "sponsor",
                                                     "note": "use the shared volume"})
    assert r.status_code == 303 and r.headers["location"] == f"/requests/{number}?done=deny"
    found = await RequestDoc.find_one({"number": number})
    assert found is not None and found.status == "denied" and found.denied_by == "mona"
    mine = (await alice.get("/requests")).text
    assert f'id="state-{number}">denied' in mine and "use the shared volume" in mine
    shown = (await alice.get(f"/requests/{number}")).text
    assert "mona</strong> denied it" in shown and 'id="request-denial"' in shown
