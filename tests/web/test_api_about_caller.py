"""The API answers about the caller by default (issue 27): ``/usage/{site}`` and
``/quotas/{site}`` without ``?user=``/``?account=`` are the signed-in person's own for
someone who may not read the whole site (operators keep the site-wide answer);
``?by=`` takes what ``ng usage report --by`` takes, with a subject too; a refusal is
in plain words and still names the rule; a dashboard URL nobody serves is an HTML page
while ``/api/v1`` keeps problem+json."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.models import UsageRecord
from cheeto_like.models.usage import GpuUse
from cheeto_like.operations.quota import SetQuota
from tests.factories import AUTHOR
from tests.web.conftest import bearer


@pytest.fixture(scope="module", autouse=True)
async def usage(world):  # type: ignore[no-untyped-def]
    await SetQuota.run(world, AUTHOR, site="farm", user="alice", cpu_minutes=600.0)
    now = datetime.now(UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    rows = [("alice", "lab", 0, 120.0, 30.0, ["a100"]), ("alice", "lab", 1, 60.0, 0.0, []),
            ("bob", "proj", 0, 900.0, 60.0, ["t4"])]
    for n, (user, account, day, cpu, gpu, types) in enumerate(rows):
        end = min(now - timedelta(minutes=5), start + timedelta(days=day, hours=1))
        await UsageRecord(key=f"farm/farm/c{n}", site="farm", cluster="farm",
                          job_id=f"c{n}", user=user, account=account, partition="main",
                          end=end, end_epoch=int(end.timestamp()), day=f"{end:%Y-%m-%d}",
                          elapsed_s=3600, cpus=2, cpu_minutes=cpu, gpu_minutes=gpu,
                          gpus=[GpuUse(type=t, count=1, factor=1.0, minutes=gpu)
                                for t in types], fingerprint=f"c{n}").insert()


async def test_usage_without_a_subject_is_the_callers_own(http, app) -> None:  # type: ignore[no-untyped-def]
    r = await http.get("/api/v1/usage/farm", headers=await bearer(app, "alice"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["user"] == "alice" and body["total"]["cpu_minutes"] == 180.0
    # an operator still gets the whole site
    r = await http.get("/api/v1/usage/farm", headers=await bearer(app, "olga"))
    assert r.status_code == 200 and r.json()["user"] is None
    assert r.json()["total"]["cpu_minutes"] == 1080.0


async def test_quotas_without_a_subject_are_the_callers_own(http, app) -> None:  # type: ignore[no-untyped-def]
    r = await http.get("/api/v1/quotas/farm", headers=await bearer(app, "alice"))
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert [(i["kind"], i["name"]) for i in items] == [("user", "alice")]
    assert items[0]["cpu_minutes"]["used"] == 180.0
    assert items[0]["cpu_minutes"]["quota"] == 600.0
    r = await http.get("/api/v1/quotas/farm", headers=await bearer(app, "olga"))
    assert r.status_code == 200 and len(r.json()["items"]) > 1


@pytest.mark.parametrize(("by", "keys"), [("day", None), ("gpu-type", {"a100"}),
                                           ("partition", {"main"}), ("account", {"lab"})])
async def test_by_as_the_cli_takes_it(http, app, by, keys) -> None:  # type: ignore[no-untyped-def]
    r = await http.get(f"/api/v1/usage/farm?by={by}", headers=await bearer(app, "alice"))
    assert r.status_code == 200, r.text
    rows = r.json()["rows"]
    found = {row[by] for row in rows}
    if keys is None:  # days: YYYY-MM-DD of alice's jobs
        assert found and all(len(k) == 10 and k[4] == "-" for k in found)
    else:
        assert found == keys
    r = await http.get(f"/api/v1/usage/farm?by={by}&user=alice",
                       headers=await bearer(app, "olga"))
    assert r.status_code == 200 and {row[by] for row in r.json()["rows"]} == found


async def test_refusals_are_plain_words_and_name_the_rule(http, app) -> None:  # type: ignore[no-untyped-def]
    r = await http.get("/api/v1/usage/farm?user=bob", headers=await bearer(app, "alice"))
    assert r.status_code == 403
    assert r.headers["content-type"].startswith("application/problem+json")
    detail = r.json()["detail"]
    assert detail.startswith("You cannot see bob's usage at farm: only they, the sponsors")
    assert detail.endswith("(alice may not usage:read)")
    r = await http.get("/api/v1/usage/farm?account=proj", headers=await bearer(app, "alice"))
    assert "You cannot see the usage of proj at farm: only the account's sponsor" in (
        r.json()["detail"])
    r = await http.put("/api/v1/quotas/farm/users/alice", json={"cpu_minutes": 1},
                       headers=await bearer(app, "alice"))
    assert r.status_code == 403 and "File a quota request instead" in r.json()["detail"]


async def test_unknown_pages_are_html_and_the_api_keeps_json(http, app) -> None:  # type: ignore[no-untyped-def]
    html = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    r = await http.get("/no/such/page", headers=html)
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert 'id="error-page"' in r.text and "404 · Not found" in r.text
    assert "There is no page at this address" in r.text
    assert r.headers["cache-control"] == "no-store"
    r = await http.get("/no/such/page", headers={"Accept": "application/json"})
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    r = await http.get("/api/v1/nothing", headers=html)
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")
