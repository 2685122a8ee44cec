"""Requests on the web, in headless Chromium at 1280 px and 390 px: alice files a request,
it is in ``cheeto ng request list``, its sponsor sees what it asks and why and approves
it on the web (then an operator, where the kind needs one), it is carried out and alice
sees it done; each form with good and bad input (the error next to its field, the typed
value kept); someone else's request is a 403 page that says what to do; a sponsor adds
and removes a member. Every page fits its window (no sideways scrolling)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from cheeto_like.models import GroupMembership, History, Quota
from cheeto_like.models import Request as RequestDoc
from tests.web.dashboard.conftest import LDAP_PASSWORDS, Browser

WIDTHS = (1280, 390)


async def as_user(browser: Browser, user: str, width: int) -> None:
    await browser.sign_in(user, LDAP_PASSWORDS[user])
    assert await browser.path() == "/me", await browser.source()
    await set_width(browser, width)


async def set_width(browser: Browser, width: int) -> None:
    metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600}
    await browser.run(browser.driver.execute_cdp_cmd, "Emulation.setDeviceMetricsOverride",
                      metrics)


@pytest.fixture(autouse=True)
async def full_width(browser: Browser):  # type: ignore[no-untyped-def]
    yield
    await browser.run(browser.driver.execute_cdp_cmd,
                      "Emulation.clearDeviceMetricsOverride", {})


async def fits(browser: Browser) -> None:
    """The page is no wider than the window (tables scroll inside their own box)."""
    wide, window = await browser.run(browser.driver.execute_script,
                                     "return [document.documentElement.scrollWidth,"
                                     " window.innerWidth]")
    assert int(wide) <= int(window), (await browser.path(), wide, window)


def made_at(request: RequestDoc) -> str:
    return datetime.fromtimestamp(request.created_epoch, UTC).strftime("%Y-%m-%d %H:%M UTC")


async def newest() -> RequestDoc:
    found = await RequestDoc.find({}).sort(-RequestDoc.number).limit(1).to_list()
    return found[0]


async def test_a_quota_request_from_filing_to_done(browser: Browser, cli) -> None:  # type: ignore[no-untyped-def]
    """alice files on the web; the CLI lists it; mona (lab's manager) reads what it asks
    and why and approves; olga (an operator: quotas need one) approves from the
    request's page; the quota is set; alice sees it done."""
    await as_user(browser, "alice", 1280)
    await browser.click("#nav-requests")
    assert await browser.visible("#mine") and await browser.visible("#ask")
    await browser.click("#new-quota")
    assert await browser.path() == "/requests/new?kind=quota"
    options = await browser.find_all("#group-names option")
    assert {o.get_attribute("value") for o in options} == {"lab"}  # alice's own groups
    await browser.fill("#group", "lab")
    await browser.fill("#cpu", "150")
    await browser.fill("#gpu", "5")
    await browser.fill("#reason", "the thesis's last chapter")
    await fits(browser)
    await browser.screenshot("request-new-quota")
    await browser.submit("#file-request")
    made = await newest()
    assert await browser.text("#notice") == (f"Request {made.number} filed: you can follow "
                                             "it here.")
    assert (made.requester, made.user, made.kind) == ("alice", "alice", "quota")
    assert made.params == {"cpu_minutes": 9000.0, "gpu_minutes": 300.0, "subject": "user"}
    row = await browser.text(f"#mine-{made.number}")
    assert "a quota of CPU 150 h, GPU 5 h for you at farm" in row
    assert "a sponsor of lab at farm" in row and "waiting" in row
    await fits(browser)

    r = await cli("ng", "request", "list", "--json")
    assert r.code == 0, r.stderr
    listed = {row["id"]: row for row in json.loads(r.stdout)}
    assert listed[str(made.number)]["user"] == "alice"
    assert listed[str(made.number)]["next_step"] == "sponsor"

    await as_user(browser, "mona", 1280)
    await browser.get("/accounts?site=farm")
    assert "CPU 150 h, GPU 5 h" in await browser.text(f"#asked-{made.number}")
    assert await browser.text(f"#why-{made.number}") == "the thesis's last chapter"
    await browser.screenshot("accounts-pending-with-reasons")
    await browser.submit(f"#approve-{made.number}")
    assert await browser.text("#notice") == "Request approved."
    assert (await RequestDoc.find_one({"number": made.number})).next_step == "operator"  # type: ignore[union-attr]

    await as_user(browser, "olga", 1280)
    await browser.get(f"/requests/{made.number}")
    assert await browser.text("#request-turn") == "an operator"
    assert "mona" in await browser.text("#request-history")
    await browser.submit(f"#approve-{made.number}")
    done = await RequestDoc.find_one({"number": made.number})
    assert done is not None and done.status == "done"
    quota = await Quota.find_one({"site": "farm", "user": "alice"})
    assert quota is not None and quota.cpu_minutes == 9000.0 and quota.gpu_minutes == 300.0
    assert [r.author for r in await History.find({"op": "approve_request"}).to_list()][-2:] \
        == ["mona", "olga"]
    r = await cli("ng", "request", "show", str(made.number), "--json")
    assert r.code == 0 and json.loads(r.stdout)["status"] == "done"

    await as_user(browser, "alice", 1280)
    await browser.get("/requests")
    assert await browser.text(f"#state-{made.number}") == "done"
    assert "carried out" in await browser.text(f"#mine-{made.number}")
    await browser.click(f"#open-{made.number}")
    assert await browser.text("#request-state") == "done"
    history = await browser.text("#request-history")
    assert "you filed it" in history and "mona approved the sponsor step" in history
    assert "olga approved the operator step" in history
    assert "carried it out (the quota is set)" in history
    assert await browser.text("#request-filed") == f"you, {made_at(made)}"
    await browser.screenshot("request-done")


async def test_a_join_request_on_a_phone(browser: Browser) -> None:
    """At 390 px: alice asks to join proj, sam (proj's sponsor) approves from the
    Accounts page, alice is a member and sees it done."""
    await as_user(browser, "alice", 390)
    await browser.get("/requests/new?kind=join")
    assert "proj" in {o.get_attribute("value") for o in
                      await browser.find_all("#group-names option")}
    await browser.fill("#group", "proj")
    await browser.fill("#reason", "joint paper with bob")
    await fits(browser)
    await browser.submit("#file-request")
    made = await newest()
    assert made.kind == "join" and made.group == "proj"
    await fits(browser)
    await browser.screenshot("phone-request-filed")

    await as_user(browser, "sam", 390)
    await browser.get("/accounts")
    assert await browser.text(f"#why-{made.number}") == "joint paper with bob"
    assert "alice to join proj at farm" in await browser.text(f"#asked-{made.number}")
    await fits(browser)
    await browser.submit(f"#approve-{made.number}")
    assert await browser.text("#notice") == "Request approved."
    edge = await GroupMembership.find_one({"user": "alice", "group": "proj", "site": "farm"})
    assert edge is not None and "member" in edge.roles

    await as_user(browser, "alice", 390)
    await browser.get("/requests")
    assert await browser.text(f"#state-{made.number}") == "done"
    await fits(browser)
    await browser.screenshot("phone-request-done")


@pytest.mark.parametrize("width", WIDTHS)
async def test_the_request_form_shows_errors_next_to_fields(browser: Browser,
                                                            width: int) -> None:
    await as_user(browser, "alice", width)
    before = await newest()
    await browser.get("/requests/new?kind=quota")
    await browser.fill("#group", "lab")
    await browser.fill("#cpu", "lots")
    await browser.fill("#reason", "")
    await browser.submit("#file-request")
    assert (await browser.find("#cpu + .field-error")).get_attribute("id") == "error-cpu"
    assert "is not a number of hours" in await browser.text("#error-cpu")
    assert await browser.text("#error-reason") == "required"
    assert (await browser.find("#cpu")).get_attribute("value") == "lots"  # kept
    assert (await browser.find("#group")).get_attribute("value") == "lab"
    assert await browser.visible("#failure")
    await fits(browser)
    await browser.screenshot(f"request-form-errors-{width}")
    await browser.get("/requests/new?kind=storage")
    await browser.fill("#group", "proj")  # alice's since she joined it; a typo instead:
    await browser.fill("#group", "porj")
    await browser.fill("#quota", "2T")
    await browser.fill("#reason", "data")
    await browser.submit("#file-request")
    assert "not one of yours" in await browser.text("#error-group") or \
        "does not exist" in await browser.text("#error-group")
    await browser.get("/requests/new?kind=access")
    await browser.click("#access-sudo")
    await browser.fill("#group", "lab")
    await browser.fill("#reason", "build tools")
    await fits(browser)
    await browser.submit("#file-request")
    made = await newest()
    assert made.number == before.number + 1 and made.params == {"access": ["sudo"]}
    assert await browser.visible(f"#mine-{made.number}")


@pytest.mark.parametrize("width", WIDTHS)
async def test_comments_and_someone_elses_request(browser: Browser, width: int) -> None:
    await as_user(browser, "alice", width)
    await browser.get("/requests/1")
    assert await browser.text("#request-reason") == "thesis runs"
    await browser.fill("#text", "")
    await browser.submit("#comment-submit")
    assert await browser.text("#error-text") == "required"
    await browser.fill("#text", f"any news? ({width})")
    await browser.submit("#comment-submit")
    assert await browser.text("#notice") == "Comment added."
    assert f"any news? ({width})" in await browser.text("#request-history")
    await fits(browser)
    await as_user(browser, "sam", width)  # proj's sponsor: request 1 is lab's
    await browser.get("/requests/1")
    assert (await browser.text("#error-page h1")).startswith("403")
    assert "open your own from the Requests page" in await browser.text("#error-message")
    assert not await browser.find_all("#comment-submit")
    await fits(browser)
    await browser.screenshot(f"someone-elses-request-{width}")
    found = await RequestDoc.find_one({"number": 1})
    assert found is not None and [c.by for c in found.comments if str(width) in c.text] \
        == ["alice"]


@pytest.mark.parametrize("width", WIDTHS)
async def test_a_sponsor_adds_and_removes_a_member(browser: Browser, width: int) -> None:
    await as_user(browser, "mona", width)
    await browser.get("/accounts?site=farm")
    await browser.click("#members-lab")
    assert (await browser.path()).startswith("/members?account=lab")
    assert "bob" in {o.get_attribute("value") for o in
                     await browser.find_all("#site-users option")}
    await browser.fill("#m_user", "nobody-here")
    await browser.submit("#add-member-submit")
    assert (await browser.find("#m_user + .field-error")).get_attribute("id") == \
        "error-add-m_user"
    assert "does not exist" in await browser.text("#error-add-m_user")
    await browser.fill("#m_user", "bob")
    await browser.submit("#add-member-submit")
    assert await browser.text("#notice") == "Member added."
    assert await browser.visible("#member-bob")
    await fits(browser)
    await browser.screenshot(f"members-added-{width}")
    await browser.submit("#remove-bob")
    assert await browser.text("#notice") == "Member removed."
    assert not await browser.find_all("#member-bob")
    assert await GroupMembership.find_one({"user": "bob", "group": "lab"}) is None
    left = await newest()  # a leave request filed (and so sponsored) by mona, carried out
    assert (left.kind, left.requester, left.status) == ("leave", "mona", "done")
    rows = await History.find({"op": "file_request"}).to_list()
    assert rows[-1].author == "mona"
