"""The demo's promise: after ``seed_demo`` (what ``scripts/demo.sh`` runs), the printed
logins sign in through the dashboard's form with the store's yescrypt hashes (the demo
has no directory), bob sees non-empty usage bars and can submit, alice the operator
pages and bob's pending requests with their amounts and reasons, dana the admin page;
the ledger holds weeks of jobs, all in the past."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from cheeto_like.config import ApiConfig, Config, MongoConfig
from cheeto_like.daemon.demo import seed_demo
from cheeto_like.daemon.demo_dashboard import (
    DEMO_ADMIN,
    DEMO_LOGINS,
    DEMO_OPERATOR,
    DEMO_USER,
    demo_logins_line,
)
from cheeto_like.web.app import create_api


@pytest.fixture(scope="module")
async def demo_app(store, tmp_path_factory):  # type: ignore[no-untyped-def]
    from tests.conftest import wipe

    await wipe()
    await seed_demo(store, "tester")
    assert await seed_demo(store, "tester") == []  # still idempotent with the dashboard steps
    config = Config(mongo=MongoConfig(), api=ApiConfig(
        jwt_key_file=tmp_path_factory.mktemp("demo") / "jwt.key"))
    return create_api(config, store=store)


@asynccontextmanager
async def signed_in(app, user: str) -> AsyncIterator[httpx.AsyncClient]:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="https://demo") as http:  # https: Secure cookies
        await _sign_in(http, user)
        yield http


async def _sign_in(http: httpx.AsyncClient, user: str) -> None:
    form = await http.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    r = await http.post("/login", data={"csrf": csrf.group(1), "username": user,
                                        "password": DEMO_LOGINS[user]})
    assert r.status_code == 303 and r.headers["location"].endswith("/me"), r.text


async def test_demo_user_sees_usage_bars(demo_app) -> None:  # type: ignore[no-untyped-def]
    async with signed_in(demo_app, DEMO_USER) as http:
        me = await http.get("/me")
        assert me.status_code == 200
        widths = [float(w) for w in re.findall(
            r'id="bar-cpu-user-bob".*?class="fill \w+" width="([\d.]+)"', me.text, re.S)]
        assert widths and widths[0] > 0
        assert 'class="col"' in me.text  # the chart has columns
        assert (await http.get("/operator")).status_code == 403


async def test_demo_user_can_submit(demo_app) -> None:  # type: ignore[no-untyped-def]
    from cheeto_like.sync.slurm.why import explain

    why = await explain("farm", DEMO_USER, runner=None, scontrol=None)
    assert why["wanted"]["can_submit"], why["summary"]
    assert [a["partition"] for a in why["wanted"]["associations"]] == ["main"]
    async with signed_in(demo_app, DEMO_USER) as http:
        me = (await http.get("/me")).text
        assert "no Slurm association" not in me and "no group with a Slurm" not in me


async def test_demo_jobs_span_weeks_and_are_in_the_past(demo_app) -> None:  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime, timedelta

    from cheeto_like.models import UsageRecord

    rows = await UsageRecord.find({"site": "farm"}).to_list()
    now = datetime.now(UTC)
    ends = [r.end.replace(tzinfo=UTC) if r.end.tzinfo is None else r.end for r in rows]
    assert ends and max(ends) < now
    assert now - min(ends) > timedelta(weeks=5)
    assert len({e.isocalendar()[:2] for e in ends}) >= 6  # every week has jobs


async def test_demo_requests_and_admin(demo_app) -> None:  # type: ignore[no-untyped-def]
    from cheeto_like.models import Request

    pending = await Request.find({"status": "pending", "requester": DEMO_USER}).to_list()
    assert len(pending) == 2 and all(r.reason and r.params for r in pending)
    async with signed_in(demo_app, DEMO_OPERATOR) as http:
        page = (await http.get("/accounts")).text
        assert "Thesis simulations" in page  # the sponsor sees why before deciding
    async with signed_in(demo_app, DEMO_ADMIN) as http:
        assert (await http.get("/admin")).status_code == 200
    line = demo_logins_line()
    for name in (DEMO_USER, DEMO_OPERATOR, DEMO_ADMIN):
        assert f"{name} / {DEMO_LOGINS[name]}" in line
    assert "(admin)" in line


async def test_demo_operator_sees_the_operator_pages(demo_app) -> None:  # type: ignore[no-untyped-def]
    async with signed_in(demo_app, DEMO_OPERATOR) as http:
        for path in ("/operator", "/operator/runs", "/accounts"):
            r = await http.get(path)
            assert r.status_code == 200, path
        assert 'id="summary-alicegrp"' in (await http.get("/operator")).text
        assert 'id="member-alicegrp-bob"' in (await http.get("/accounts")).text


async def test_plain_http_to_a_remote_host_is_explained(demo_app) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=demo_app),
                                 base_url="http://cheeto.example.org") as http:
        assert 'id="plain-http"' in (await http.get("/login")).text
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=demo_app),
                                 base_url="http://127.0.0.1:8000") as http:
        assert 'id="plain-http"' not in (await http.get("/login")).text


async def test_under_a_prefix(demo_app, store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = Config(mongo=MongoConfig(), api=ApiConfig(prefix="/cheeto",
                                                        jwt_key_file=tmp_path / "jwt.key"))
    app = create_api(config, store=store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="https://demo") as http:
        form = await http.get("/cheeto/login")
        assert form.status_code == 200
        assert 'href="/cheeto/dashboard-static/dashboard.css"' in form.text
        assert 'action="/cheeto/login"' in form.text
        assert (await http.get("/cheeto/dashboard-static/dashboard.css")).status_code == 200
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        r = await http.post("/cheeto/login", data={"csrf": csrf.group(1), "username": "bob",
                                                   "password": DEMO_LOGINS["bob"]})
        assert r.status_code == 303 and r.headers["location"] == "/cheeto/me"
        assert "Path=/cheeto" in r.headers["set-cookie"]
        assert (await http.get("/cheeto/me")).status_code == 200
