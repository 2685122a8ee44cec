"""``cheeto ng request …`` end to end: file, list (--triage, --json), show, approve (the
acting person is --author; a wrong approver exits 2 with one line), deny, comment,
escalate."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.models import GroupMembership, HippoEvent, Request, RoleGrant
from cheeto_like.operations.group_membership import AddGroupSponsor

from ..factories import make_group, make_site, make_user, snapshot


@pytest.fixture
async def lab(db):
    await make_site(db, "farm")
    for name in ("alice", "bob", "carol", "dave"):
        await make_user(db, name, site="farm")
    await make_group(db, "lab")
    await AddGroupSponsor.run(db, "tester", group="lab", user="bob", site="farm")
    await RoleGrant(user="carol", role="operator").insert()
    return db


async def test_the_whole_flow(lab, cli):
    r = await cli("ng", "request", "new", "access", "-s", "farm", "-g", "lab", "-u", "alice",
                  "--access", "sudo", "--reason", "lab containers", "--author", "alice")
    assert r.code == 0, r.stderr
    assert "request 1 filed (sudo access for alice at farm): waiting for the sponsor" in r.stderr

    before = await snapshot()
    r = await cli("ng", "request", "approve", "1", "--author", "dave")
    assert r.code == 2 and len(r.error_lines) == 1
    assert "dave may not approve request 1: it waits for a sponsor of lab at farm" in r.stderr
    assert "Traceback" not in r.stderr and await snapshot() == before

    r = await cli("ng", "request", "approve", "1", "--author", "bob", "--note", "ok")
    assert r.code == 0 and "waiting for the operator" in r.stderr
    r = await cli("ng", "request", "comment", "1", "-m", "checking", "--author", "carol")
    assert r.code == 0
    r = await cli("ng", "request", "approve", "1", "--author", "carol", "--json")
    assert r.code == 0, r.stderr
    shown = r.json()
    assert shown["status"] == "done" and shown["summary"] == "sudo access for alice at farm"
    assert [a["by"] for a in shown["approvals"]] == ["bob", "carol"]
    assert shown["comments"][0]["text"] == "checking"
    assert shown["actions"][0]["op"] == "add_user_access"

    r = await cli("ng", "request", "show", "1", "--yaml")
    assert r.code == 0 and r.yaml()["status"] == "done"
    r = await cli("ng", "request", "show", "1")
    assert r.code == 0 and "request 1" in r.stderr and "add_user_access" in r.stderr
    r = await cli("ng", "request", "show", "7")
    assert r.code == 2 and "request 7 does not exist" in r.stderr


async def test_list_triage_and_hippo_rows(lab, cli):
    epoch = int(time.time())
    for _ in range(2):
        await cli("ng", "request", "new", "join", "-s", "farm", "-g", "lab", "-u", "dave",
                  "--author", "dave")
    # make the second one old (filed 9 days ago)
    second = await Request.find_one({"number": 2})
    second.created_epoch = epoch - 9 * 86400
    await second.save()
    await HippoEvent(hippo_id=5, hippo_endpoint="https://hippo", action="AddAccountToGroup",
                     status="Pending", site="farm", target_username="zed",
                     target_groupnames=["lab"],
                     first_seen_at=datetime.now(UTC) - timedelta(hours=1)).insert()
    r = await cli("ng", "request", "list", "--triage", "--json")
    assert r.code == 0, r.stderr
    rows = r.json()
    assert [row["id"] for row in rows] == ["2", "h5", "1"]
    assert rows[0]["breached"] is True and rows[0]["left"].startswith("-")
    assert rows[1]["source"] == "hippo" and rows[1]["kind"] == "join"
    r = await cli("ng", "request", "list", "--breached")
    assert r.code == 0 and "breached=1" in r.stderr
    r = await cli("ng", "request", "list", "--no-hippo", "--json")
    assert [row["id"] for row in r.json()] == ["2", "1"]
    r = await cli("ng", "request", "list", "--kind", "nope")
    assert r.code == 2 and "invalid choice: 'nope'" in r.stderr

    r = await cli("ng", "request", "escalate", "--json", "--author", "beat")
    assert r.code == 0 and r.json() == {"escalated": [2]}
    r = await cli("ng", "request", "escalate", "--author", "beat")
    assert r.code == 0 and "nothing new to escalate" in r.stderr


async def test_deny_and_bad_input(lab, cli):
    r = await cli("ng", "request", "new", "join", "-s", "farm", "-g", "lab", "-u", "alice",
                  "--author", "alice")
    assert r.code == 0
    r = await cli("ng", "request", "deny", "1", "--author", "alice", "--reason", "oops")
    assert r.code == 2 and "alice may not deny request 1" in r.stderr
    r = await cli("ng", "request", "deny", "1", "--author", "bob", "--reason", "not my lab")
    assert r.code == 0 and "request 1 denied" in r.stderr
    assert await GroupMembership.find_one({"user": "alice", "roles": "member"}) is None
    r = await cli("ng", "request", "approve", "1", "--author", "bob")
    assert r.code == 2 and "already denied" in r.stderr

    before = await snapshot()
    for argv, message in (
        (("new", "quota", "-s", "farm", "--account", "lab", "--cpu", "lots"), "--cpu"),
        (("new", "quota", "-s", "farm", "--account", "lab"), "needs --cpu or --gpu"),
        (("new", "join", "-s", "farm", "-u", "alice"), "needs --group"),
        (("new", "join", "-s", "farm", "-g", "lab", "-u", "ghost"), "user 'ghost'"),
        (("new", "storage", "-s", "farm", "-g", "lab", "--quota", "huge"), "quota"),
    ):
        r = await cli("ng", "request", *argv, "--author", "alice")
        assert r.code == 2, (argv, r.stderr)
        assert message in r.stderr and len(r.error_lines) == 1, r.stderr
    assert await snapshot() == before


async def test_ended_requests_show_no_time_left_or_breach(lab, cli):
    """`--status all` lists ended requests too: they have no time left and no breach
    (issue 28); a late one that is still open keeps both."""
    for _ in range(2):
        await cli("ng", "request", "new", "join", "-s", "farm", "-g", "lab", "-u", "dave",
                  "--author", "dave")
    for number in (1, 2):
        old = await Request.find_one({"number": number})
        old.created_epoch = int(time.time()) - 9 * 86400
        await old.save()
    r = await cli("ng", "request", "deny", "1", "--author", "bob", "--reason", "too late")
    assert r.code == 0, r.stderr
    r = await cli("ng", "request", "list", "--status", "all", "--json")
    rows = {row["id"]: row for row in r.json()}
    assert rows["1"]["status"] == "denied" and rows["1"]["ended"] is True
    assert rows["1"]["left"] is None and rows["1"]["breached"] is None
    assert rows["2"]["breached"] is True and rows["2"]["left"].startswith("-")
    r = await cli("ng", "request", "list", "--status", "all")
    assert r.code == 0 and "breached=1" in r.stderr
