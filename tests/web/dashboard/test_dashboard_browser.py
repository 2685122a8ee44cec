"""The dashboard in headless Chromium: each role signs in against slapd, sees its pages
(main elements displayed with a non-zero size, a screenshot of each page under the
pytest temp dir) and is refused the others with a 403 page; an operator edits a quota
(seen in the store, in History with their name, and in ``cheeto ng quota show``); a
bad value shows an error next to its field; signing out revokes the token."""

from __future__ import annotations

import json

import httpx
import pytest

from cheeto_like.models import AuditRun, History, Quota, RevokedToken, RoleGrant, SyncRun
from cheeto_like.models.sync import SyncItem
from tests.factories import insert_audit_run, insert_sync_run
from tests.web.dashboard.conftest import LDAP_PASSWORDS, ROLE_LOGINS, Browser

PAGES = {"me": "/me", "requests": "/requests", "accounts": "/accounts", "operator": "/operator",
         "runs": "/operator/runs", "admin": "/admin"}
ALLOWED = {"user": {"me", "requests"}, "manager": {"me", "requests", "accounts"},
           "sponsor": {"me", "requests", "accounts"},
           "operator": {"me", "requests", "accounts", "operator", "runs"},
           "admin": {"me", "requests", "accounts", "operator", "runs", "admin"}}
MAIN = {"me": ["#sites", "#usage", "#chart svg.chart", "#why-summary"],
        "requests": ["#ask", "#mine"],
        "accounts": ["#pending"], "operator": ["#form-quota", "#accounts-by-use"],
        "runs": ["#runs", "#drift", "#audit"], "admin": ["#roles", "#keys"]}


async def sign_in_as(browser: Browser, role: str) -> str:
    user = ROLE_LOGINS[role]
    await browser.sign_in(user, LDAP_PASSWORDS[user])
    assert await browser.path() == "/me", await browser.source()
    return user


@pytest.fixture(scope="module", autouse=True)
async def a_sync_run(dash_world):  # type: ignore[no-untyped-def]
    """One dry Slurm run with a planned and a failed command (drift to show), and an
    audit with one finding."""
    await insert_sync_run(
        SyncRun(target="slurm", site="farm", author="olga", apply=False, status="ok",
                counts={"planned": 2}),
        [SyncItem(batch="users", command="sacctmgr -i add user alice account=lab",
                  targets=["alice@lab"], outcome="planned"),
         SyncItem(batch="users", command="sacctmgr -i modify user bob", targets=["bob"],
                  outcome="failed", detail="<b>nope</b>")])
    await insert_audit_run(AuditRun(scope="*", author="olga"), [
        {"key": "expired|farm|carl", "severity": "high", "kind": "expired", "site": "farm",
         "object": "carl", "detail": "expired but still in slurm", "fix": "ng user remove",
         "status": "new"}])


async def test_session_cookie_is_httponly_secure_strict(browser: Browser) -> None:
    await sign_in_as(browser, "user")
    cookie = await browser.cookie("cheeto_session")
    assert cookie is not None, "Chromium kept no Secure cookie on loopback http"
    assert cookie["httpOnly"] is True and cookie["secure"] is True
    assert cookie["sameSite"] == "Strict"


@pytest.mark.parametrize("role", list(ALLOWED))
async def test_each_role_sees_its_pages_and_is_refused_the_others(
        browser: Browser, role: str) -> None:
    await sign_in_as(browser, role)
    nav = {a.get_attribute("id") for a in await browser.find_all("#nav a")}
    assert nav == {f"nav-{p}" for p in ALLOWED[role]}
    for name, path in PAGES.items():
        await browser.get(path)
        if name in ALLOWED[role]:
            assert await browser.path() == path
            assert not await browser.find_all("#error-page"), (role, name)
            for css in ["#page-title", "#whoami", *MAIN[name]]:
                assert await browser.visible(css), (role, name, css)
            # plain forms: no script anywhere (the CSP would refuse one anyway)
            assert "<script" not in (await browser.source()).lower()
            await browser.screenshot(f"{role}-{name}")
        else:
            assert await browser.visible("#error-page"), (role, name)
            assert (await browser.text("#error-page h1")).startswith("403"), (role, name)
            await browser.screenshot(f"{role}-{name}-refused")


async def test_me_shows_usage_bars_chart_and_why(browser: Browser) -> None:
    await sign_in_as(browser, "user")
    for css in ("#bar-cpu-user-alice", "#bar-gpu-user-alice", "#bar-cpu-account-lab",
                "#chart-1", "#associations", "#groups"):
        assert await browser.visible(css), css
    # 390 CPU minutes of a 600-minute quota
    label = await browser.text("#quota-user-alice")
    assert "6.5 h of 10.0 h (65%)" in label
    fill = await browser.find("#bar-cpu-user-alice rect.fill")
    assert float(fill.get_attribute("width")) == pytest.approx(65.0)
    assert await browser.find_all("#chart-1 rect.col")  # columns drawn for the used days
    assert "cannot submit" in await browser.text("#why-summary") or \
        "can submit" in await browser.text("#why-summary")
    await browser.screenshot("me-alice")


async def test_manager_and_sponsor_see_their_accounts(browser: Browser) -> None:
    await sign_in_as(browser, "manager")
    await browser.get("/accounts")
    assert await browser.visible("#account-lab")
    assert await browser.visible("#member-lab-alice")
    assert await browser.visible("#m-cpu-lab-alice")
    assert not await browser.find_all("#account-proj")
    pending = await browser.text("#pending")
    assert "quota" in pending and "lab" in pending and "alice" in pending
    await browser.get("/accounts?account=proj")  # not theirs
    assert (await browser.text("#error-page h1")).startswith("403")
    await sign_in_as(browser, "sponsor")
    await browser.get("/accounts")
    assert await browser.visible("#member-proj-bob")
    assert not await browser.find_all("#account-lab")
    assert "thesis" not in await browser.text("#pending") and "lab" not in \
        await browser.text("#pending")  # not sam's group
    await browser.screenshot("sponsor-accounts")


async def test_operator_edits_a_quota(browser: Browser, cli) -> None:  # type: ignore[no-untyped-def]
    await sign_in_as(browser, "operator")
    await browser.get("/operator?site=farm")
    await browser.fill("#q_name", "alice")
    await browser.fill("#q_cpu", "20h")
    await browser.submit("#save-quota")
    assert await browser.visible("#notice")
    assert await browser.text("#notice") == "Quota saved."
    await browser.screenshot("operator-quota-saved")
    quota = await Quota.find_one({"site": "farm", "user": "alice"})
    assert quota is not None and quota.cpu_minutes == 1200.0
    assert quota.gpu_minutes == 120.0  # left empty: kept
    rows = await History.find({"op": "set_quota"}).to_list()
    assert rows and rows[-1].author == "olga"
    r = await cli("ng", "quota", "show", "-s", "farm", "--user", "alice", "--no-squeue",
                  "--json")
    assert r.code == 0, r.stderr
    subject = json.loads(r.stdout)["subjects"][0]
    assert subject["name"] == "alice" and subject["cpu_minutes"]["quota"] == 1200.0


async def test_a_bad_value_shows_an_error_next_to_the_field(browser: Browser) -> None:
    await sign_in_as(browser, "operator")
    await browser.get("/operator?site=farm")
    await browser.fill("#q_name", "alice")
    await browser.fill("#q_cpu", "lots")
    await browser.submit("#save-quota")
    assert await browser.visible("#error-q_cpu")
    assert "cannot read amount" in await browser.text("#error-q_cpu")
    assert await browser.visible("#failure")
    # the error sits right after its input, and the typed value is kept
    sibling = await browser.find("#q_cpu + .field-error")
    assert sibling.get_attribute("id") == "error-q_cpu"
    assert (await browser.find("#q_cpu")).get_attribute("value") == "lots"
    await browser.screenshot("operator-bad-value")
    quota = await Quota.find_one({"site": "farm", "user": "alice"})
    assert quota is not None and quota.cpu_minutes in (600.0, 1200.0)  # unchanged
    # an unknown user: the operation's refusal, next to the name
    await browser.fill("#a_name", "nobody-here")
    await browser.fill("#a_cpu", "-1h")
    await browser.fill("#a_reason", "credit")
    await browser.submit("#save-adjust")
    assert "does not exist" in await browser.text("#error-a_name")


async def test_operator_sees_runs_drift_and_escaped_details(browser: Browser) -> None:
    await sign_in_as(browser, "operator")
    await browser.get("/operator/runs?site=farm")
    assert "sacctmgr -i add user alice" in await browser.text("#drift")
    assert "<b>nope</b>" in await browser.text("#drift")  # shown as text, not markup
    assert not await browser.find_all("#drift b")
    assert "expired but still in slurm" in await browser.text("#audit")
    await browser.click("#runs details summary")
    assert await browser.visible("#runs table.commands")
    await browser.screenshot("operator-runs-open")


async def test_admin_creates_a_key_shown_once_and_grants_a_role(browser: Browser) -> None:
    await sign_in_as(browser, "admin")
    await browser.get("/admin")
    await browser.fill("#k_name", "puppet-dash")
    await browser.click("input[name=k_scope][value='puppet:read']")
    await browser.submit("#create-key")
    assert await browser.visible("#secret-value")
    secret = await browser.text("#secret-value")
    assert secret.startswith("ck_")
    await browser.screenshot("admin-key-created")
    await browser.get("/admin")
    assert not await browser.find_all("#secret-value")
    assert secret not in await browser.source()
    assert await browser.visible("#key-puppet-dash")
    await browser.fill("#r_user", "carl")
    await browser.fill("#r_accounts", "proj")
    await browser.submit("#grant")
    assert await browser.text("#notice") == "Role granted."
    assert "proj" in await browser.text("#role-carl-manager")
    grants = await History.find({"op": "grant_role"}).to_list()
    assert grants[-1].author == "adam"
    await browser.fill("#r_user", "carl")
    await browser.fill("#r_accounts", "lab")
    await browser.submit("#grant")
    assert await browser.visible("#drop-carl-lab")
    await browser.submit("#drop-carl-proj")  # one account taken away, the grant stays
    assert await browser.text("#notice") == "Role revoked."
    row = await browser.text("#role-carl-manager")
    assert "lab" in row and "proj" not in row
    grant = await RoleGrant.find_one({"user": "carl", "role": "manager"})
    assert grant is not None and grant.accounts == ["lab"]
    await browser.submit("#key-puppet-dash form[action$='/rotate'] button")
    rotated = await browser.text("#secret-value")
    assert rotated.startswith("ck_") and rotated != secret
    await browser.get("/admin")
    await browser.submit("#key-puppet-dash form[action$='/revoke'] button")
    assert await browser.text("#notice") == "Key revoked."
    assert not await browser.find_all("#key-puppet-dash")  # revoked keys are not listed


async def test_operator_sets_defaults_factors_and_adjusts(browser: Browser) -> None:
    from cheeto_like.models import GpuFactor, QuotaAdjustment, QuotaDefaults

    await sign_in_as(browser, "operator")
    await browser.get("/operator?site=farm")
    await browser.fill("#d_user_cpu", "50h")
    await browser.submit("#save-defaults")
    assert await browser.text("#notice") == "Default quotas saved."
    defaults = await QuotaDefaults.find_one({"site": "farm"})
    assert defaults is not None and defaults.user_cpu_minutes == 3000.0
    assert defaults.account_cpu_minutes == 60000.0  # empty: kept
    await browser.fill("#f_type", "a100")
    await browser.fill("#f_factor", "2.5")
    await browser.submit("#save-factor")
    assert await browser.text("#notice") == "GPU factor saved."
    assert "2.5" in await browser.text("#form-factor")
    assert (await GpuFactor.find_one({"site": "farm", "gpu_type": "a100"})) is not None
    await browser.fill("#f_factor", "-1")
    await browser.submit("#save-factor")
    assert "between 0 and 1000" in await browser.text("#error-f_factor")
    await browser.fill("#a_name", "bob")
    await browser.fill("#a_cpu", "-2h")
    await browser.fill("#a_reason", "node failure")
    await browser.submit("#save-adjust")
    assert await browser.text("#notice") == "Adjustment recorded."
    adjustment = await QuotaAdjustment.find_one({"site": "farm", "user": "bob"})
    assert adjustment is not None and adjustment.cpu_minutes == -120.0
    rows = await History.find({"op": "adjust_usage"}).to_list()
    assert rows[-1].author == "olga"
    await browser.screenshot("operator-after-saves")


async def test_logout_revokes_the_token(browser: Browser) -> None:
    await sign_in_as(browser, "user")
    token = (await browser.cookie("cheeto_session") or {})["value"]
    async with httpx.AsyncClient(base_url=browser.base) as http:
        ok = await http.get("/me", headers={"Cookie": f"cheeto_session={token}"})
        assert ok.status_code == 200
        await browser.submit("#logout")
        assert await browser.path() == "/login"
        assert await browser.cookie("cheeto_session") is None
        again = await http.get("/me", headers={"Cookie": f"cheeto_session={token}"})
        assert again.status_code == 303 and again.headers["location"].endswith("/login")
        bearer = await http.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
        assert bearer.status_code == 401
    assert await RevokedToken.find_one({"user": "alice"}) is not None
    # the old cookie put back into the browser does not sign it in either
    await browser.run(browser.driver.add_cookie, {"name": "cheeto_session", "value": token,
                                                  "path": "/", "secure": True})
    await browser.get("/me")
    assert await browser.path() == "/login"


async def test_forms_need_the_csrf_token(browser: Browser) -> None:
    await sign_in_as(browser, "operator")
    token = (await browser.cookie("cheeto_session") or {})["value"]
    async with httpx.AsyncClient(base_url=browser.base) as http:
        r = await http.post("/operator/quota", headers={"Cookie": f"cheeto_session={token}"},
                            data={"site": "farm", "q_name": "alice", "q_cpu": "1h"})
        assert r.status_code == 403 and "did not come from this site" in r.text
        r = await http.post("/login", data={"username": "alice", "password": "x"})
        assert r.status_code == 403  # no login CSRF cookie


async def test_a_manager_denies_without_a_reason_then_approves_a_request(
        browser: Browser) -> None:
    """From the pending list: a deny needs a reason (shown next to its field, nothing
    written); approving the last step carries the request out, as mona."""
    from cheeto_like.models import Request as RequestDoc

    await sign_in_as(browser, "manager")
    await browser.get("/accounts?site=farm")
    found = await RequestDoc.find_one({"group": "lab", "status": "pending"})
    assert found is not None
    number = found.number
    await browser.submit(f"#deny-{number}")
    assert "a reason is required" in await browser.text(f"#error-q_reason-{number}")
    assert (await RequestDoc.find_one({"number": number})).status == "pending"
    await browser.submit(f"#approve-{number}")
    assert await browser.text("#notice") == "Request approved."
    done = await RequestDoc.find_one({"number": number})
    assert done is not None and done.status == "done"
    rows = await History.find({"op": "approve_request"}).to_list()
    assert rows[-1].author == "mona"
    assert not await browser.find_all(f"#request-{number}")
    await browser.screenshot("manager-approved")
