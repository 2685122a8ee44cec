"""Requests: who may approve each step, the last approval running the kind's operations
in one transaction (and nothing at all when one fails), denials, comments, escalation,
and the queue that joins HiPPO's account requests."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.config import Config, RequestsConfig
from cheeto_like.errors import Conflict, InvalidInput, NotAllowed, NotFound
from cheeto_like.models import (
    Group,
    GroupMembership,
    HippoEvent,
    Quota,
    Request,
    RoleGrant,
    Storage,
    SyncRun,
    UserSiteInfo,
)
from cheeto_like.operations.group_membership import AddGroupSponsor
from cheeto_like.operations.request import (
    approve_request,
    comment_request,
    deny_request,
    escalate_breaches,
    file_request,
)
from cheeto_like.queries.request import request_queue

from ..factories import history, make_group, make_site, make_user, make_volume, snapshot

CONFIG = Config()
DAY = 86400


@pytest.fixture
async def lab(db):
    """farm; alice (on farm), bob (sponsor of lab at farm), carol (operator), dave
    (nobody), erin (not on farm); group lab."""
    await make_site(db, "farm")
    for name in ("alice", "bob", "carol", "dave"):
        await make_user(db, name, site="farm")
    await make_user(db, "erin")
    await make_group(db, "lab")
    await AddGroupSponsor.run(db, "tester", group="lab", user="bob", site="farm")
    await RoleGrant(user="carol", role="operator").insert()
    return db


async def member_roles(user: str, group: str = "lab") -> list[str] | None:
    edge = await GroupMembership.find_one({"user": user, "group": group, "site": "farm"})
    return None if edge is None else edge.roles


async def test_a_join_request_runs_when_its_sponsor_approves(lab):
    request = await file_request(lab, "alice", CONFIG, kind="join", site="farm", group="lab",
                                 user="alice", reason="new student")
    assert (request.number, request.status, request.steps) == (1, "pending", ["sponsor"])
    assert request.next_step == "sponsor" and await member_roles("alice") is None

    before = await snapshot()
    for wrong in ("dave", "alice", "carol"):  # nobody, the requester, an operator
        with pytest.raises(NotAllowed, match="waits for a sponsor of lab at farm"):
            await approve_request(lab, wrong, CONFIG, request.number)
    assert await snapshot() == before  # refused: nothing written, no History row

    done = await approve_request(lab, "bob", CONFIG, request.number, note="welcome")
    assert done.status == "done" and done.closed_epoch is not None
    assert await member_roles("alice") == ["member"]
    assert done.actions == [{"op": "add_site_user", "skipped": "already on the site"},
                            {"op": "add_group_member",
                             "args": {"group": "lab", "user": "alice", "site": "farm"}}]
    [approval] = done.approvals
    assert (approval.step, approval.by, approval.note) == ("sponsor", "bob", "welcome")
    [row] = await history("approve_request")
    assert row.author == "bob" and row.changes["status"] == "done"
    assert await history("add_group_member") == []  # ran inside approve_request
    with pytest.raises(Conflict, match="already done"):
        await approve_request(lab, "bob", CONFIG, request.number)


async def test_an_access_request_needs_the_sponsor_then_an_operator(lab):
    request = await file_request(lab, "alice", CONFIG, kind="access", site="farm",
                                 group="lab", user="alice", access=["sudo"])
    assert request.steps == ["sponsor", "operator"]
    with pytest.raises(NotAllowed):
        await approve_request(lab, "carol", CONFIG, request.number)  # sponsor step first
    step1 = await approve_request(lab, "bob", CONFIG, request.number)
    assert step1.status == "pending" and step1.next_step == "operator"
    with pytest.raises(NotAllowed, match="waits for an operator"):
        await approve_request(lab, "bob", CONFIG, request.number)
    done = await approve_request(lab, "carol", CONFIG, request.number)
    assert done.status == "done"
    usi = await UserSiteInfo.find_one({"user": "alice", "site": "farm"})
    assert "sudo" in usi.access
    assert done.actions == [{"op": "add_user_access",
                             "args": {"name": "alice", "access": ["sudo"], "site": "farm"}}]


async def test_nobody_approves_the_operator_step_of_their_own_request(lab):
    await RoleGrant(user="dave", role="admin").insert()
    request = await file_request(lab, "carol", CONFIG, kind="access", site="farm",
                                 group="lab", user="carol", access=["sudo"])
    await approve_request(lab, "bob", CONFIG, request.number)
    with pytest.raises(NotAllowed, match="filed request 1 and may not approve"):
        await approve_request(lab, "carol", CONFIG, request.number)
    assert (await approve_request(lab, "dave", CONFIG, request.number)).status == "done"


async def test_a_managers_grant_and_a_sponsor_filing_count_as_the_sponsor(lab):
    await RoleGrant(user="dave", role="manager", accounts=["lab"]).insert()
    first = await file_request(lab, "alice", CONFIG, kind="join", site="farm", group="lab",
                               user="alice")
    assert (await approve_request(lab, "dave", CONFIG, first.number)).status == "done"
    # the sponsor files for someone: vouched by filing, done at once (no operator step)
    await make_user(lab, "frank", site="farm")
    second = await file_request(lab, "bob", CONFIG, kind="join", site="farm", group="lab",
                                user="frank")
    assert second.status == "done" and await member_roles("frank") == ["member"]
    assert second.approvals[0].note == "filed by a sponsor"


async def test_a_failing_operation_writes_nothing(lab):
    """The account request puts erin on farm, then joins her to lab; when the second
    step fails the first is rolled back with it, and the approval is not recorded."""
    request = await file_request(lab, "erin", CONFIG, kind="account", site="farm",
                                 group="lab", user="erin")
    await Group.get_pymongo_collection().delete_one({"name": "lab"})  # gone since filing
    before = await snapshot()
    with pytest.raises(NotFound, match="group 'lab' does not exist"):
        await approve_request(lab, "bob", CONFIG, request.number)
    assert await snapshot() == before
    again = await Request.find_one({"number": request.number})
    assert again.status == "pending" and again.approvals == [] and again.actions == []
    assert await UserSiteInfo.find_one({"user": "erin", "site": "farm"}) is None
    assert await history("approve_request") == []


async def test_an_account_request_puts_the_user_on_the_site(lab):
    request = await file_request(lab, "erin", CONFIG, kind="account", site="farm",
                                 group="lab", user="erin")
    done = await approve_request(lab, "bob", CONFIG, request.number)
    assert [a["op"] for a in done.actions] == ["add_site_user", "add_group_member"]
    assert await UserSiteInfo.find_one({"user": "erin", "site": "farm"}) is not None
    assert await member_roles("erin") == ["member"]


async def test_a_join_for_someone_not_on_the_site_is_refused_at_approval(lab):
    request = await file_request(lab, "erin", CONFIG, kind="join", site="farm", group="lab",
                                 user="erin")
    with pytest.raises(Conflict, match="file an account request"):
        await approve_request(lab, "bob", CONFIG, request.number)


async def test_denial_carries_a_reason(lab):
    request = await file_request(lab, "alice", CONFIG, kind="join", site="farm", group="lab",
                                 user="alice")
    with pytest.raises(NotAllowed, match="may not deny"):
        await deny_request(lab, "dave", CONFIG, request.number, reason="no")
    with pytest.raises(InvalidInput, match="reason"):
        await deny_request(lab, "bob", CONFIG, request.number, reason="")
    denied = await deny_request(lab, "bob", CONFIG, request.number, reason="not in my lab")
    assert (denied.status, denied.denied_by, denied.denial_reason) == \
        ("denied", "bob", "not in my lab")
    assert await member_roles("alice") is None
    with pytest.raises(Conflict, match="already denied"):
        await approve_request(lab, "bob", CONFIG, request.number)
    # an operator may deny at any step
    other = await file_request(lab, "alice", CONFIG, kind="join", site="farm", group="lab",
                               user="alice")
    assert (await deny_request(lab, "carol", CONFIG, other.number,
                               reason="duplicate")).status == "denied"


async def test_comments_accumulate(lab):
    request = await file_request(lab, "alice", CONFIG, kind="join", site="farm", group="lab",
                                 user="alice")
    await comment_request(lab, "bob", CONFIG, request.number, text="which project?")
    after = await comment_request(lab, "alice", CONFIG, request.number, text="genomics")
    assert [(c.by, c.text) for c in after.comments] == [("bob", "which project?"),
                                                        ("alice", "genomics")]
    with pytest.raises(NotFound):
        await comment_request(lab, "bob", CONFIG, 99, text="hello")


async def test_quota_and_storage_requests_run_their_operations(lab):
    quota = await file_request(lab, "bob", CONFIG, kind="quota", site="farm", account="lab",
                               cpu_minutes=6000.0)
    assert quota.group == "lab" and quota.next_step == "operator"  # bob vouched by filing
    done = await approve_request(lab, "carol", CONFIG, quota.number)
    assert done.actions == [{"op": "set_quota", "args": {"site": "farm", "account": "lab",
                                                         "cpu_minutes": 6000.0}}]
    assert (await Quota.find_one({"account": "lab"})).cpu_minutes == 6000.0

    await make_volume(lab, "group", host="nas1", host_path="/export/group")
    new = await file_request(lab, "bob", CONFIG, kind="storage", site="farm", group="lab",
                             quota="2T", parent_volume="group")
    await approve_request(lab, "carol", CONFIG, new.number)
    storage = await Storage.find_one({"name": "lab", "category": "group"})
    assert storage is not None and storage.owner == "bob"
    bigger = await file_request(lab, "bob", CONFIG, kind="storage", site="farm", group="lab",
                                quota="4T")
    done = await approve_request(lab, "carol", CONFIG, bigger.number)
    assert done.actions[0]["op"] == "edit_storage"


@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "join", "site": "farm", "group": "lab"}, "needs --user"),
    ({"kind": "join", "site": "farm", "user": "alice"}, "needs --group"),
    ({"kind": "access", "site": "farm", "group": "lab", "user": "alice"}, "needs --access"),
    ({"kind": "quota", "site": "farm", "account": "lab"}, "needs --cpu or --gpu"),
    ({"kind": "quota", "site": "farm", "account": "lab", "user": "alice",
      "cpu_minutes": 1.0}, "exactly one"),
    ({"kind": "storage", "site": "farm", "group": "lab"}, "needs --quota"),
    ({"kind": "join", "site": "farm", "group": "lab", "user": "alice", "quota": "1T"},
     "go with storage"),
    ({"kind": "join", "site": "moon", "group": "lab", "user": "alice"}, "moon"),
    ({"kind": "join", "site": "farm", "group": "nolab", "user": "alice"}, "nolab"),
    ({"kind": "join", "site": "farm", "group": "sudo-users", "user": "alice"}, "access group"),
    ({"kind": "access", "site": "farm", "group": "lab", "user": "alice",
      "access": ["superpowers"]}, "unknown access type superpowers"),
    ({"kind": "storage", "site": "farm", "group": "lab", "quota": "1T",
      "parent_volume": "../x"}, "parent_volume"),
])
async def test_bad_requests_are_refused_before_anything_is_written(lab, kwargs, message):
    before = await snapshot()
    with pytest.raises((InvalidInput, NotFound), match=message):
        await file_request(lab, "alice", CONFIG, **kwargs)
    assert await snapshot() == before


async def test_escalation_happens_once_per_breach(lab):
    now = int(time.time())
    old = await file_request(lab, "alice", CONFIG, kind="join", site="farm", group="lab",
                             user="alice", created_epoch=now - 10 * DAY)
    await file_request(lab, "alice", CONFIG, kind="join", site="farm", group="lab",
                       user="alice")  # fresh: not breached
    assert await escalate_breaches(lab, "beat", CONFIG) == [old.number]
    assert await escalate_breaches(lab, "beat", CONFIG) == []
    stamped = await Request.find_one({"number": old.number})
    assert stamped.escalated_epoch is not None
    [run] = await SyncRun.find({"target": "requests"}).to_list()
    [item] = run.extra["escalations"]
    assert item["key"] == f"request:{old.number}" and item["site"] == "farm"
    assert "past its SLA, waiting for the sponsor" in item["summary"]
    assert item["fix"] == f"cheeto ng request show {old.number}"
    [row] = await history("escalate_requests")
    assert row.changes == {"escalated": [old.number]}


async def test_the_queue_joins_hippo_and_sorts_for_triage(lab):
    now = datetime.now(UTC)
    epoch = int(now.timestamp())
    cfg = RequestsConfig(kinds={"access": {"sla": "1d", "operator": True}})
    join_old = await file_request(lab, "alice", CONFIG, kind="join", site="farm", group="lab",
                                  user="alice", created_epoch=epoch - 20 * DAY)
    access_new = await file_request(lab, "alice", CONFIG, kind="access", site="farm",
                                    group="lab", user="alice", access=["sudo"],
                                    created_epoch=epoch - 3600)
    join_new = await file_request(lab, "alice", CONFIG, kind="join", site="farm",
                                  group="lab", user="alice", created_epoch=epoch - 7200)
    await HippoEvent(hippo_id=77, hippo_endpoint="https://hippo", action="CreateAccount",
                     status="Pending", site="farm", target_username="zed",
                     target_groupnames=["lab"], sponsor_username="bob",
                     first_seen_at=now - timedelta(days=30)).insert()
    await HippoEvent(hippo_id=78, hippo_endpoint="https://hippo", action="UpdateSshKey",
                     status="Pending", site="farm", target_username="zed",
                     first_seen_at=now - timedelta(days=40)).insert()  # not a request
    rows = await request_queue(cfg, now=now, triage=True)
    ids = [r.id for r in rows]
    # breaches first, oldest breach first (HiPPO's 30-day-old one, then the 20-day join);
    # then by kind (access before join), oldest first
    assert ids == ["h77", str(join_old.number), str(access_new.number),
                   str(join_new.number)]
    hippo = rows[0]
    assert (hippo.source, hippo.kind, hippo.status, hippo.user, hippo.next_step) == \
        ("hippo", "account", "pending", "zed", "hippo")
    assert rows[0].sla.breached and rows[1].sla.breached and not rows[2].sla.breached
    plain = await request_queue(cfg, now=now)
    assert [r.id for r in plain] == ["h77", str(join_old.number), str(join_new.number),
                                     str(access_new.number)]  # oldest first
    assert [r.id for r in await request_queue(cfg, now=now, breached=True,
                                              include_hippo=False)] == [str(join_old.number)]
    assert [r.id for r in await request_queue(cfg, now=now, kind="access")] == \
        [str(access_new.number)]
    assert await request_queue(cfg, now=now, status="done") == []


async def test_renames_follow_requests(lab):
    from cheeto_like.operations.group import RenameGroup
    from cheeto_like.operations.user import RenameUser

    request = await file_request(lab, "alice", CONFIG, kind="join", site="farm", group="lab",
                                 user="alice")
    await RenameUser.run(lab, "tester", name="alice", new_name="alicia")
    await RenameGroup.run(lab, "tester", name="lab", new_name="lab2")
    again = await Request.find_one({"number": request.number})
    assert (again.requester, again.user, again.group) == ("alicia", "alicia", "lab2")
    done = await approve_request(lab, "bob", CONFIG, request.number)
    assert done.status == "done" and await member_roles("alicia", "lab2") == ["member"]


async def test_the_queue_costs_the_same_number_of_queries_however_long(lab, mongo_config):
    from tests.queries.test_query_count import command_count

    async def grow(n: int) -> None:
        for _ in range(n):
            await file_request(lab, "alice", CONFIG, kind="join", site="farm", group="lab",
                               user="alice")
            await HippoEvent(hippo_id=1000 + await Request.count(), hippo_endpoint="h",
                             action="CreateAccount", status="Pending",
                             first_seen_at=datetime.now(UTC)).insert()

    def queue():  # type: ignore[no-untyped-def]
        return request_queue(RequestsConfig(), triage=True)

    await grow(2)
    small = await command_count(lab, mongo_config, queue)
    await grow(10)
    large = await command_count(lab, mongo_config, queue)
    assert small == large == 2


async def test_a_leave_request_removes_the_member_when_the_sponsor_files_it(lab):
    """A sponsor filing a ``leave`` has vouched: with no operator step (the default) the
    member is removed at once; with one, it waits for an operator."""
    await file_request(lab, "bob", CONFIG, kind="join", site="farm", group="lab",
                       user="alice", reason="new student")
    assert await member_roles("alice") == ["member"]
    done = await file_request(lab, "bob", CONFIG, kind="leave", site="farm", group="lab",
                              user="alice", reason="graduated")
    assert done.status == "done" and await member_roles("alice") is None
    assert done.actions == [{"op": "remove_group_member",
                             "args": {"group": "lab", "user": "alice", "site": "farm"}}]
    with pytest.raises(InvalidInput, match="alice is not a member of lab at farm"):
        await file_request(lab, "bob", CONFIG, kind="leave", site="farm", group="lab",
                           user="alice", reason="again")
    strict = Config(requests=RequestsConfig(kinds={"leave": {"operator": True}}))
    await file_request(lab, "bob", CONFIG, kind="join", site="farm", group="lab",
                       user="dave", reason="x")
    waiting = await file_request(lab, "bob", strict, kind="leave", site="farm", group="lab",
                                 user="dave", reason="left")
    assert waiting.status == "pending" and waiting.next_step == "operator"
    assert await member_roles("dave") == ["member"]
    await approve_request(lab, "carol", strict, waiting.number)
    assert await member_roles("dave") is None
