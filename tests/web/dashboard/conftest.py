"""The dashboard in a real browser: Debian's headless Chromium driven by Selenium through
the system chromedriver (never a downloaded one: the driver and browser paths are given
and Selenium Manager is told to stay offline), against the API app served by uvicorn on
loopback in the test's event loop, signing in against the session's slapd.

The app and the store client live in pytest's event loop, so the blocking WebDriver
calls run in a thread (``Browser`` wraps each in ``asyncio.to_thread``) while the loop
serves the pages. One browser per session (a fresh cookie jar per test via
``browser.reset()``), one server per module.

World (``tests/web/conftest.seed_world`` plus): Slurm accounts lab and proj at farm,
usage in the ledger this month (alice, bob), alice's quota 10 h CPU, defaults, a
pending quota request of alice for lab; the
directory holds alice, mona (manager of lab), sam (sponsor of proj), olga (operator)
and adam (admin) with the passwords of ``LDAP_PASSWORDS``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cheeto_like.config import ApiConfig, Config, LDAPConfig, MongoConfig
from cheeto_like.store import Store
from tests.services.ldap import Slapd, ssha

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
LDAP_PASSWORDS = {"alice": "alice-dir-pw", "mona": "mona-dir-pw", "sam": "sam-dir-pw",
                  "olga": "olga-dir-pw", "adam": "adam-dir-pw"}
ROLE_LOGINS = {"user": "alice", "manager": "mona", "sponsor": "sam", "operator": "olga",
               "admin": "adam"}
_n = itertools.count(1)


async def seed_dashboard_world(store: Store) -> None:
    from cheeto_like.models import UsageRecord
    from cheeto_like.operations.quota import SetQuota, SetQuotaDefaults
    from cheeto_like.operations.slurm import CreateSlurmAccount
    from tests.factories import AUTHOR
    from tests.web.conftest import seed_world

    await seed_world(store)
    for group in ("lab", "proj"):
        await CreateSlurmAccount.run(store, AUTHOR, site="farm", group=group)
    await SetQuotaDefaults.run(store, AUTHOR, site="farm", period="monthly",
                               user_cpu_minutes=6000.0, account_cpu_minutes=60000.0,
                               user_gpu_minutes=600.0, account_gpu_minutes=6000.0)
    await SetQuota.run(store, AUTHOR, site="farm", user="alice", cpu_minutes=600.0,
                       gpu_minutes=120.0)
    from cheeto_like.operations.request import FileRequest

    await FileRequest.run(store, "alice", kind="quota", site="farm", account="lab",
                          cpu_minutes=6000.0, reason="thesis runs", steps=["sponsor"])
    now = datetime.now(UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    jobs = [("alice", "lab", 0, 240.0, 30.0), ("alice", "lab", 1, 150.0, 0.0),
            ("bob", "proj", 0, 900.0, 60.0)]
    for n, (user, account, day, cpu, gpu) in enumerate(jobs):
        end = min(now - timedelta(minutes=5), start + timedelta(days=day, hours=3))
        await UsageRecord(key=f"farm/farm/{n}", site="farm", cluster="farm", job_id=str(n),
                          user=user, account=account, end=end,
                          end_epoch=int(end.timestamp()), day=f"{end:%Y-%m-%d}",
                          elapsed_s=3600, cpus=4, cpu_minutes=cpu, gpu_minutes=gpu,
                          fingerprint=f"f{n}").insert()


@pytest.fixture(scope="module")
async def dash_world(store: Store) -> Store:
    await seed_dashboard_world(store)
    return store


@pytest.fixture(scope="module")
def directory(slapd: Slapd) -> tuple[Slapd, str]:
    """A fresh user base holding the people of ``LDAP_PASSWORDS``."""
    base = f"ou=dash{next(_n)},{slapd.suffix}"
    entries = [f"dn: {base}\nobjectClass: organizationalUnit\nou: {base[3:].split(',')[0]}\n"]
    for uid, password in LDAP_PASSWORDS.items():
        entries.append(f"dn: uid={uid},{base}\nobjectClass: inetOrgPerson\nuid: {uid}\n"
                       f"cn: {uid}\nsn: {uid}\nuserPassword: {ssha(password)}\n")
    slapd.ldapadd("\n".join(entries))
    return slapd, base


@pytest.fixture(scope="module")
def dash_config(directory: tuple[Slapd, str],
                tmp_path_factory: pytest.TempPathFactory) -> Config:
    server, base = directory
    ldap = LDAPConfig(servers=[server.uri], searchbase=server.suffix, user_base=base,
                      login_dn=server.root_dn, password=server.root_password, use_tls=True,
                      ca_file=server.ca_file)
    key = tmp_path_factory.mktemp("dash") / "jwt.key"
    return Config(mongo=MongoConfig(), ldap=ldap, api=ApiConfig(jwt_key_file=key))


@pytest.fixture(scope="module")
async def server(dash_world: Store, dash_config: Config) -> AsyncIterator[str]:
    """The API app (with the dashboard) on a free loopback port; yields its base URL."""
    import uvicorn

    from cheeto_like.web.app import create_api
    from tests.services._proc import free_port

    app = create_api(dash_config, store=dash_world)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            lifespan="on")
    running = uvicorn.Server(config)
    running.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(running.serve())
    for _ in range(200):
        if running.started:
            break
        await asyncio.sleep(0.05)
    assert running.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        running.should_exit = True
        await asyncio.wait_for(task, 10)


class Browser:
    """Blocking WebDriver calls, each run in a thread so the event loop keeps serving."""

    def __init__(self, driver: Any, shots: Path) -> None:
        self.driver = driver
        self.shots = shots
        self.base = ""

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    async def get(self, path: str) -> None:
        await self.run(self.driver.get, self.base + path)

    async def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return await self.run(self.driver.find_element, By.CSS_SELECTOR, css)

    async def find_all(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return await self.run(self.driver.find_elements, By.CSS_SELECTOR, css)

    async def fill(self, css: str, value: str) -> None:
        element = await self.find(css)
        await self.run(element.clear)
        await self.run(element.send_keys, value)

    async def click(self, css: str) -> None:
        await self.run((await self.find(css)).click)

    async def submit(self, css: str) -> None:
        """Click a submit button and wait until the next page has replaced this one (a
        click returns before a form's navigation is guaranteed to be done)."""
        from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
        from selenium.webdriver.support.wait import WebDriverWait

        def gone(page: Any) -> bool:
            """The old page's root is detached. Mid-navigation chromedriver can report that
            as "Node with given id does not belong to the document" (an unknown error)
            instead of a stale reference: the same fact."""
            try:
                page.is_enabled()
            except StaleElementReferenceException:
                return True
            except WebDriverException as exc:
                if "does not belong to the document" in str(exc):
                    return True
                raise
            return False

        def go() -> None:
            page = self.driver.find_element("css selector", "html")
            self.driver.find_element("css selector", css).click()
            WebDriverWait(self.driver, 30).until(lambda _: gone(page))
            WebDriverWait(self.driver, 30).until(
                lambda d: d.execute_script("return document.readyState") == "complete")
        await self.run(go)

    async def text(self, css: str) -> str:
        return str(await self.run(lambda: (self.driver.find_element("css selector", css)
                                           .text)))

    async def visible(self, css: str) -> bool:
        """Displayed and of non-zero size: what a person would actually see."""
        def check() -> bool:
            element = self.driver.find_element("css selector", css)
            size = element.size
            return bool(element.is_displayed() and size["width"] > 0 and size["height"] > 0)
        return bool(await self.run(check))

    async def path(self) -> str:
        url = str(await self.run(lambda: self.driver.current_url))
        return url[len(self.base):] if url.startswith(self.base) else url

    async def title(self) -> str:
        return str(await self.run(lambda: self.driver.title))

    async def source(self) -> str:
        return str(await self.run(lambda: self.driver.page_source))

    async def screenshot(self, name: str) -> Path:
        target = self.shots / f"{name}.png"
        ok = await self.run(self.driver.save_screenshot, str(target))
        assert ok and target.stat().st_size > 1000, target
        return target

    async def cookie(self, name: str) -> dict[str, Any] | None:
        return await self.run(self.driver.get_cookie, name)

    async def reset(self) -> None:
        await self.run(self.driver.delete_all_cookies)

    async def sign_in(self, user: str, password: str) -> None:
        await self.reset()
        await self.get("/login")
        await self.fill("#username", user)
        await self.fill("#password", password)
        await self.submit("#login-submit")


@pytest.fixture(scope="session")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Headless Chromium through the system chromedriver; nothing is downloaded."""
    for needed in (CHROMIUM, CHROMEDRIVER):
        assert shutil.which(needed), (f"{needed} is missing: run scripts/install-system-"
                                      "deps.sh (Debian's chromium and chromium-driver)")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never fetch a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu",
                 "--disable-dev-shm-usage", "--window-size=1280,1000",
                 "--no-first-run", "--disable-extensions", "--disable-sync",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-default-apps", "--metrics-recording-only"):
        options.add_argument(flag)
    profile = tmp_path_factory.mktemp("chromium-profile")
    options.add_argument(f"--user-data-dir={profile}")
    service = Service(executable_path=CHROMEDRIVER,
                      log_output=str(tmp_path_factory.mktemp("chromedriver") / "log"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
async def browser(chromium: Any, server: str,
                  tmp_path_factory: pytest.TempPathFactory) -> Browser:
    shots = tmp_path_factory.mktemp("screenshots")
    b = Browser(chromium, shots)
    b.base = server
    return b
