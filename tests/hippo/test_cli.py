"""``cheeto ng hippo …`` end to end through the real entry point and the fake HiPPO."""

from __future__ import annotations

import pytest

from cheeto_like.models import HippoEvent, User
from tests.factories import home_defaults, make_group, make_site
from tests.services.fake_hippo import account
from tests.services.http_server import Fault


@pytest.fixture
async def farm(db):
    await make_site(db, "farm")
    await home_defaults(db)
    await make_group(db, "lab1", 500001)


async def test_process_with_post_back_then_list_and_show(cli, farm, hippo, mailbox,
                                                         people_cli_config):
    event_id = hippo.add_event("CreateAccount", cluster="caesfarm", groups=["lab1"],
                               accounts=[account("alice", 5001)])
    r = await cli("ng", "hippo", "process", "--post", "--json", config=people_cli_config)
    assert r.code == 0, r.stderr
    data = r.json()
    assert data["tally"] == {"complete": 1, "posted_back": 1, "emails_sent": 1}
    assert data["events"][0]["hippo_id"] == event_id
    assert await User.find_one(User.name == "alice") is not None
    assert [m.subject for m in mailbox.messages] == ["HPC: Account Ready on Farm"]
    assert hippo.statuses_posted(event_id) == ["Complete"]

    r = await cli("ng", "hippo", "list", "--json", config=people_cli_config)
    assert r.code == 0 and [e["id"] for e in r.json()] == [event_id]
    r = await cli("ng", "hippo", "list", "--status", "Failed", "--json",
                  config=people_cli_config)
    assert r.json() == []
    r = await cli("ng", "hippo", "show", "--id", str(event_id), "--yaml",
                  config=people_cli_config)
    shown = r.yaml()
    assert shown["status"] == "Complete" and shown["site"] == "farm"
    assert shown["raw"]["data"]["accounts"][0]["kerberos"] == "alice"
    r = await cli("ng", "hippo", "show", "--id", "999", config=people_cli_config)
    assert r.code == 2 and "no local record of HiPPO event 999" in r.stderr


async def test_process_human_output_and_failure_exit_code(cli, farm, hippo,
                                                          people_cli_config):
    bad = hippo.add_event("Explode", accounts=[account("alice")])
    r = await cli("ng", "hippo", "process", "--no-notify", config=people_cli_config)
    assert r.code == 1
    assert "unknown action 'Explode'" in r.stderr and "1 event(s) failed" in r.stderr
    assert (await HippoEvent.find_one(HippoEvent.hippo_id == bad)).status == "Failed"


async def test_events_shows_the_upstream_queue(cli, hippo, people_cli_config):
    event_id = hippo.add_event("AddAccountToGroup", groups=["lab1"],
                               accounts=[account("alice")])
    r = await cli("ng", "hippo", "events", "--json", config=people_cli_config)
    assert r.code == 0, r.stderr
    [raw] = r.json()
    assert raw["id"] == event_id and raw["data"]["groups"] == [{"name": "lab1"}]
    r = await cli("ng", "hippo", "events", "--type", "CreateGroup", config=people_cli_config)
    assert r.code == 0 and "count=0" in r.stderr


async def test_sync_puppet(cli, hippo, people_cli_config):
    r = await cli("ng", "hippo", "sync-puppet", config=people_cli_config)
    assert r.code == 0 and "HTTP 200" in r.stderr
    assert hippo.puppet_syncs == 1


async def test_errors_are_one_line(cli, db, hippo, people_cli_config):
    hippo.faults.add("pending", Fault(status=401))
    r = await cli("ng", "hippo", "process", config=people_cli_config)
    assert r.code == 1 and len(r.error_lines) == 1 and "check the API key" in r.stderr
    hippo.faults.add("pending", Fault(malformed=True))
    r = await cli("ng", "hippo", "events", config=people_cli_config)
    assert r.code == 1 and "not JSON" in r.stderr and "Traceback" not in r.stderr
    r = await cli("ng", "hippo", "process")  # the plain test config has no hippo section
    assert r.code == 2 and "needs the hippo section" in r.stderr
