"""Every dashboard page fits a phone: each role signs in and visits every GET page of
``app.state.dashboard_routes`` (so pages added later are covered without a list here;
path parameters get a sample value) at 390 px (a phone, emulated as a mobile viewport)
and at 1280 px, and the document is never wider than the window (tables scroll inside
their own box, forms and navigation wrap, charts scale). Refused pages (the 403 page)
must fit too."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest

from cheeto_like.models import AuditRun, SyncRun
from cheeto_like.models.sync import SyncItem
from tests.factories import insert_audit_run, insert_sync_run
from tests.web.dashboard.conftest import LDAP_PASSWORDS, ROLE_LOGINS, Browser

WIDTHS = (390, 1280)
SAMPLES = {"site": "farm", "number": "1", "name": "lab", "group": "lab", "account": "lab",
           "user": "alice"}
SIGNED_OUT = {"/login"}


@pytest.fixture(scope="module", autouse=True)
async def a_sync_run(dash_world):  # type: ignore[no-untyped-def]
    """Long cells (a sacctmgr command line, an audit finding) on the runs page."""
    await insert_sync_run(
        SyncRun(target="slurm", site="farm", author="olga", apply=False, status="ok",
                counts={"planned": 1, "failed": 1}),
        [SyncItem(batch="users", command="sacctmgr -i add user alice account=lab "
                  "partition=gpu-a100-long qos=normal,gpu-priority,long-running-jobs",
                  targets=["alice@lab"], outcome="planned"),
         SyncItem(batch="users", command="sacctmgr -i modify user bob set "
                  "GrpTRESMins=cpu=0,gres/gpu=0 where account=proj", targets=["bob"],
                  outcome="failed", detail="x" * 200)])
    await insert_audit_run(AuditRun(scope="*", author="olga"), [
        {"key": "expired|farm|carl", "severity": "high", "kind": "expired", "site": "farm",
         "object": "carl", "detail": "expired but still in slurm " * 5,
         "fix": "ng user remove carl --site farm --force", "status": "new"}])


def page_paths(app: Any) -> list[str]:
    """The GET pages of the app, path parameters filled with samples (a parameter we
    have no sample for skips that route)."""
    paths = []
    for method, path in sorted(app.state.dashboard_routes):
        if method != "GET" or path in SIGNED_OUT:
            continue
        names = re.findall(r"{(\w+)(?::\w+)?}", path)
        if any(n not in SAMPLES for n in names):
            continue
        paths.append(re.sub(r"{(\w+)(?::\w+)?}", lambda m: SAMPLES[m.group(1)], path))
    return paths


async def set_width(browser: Browser, width: int) -> None:
    metrics = {"width": width, "height": 900, "deviceScaleFactor": 1,
               "mobile": width < 600}
    await browser.run(browser.driver.execute_cdp_cmd,
                      "Emulation.setDeviceMetricsOverride", metrics)


async def overflow(browser: Browser) -> tuple[int, int]:
    sizes = await browser.run(browser.driver.execute_script,
                              "return [document.documentElement.scrollWidth,"
                              " window.innerWidth]")
    return int(sizes[0]), int(sizes[1])


async def whole_page(browser: Browser, name: str) -> None:
    """A screenshot of the whole page, below the fold too."""
    shot = await browser.run(browser.driver.execute_cdp_cmd, "Page.captureScreenshot",
                             {"format": "png", "captureBeyondViewport": True})
    (browser.shots / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))


@pytest.fixture(scope="module")
def server_app(dash_world, dash_config):  # type: ignore[no-untyped-def]
    """An app built as the server's is, for its list of routes."""
    from cheeto_like.web.app import create_api

    return create_api(dash_config, store=dash_world)


@pytest.fixture
async def viewport(browser: Browser):  # type: ignore[no-untyped-def]
    yield
    await browser.run(browser.driver.execute_cdp_cmd,
                      "Emulation.clearDeviceMetricsOverride", {})


async def test_signed_out_pages_fit(browser: Browser, viewport: None) -> None:
    await browser.reset()
    for width in WIDTHS:
        await set_width(browser, width)
        for path in ("/login", "/no-such-page"):
            await browser.get(path)
            scroll, inner = await overflow(browser)
            assert inner == width and scroll <= inner, (path, width, scroll, inner)


@pytest.mark.parametrize("role", list(ROLE_LOGINS))
async def test_every_page_fits_the_window(browser: Browser, server_app: Any, role: str,
                                          viewport: None) -> None:
    user = ROLE_LOGINS[role]
    await browser.sign_in(user, LDAP_PASSWORDS[user])
    assert await browser.path() == "/me", await browser.source()
    paths = page_paths(server_app)
    assert {"/me", "/accounts", "/operator", "/admin"} <= set(paths)
    too_wide = []
    for width in WIDTHS:
        await set_width(browser, width)
        for path in paths:
            await browser.get(path)
            source = await browser.source()
            assert "Internal Server Error" not in source, (role, path)
            scroll, inner = await overflow(browser)
            # a mobile viewport zooms out to fit a wider page: innerWidth grows with it
            name = f"{role}-{width}-{path.strip('/').replace('/', '-')}"
            if scroll > inner or inner != width:
                too_wide.append((path, width, max(scroll, inner)))
                name = f"wide-{name}"
            if width < 600 or name.startswith("wide"):
                await whole_page(browser, name)  # under pytest's temp dir, to look at
    assert not too_wide, f"{role}: pages wider than the window: {too_wide}"
