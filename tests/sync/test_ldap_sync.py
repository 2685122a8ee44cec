"""The LDAP reconciler against a real slapd: bootstrap, projection, incremental runs that
write only what changed, drift repair, per-site isolation, dry runs that leave the
directory byte-identical, the deletion cap, bad input, and each fixed reference defect.

Every test gets its own user base OU and site names, so tests never see each other's
entries in the session's slapd. Reads for assertions go through ``ldapsearch`` (an
independent client), not through the adapter under test.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from cheeto_like.adapters.ldap import DirectoryError, check_bind
from cheeto_like.errors import GuardTripped, InvalidInput, NotFound
from cheeto_like.models import AutomountMap, Storage, SyncRun, User
from cheeto_like.operations.group_membership import RemoveGroupMember
from cheeto_like.operations.site import AddStickyGroup
from cheeto_like.operations.user import (
    AddUserAccess,
    AddUserSshKey,
    ClearOffboardingSiteStatuses,
    SetUserShell,
    SetUserStatus,
    SetUserType,
)
from cheeto_like.operations.user_site import AddSiteUser, RemoveSiteUser
from cheeto_like.sync.ldap import run as sync
from cheeto_like.sync.ldap.desired import desired_state
from cheeto_like.sync.ldap.plan import Scope
from tests.factories import (
    AUTHOR,
    ED25519_KEY,
    ED25519_KEY_2,
    make_group,
    make_site,
    make_user,
    reload_user,
)
from tests.services.ldap import Slapd
from tests.sync.ldap_lab import Lab, ed25519_key, populate


@pytest.fixture
async def lab(db, slapd: Slapd) -> Lab:
    lab = Lab(db, slapd)
    await lab.make_sites()
    return lab


# -- bootstrap --------------------------------------------------------------------------------


async def test_bootstrap_is_idempotent(lab: Lab):
    first = await lab.sync(bootstrap=True)
    assert first.ok and first.writes == {"add": 4 + 1 + 10}  # 4 OUs, auto.master, 10 groups
    assert lab.members("login-ssh-users") == [] and lab.entry(lab.map_dn("auto.master"))
    before = lab.dump()
    second = await lab.sync(bootstrap=True)
    assert second.plan.is_empty and second.writes == {}
    assert lab.dump() == before


async def test_bootstrap_needs_the_access_and_status_groups(empty_db, slapd: Slapd):
    lab = Lab(empty_db, slapd)
    await lab.make_sites()
    with pytest.raises(InvalidInput, match="seed-access-status"):
        await lab.sync(bootstrap=True)
    assert lab.entry(lab.site_dn()) is None


# -- projection -------------------------------------------------------------------------------


async def test_entries_match_the_model_and_a_second_run_writes_nothing(lab: Lab):
    n = await populate(lab)
    report = await lab.sync()
    assert report.ok, report.failed
    assert report.writes["add"] == sum(report.plan.counts.values())

    alice = lab.entry(lab.user_dn(n["alice"]))
    assert alice is not None
    assert set(alice["objectClass"]) == {"top", "inetOrgPerson", "posixAccount",
                                         "ldapPublicKey", "shadowAccount"}
    assert alice["cn"] == alice["displayName"] == ["Doe, Alice Q"]
    assert alice["sn"] == ["Q"] and alice["mail"] == [f"{n['alice']}@example.org"]
    assert alice["homeDirectory"] == [f"/home/{n['alice']}"]
    assert alice["loginShell"] == ["/usr/bin/bash"] and alice["shadowExpire"] == ["21915"]
    assert alice["userPassword"][0].startswith("{CRYPT}$y$")
    assert alice["sshPublicKey"] == [f'environment="REMOTE_SSH_USER={n["alice"]}" '
                                     f"{ED25519_KEY}"]
    user = await reload_user(n["alice"])
    assert alice["uidNumber"] == [str(user.uid)] and alice["gidNumber"] == [str(user.gid)]
    # a system user carries the root-ssh admin's keys; the admin only their own
    svc = lab.entry(lab.user_dn(n["svc"]))
    assert svc is not None and svc["sshPublicKey"] == [
        f'environment="REMOTE_SSH_USER={n["root"]}" {ED25519_KEY_2}']
    assert "userPassword" not in svc and "shadowExpire" not in svc

    assert lab.members(n["lab"]) == sorted([n["alice"], n["bob"]])
    lab_entry = lab.entry(lab.group_dn(n["lab"]))
    assert lab_entry is not None
    assert sorted(lab_entry["member"]) == sorted(lab.user_dn(n[u]) for u in ("alice", "bob"))
    assert set(lab_entry["objectClass"]) == {"top", "groupOfMembers", "posixGroup"}
    everyone = sorted(n[u] for u in ("alice", "bob", "root", "svc"))
    assert lab.members(n["all"]) == everyone  # sticky
    # bob is inactive at the site: his access list is kept but grants nothing there
    assert lab.members("login-ssh-users") == sorted([n["alice"], n["root"]])
    assert lab.members("slurm-users") == [n["alice"]]
    assert lab.members("root-ssh-users") == [n["root"]]
    assert lab.members("inactive-users") == [n["bob"]]
    assert lab.members("active-users") == sorted([n["alice"], n["root"], n["svc"]])
    assert lab.members(n["alice"]) == []  # personal group: present, no memberUid
    assert lab.members("sudo-users") == []

    keys = {(e["automountKey"][0], e["automountInformation"][0]) for e in lab.search(
        lab.site_dn(), "(objectClass=automount)").values()}
    assert keys == {
        ("/home", lab.map_dn("auto.home")),
        ("/group", f"{lab.map_dn('auto.group')} --ghost"),
        ("/share", lab.map_dn("auto.share")),
        (n["alice"], f"-nosuid,rw nfs1${{HOST_SUFFIX}}:/export/home/{n['alice']}"),
        (n["lab"], f"nfs1${{HOST_SUFFIX}}:/export/group/{n['lab']}"),
        (f"data+raw{lab.k}", f"-ro nfs1${{HOST_SUFFIX}}:/export/share/data{lab.k}"),
    }
    assert lab.entry(f"automountKey=data\\+raw{lab.k},{lab.map_dn('auto.share')}")

    before = lab.dump()
    for scope in ({}, {"full": True}):
        again = await lab.sync(**scope)
        assert again.plan.is_empty, again.plan.as_dict()
        assert again.writes == {} and again.items == []
    assert lab.dump() == before
    runs = await SyncRun.find({"site": lab.site, "target": "ldap"}).to_list()
    assert [r.status for r in runs] == ["ok", "ok", "ok"]
    assert runs[0].counts["writes"] == report.plan.writes


async def test_a_synced_user_binds_with_the_password_set_through_the_cli(
        db, slapd: Slapd, cli, cli_config, tmp_path):
    from ruamel.yaml import YAML

    lab = Lab(db, slapd)
    await lab.make_sites()
    alice = lab.name("alice")
    await make_user(db, alice, site=lab.site)
    yaml = YAML(typ="safe")
    data = yaml.load(cli_config.read_text())
    data["ldap"] = {"default": {**lab.config.model_dump(mode="json", exclude_none=True),
                                "password": lab.slapd.root_password}}
    config = tmp_path / "config.yaml"
    with config.open("w") as fh:
        yaml.dump(data, fh)

    r = await cli("ng", "user", "password", "-u", alice, "--stdin", stdin="first Pass!\n")
    assert r.code == 0, r.stderr
    r = await cli("ng", "ldap", "sync-site", "-s", lab.site, config=config)
    assert r.code == 0, r.stderr
    dn = lab.user_dn(alice)
    assert await check_bind(lab.config, dn, "first Pass!") == f"dn:{dn}"
    with pytest.raises(DirectoryError, match="invalid credentials"):
        await check_bind(lab.config, dn, "wrong")

    r = await cli("ng", "user", "password", "-u", alice, "--stdin", stdin="second Pass!\n")
    assert r.code == 0, r.stderr
    r = await cli("ng", "ldap", "sync-user", "-s", lab.site, "-u", alice, "--json",
                  config=config)
    assert r.code == 0, r.stderr
    assert r.json()["counts"] == {"update users": 1}
    assert await check_bind(lab.config, dn, "second Pass!") == f"dn:{dn}"
    with pytest.raises(DirectoryError):
        await check_bind(lab.config, dn, "first Pass!")


# -- incremental runs -------------------------------------------------------------------------


async def test_an_incremental_run_writes_only_what_changed(lab: Lab):
    n = await populate(lab)
    await lab.sync()
    before = lab.search(lab.users_dn, "(objectClass=*)", "modifyTimestamp", "entryCSN")
    await SetUserShell.run(lab.store, AUTHOR, name=n["bob"], shell="/bin/zsh")
    report = await lab.sync()
    assert [(c.op, c.label) for c in report.plan.changes] == [("modify", f"user {n['bob']}")]
    assert report.plan.changes[0].why == "changed: loginShell"
    assert report.writes == {"modify": 1}
    assert len(report.plan.focus.users) == 1  # only bob was compared
    after = lab.search(lab.users_dn, "(objectClass=*)", "modifyTimestamp", "entryCSN")
    changed = {dn for dn in before if before[dn] != after[dn]}
    assert changed == {lab.user_dn(n["bob"])}
    # membership changes write one value, to one group
    await RemoveGroupMember.run(lab.store, AUTHOR, group=n["lab"], user=n["bob"],
                                site=lab.site)
    report = await lab.sync()
    assert [(c.op, c.label) for c in report.plan.changes] == [("modify", f"group {n['lab']}")]
    assert lab.members(n["lab"]) == [n["alice"]]
    assert (await lab.sync()).plan.is_empty


async def test_drift_made_by_hand_is_repaired(lab: Lab):
    n = await populate(lab)
    await lab.sync()
    alice_dn = lab.user_dn(n["alice"])
    lab.ldapdelete(lab.user_dn(n["bob"]))
    lab.ldapmodify(f"dn: {lab.group_dn(n['lab'])}\nchangetype: modify\nadd: memberUid\n"
                   "memberUid: intruder\n")
    lab.ldapmodify(f"dn: {alice_dn}\nchangetype: modify\nreplace: loginShell\n"
                   "loginShell: /bin/sh\n")
    lab.ldapadd(f"dn: {lab.group_dn('extra')}\nobjectClass: groupOfMembers\n"
                "objectClass: posixGroup\ncn: extra\ngidNumber: 99\n")
    lab.ldapadd(f"dn: automountKey=stale,{lab.map_dn('auto.home')}\nobjectClass: automount\n"
                "automountKey: stale\nautomountInformation: old:/x\n")

    # an incremental run reads only what changed in the store: nothing here ...
    report = await lab.sync()
    assert report.ok and report.plan.is_empty and report.unchanged
    assert lab.entry(lab.user_dn(n["bob"])) is None
    # ... hand-made drift (missing, stray and edited entries) is --full's to repair
    report = await lab.sync(full=True)
    assert sorted((c.op, c.label) for c in report.plan.changes) == [
        ("add", f"user {n['bob']}"), ("delete", "automount auto.home/stale"),
        ("delete", "group extra"), ("modify", f"group {n['lab']}"),
        ("modify", f"user {n['alice']}")]
    assert lab.entry(lab.user_dn(n["bob"])) is not None
    assert lab.entry(lab.group_dn("extra")) is None
    assert lab.members(n["lab"]) == sorted([n["alice"], n["bob"]])
    alice = lab.entry(alice_dn)
    assert alice is not None and alice["loginShell"] == ["/usr/bin/bash"]
    assert (await lab.sync(full=True)).plan.is_empty


async def test_a_full_check_is_due_when_the_last_full_run_is_older_than_the_interval(lab: Lab):
    """The daemon's ``ldap_sync`` runs a full check when none succeeded at the site
    within ``full_every_hours`` (default 24): what bounds hand-made drift in LDAP."""
    from datetime import timedelta

    day = timedelta(hours=24)
    await populate(lab)
    assert await sync.full_check_due(lab.site, day)  # never ran
    await lab.sync()  # the first run lists everything, but was not asked to be full
    assert await sync.full_check_due(lab.site, day)
    await lab.sync(full=True, dry_run=True)  # a dry run repairs nothing: it does not count
    assert await sync.full_check_due(lab.site, day)
    await lab.sync(full=True)
    assert not await sync.full_check_due(lab.site, day)
    assert await sync.full_check_due("elsewhere", day)  # another site: still due
    await asyncio.sleep(2.1)  # whole seconds: sub-second ranges are unreliable (embedded)
    assert await sync.full_check_due(lab.site, timedelta(seconds=1))  # too old now


async def test_a_mid_run_edit_stays_dirty(lab: Lab):
    n = await populate(lab)
    desired = await desired_state(lab.site, lab.config)  # the run reads the store ...
    await SetUserShell.run(lab.store, AUTHOR, name=n["bob"], shell="/bin/zsh")  # ... edit
    stamped, redirtied = await sync.write_watermarks(
        lab.store, desired, [("user", n["bob"]), ("user", n["alice"])])
    assert (stamped, redirtied) == (2, 1)
    assert (await reload_user(n["bob"])).ldap.needs_sync(lab.site)
    assert not (await reload_user(n["alice"])).ldap.needs_sync(lab.site)


# -- isolation, dry run, cap ---------------------------------------------------------------------


async def test_sites_are_isolated(db, slapd: Slapd):
    lab = Lab(db, slapd, sites=2)
    await lab.make_sites()
    a, b = lab.sites
    alice, bob = lab.name("alice"), lab.name("bob")
    await make_user(db, alice, site=a, access=["login-ssh"])
    await AddSiteUser.run(db, AUTHOR, user=alice, site=b)
    await make_user(db, bob, site=b, access=["login-ssh"])
    await lab.sync(a)
    assert lab.entry(lab.site_dn(b)) is None
    assert lab.entry(lab.user_dn(bob)) is None  # not a user of site a
    await lab.sync(b)
    assert lab.members("login-ssh-users", a) == [alice]
    assert lab.members("login-ssh-users", b) == sorted([alice, bob])
    site_a = lab.dump(a)
    # changes and prunes at b leave a alone, and alice's shared entry settles
    await RemoveSiteUser.run(db, AUTHOR, user=alice, site=b)
    lab.ldapadd(f"dn: {lab.group_dn('stray', b)}\nobjectClass: groupOfMembers\n"
                "objectClass: posixGroup\ncn: stray\ngidNumber: 98\n")
    report = await lab.sync(b, full=True)
    assert report.ok and lab.members("login-ssh-users", b) == [bob]
    assert lab.dump(a).split(lab.users_dn, 1)[1] == site_a.split(lab.users_dn, 1)[1]
    assert lab.entry(lab.user_dn(alice)) is not None
    assert (await lab.sync(a)).plan.is_empty


async def test_a_dry_run_leaves_the_directory_byte_identical(lab: Lab):
    n = await populate(lab)
    await lab.sync()
    await make_user(lab.store, lab.name("carol"), site=lab.site)
    await SetUserShell.run(lab.store, AUTHOR, name=n["alice"], shell="/bin/zsh")
    lab.ldapadd(f"dn: {lab.group_dn('extra')}\nobjectClass: groupOfMembers\n"
                "objectClass: posixGroup\ncn: extra\ngidNumber: 97\n")
    before = lab.dump()
    watermarks = {u.name: u.ldap.synced for u in await User.find({}).to_list()}
    report = await lab.sync(dry_run=True, full=True)
    assert report.dry_run and report.plan.writes >= 3 and report.items == []
    assert lab.dump() == before
    assert {u.name: u.ldap.synced for u in await User.find({}).to_list()} == watermarks
    run = await SyncRun.get(report.run_id)
    assert run is not None and run.apply is False and run.status == "ok"
    from cheeto_like.queries.sync_runs import run_items

    stored = await run_items(report.run_id)  # the plan, for the runs page and its drift
    assert [i.command for i in stored] == [str(c) for c in report.plan.changes]
    assert {i.outcome for i in stored} == {"planned"}
    applied = await lab.sync(full=True)  # the same plan, now applied
    assert [(c.op, c.dn) for c in applied.plan.changes] == [
        (c.op, c.dn) for c in report.plan.changes]
    assert sum(applied.writes.values()) == report.plan.writes


async def test_a_prune_over_the_cap_fails_the_run_and_writes_nothing(lab: Lab):
    n = await populate(lab)
    await lab.sync()
    for i in range(3):
        lab.ldapadd(f"dn: {lab.group_dn(f'x{i}')}\nobjectClass: groupOfMembers\n"
                    f"objectClass: posixGroup\ncn: x{i}\ngidNumber: {90 + i}\n")
    await SetUserShell.run(lab.store, AUTHOR, name=n["alice"], shell="/bin/zsh")
    before = lab.dump()
    with pytest.raises(GuardTripped) as caught:  # hand-made strays: --full finds them
        await lab.sync(max_deletions=2, full=True)
    assert caught.value.exit_code == 1
    assert sorted(caught.value.would_delete) == sorted(lab.group_dn(f"x{i}") for i in range(3))
    assert lab.dump() == before  # not even the shell change went out
    assert (await reload_user(n["alice"])).ldap.needs_sync(lab.site)
    run = await SyncRun.find_one({"site": lab.site, "status": "aborted"})
    assert run is not None and len(run.extra["would_delete"]) == 3
    # without the prune the rest goes through, even with no deletions allowed
    report = await sync.sync_site(lab.store, lab.config, lab.site, prune=False,
                                  max_deletions=0)
    assert report.writes == {"modify": 1}
    assert (await lab.sync(max_deletions=3, full=True)).writes == {"delete": 3}


async def test_an_unreachable_server_or_a_wrong_password_writes_nothing(db, slapd: Slapd):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"ldap://127.0.0.1:{sock.getsockname()[1]}"
    for config, code in (({"servers": [closed]}, "unreachable"), ({"password": "nope"}, "auth")):
        lab = Lab(db, slapd, **config)
        await lab.make_sites()
        await make_user(db, lab.name("alice"), site=lab.site)
        with pytest.raises(DirectoryError) as caught:
            await lab.sync()
        assert caught.value.code == code and "\n" not in caught.value.message
        assert lab.entry(lab.site_dn()) is None and lab.entry(lab.users_dn) is None
        assert (await reload_user(lab.name("alice"))).ldap.synced == {}
        run = await SyncRun.find_one({"site": lab.site})
        assert run is not None and run.status == "failed" and run.error == caught.value.message


# -- the reference's defects, fixed -----------------------------------------------------------


async def test_object_classes_are_upgraded_in_place(lab: Lab):
    alice = lab.name("alice")
    await make_user(lab.store, alice, site=lab.site, ssh_key=ED25519_KEY,
                    expires_at=datetime(2030, 1, 1, tzinfo=UTC))
    await lab.sync(kinds=frozenset({"groups"}))  # containers exist, no user yet
    lab.ldapadd(f"dn: {lab.users_dn}\nobjectClass: organizationalUnit\nou: people{lab.k}\n")
    lab.ldapadd(f"dn: {lab.user_dn(alice)}\nobjectClass: inetOrgPerson\n"
                f"objectClass: posixAccount\nuid: {alice}\ncn: Old\nsn: Old\n"
                f"uidNumber: 1\ngidNumber: 1\nhomeDirectory: /old\n")
    uuid = lab.entry(lab.user_dn(alice))["entryUUID"]  # type: ignore[index]
    report = await lab.sync()
    change = next(c for c in report.plan.changes if c.label == f"user {alice}")
    assert change.op == "modify" and change.mods[0].attr == "objectClass"
    entry = lab.entry(lab.user_dn(alice))
    assert entry is not None and entry["entryUUID"] == uuid
    assert {"ldapPublicKey", "shadowAccount"} <= set(entry["objectClass"])
    assert entry["shadowExpire"] == ["21915"] and entry["cn"] == [f"{alice.capitalize()} Tester"]


async def test_a_user_who_leaves_a_site_leaves_its_groups(lab: Lab):
    n = await populate(lab)
    await lab.sync()
    await RemoveSiteUser.run(lab.store, AUTHOR, user=n["alice"], site=lab.site)
    report = await lab.sync()
    assert report.ok
    for group in ("login-ssh-users", "slurm-users", "active-users", n["lab"], n["all"]):
        assert n["alice"] not in lab.members(group, lab.site), group
    # her home storage is still at the site, so her personal group stays (no members)
    assert lab.members(n["alice"]) == []
    assert lab.entry(lab.user_dn(n["alice"])) is not None  # the global entry stays
    assert lab.site not in (await reload_user(n["alice"])).ldap.synced
    assert (await lab.sync()).plan.is_empty


async def test_system_users_root_keys_do_not_depend_on_sync_order(db, slapd: Slapd):
    lab = Lab(db, slapd, sites=2)
    await lab.make_sites()
    a, b = lab.sites
    svc, ra, rb = lab.name("svc"), lab.name("ra"), lab.name("rb")
    await make_user(db, svc, site=a, type="system")
    await AddSiteUser.run(db, AUTHOR, user=svc, site=b)
    await make_user(db, ra, site=a, type="admin", ssh_key=ED25519_KEY)
    await AddUserAccess.run(db, AUTHOR, name=ra, access=["root-ssh"], site=a)
    await make_user(db, rb, site=b, type="admin", ssh_key=ED25519_KEY_2)
    await AddUserAccess.run(db, AUTHOR, name=rb, access=["root-ssh"], site=b)
    expected = sorted([f'environment="REMOTE_SSH_USER={ra}" {ED25519_KEY}',
                       f'environment="REMOTE_SSH_USER={rb}" {ED25519_KEY_2}'])
    for site in (a, b, a, b):
        report = await lab.sync(site)
        assert report.ok
        entry = lab.entry(lab.user_dn(svc))
        assert entry is not None and sorted(entry["sshPublicKey"]) == expected
    # after the first pass, neither site rewrites the shared entry
    assert not [c for c in report.plan.changes if c.label == f"user {svc}"]


async def test_dependencies_redirty_what_they_change(lab: Lab):
    n = await populate(lab)
    await lab.sync()

    # an admin's new key reaches the system user in an incremental run
    await AddUserSshKey.run(lab.store, AUTHOR, name=n["root"], key=ed25519_key(7, "spare"))
    report = await lab.sync()
    assert {c.label for c in report.plan.changes} == {f"user {n['root']}", f"user {n['svc']}"}
    assert len(lab.entry(lab.user_dn(n["svc"]))["sshPublicKey"]) == 2  # type: ignore[index]

    # a user turned into a system user gains the root keys
    await SetUserType.run(lab.store, AUTHOR, name=n["bob"], type="system")
    report = await lab.sync()
    assert [c.label for c in report.plan.changes] == [f"user {n['bob']}"]

    # a new sticky group lists every user of the site
    sticky = lab.name("sticky")
    await make_group(lab.store, sticky)
    await AddStickyGroup.run(lab.store, AUTHOR, site=lab.site, group=sticky)
    await lab.sync()
    assert lab.members(sticky) == sorted(n[u] for u in ("alice", "bob", "root", "svc"))

    # clearing per-site statuses of offboarding users moves them between status groups
    await SetUserStatus.run(lab.store, AUTHOR, name=n["bob"], status="offboarding", reason="t")
    await lab.sync()
    assert n["bob"] in lab.members("inactive-users")  # the site override still wins
    await ClearOffboardingSiteStatuses.run(lab.store, AUTHOR)
    await lab.sync()
    assert n["bob"] in lab.members("offboarding-users")
    assert n["bob"] not in lab.members("inactive-users")

    # a map's options reach its keys (the storage itself did not change), in place
    amap = await AutomountMap.find_one({"name": "auto.home", "site": lab.site})
    assert amap is not None
    key_dn = f"automountKey={n['alice']},{lab.map_dn('auto.home')}"
    uuid = lab.entry(key_dn)["entryUUID"]  # type: ignore[index]
    amap.options = ["rw"]
    await amap.save()
    report = await lab.sync()
    assert [(c.op, c.label) for c in report.plan.changes] == [
        ("modify", f"automount auto.home/{n['alice']}")]
    key = lab.entry(key_dn)
    assert key is not None and key["entryUUID"] == uuid
    assert key["automountInformation"][0].startswith("-rw nfs1")
    assert (await lab.sync()).plan.is_empty


async def test_absent_groups_and_any_map_are_pruned(lab: Lab):
    n = await populate(lab)
    await lab.sync()
    await RemoveGroupMember.run(lab.store, AUTHOR, group=n["lab"], user=n["alice"],
                                site=lab.site)
    await RemoveGroupMember.run(lab.store, AUTHOR, group=n["lab"], user=n["bob"],
                                site=lab.site)
    share = await Storage.find_one({"site": lab.site, "category": "share"})
    group = await Storage.find_one({"site": lab.site, "category": "group"})
    assert share is not None and group is not None
    await share.delete()
    await group.delete()  # the lab group is now used nowhere at the site
    report = await lab.sync()
    assert sorted(c.label for c in report.plan.changes if c.op == "delete") == [
        f"automount auto.group/{n['lab']}", f"automount auto.share/data+raw{lab.k}",
        f"group {n['lab']}"]
    assert lab.entry(lab.group_dn(n["lab"])) is None


async def test_force_recreates_and_counts_as_deletions(lab: Lab):
    n = await populate(lab)
    await lab.sync()
    dn = lab.user_dn(n["alice"])
    uuid = lab.entry(dn)["entryUUID"]  # type: ignore[index]
    with pytest.raises(GuardTripped):
        await lab.sync(force=True, max_deletions=3)
    report = await lab.sync(kinds=frozenset({"users"}), only_users=frozenset({n["alice"]}),
                            force=True)
    assert report.writes == {"delete": 1, "add": 1}
    assert lab.entry(dn)["entryUUID"] != uuid  # type: ignore[index]


async def test_concurrent_writes_give_the_same_directory(db, slapd: Slapd):
    dumps = []
    # 6 and 16 in flight over the default five connections: requests pipeline (2 and 4
    # per connection), and the directory ends the same
    for concurrency in (1, 6, 16):
        lab = Lab(db, slapd)
        await lab.make_sites()
        for i in range(6):
            await make_user(db, lab.name(f"u{i}x"), site=lab.site, access=["login-ssh"])
        report = await lab.sync(concurrency=concurrency)
        assert report.ok
        dumps.append({dn.replace(str(lab.k), "K"): sorted(e.get("memberUid", []))
                      for dn, e in lab.search(lab.site_dn()).items()})
        dumps[-1] = {k: [v.replace(str(lab.k), "K") for v in vs] for k, vs in dumps[-1].items()}
    assert dumps[0] == dumps[1] == dumps[2]


async def test_ignored_records_are_never_written_or_pruned(lab: Lab):
    n = await populate(lab)
    await lab.sync()
    users = User.get_pymongo_collection()
    await users.update_one({"name": n["bob"]}, {"$set": {"ldap.ignore": True}})
    await SetUserShell.run(lab.store, AUTHOR, name=n["bob"], shell="/bin/zsh")
    report = await lab.sync(full=True)
    assert report.plan.is_empty
    bob = lab.entry(lab.user_dn(n["bob"]))
    assert bob is not None and bob["loginShell"] == ["/usr/bin/bash"]


async def test_single_user_and_group_runs(lab: Lab):
    n = await populate(lab)
    await lab.sync()
    await SetUserShell.run(lab.store, AUTHOR, name=n["alice"], shell="/bin/zsh")
    await SetUserShell.run(lab.store, AUTHOR, name=n["bob"], shell="/bin/zsh")
    report = await lab.sync(kinds=frozenset({"users"}), only_users=frozenset({n["alice"]}))
    assert [c.label for c in report.plan.changes] == [f"user {n['alice']}"]
    assert (await reload_user(n["bob"])).ldap.needs_sync(lab.site)
    assert not (await reload_user(n["alice"])).ldap.needs_sync(lab.site)
    clean = await lab.sync(kinds=frozenset({"users"}), only_users=frozenset({n["alice"]}))
    assert clean.plan.is_empty and not clean.plan.focus.users  # skipped: clean
    lab.ldapmodify(f"dn: {lab.group_dn(n['lab'])}\nchangetype: modify\ndelete: memberUid\n"
                   f"memberUid: {n['bob']}\n")
    report = await lab.sync(kinds=frozenset({"groups"}), only_groups=frozenset({n["lab"]}),
                            full=True)
    assert [c.label for c in report.plan.changes] == [f"group {n['lab']}"]
    assert n["bob"] in lab.members(n["lab"])


async def test_escaped_names_round_trip(lab: Lab):
    """A comma in a full name and a plus sign in a share's key are escaped, not refused."""
    n = await populate(lab)
    await lab.sync()
    assert (await lab.sync(full=True)).plan.is_empty  # read back and compared equal
    found = lab.search(lab.map_dn("auto.share"), f"(automountKey=data+raw{lab.k})")
    assert len(found) == 1
    assert lab.search(lab.users_dn, "(cn=Doe\\2c Alice Q)")  # 0x2c = ','
    assert lab.search(lab.users_dn, f"(uid={n['alice']})")


async def test_unknown_names_are_not_found_and_strangers_are_noted(lab: Lab):
    with pytest.raises(NotFound):
        await sync.run(lab.store, lab.config, "nosuchsite", scope=Scope())
    with pytest.raises(NotFound, match="ghost"):
        await lab.sync(kinds=frozenset({"users"}), only_users=frozenset({"ghost"}))
    with pytest.raises(NotFound, match="ghost"):
        await lab.sync(kinds=frozenset({"groups"}), only_groups=frozenset({"ghost"}))
    stranger, unused = lab.name("stranger"), lab.name("unused")
    await make_user(lab.store, stranger)
    await make_group(lab.store, unused)
    report = await lab.sync(kinds=frozenset({"users"}), only_users=frozenset({stranger}))
    assert [c.label for c in report.plan.changes] == [f"ou people{lab.k}"]  # the base only
    assert f"user {stranger} is not on site {lab.site}" in report.plan.notes
    report = await lab.sync(kinds=frozenset({"groups"}), only_groups=frozenset({unused}))
    assert any(f"group {unused} is not used at site" in n for n in report.plan.notes)


async def test_every_root_key_dependency_dirties_the_system_users(db):
    """Each change to who holds root-ssh, or to their keys, marks system users dirty."""
    from cheeto_like.operations.user import RemoveUserAccess, RemoveUserSshKey, RenameUser
    from cheeto_like.queries.user import list_user_ssh_keys

    await make_site(db, "rk")
    await make_user(db, "svc", site="rk", type="system")
    await make_user(db, "boss", type="admin", access=["login-ssh", "root-ssh"])
    users = User.get_pymongo_collection()

    async def clean() -> None:
        async for raw in users.find({}, {"ldap": 1}):  # synced at their versions
            await users.update_one({"_id": raw["_id"]}, {"$set": {
                "ldap.synced_version.rk": raw["ldap"]["version"]}})
        assert not (await reload_user("svc")).ldap.needs_sync("rk")

    steps = [
        lambda: AddSiteUser.run(db, AUTHOR, user="boss", site="rk"),
        lambda: AddUserSshKey.run(db, AUTHOR, name="boss", key=ed25519_key(1, "a")),
        lambda: RemoveUserAccess.run(db, AUTHOR, name="boss", access=["root-ssh"], site="rk"),
        lambda: RemoveUserAccess.run(db, AUTHOR, name="boss", access=["root-ssh"]),
        lambda: AddUserAccess.run(db, AUTHOR, name="boss", access=["root-ssh"]),
        lambda: RenameUser.run(db, AUTHOR, name="boss", new_name="chief"),
        lambda: SetUserType.run(db, AUTHOR, name="chief", type="user"),
        lambda: SetUserType.run(db, AUTHOR, name="chief", type="admin"),
        lambda: RemoveSiteUser.run(db, AUTHOR, user="chief", site="rk"),
    ]
    for number, step in enumerate(steps):
        await clean()
        await step()
        assert (await reload_user("svc")).ldap.needs_sync("rk"), number
    await clean()
    key = (await list_user_ssh_keys("chief"))[0]
    await RemoveUserSshKey.run(db, AUTHOR, name="chief", key_id=key.id)
    assert (await reload_user("svc")).ldap.needs_sync("rk")
    # an ordinary user's key changes nothing for the system users
    await make_user(db, "pleb")
    await clean()
    await AddUserSshKey.run(db, AUTHOR, name="pleb", key=ed25519_key(2, "b"))
    assert not (await reload_user("svc")).ldap.needs_sync("rk")


async def test_a_refused_write_is_reported_the_record_stays_dirty_and_deletes_wait(lab: Lab):
    n = await populate(lab)
    await lab.sync()
    lab.ldapadd(f"dn: {lab.group_dn('extra')}\nobjectClass: groupOfMembers\n"
                "objectClass: posixGroup\ncn: extra\ngidNumber: 96\n")
    zoe = lab.name("zoe")  # homeDirectory is IA5 (ASCII): slapd refuses this one
    await make_user(lab.store, zoe, site=lab.site)
    # CreateUser refuses such a path now; a row from before that check still syncs
    await User.get_pymongo_collection().update_one(
        {"name": zoe}, {"$set": {"home_directory": "/home/zoë"}})
    await SetUserShell.run(lab.store, AUTHOR, name=n["bob"], shell="/bin/zsh")
    report = await lab.sync(full=True)  # --full: it also sees the hand-made group
    assert not report.ok
    assert [(i.targets, i.outcome) for i in report.failed] == [([f"user {zoe}"], "failed")]
    assert "homeDirectory" in report.failed[0].detail
    assert [i.targets for i in report.skipped] == [["group extra"]]
    assert lab.entry(lab.group_dn("extra")) is not None
    assert await sync.needs_sync("user", zoe, lab.site)
    assert not await sync.needs_sync("user", n["bob"], lab.site)  # bob went through
    run = await SyncRun.get(report.run_id)
    assert run is not None and run.status == "failed" and "1 LDAP write(s) failed" in run.error
