"""Words and units on the dashboard: times carry their zone, a period shows its last day
(inclusive), amounts are hours (a bare number on the operator's forms is hours, and the
defaults read back in hours), and an unknown dashboard URL is the HTML 404 page."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

import httpx
import pytest

from cheeto_like.auth.principal import subject_of
from cheeto_like.models import Quota
from cheeto_like.web.dashboard.render import hours, last_day, span, when
from cheeto_like.web.dashboard.session import csrf_for


def test_filters() -> None:
    assert when(datetime(2026, 12, 5, 20, 4, tzinfo=UTC)) == "2026-12-05 20:04 UTC"
    assert when(datetime(2026, 12, 5, 20, 4)) == "2026-12-05 20:04 UTC"  # naive = UTC
    assert when(None) == "never"
    december = (datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))
    assert span(*december) == "2026-12-01 – 2026-12-31"
    assert last_day(date(2027, 1, 1)) == "2026-12-31" and last_day("2026-12-31") == "2026-12-31"
    assert [hours(600), hours(90), hours(6000 * 60), hours(None)] == [
        "10h", "1.5h", "6,000h", "no limit"]


@pytest.fixture(scope="module")
def app(dash_world, dash_config):  # type: ignore[no-untyped-def]
    from cheeto_like.web.app import create_api

    return create_api(dash_config, store=dash_world)


async def test_a_bare_number_is_hours(app, dash_world) -> None:  # type: ignore[no-untyped-def]
    token, _ = app.state.auth.issuer.issue(await subject_of("olga"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="https://dash",
                                 cookies={"cheeto_session": token}) as http:
        r = await http.post("/operator/quota", data={
            "csrf": csrf_for(token), "site": "farm", "q_kind": "user", "q_name": "bob",
            "q_cpu": "12", "q_gpu": "1.5", "q_period": "keep"})
        assert r.status_code == 303, r.text
        quota = await Quota.find_one({"site": "farm", "user": "bob"})
        assert quota is not None
        assert (quota.cpu_minutes, quota.gpu_minutes) == (720.0, 90.0)
        page = (await http.get("/operator?site=farm")).text
        now = re.search(r"Now: users CPU ([^,]+), GPU ([^;]+);", page)
        assert now is not None and now.groups() == ("100h", "10h"), page
        assert "min," not in page


async def test_an_unknown_page_is_html(app) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="https://dash") as http:
        r = await http.get("/accounts/nowhere/at/all", headers={"Accept": "text/html"})
        assert r.status_code == 404 and "text/html" in r.headers["content-type"]
        assert "404 · Not found" in r.text and '<meta name="viewport"' in r.text
