"""HiPPO event processing against the fake HiPPO: handlers, terminal gating, retries,
post-back healing, idempotent steps, and bad events."""

from __future__ import annotations

import pytest

from cheeto_like.adapters.http import HttpAuthError
from cheeto_like.models import (
    Group,
    GroupMembership,
    HippoEvent,
    History,
    SshKey,
    Storage,
    SyncRun,
    User,
    UserSiteInfo,
)
from cheeto_like.operations.group import CreateGroupFromSponsor
from cheeto_like.operations.hippo import process_events
from cheeto_like.operations.site import AddSiteAlias
from tests.factories import (
    AUTHOR,
    ED25519_KEY,
    ED25519_KEY_2,
    history,
    home_defaults,
    make_group,
    make_site,
    make_user,
    reload_user,
)
from tests.services.fake_hippo import account
from tests.services.fixtures_people import hippo_config
from tests.services.http_server import Fault

MOTHRA = 7654321


@pytest.fixture
async def farm(db):
    site = await make_site(db, "farm")
    await home_defaults(db)
    await make_group(db, "lab1", 500001)
    return site


@pytest.fixture
def config(fake_hippo_server):
    return hippo_config(fake_hippo_server)


async def process(db, config, **kwargs):
    return await process_events(db, AUTHOR, config, **kwargs)


async def local(event_id: int) -> HippoEvent:
    found = await HippoEvent.find_one(HippoEvent.hippo_id == event_id)
    assert found is not None
    return found


def create_account(hippo, name="alice", *, mothra=MOTHRA, cluster="CAESFARM", groups=("lab1",),
                   **kwargs):
    return hippo.add_event("CreateAccount", cluster=cluster, groups=list(groups),
                           accounts=[account(name, mothra, key=kwargs.pop("key", ED25519_KEY),
                                             **kwargs)])


async def counts(name="alice") -> dict[str, int]:
    return {
        "users": await User.find(User.name == name).count(),
        "groups": await Group.find(Group.name == name).count(),
        "sites": await UserSiteInfo.find(UserSiteInfo.user == name).count(),
        "keys": await SshKey.find(SshKey.user == name).count(),
        "homes": await Storage.find(Storage.owner == name).count(),
        "memberships": await GroupMembership.find(GroupMembership.user == name).count(),
    }


# -- CreateAccount -------------------------------------------------------------------------


async def test_create_account_end_to_end_with_post_back(db, farm, hippo, config):
    event_id = create_account(hippo, access_types=["SshKey", "OpenOnDemand"])
    report = await process(db, config, post_back=True)
    [outcome] = report.outcomes
    assert outcome.result == "complete" and outcome.posted_back is True, outcome
    user = await reload_user("alice")
    assert (user.uid, user.gid, user.home_directory) == (MOTHRA, MOTHRA, "/home/alice")
    assert user.email == "alice@ucdavis.edu" and user.fullname == "Alice Person"
    assert user.access == ["login-ssh", "ondemand"]  # no slurm: not asked, not configured
    assert await counts() == {"users": 1, "groups": 1, "sites": 1, "keys": 1, "homes": 1,
                              "memberships": 1}
    event = await local(event_id)
    assert event.status == "Complete" and event.n_tries == 1 and event.last_error is None
    assert event.site == "farm" and event.cluster == "CAESFARM"
    assert event.target_user == "alice" and event.target_groups == ["lab1"]
    assert event.posted_back_at is not None and event.completed_at is not None
    assert hippo.statuses_posted(event_id) == ["Complete"]
    assert hippo.pending() == []
    run = await SyncRun.find_one(SyncRun.target == "hippo")
    assert run.status == "ok" and run.counts["complete"] == 1


async def test_without_post_back_an_event_is_handled_once_across_runs(db, farm, hippo, config):
    event_id = create_account(hippo)
    await process(db, config)
    second = await process(db, config)
    assert [o.result for o in second.outcomes] == ["skipped_terminal"]
    assert hippo.status_updates == []
    assert len(await history("create_user")) == 1
    assert (await local(event_id)).n_tries == 1


async def test_a_later_run_with_post_back_heals_without_re_handling(db, farm, hippo, config):
    event_id = create_account(hippo)
    await process(db, config)
    before = await History.count()
    healed = await process(db, config, post_back=True)
    assert [(o.result, o.posted_back) for o in healed.outcomes] == [("skipped_terminal", True)]
    assert await History.count() == before
    assert hippo.statuses_posted(event_id) == ["Complete"]
    third = await process(db, config, post_back=True)
    assert third.outcomes == [] and hippo.statuses_posted(event_id) == ["Complete"]


async def test_a_failed_post_back_is_retried_later_without_re_handling(db, farm, hippo,
                                                                       config):
    event_id = create_account(hippo)
    hippo.faults.add("update", Fault(status=500), times=3)
    first = await process(db, config, post_back=True)
    assert first.outcomes[0].posted_back is False
    assert "post-back failed" in first.outcomes[0].error
    assert first.tally()["postback_error"] == 1
    event = await local(event_id)
    assert event.status == "Complete" and event.posted_back_at is None
    second = await process(db, config, post_back=True)
    assert second.outcomes[0].posted_back is True
    assert (await local(event_id)).posted_back_at is not None
    assert len(await history("create_user")) == 1
    assert hippo.statuses_posted(event_id) == ["Complete"]
    updates = [path for _, path, _ in hippo.requests if path.endswith("UpdateStatus")]
    assert len(updates) == 4  # 3 refused (one run: first try + 2 retries), 1 taken


async def test_retry_until_max_tries_then_failed_and_posted(db, farm, hippo, fake_hippo_server):
    config = hippo_config(fake_hippo_server, max_tries=2)
    event_id = create_account(hippo, groups=["nosuchlab"])
    first = await process(db, config, post_back=True)
    assert first.outcomes[0].result == "retrying"
    event = await local(event_id)
    assert event.status == "Pending" and event.n_tries == 1
    assert "nosuchlab do not exist" in event.last_error
    assert hippo.status_updates == []  # nothing final to say yet
    second = await process(db, config, post_back=True)
    assert second.outcomes[0].result == "failed"
    event = await local(event_id)
    assert event.status == "Failed" and "gave up after 2 tries" in event.last_error
    assert hippo.statuses_posted(event_id) == ["Failed"]
    # the account itself was created once, and nothing runs again
    third = await process(db, config, post_back=True)
    assert third.outcomes == []
    assert (await local(event_id)).n_tries == 2
    assert len(await history("create_user")) == 1


async def test_max_tries_1_fails_at_once_and_is_never_re_processed(db, farm, hippo,
                                                                    fake_hippo_server):
    config = hippo_config(fake_hippo_server, max_tries=1)
    event_id = create_account(hippo, groups=["nosuchlab"])
    await process(db, config)  # no post-back: the event stays pending upstream
    assert (await local(event_id)).status == "Failed"
    again = await process(db, config)
    assert [o.result for o in again.outcomes] == ["skipped_terminal"]
    assert (await local(event_id)).n_tries == 1
    healed = await process(db, config, post_back=True)
    assert healed.outcomes[0].posted_back is True
    assert hippo.statuses_posted(event_id) == ["Failed"]


async def test_fail_once_then_succeed_reaches_complete(db, farm, hippo, config):
    event_id = create_account(hippo, groups=["lab2"])
    await process(db, config)
    assert (await local(event_id)).status == "Pending"
    await make_group(db, "lab2", 500002)
    report = await process(db, config, post_back=True)
    assert report.outcomes[0].result == "complete"
    event = await local(event_id)
    assert event.status == "Complete" and event.n_tries == 2 and event.last_error is None
    assert hippo.statuses_posted(event_id) == ["Complete"]


async def test_a_handler_failing_at_step_3_then_succeeding_leaves_one_of_each(db, farm, hippo,
                                                                              config):
    ondemand = await Group.find_one(Group.name == "ondemand-users")
    await ondemand.delete()  # step 3 (access) cannot succeed
    event_id = create_account(hippo, access_types=["SshKey", "OpenOnDemand"])
    first = await process(db, config)
    assert first.outcomes[0].result == "retrying"
    assert "unknown access type ondemand" in first.outcomes[0].error
    assert [s.split(":")[0] for s in first.outcomes[0].steps] == ["create user alice",
                                                                  "site farm"]
    assert await counts() == {"users": 1, "groups": 1, "sites": 1, "keys": 1, "homes": 0,
                              "memberships": 0}
    await Group(name="ondemand-users", gid=ondemand.gid, type="access",
                shorthand="ondemand").insert()
    second = await process(db, config)
    assert second.outcomes[0].result == "complete", second.outcomes[0]
    steps = second.outcomes[0].steps
    assert "create user: skipped (alice exists (uid 7654321))" in steps
    assert "ssh key: skipped" in " ".join(steps) and "site: skipped (already on farm)" in steps
    assert await counts() == {"users": 1, "groups": 1, "sites": 1, "keys": 1, "homes": 1,
                              "memberships": 1}
    for op in ("create_user", "add_site_user", "add_user_access", "create_home_storage",
               "add_group_member"):
        assert len(await history(op)) == 1, op
    assert (await local(event_id)).n_tries == 2
    assert (await reload_user("alice")).access == ["login-ssh", "ondemand"]


async def test_create_account_refuses_a_uid_held_by_another_user(db, farm, hippo, config):
    await make_user(db, "mallory", uid=MOTHRA)
    event_id = create_account(hippo)
    report = await process(db, config)
    assert report.outcomes[0].result == "retrying"
    assert "uid 7654321" in report.outcomes[0].error and "'mallory'" in report.outcomes[0].error
    assert await User.find_one(User.name == "alice") is None
    assert (await local(event_id)).status == "Pending"


async def test_slurm_access_only_when_asked_or_configured(db, farm, hippo, fake_hippo_server):
    asked_by_metadata = hippo.add_event(
        "CreateAccount", cluster="farm", metadata={"slurm": "true"},
        accounts=[account("bob", 1001, key=ED25519_KEY_2)])
    mapped = hippo.add_event("CreateAccount", cluster="farm",
                             accounts=[account("carol", 1002, access_types=["Slurm"])])
    config = hippo_config(fake_hippo_server, access_types={
        "SshKey": "login-ssh", "OpenOnDemand": "ondemand", "Slurm": "slurm"})
    await process(db, config)
    assert (await reload_user("bob")).access == ["login-ssh", "slurm"]
    assert (await reload_user("carol")).access == ["slurm"]
    assert {(await local(i)).status for i in (asked_by_metadata, mapped)} == {"Complete"}
    site_config = hippo_config(fake_hippo_server, sites={"farm": {"grant_slurm": True}})
    create_account(hippo, "dave", mothra=1003, key=None)
    await process(db, site_config)
    assert (await reload_user("dave")).access == ["login-ssh", "slurm"]


async def test_site_aliases_resolve_case_insensitively_from_config_and_site(db, farm, hippo,
                                                                            config):
    await make_site(db, "peloton")
    await AddSiteAlias.run(db, AUTHOR, site="peloton", alias="HPC2")
    via_site = create_account(hippo, "erin", mothra=2001, cluster="hpc2", groups=())
    via_config = create_account(hippo, "frank", mothra=2002, cluster="caesFARM", groups=())
    via_name = create_account(hippo, "gina", mothra=2003, cluster="Farm", groups=())
    await process(db, config)
    assert (await local(via_site)).site == "peloton"
    assert {(await local(i)).site for i in (via_config, via_name)} == {"farm"}
    assert {(await local(i)).status for i in (via_site, via_config, via_name)} == {"Complete"}


# -- the other handlers -----------------------------------------------------------------------


async def test_add_account_to_group(db, farm, hippo, config):
    await make_user(db, "alice", site="farm")
    await make_group(db, "lab2", 500002)
    event_id = hippo.add_event("AddAccountToGroup", cluster="farm", groups=["lab1", "lab2"],
                               accounts=[account("alice")])
    await process(db, config)
    edges = await GroupMembership.find(GroupMembership.user == "alice").to_list()
    assert sorted(e.group for e in edges) == ["lab1", "lab2"]
    assert (await local(event_id)).status == "Complete"


async def test_remove_account_from_every_listed_group(db, farm, hippo, config):
    from cheeto_like.operations.group_membership import AddGroupMember

    await make_user(db, "alice", site="farm")
    for name, gid in (("lab2", 500002), ("lab3", 500003)):
        await make_group(db, name, gid)
    for group in ("lab1", "lab2", "lab3"):
        await AddGroupMember.run(db, AUTHOR, group=group, user="alice", site="farm")
    event_id = hippo.add_event("RemoveAccountFromGroup", cluster="farm",
                               groups=["lab1", "lab3", "ghost"], accounts=[account("alice")])
    report = await process(db, config)
    edges = await GroupMembership.find(GroupMembership.user == "alice").to_list()
    assert [e.group for e in edges] == ["lab2"]
    assert "leave ghost: skipped (no such group)" in report.outcomes[0].steps
    assert (await local(event_id)).status == "Complete"


async def test_update_ssh_key_keeps_the_other_keys(db, farm, hippo, config):
    await make_user(db, "alice", site="farm", ssh_key=ED25519_KEY)
    hippo.add_event("UpdateSshKey", cluster="farm",
                    accounts=[account("alice", key=ED25519_KEY_2)])
    await process(db, config)
    keys = sorted(k.key for k in await SshKey.find(SshKey.user == "alice").to_list())
    assert len(keys) == 2
    assert "login-ssh" in (await reload_user("alice")).access
    # the same event content again adds nothing
    again = hippo.add_event("UpdateSshKey", cluster="farm",
                            accounts=[account("alice", key=ED25519_KEY_2)])
    report = await process(db, config)
    assert {o.hippo_id: o.result for o in report.outcomes}[again] == "complete"
    assert await SshKey.find(SshKey.user == "alice").count() == 2


async def test_update_ssh_key_replaces_them_where_the_site_says_so(db, farm, hippo,
                                                                   fake_hippo_server):
    config = hippo_config(fake_hippo_server, sites={"farm": {"replace_ssh_keys": True}})
    await make_user(db, "alice", site="farm", ssh_key=ED25519_KEY)
    hippo.add_event("UpdateSshKey", cluster="farm",
                    accounts=[account("alice", key=ED25519_KEY_2)])
    await process(db, config)
    [key] = await SshKey.find(SshKey.user == "alice").to_list()
    assert key.key.split()[:2] == ED25519_KEY_2.split()[:2]


async def test_create_group_and_again_at_a_second_site(db, farm, hippo, config):
    await make_site(db, "peloton")
    sponsor = await make_user(db, "prof", uid=4242, site="farm")
    first = hippo.add_event("CreateGroup", cluster="farm", accounts=[account("prof", 4242)])
    await process(db, config)
    group = await Group.find_one(Group.name == "profgrp")
    assert group.gid == 100_000_000 + sponsor.uid
    second = hippo.add_event("CreateGroup", cluster="peloton", accounts=[account("prof", 4242)])
    report = await process(db, config)
    assert {o.hippo_id: o.result for o in report.outcomes} == {first: "skipped_terminal",
                                                              second: "complete"}
    edges = await GroupMembership.find(GroupMembership.group == "profgrp").to_list()
    assert sorted((e.site, tuple(e.roles)) for e in edges) == [
        ("farm", ("member", "sponsor")), ("peloton", ("member", "sponsor"))]
    assert {(await local(i)).status for i in (first, second)} == {"Complete"}
    assert len(await history(CreateGroupFromSponsor.op_name)) == 1


# -- bad events and bad queues ------------------------------------------------------------------


@pytest.mark.parametrize(("event", "message"), [
    ({"action": "DeleteEverything", "accounts": [account("alice")]},
     "unknown action 'DeleteEverything'"),
    ({"action": "CreateAccount", "accounts": [{"kerberos": "alice", "name": "A",
                                               "email": "a@ucdavis.edu", "mothra": "123"}],
      "drop_cluster": True}, "cluster: required but missing"),
    ({"action": "CreateAccount", "accounts": [account("alice", "12ab")]},
     "mothra id '12ab' is not a number"),
    ({"action": "CreateAccount", "accounts": [{"kerberos": "alice", "mothra": "1"}]},
     "accounts.0.name: required but missing"),
    ({"action": "UpdateSshKey", "accounts": [account("alice", key="")]},
     "needs data.accounts[0].key"),
    ({"action": "CreateAccount", "accounts": [account("alice", key="ssh-rsa nonsense")]},
     "SSH key is not valid"),
    ({"action": "CreateGroup", "accounts": []}, "needs an account"),
])
async def test_bad_events_fail_with_a_readable_error_and_the_run_goes_on(db, farm, hippo,
                                                                         config, event,
                                                                         message):
    data = {"groups": [], "accounts": event["accounts"], "cluster": "farm", "metadata": {}}
    if event.get("drop_cluster"):
        del data["cluster"]
    bad = hippo.add_event(event["action"], data=data)
    good = create_account(hippo, "zoe", mothra=3001, groups=())
    report = await process(db, config, post_back=True)
    results = {o.hippo_id: o.result for o in report.outcomes}
    assert results == {bad: "bad_event", good: "complete"}
    record = await local(bad)
    assert record.status == "Failed" and message in record.last_error
    assert record.n_tries == 1 and hippo.statuses_posted(bad) == ["Failed"]
    run = await SyncRun.find_one(SyncRun.target == "hippo")
    assert run.status == "failed" and str(bad) in run.error


async def test_an_event_whose_data_is_not_an_object_is_a_bad_event(db, farm, hippo, config):
    bad = hippo.add_event("CreateAccount", data="oops")
    report = await process(db, config)
    assert report.outcomes[0].result == "bad_event"
    assert "event data is str" in (await local(bad)).last_error


async def test_an_unknown_cluster_is_retried_with_a_clear_error(db, farm, hippo, config):
    event_id = create_account(hippo, cluster="nowhere")
    report = await process(db, config)
    assert report.outcomes[0].result == "retrying"
    assert "cluster 'nowhere' matches no site" in (await local(event_id)).last_error


async def test_a_refused_key_fails_the_run_and_handles_nothing(db, farm, hippo,
                                                               fake_hippo_server):
    create_account(hippo)
    config = hippo_config(fake_hippo_server, api_key="wrong")
    with pytest.raises(HttpAuthError):
        await process(db, config)
    assert await HippoEvent.count() == 0
    run = await SyncRun.find_one(SyncRun.target == "hippo")
    assert run.status == "failed" and "401" in run.error


async def test_filters_by_id_and_type(db, farm, hippo, config):
    one = create_account(hippo, "alice", mothra=1)
    two = create_account(hippo, "bob", mothra=2)
    report = await process(db, config, event_id=two)
    assert [o.hippo_id for o in report.outcomes] == [two]
    report = await process(db, config, action="CreateGroup")
    assert report.outcomes == []
    assert await HippoEvent.find_one(HippoEvent.hippo_id == one) is None


async def test_an_unmapped_access_type_is_retried_and_changes_nothing(db, farm, hippo, config):
    event_id = create_account(hippo, access_types=["Teleport"])
    report = await process(db, config)
    assert report.outcomes[0].result == "retrying"
    assert "unknown HiPPO access type(s) Teleport" in (await local(event_id)).last_error
    assert await User.find_one(User.name == "alice") is None  # checked before step 1
