"""The operator's and the admin's pages in headless Chromium, at 1280 and 390 px: the
quotas of their own fullest first, History filtered and paged, sync runs with their
counts and commands, the admin's roles and keys, every table sorted, searched and paged
by links and a GET form (no script), names suggested by a ``<datalist>`` and an unknown
name shown as the field's own error; a bad table parameter is a 400 page; every page
fits the window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from cheeto_like.models import History, SyncRun
from cheeto_like.models.sync import SyncItem
from tests.factories import AUTHOR, insert_sync_run
from tests.web.dashboard.conftest import LDAP_PASSWORDS, ROLE_LOGINS, Browser

RUNS: dict[str, str] = {}
BOT_ROWS = 55  # more than a page of History (50)


@pytest.fixture(scope="module", autouse=True)
async def operator_world(dash_world):  # type: ignore[no-untyped-def]
    """Quotas of their own (proj over its quota, bob far from his), History rows to
    page and filter, a run that failed before planning and a dry run with commands."""
    from cheeto_like.operations.quota import SetQuota

    await SetQuota.run(dash_world, AUTHOR, site="farm", account="proj", cpu_minutes=60.0)
    await SetQuota.run(dash_world, AUTHOR, site="farm", user="bob", cpu_minutes=6000.0)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    for n in range(BOT_ROWS):
        await History(op="demo_touch", author="hist-bot", timestamp=base + timedelta(hours=n),
                      changes={"user": f"u{n:02d}", "site": "farm"}).insert()
    await History(op="grant_role", author="olga", timestamp=datetime(2026, 2, 3, tzinfo=UTC),
                  changes={"user": "carla9", "role": "manager", "note": "<i>x</i>"}).insert()
    failed = await insert_sync_run(SyncRun(
        target="ldap", site="farm", author="olga", apply=True, status="failed",
        error="cannot reach ldaps://dir:636"))
    dry = await insert_sync_run(
        SyncRun(target="slurm", site="farm", author="olga", apply=False, status="ok",
                counts={"processes": 2, "removals": 0, "deletions": 0}),
        [SyncItem(batch="users", command="sacctmgr -i add user alice account=lab",
                  targets=["alice@lab"], outcome="planned"),
         SyncItem(batch="users", command="sacctmgr -i modify user bob", targets=["bob"],
                  outcome="planned")])
    RUNS.update(failed=failed.id, dry=dry.id)
    return dash_world


async def sign_in_as(browser: Browser, role: str) -> str:
    user = ROLE_LOGINS[role]
    await browser.sign_in(user, LDAP_PASSWORDS[user])
    assert await browser.path() == "/me", await browser.source()
    return user


async def row_ids(browser: Browser, table: str) -> list[str]:
    return [str(r.get_attribute("id")) for r in await browser.find_all(f"#{table} tbody tr")
            if r.get_attribute("id")]


async def set_width(browser: Browser, width: int) -> None:
    await browser.run(browser.driver.execute_cdp_cmd, "Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": 900, "deviceScaleFactor": 1,
                       "mobile": width < 600})


async def fits(browser: Browser, width: int) -> bool:
    scroll, inner = await browser.run(browser.driver.execute_script,
                                      "return [document.documentElement.scrollWidth,"
                                      " window.innerWidth]")
    return int(inner) == width and int(scroll) <= int(inner)


@pytest.fixture
async def viewport(browser: Browser):  # type: ignore[no-untyped-def]
    yield
    await browser.run(browser.driver.execute_cdp_cmd,
                      "Emulation.clearDeviceMetricsOverride", {})


async def status_of(browser: Browser, server: str, path: str) -> tuple[int, str]:
    """The status of ``path`` fetched with the browser's session cookie (WebDriver does
    not tell statuses)."""
    cookie = await browser.cookie("cheeto_session")
    assert cookie is not None
    async with httpx.AsyncClient(base_url=server) as http:
        r = await http.get(path, headers={"Cookie": f"cheeto_session={cookie['value']}"})
    return r.status_code, r.text


async def test_quotas_of_their_own_fullest_first_sorted_and_searched(
        browser: Browser) -> None:
    await sign_in_as(browser, "operator")
    await browser.get("/operator?site=farm")
    assert await row_ids(browser, "quotas-table") == [
        "quota-account-proj", "quota-user-alice", "quota-user-bob"]
    assert await browser.text("#quota-account-proj td:last-child") == "blocked"
    assert "1–3 of 3 quotas" in await browser.text("#count-quotas")
    await browser.submit("#sort-quotas-name")
    assert await row_ids(browser, "quotas-table") == [
        "quota-user-alice", "quota-user-bob", "quota-account-proj"]
    assert "t=quotas" in await browser.path() and "sort=name" in await browser.path()
    await browser.submit("#sort-quotas-name")  # again: the other way
    assert await row_ids(browser, "quotas-table") == [
        "quota-account-proj", "quota-user-bob", "quota-user-alice"]
    await browser.fill("#q-quotas", "ALI")
    await browser.submit("#search-quotas")
    assert await row_ids(browser, "quotas-table") == ["quota-user-alice"]
    assert "matching “ALI”" in await browser.text("#count-quotas")
    assert "site=farm" in await browser.path()  # the page's own parameters are kept
    # the accounts table beside it kept its own order
    assert (await row_ids(browser, "accounts-table"))[0] == "summary-proj"
    await browser.screenshot("operator-quotas-searched")


async def test_an_unknown_name_is_the_fields_own_error(browser: Browser) -> None:
    await sign_in_as(browser, "operator")
    await browser.get("/operator?site=farm")
    options = [o.get_attribute("value")
               for o in await browser.find_all("datalist#subject-names option")]
    assert {"alice", "bob", "lab", "proj"} <= set(options)
    assert (await browser.find("#q_name")).get_attribute("list") == "subject-names"
    assert (await browser.find("#f_type")).get_attribute("list") == "gpu-types"
    await browser.fill("#q_name", "alcie")
    await browser.fill("#q_cpu", "10")
    await browser.submit("#save-quota")
    assert not await browser.find_all("#error-page")
    assert await browser.visible("#error-q_name")
    assert "alcie" in await browser.text("#error-q_name")
    assert (await browser.find("#q_name")).get_attribute("value") == "alcie"


async def test_history_filtered_and_paged(browser: Browser, server: str) -> None:
    await sign_in_as(browser, "operator")
    await browser.get("/operator?site=farm")
    await browser.submit("#link-history")
    assert await browser.path() == "/operator/history"
    total = int((await browser.text("#count-history")).split(" of ")[1].split()[0])
    assert total >= BOT_ROWS + 1
    assert (await browser.text("#count-history")).startswith("1–50 of")
    await browser.submit("#next-history")
    assert (await browser.text("#count-history")).startswith("51–")
    await browser.get("/operator/history")
    await browser.fill("#author", "hist-bot")
    await browser.fill("#since", "01/02/2026")  # Chromium's date input, en-US order
    await browser.submit("#filter-history")
    assert "author=hist-bot" in await browser.path()
    assert "since=2026-01-02" in await browser.path()
    # 55 hourly rows from 2026-01-01 00:00: those of the 2nd and 3rd (hours 24-54)
    assert (await browser.text("#count-history")) == "1–31 of 31 operations"
    await browser.submit("#sort-history-timestamp")  # oldest first, filters kept
    first = (await browser.find_all("#history-table tbody tr"))[0]
    assert "u24" in await browser.run(lambda: first.text)
    await browser.get("/operator/history?subject=carla9")
    assert await browser.text("#count-history") == "1–1 of 1 operations"
    text = await browser.text("#history-table tbody")
    assert "grant_role" in text and "olga" in text and "<i>x</i>" in text  # as text
    assert not await browser.find_all("#history-table i")
    await browser.get("/operator/history?op=demo_touch&until=2026-01-01&q=u1")
    assert await browser.text("#count-history") == "1–10 of 10 operations matching “u1”"
    await browser.get("/operator/history?since=2026-13-01&author=bad name")
    assert await browser.visible("#error-since") and await browser.visible("#error-author")
    code, _ = await status_of(browser, server, "/operator/history?since=2026-13-01")
    assert code == 422


async def test_runs_show_their_counts_and_commands(browser: Browser) -> None:
    await sign_in_as(browser, "operator")
    await browser.get("/operator/runs?site=farm")
    failed = await browser.text(f"#run-{RUNS['failed']}")
    assert "failed before it planned anything" in failed
    dry = await browser.text(f"#run-{RUNS['dry']}")
    assert "processes 2" in dry and "2 commands: 2 planned" in dry
    assert "removals" not in dry  # zero counts are left out
    assert "cannot reach ldaps://dir:636" in await browser.text("#runs-table")
    assert "sacctmgr -i modify user bob" in await browser.text("#drift-table")
    await browser.fill("#q-runs", "ldap")
    await browser.submit("#search-runs")
    assert await row_ids(browser, "runs-table") == [f"run-{RUNS['failed']}"]
    await browser.screenshot("operator-runs-searched")


@pytest.mark.parametrize("path", [
    "/operator/runs?sort=nope", "/operator?site=farm&t=quotas&page=0",
    "/operator/history?dir=sideways", "/admin?t=keys&sort=secret", "/admin?t=nope",
    "/operator/runs?t=drift&q=" + "x" * 101, "/operator/history?page=abc",
])
async def test_a_bad_table_parameter_is_a_400_page(browser: Browser, server: str,
                                                   path: str) -> None:
    await sign_in_as(browser, "admin")
    await browser.get(path)
    assert (await browser.text("#error-page h1")).startswith("400"), path
    code, text = await status_of(browser, server, path)
    assert code == 400 and "<html" in text, (path, code)


async def test_admin_tables_suggestions_and_field_errors(browser: Browser) -> None:
    await sign_in_as(browser, "admin")
    await browser.get("/admin")
    assert "role-olga-operator" in await row_ids(browser, "roles-table")
    await browser.fill("#q-roles", "olga")
    await browser.submit("#search-roles")
    assert await row_ids(browser, "roles-table") == ["role-olga-operator"]
    users = {o.get_attribute("value") for o in await browser.find_all("#user-names option")}
    assert {"alice", "olga", "adam"} <= users
    accounts = {o.get_attribute("value")
                for o in await browser.find_all("#account-names option")}
    assert {"lab", "proj"} <= accounts
    await browser.fill("#r_user", "nosuchperson")
    await browser.click("#r_role option[value=operator]")
    await browser.submit("#grant")
    assert not await browser.find_all("#error-page")
    assert await browser.visible("#error-r_user")


@pytest.mark.parametrize("width", [1280, 390])
async def test_operator_and_admin_pages_fit_the_window(browser: Browser, width: int,
                                                       viewport: None) -> None:
    await sign_in_as(browser, "admin")
    await set_width(browser, width)
    pages: dict[str, list[str]] = {
        "/operator?site=farm": ["#own-quotas", "#quotas-table", "#accounts-table",
                                "#q-quotas"],
        "/operator?site=farm&t=accounts&sort=name&q=p": ["#accounts-table"],
        "/operator/history": ["#history-filters", "#history-table", "#next-history"],
        "/operator/history?author=olga": ["#history-table"],
        "/operator/runs": ["#runs-table", "#drift-table", "#findings-table"],
        "/admin": ["#roles-table", "#keys-table", "#grant-form"],
    }
    narrow: list[Any] = []
    for path, main in pages.items():
        await browser.get(path)
        assert not await browser.find_all("#error-page"), path
        for css in main:
            assert await browser.visible(css), (path, css, width)
        if not await fits(browser, width):
            narrow.append(path)
        assert "<script" not in (await browser.source()).lower()
        await browser.screenshot(f"ops-{width}-{path.strip('/').replace('/', '-')[:40]}")
    assert not narrow, f"wider than {width} px: {narrow}"


async def test_the_me_page_tables_sort_search_and_refuse_bad_parameters(
        browser: Browser, server: str) -> None:
    """Me's lists (sites, jobs per site, quotas, storage, associations) use the same
    tables; the range form's values ride along in their links."""
    await sign_in_as(browser, "user")
    await browser.get("/me?site=farm&by=week")
    assert await browser.visible("#sites-table") and await browser.visible("#quotas-table")
    href = (await browser.find("#sort-quotas-cpu")).get_attribute("href")
    assert "site=farm" in href and "by=week" in href and "t=quotas" in href
    await browser.submit("#sort-quotas-cpu")
    assert "sort=cpu" in await browser.path() and await browser.visible("#quotas-table")
    await browser.fill("#q-sites", "nowhere")
    await browser.submit("#search-sites")
    assert "nothing matches" in await browser.text("#sites-table")
    for path in ("/me?t=sites&sort=secret", "/me?t=jobs-farm&page=-2", "/me?t=elsewhere"):
        code, _ = await status_of(browser, server, path)
        assert code == 400, path


async def test_the_accounts_page_tables_and_an_unknown_account(browser: Browser,
                                                              server: str) -> None:
    """An operator opens an account by name (suggested); a typo is the picker's own
    error, not a separate 404 page; members and pending requests sort on the server."""
    await sign_in_as(browser, "operator")
    await browser.get("/accounts?site=farm")
    options = {o.get_attribute("value") for o in await browser.find_all("#account-names option")}
    assert {"lab", "proj"} <= options
    await browser.fill("#account", "lba")
    await browser.submit("#open-account")
    assert not await browser.find_all("#error-page")
    assert "lba" in await browser.text("#error-account")
    code, _ = await status_of(browser, server, "/accounts?site=farm&account=lba")
    assert code == 404
    await browser.fill("#account", "lab")
    await browser.submit("#open-account")
    assert await browser.visible("#members-table-lab")
    await browser.submit("#sort-members-lab-name")
    names = [i.removeprefix("member-lab-") for i in await row_ids(browser, "members-table-lab")]
    assert names == sorted(names) and names
    assert "account=lab" in await browser.path()
    assert await browser.visible("#pending-table")
    for path in ("/accounts?t=pending&sort=secret", "/accounts?t=members-lab&page=0"):
        code, _ = await status_of(browser, server, path + "&account=lab")
        assert code == 400, path
