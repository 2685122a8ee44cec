"""The "Me" page and the sponsors' member usage in headless Chromium, at 1280 and 390 px.

alice's jobs come from the live one-node cluster: she submits a held job, the cluster
monitor's body (``read_snapshot`` + ``publish_jobs``, as the site worker's task runs it)
publishes the queue to the store, and the page says "you held it" with the command that
releases it. Her home and group storage, her usage over a chosen range per day and per
week (the CSV read back with ``csv``), and the forecast. sam (sponsor of proj) sees bob's
hours in proj over a range, and downloads them as CSV.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from cheeto_like.adapters.sinfo import Sinfo
from cheeto_like.adapters.squeue import Squeue
from cheeto_like.models.job_snapshot import JobSnapshot, SnapshotJob
from cheeto_like.queries.job_snapshot import jobs_of
from cheeto_like.store import Store
from cheeto_like.sync.cluster_monitor import plain_reason, publish_jobs, read_snapshot
from cheeto_like.web.dashboard.forecast import forecast, window
from tests.factories import AUTHOR, home_defaults, make_volume
from tests.services.slurm_cluster import SlurmCluster, ensure_unix_user
from tests.web.dashboard.conftest import LDAP_PASSWORDS, Browser

WIDTHS = (1280, 390)


@pytest.fixture(scope="module", autouse=True)
async def storage_world(dash_world: Store) -> None:
    """alice's home (20G) and lab's group storage (1T)."""
    from cheeto_like.operations.storage import CreateGroupStorage, CreateHomeStorage

    await home_defaults(dash_world)
    await CreateHomeStorage.run(dash_world, AUTHOR, site="farm", user="alice")
    await make_volume(dash_world, "group", host_path="/export/group")
    await CreateGroupStorage.run(dash_world, AUTHOR, site="farm", group="lab", owner="alice",
                                 quota="1T", parent_volume="group", no_mount=True)


@pytest.fixture(scope="module")
def farm(slurm_cluster: SlurmCluster) -> SlurmCluster:
    """The live cluster with Slurm account lab and alice in it (job users are unix users)."""
    slurm_cluster.reset()
    ensure_unix_user("alice")
    slurm_cluster.sacctmgr("-i", "add", "account", "lab", "cluster=farm")
    slurm_cluster.sacctmgr("-i", "add", "user", "alice", "account=lab", "cluster=farm")
    return slurm_cluster


async def monitor(store: Store, cluster: SlurmCluster) -> str:
    """The cluster monitor task's reading and publishing (daemon.tasks._cluster_monitor)."""
    snap = await read_snapshot("farm", sinfo=Sinfo(env=cluster.env),
                               squeue=Squeue(env=cluster.env))
    return await publish_jobs(store, snap)


async def set_width(browser: Browser, width: int) -> None:
    await browser.run(browser.driver.execute_cdp_cmd, "Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": 900, "deviceScaleFactor": 1,
                       "mobile": width < 600})


async def fits(browser: Browser) -> bool:
    scroll, inner = await browser.run(browser.driver.execute_script,
                                      "return [document.documentElement.scrollWidth,"
                                      " window.innerWidth]")
    return int(scroll) <= int(inner)


@pytest.fixture
async def viewport(browser: Browser):  # type: ignore[no-untyped-def]
    yield
    await browser.run(browser.driver.execute_cdp_cmd, "Emulation.clearDeviceMetricsOverride",
                      {})


async def sign_in(browser: Browser, user: str) -> None:
    await browser.sign_in(user, LDAP_PASSWORDS[user])
    assert await browser.path() == "/me", await browser.source()


async def fetch(browser: Browser, href: str) -> httpx.Response:
    """A link followed with the browser's session cookie (Chromium saves downloads)."""
    token = (await browser.cookie("cheeto_session") or {})["value"]
    async with httpx.AsyncClient() as http:
        return await http.get(href, headers={"Cookie": f"cheeto_session={token}"})


def test_plain_reasons() -> None:
    assert plain_reason("7", "PENDING", "JobHeldUser") == (
        "you held it", "Release it when you want it to run: `scontrol release 7`.")
    words, todo = plain_reason("7", "PENDING", "AssocGrpCPUMinutesLimit")
    assert words == "you are out of CPU quota at this site" and "quota request" in todo
    assert plain_reason("7", "PENDING", "Priority")[0].startswith("other jobs are ahead")
    assert plain_reason("7", "PENDING", "ReqNodeNotAvail, UnavailableNodes:n1")[0] == \
        "nodes it needs are down, drained or reserved"
    assert plain_reason("7", "PENDING", "QOSMaxJobsPerUserLimit")[1].startswith("Nothing")
    assert plain_reason("7", "PENDING", "AssocGrpMemLimit")[0] == \
        "a limit holds it (AssocGrpMemLimit)"
    assert plain_reason("7", "PENDING", "SomethingNew") == ("waiting (SomethingNew)", "")
    assert plain_reason("7", "RUNNING", "None") == ("running", "")


async def test_the_snapshot_is_replaced_each_run(dash_world: Store, farm: SlurmCluster) -> None:
    sub = farm.submit("alice", "-A", "lab", "-H", wrap="sleep 60")
    assert sub.accepted and sub.job_id, sub
    assert farm.wait_pending_reason(sub.job_id).reason == "JobHeldUser"
    first = await monitor(dash_world, farm)
    found = await jobs_of("farm", "alice")
    assert [j["job_id"] for j in found.jobs] == [sub.job_id]
    job = found.jobs[0]
    assert (job["state"], job["reason"], job["slurm_account"]) == ("PENDING", "JobHeldUser",
                                                                  "lab")
    assert found.read_at is not None
    second = await monitor(dash_world, farm)
    assert second != first
    # one header per site, and only the current snapshot's rows remain
    assert await JobSnapshot.find({}).count() == 1
    assert {r.snapshot for r in await SnapshotJob.find({"site": "farm"}).to_list()} == {second}
    assert (await jobs_of("farm", "bob")).jobs == []
    assert (await jobs_of("nowhere", "alice")).read_at is None


async def test_me_shows_jobs_storage_range_csv_and_forecast(
        browser: Browser, dash_world: Store, farm: SlurmCluster, viewport: None) -> None:
    farm.cancel_all()
    sub = farm.submit("alice", "-A", "lab", "-H", wrap="sleep 60")
    assert sub.accepted and sub.job_id, sub
    assert farm.wait_pending_reason(sub.job_id).reason == "JobHeldUser"
    await monitor(dash_world, farm)
    await sign_in(browser, "alice")
    for width in WIDTHS:
        await set_width(browser, width)
        await browser.get("/me?site=farm")
        row = f"#job-farm-{sub.job_id}"
        assert await browser.visible(row), width
        text = await browser.text(row)
        assert "you held it" in text and f"scontrol release {sub.job_id}" in text
        assert await browser.text(f"{row} td.job-todo code") == \
            f"scontrol release {sub.job_id}"
        assert "UTC" in await browser.text("#jobs-age-farm")
        assert "seconds ago" in await browser.text("#jobs-age-farm") or \
            "minutes ago" in await browser.text("#jobs-age-farm")
        home = await browser.text("#storage-home-alice")
        assert "your home" in home and "20G" in home
        assert "1T" in await browser.text("#storage-group-lab")
        assert "group of lab" in await browser.text("#storage-group-lab")
        for css in ("#forecast-cpu", "#forecast-gpu", "#range", "#csv-link", "#chart-1",
                    "#why-summary"):
            assert await browser.visible(css), (width, css)
        assert await fits(browser), width
        await browser.screenshot(f"me-alice-{width}")
        for part in ("usage", "storage", "chart", "why"):
            await browser.run(browser.driver.execute_script,
                              f"document.getElementById('{part}').scrollIntoView()")
            await browser.screenshot(f"me-alice-{width}-{part}")

    # the forecast: the pure function over the same figures gives the page's state
    now = datetime.now(UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    lo, _ = window(now, start)
    recent = sum(cpu for end, cpu in _alice_jobs(now) if end >= lo)
    period_end = (start + timedelta(days=32)).replace(day=1)
    expected = forecast(used=390.0, quota=600.0, recent=recent, window_start=lo, now=now,
                        period_end=period_end)
    assert expected is not None
    cpu_class = (await browser.find("#forecast-cpu")).get_attribute("class")
    assert expected.state in cpu_class.split(), (expected, cpu_class)
    text = await browser.text("#forecast-cpu")
    assert "your CPU quota" in text
    if expected.state == "runs_out":
        assert "At this rate" in text and "runs out on" in text and "UTC" in text

    # the range, per week, and the CSV of the same range
    await set_width(browser, 1280)
    first_day = start.date().isoformat()
    last_day = (start + timedelta(days=6)).date().isoformat()
    await browser.get(f"/me?site=farm&from={first_day}&to={last_day}&by=week")
    assert "per week" in await browser.text("#chart h2")
    assert f"{first_day} – {last_day}" in await browser.text("#chart h2")
    assert await browser.find_all("#chart-1 rect.col")
    href = (await browser.find("#csv-link")).get_attribute("href")
    r = await fetch(browser, href)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert "attachment; filename=" in r.headers["content-disposition"]
    assert f"usage-alice-farm-{first_day}-{last_day}-week.csv" in \
        r.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert rows and list(rows[0]) == ["week_of", "jobs", "cpu_hours", "gpu_hours"]
    assert sum(float(x["cpu_hours"]) for x in rows) == pytest.approx(6.5)  # 240 + 150 min
    assert sum(int(x["jobs"]) for x in rows) == 2
    # per day: one row per day of the range
    r = await fetch(browser, href.replace("by=week", "by=day"))
    days = list(csv.DictReader(io.StringIO(r.text)))
    assert days[0]["day"] == first_day and len(days) == 7
    assert sum(float(d["gpu_hours"]) for d in days) == pytest.approx(0.5)

    # a bad date is an error next to its field, the page still shown
    await browser.get("/me?site=farm&from=2026-13-45")
    assert "YYYY-MM-DD" in await browser.text("#error-from")
    assert await browser.visible("#chart-1")
    await browser.screenshot("me-alice-bad-range")


def _alice_jobs(now: datetime) -> list[tuple[datetime, float]]:
    """The seed's jobs of alice (conftest.seed_dashboard_world): (end, CPU minutes)."""
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return [(min(now - timedelta(minutes=5), start + timedelta(days=day, hours=3)), cpu)
            for day, cpu in ((0, 240.0), (1, 150.0))]


async def test_can_i_submit_speaks_to_you_with_a_next_step(browser: Browser,
                                                           viewport: None) -> None:
    await sign_in(browser, "alice")
    for width in WIDTHS:
        await set_width(browser, width)
        await browser.get("/me?site=farm")
        summary = await browser.text("#why-summary")
        assert summary.startswith("You can") or summary.startswith("You cannot"), summary
        if summary.startswith("You cannot"):
            assert await browser.visible("#why-next")
            link = (await browser.find("#why-request")).get_attribute("href")
            assert "/requests/new?kind=" in link  # A's request form
        assert "them" not in summary  # second person, never "they"
        assert await fits(browser), width


async def test_sponsor_sees_usage_per_member_and_downloads_it(browser: Browser,
                                                              viewport: None) -> None:
    await sign_in(browser, "sam")
    for width in WIDTHS:
        await set_width(browser, width)
        await browser.get("/accounts?site=farm")
        assert await browser.visible("#usage-proj"), width
        row = await browser.text("#mu-proj-bob")
        assert "15.00" in row and "1.00" in row  # 900 CPU and 60 GPU minutes
        assert await browser.visible("#usage-range") and await browser.visible("#csv-proj")
        assert await fits(browser), width
        await browser.screenshot(f"sponsor-usage-{width}")
    assert not await browser.find_all("#usage-lab")  # not sam's account
    href = (await browser.find("#csv-proj")).get_attribute("href")
    r = await fetch(browser, href)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert "filename=\"usage-proj-farm-" in r.headers["content-disposition"]
    rows = {x["user"]: x for x in csv.DictReader(io.StringIO(r.text))}
    assert rows["bob"]["cpu_hours"] == "15.0" and rows["bob"]["gpu_hours"] == "1.0"
    assert rows["bob"]["member"] == "yes" and rows["bob"]["jobs"] == "1"
    # a range with no usage: every member at zero
    await set_width(browser, 1280)
    await browser.fill("#u_from", "01/01/2020")
    await browser.fill("#u_to", "01/31/2020")
    await browser.submit("#usage-range-show")
    assert "2020-01-01 – 2020-01-31" in await browser.text("#account-proj")
    assert "0.00" in await browser.text("#mu-proj-bob")
    # the member table sorts and searches on the server (tables.py), keeping the range
    await browser.get("/accounts?site=farm&from=2020-01-01&to=2020-01-31&t=usage-proj&q=zzz")
    assert not await browser.find_all("#mu-proj-bob")
    assert "2020-01-01 – 2020-01-31" in await browser.text("#account-proj")
    await browser.get("/accounts?site=farm&t=usage-proj&q=bo&sort=name&dir=asc")
    assert await browser.visible("#mu-proj-bob")
    # not his account: refused, as a page
    r = await fetch(browser, href.replace("account=proj", "account=lab"))
    assert r.status_code == 403 and "text/html" in r.headers["content-type"]


async def test_a_user_may_not_download_an_accounts_usage(browser: Browser) -> None:
    await sign_in(browser, "alice")
    r = await fetch(browser, f"{browser.base}/accounts/usage.csv?account=lab&site=farm")
    assert r.status_code == 403
