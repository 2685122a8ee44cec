"""The pure LDAP plan: focus (what a run compares), entry diffs (object class upgrades,
value-by-value membership changes, DN normalisation), existence checks on every run,
per-user membership patches, prune rules, ordering, and the value rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest

from cheeto_like.adapters.ldap import Entry, Mod, normalize_dn
from cheeto_like.config import LDAPConfig
from cheeto_like.sync.ldap.desired import (
    DesiredState,
    Record,
    automount_entry,
    group_entry,
    user_entry,
)
from cheeto_like.sync.ldap.plan import (
    BATCH_ORDER,
    MEMBER_SEARCH_LIMIT,
    ActualState,
    Focus,
    Plan,
    Scope,
    attr_mods,
    entry_mods,
    focus,
    plan,
)
from cheeto_like.sync.ldap.state import (
    EntryState,
    Layout,
    automount_info,
    crypt_value,
    entry,
    map_entry,
    ou_entry,
    shadow_expire,
)

CONFIG = LDAPConfig(servers=["ldap://ldap.example.org"], searchbase="dc=example,dc=org",
                    user_base="ou=people,dc=example,dc=org")
L = Layout.for_site(CONFIG, "farm")
WHEN = datetime(2030, 1, 1, tzinfo=UTC)
SPECIAL = ("login-ssh-users", "active-users")


def mk_user(name: str, *, keys: tuple[str, ...] = (), **fields: Any) -> EntryState:
    values: dict[str, Any] = dict(
        name=name, fullname=f"{name.title()} Tester", surname=None, email=f"{name}@example.org",
        uid=1000 + len(name), gid=1000 + len(name), home_directory=f"/home/{name}",
        shell="/usr/bin/bash", password=None, expires_at=None)
    values.update(fields)
    return user_entry(L, SimpleNamespace(**values), list(keys))  # type: ignore[arg-type]


def mk_group(name: str, *members: str, gid: int = 5000) -> EntryState:
    return group_entry(L, name, gid, set(members))


def mk_key(map_name: str, key: str, info: str = "nfs1${HOST_SUFFIX}:/export/x"
           ) -> EntryState:
    return automount_entry(L, map_name, key, info)


def desired(users: dict[str, EntryState] | None = None,
            groups: dict[str, EntryState] | None = None,
            automounts: dict[tuple[str, str], EntryState] | None = None,
            maps: tuple[str, ...] = ("auto.master", "auto.home"),
            **extra: Any) -> DesiredState:
    users = users or {}
    groups = groups or {}
    automounts = automounts or {}
    records = {("user", n): Record("users", f"id-{n}", WHEN) for n in users}
    records |= {("group", n): Record("groups", f"id-{n}", WHEN) for n in groups}
    records |= {("storage", f"{m}/{k}"): Record("storages", f"id-{m}-{k}", WHEN)
                for m, k in automounts if m != "auto.master"}
    fields: dict[str, Any] = dict(
        site="farm", layout=L, users=users, groups=groups, automounts=automounts,
        maps={m: map_entry(L, m) for m in maps},
        special_groups=frozenset(g for g in groups if g in SPECIAL),
        store_users=frozenset(users), records=records)
    fields.update(extra)
    return DesiredState(**fields)


def as_entry(state: EntryState, **attrs: tuple[str, ...]) -> Entry:
    data: dict[str, tuple[str, ...]] = {"objectclass": tuple(state.classes)}
    for name, values in state.attrs.items():
        data[name.lower()] = tuple(sorted(values))
    data.update({k.lower(): v for k, v in attrs.items()})
    return Entry(state.dn, data)


def converged(want: DesiredState, **overrides: Any) -> ActualState:
    """The directory exactly as ``want`` describes it (everything read in full)."""
    containers = {normalize_dn(dn) for dn in L.containers(("users", "groups", "automounts"))}
    containers |= {normalize_dn(m.dn) for m in want.maps.values()}
    memberships = {}
    for user in set(want.users) | set(want.former_users):
        groups = frozenset(g for g, e in want.groups.items() if user in e.get("memberUid"))
        memberships[user] = (groups, groups)
    fields: dict[str, Any] = dict(
        containers=frozenset(containers),
        user_index={n: as_entry(e) for n, e in want.users.items()},
        users=dict(want.users),
        group_index={n: as_entry(e) for n, e in want.groups.items()},
        groups=dict(want.groups),
        memberships=memberships,
        maps={m: e.dn for m, e in want.maps.items()},
        automounts=dict(want.automounts))
    fields.update(overrides)
    return ActualState(**fields)


FULL = Scope(full=True)
INCREMENTAL = Scope()
WITH_PRUNE = Scope(kinds=frozenset({"users", "groups", "automounts", "prune"}))


def labels(result: Plan) -> list[tuple[str, str, str]]:
    return [(b.label, c.op, c.label) for b in result.batches for c in b.changes]


def only_change(result: Plan):
    changes = result.changes
    assert len(changes) == 1, labels(result)
    return changes[0]


# -- from nothing, and when converged ---------------------------------------------------------


def test_empty_directory_gets_everything_in_dependency_order():
    want = desired({"alice": mk_user("alice")},
                   {"lab": mk_group("lab", "alice"), "active-users": mk_group("active-users")},
                   {("auto.home", "alice"): mk_key("auto.home", "alice"),
                    ("auto.master", "/home"): mk_key("auto.master", "/home",
                                                     L.map_dn("auto.home"))},
                   dirty_users=frozenset({"alice"}))
    result = plan(want, ActualState(), INCREMENTAL)
    order = [label for label, _ in BATCH_ORDER]
    assert [b.label for b in result.batches] == sorted(
        (b.label for b in result.batches), key=order.index)
    assert [c.dn for c in result.batches[0].changes] == [
        L.users, L.site_dn, L.groups, L.automount, L.map_dn("auto.home"),
        L.map_dn("auto.master")]
    assert result.counts == {"add containers": 6, "add users": 1, "add groups": 2,
                             "add automount keys": 2}
    assert result.writes == 11 and result.deletions == []
    lab = next(c for c in result.changes if c.label == "group lab")
    assert lab.entry is not None
    assert lab.entry.get("member") == {L.user_dn("alice")}


def test_converged_directory_plans_nothing_incremental_or_full():
    want = desired({"alice": mk_user("alice", keys=("ssh-ed25519 AAAA a",))},
                   {"lab": mk_group("lab", "alice")},
                   {("auto.home", "alice"): mk_key("auto.home", "alice")},
                   dirty_users=frozenset({"alice"}), dirty_groups=frozenset({"lab"}))
    for scope in (INCREMENTAL, FULL, WITH_PRUNE):
        assert plan(want, converged(want), scope).is_empty


def test_focus_records_are_what_gets_watermarked():
    want = desired({"alice": mk_user("alice"), "bob": mk_user("bob")},
                   {"lab": mk_group("lab", "alice")},
                   {("auto.home", "alice"): mk_key("auto.home", "alice")},
                   dirty_users=frozenset({"alice"}), former_users=frozenset({"carol"}),
                   dirty_automounts=frozenset({("auto.home", "alice")}))
    seen = focus(want, INCREMENTAL)
    assert seen.users == {"alice"} and seen.member_users == {"alice", "carol"}
    assert seen.records == {("user", "alice"), ("user", "carol"),
                            ("storage", "auto.home/alice")}
    everything = focus(want, FULL)
    assert everything.users == {"alice", "bob"} and everything.groups == {"lab"}
    assert everything.read_all_users and everything.read_all_groups


# -- users -------------------------------------------------------------------------------------


def test_a_changed_attribute_is_replaced_alone():
    want = desired({"alice": mk_user("alice", shell="/bin/zsh")},
                   dirty_users=frozenset({"alice"}))
    have = converged(want, users={"alice": mk_user("alice")})
    change = only_change(plan(want, have, INCREMENTAL))
    assert change.op == "modify" and change.mods == (Mod("replace", "loginShell",
                                                          ("/bin/zsh",)),)
    assert change.records == (("user", "alice"),)
    assert change.why == "changed: loginShell"


def test_a_clean_user_is_not_compared_unless_full():
    want = desired({"alice": mk_user("alice", shell="/bin/zsh")})
    have = converged(want, users={"alice": mk_user("alice")})
    assert plan(want, have, INCREMENTAL).is_empty
    assert only_change(plan(want, have, FULL)).op == "modify"


def test_a_missing_user_is_added_even_when_clean():
    want = desired({"alice": mk_user("alice"), "bob": mk_user("bob")})
    have = converged(want, user_index={"bob": as_entry(want.users["bob"])})
    change = only_change(plan(want, have, INCREMENTAL))
    assert (change.op, change.label, change.why) == ("add", "user alice", "missing")
    assert change.records == ()  # not in focus: no watermark for it


def test_missing_auxiliary_classes_are_added_with_the_attributes_they_allow():
    want = desired({"alice": mk_user("alice", expires_at=WHEN, keys=("ssh-ed25519 K a",))},
                   dirty_users=frozenset({"alice"}))
    legacy = EntryState("user", L.user_dn("alice"), ("top", "inetOrgPerson", "posixAccount"),
                        {k: v for k, v in want.users["alice"].attrs.items()
                         if k not in ("shadowExpire", "sshPublicKey")})
    change = only_change(plan(want, converged(want, users={"alice": legacy}), INCREMENTAL))
    assert change.op == "modify"
    assert change.mods[0] == Mod("add", "objectClass", ("ldapPublicKey", "shadowAccount"))
    assert {m.attr for m in change.mods[1:]} == {"sshPublicKey", "shadowExpire"}


def test_object_class_names_compare_case_insensitively():
    want = desired({"alice": mk_user("alice")}, dirty_users=frozenset({"alice"}))
    shouting = EntryState("user", want.users["alice"].dn,
                          tuple(c.upper() for c in want.users["alice"].classes),
                          want.users["alice"].attrs)
    assert plan(want, converged(want, users={"alice": shouting}), INCREMENTAL).is_empty


def test_a_wrong_structural_class_means_recreate_which_counts_as_a_deletion():
    want = desired(groups={"lab": mk_group("lab", "x")}, dirty_groups=frozenset({"lab"}))
    legacy = EntryState("group", L.group_dn("lab"), ("top", "groupOfNames", "posixGroup"),
                        want.groups["lab"].attrs)
    result = plan(want, converged(want, groups={"lab": legacy}), INCREMENTAL)
    change = only_change(result)
    assert change.op == "recreate" and "groupOfMembers" in change.why
    assert result.deletions == [L.group_dn("lab")] and result.writes == 2


def test_force_recreates_entries_in_focus():
    want = desired({"alice": mk_user("alice"), "bob": mk_user("bob")})
    result = plan(want, converged(want), Scope(force=True, only_users=frozenset({"alice"}),
                                               kinds=frozenset({"users"})))
    assert labels(result) == [("recreate users", "recreate", "user alice")]


@pytest.mark.parametrize(("before", "after", "mods"), [
    ("$y$j9T$a$b", None, [Mod("delete", "userPassword")]),
    (None, "$y$j9T$a$b", [Mod("replace", "userPassword", ("{CRYPT}$y$j9T$a$b",))]),
    ("$y$old", "$y$new", [Mod("replace", "userPassword", ("{CRYPT}$y$new",))]),
])
def test_password_is_set_replaced_and_cleared(before, after, mods):
    want = desired({"alice": mk_user("alice", password=after)}, dirty_users=frozenset({"alice"}))
    have = converged(want, users={"alice": mk_user("alice", password=before)})
    assert list(only_change(plan(want, have, INCREMENTAL)).mods) == mods


def test_ssh_keys_are_replaced_as_a_set_and_cleared_when_gone():
    want = desired({"alice": mk_user("alice", keys=("k2", "k3"))},
                   dirty_users=frozenset({"alice"}))
    have = converged(want, users={"alice": mk_user("alice", keys=("k1", "k2"))})
    assert only_change(plan(want, have, INCREMENTAL)).mods == (
        Mod("replace", "sshPublicKey", ("k2", "k3")),)
    none = desired({"alice": mk_user("alice")}, dirty_users=frozenset({"alice"}))
    assert only_change(plan(none, have, INCREMENTAL)).mods == (Mod("delete", "sshPublicKey"),)


def test_change_descriptions_never_show_the_password():
    want = desired({"alice": mk_user("alice", password="$y$secret")})
    result = plan(want, ActualState(), INCREMENTAL)
    assert "$y$secret" not in repr(result.as_dict())


def test_only_users_leaves_everyone_else_alone():
    want = desired({"alice": mk_user("alice"), "bob": mk_user("bob")},
                   {"lab": mk_group("lab", "alice", "bob")},
                   dirty_users=frozenset({"alice", "bob"}))
    result = plan(want, ActualState(), Scope(kinds=frozenset({"users"}),
                                             only_users=frozenset({"alice"})))
    assert [c.label for c in result.changes if c.op != "add" or "user" in c.label] == [
        "user alice"]
    assert any("group lab is missing" in n for n in result.notes)


# -- groups and memberships -----------------------------------------------------------------


def test_a_dirty_group_gets_its_member_values_patched_not_rewritten():
    want = desired(groups={"lab": mk_group("lab", "alice", "carol")},
                   dirty_groups=frozenset({"lab"}))
    have = converged(want, groups={"lab": mk_group("lab", "alice", "bob")})
    change = only_change(plan(want, have, INCREMENTAL))
    assert change.mods == (Mod("delete", "memberUid", ("bob",)),
                           Mod("add", "memberUid", ("carol",)),
                           Mod("delete", "member", (L.user_dn("bob"),)),
                           Mod("add", "member", (L.user_dn("carol"),)))


def test_member_dns_compare_normalised():
    want = desired(groups={"lab": mk_group("lab", "alice")}, dirty_groups=frozenset({"lab"}))
    shouted = EntryState("group", L.group_dn("lab"), want.groups["lab"].classes, {
        **want.groups["lab"].attrs,
        "member": frozenset({"UID=alice, OU=People,DC=example,DC=org"})})
    assert plan(want, converged(want, groups={"lab": shouted}), INCREMENTAL).is_empty


def test_a_group_losing_its_last_member_drops_both_attributes():
    want = desired(groups={"lab": mk_group("lab")}, dirty_groups=frozenset({"lab"}))
    have = converged(want, groups={"lab": mk_group("lab", "alice")})
    assert only_change(plan(want, have, INCREMENTAL)).mods == (
        Mod("delete", "memberUid"), Mod("delete", "member"))


def test_a_dirty_user_joining_a_clean_group_adds_only_their_values():
    want = desired({"alice": mk_user("alice")}, {"lab": mk_group("lab", "alice", "bob")},
                   dirty_users=frozenset({"alice"}))
    have = converged(want, memberships={"alice": (frozenset(), frozenset())})
    change = only_change(plan(want, have, INCREMENTAL))
    assert (change.op, change.label) == ("modify", "group lab")
    assert change.mods == (Mod("add", "memberUid", ("alice",)),
                           Mod("add", "member", (L.user_dn("alice"),)))
    assert change.records == (("user", "alice"),)


def test_only_the_missing_half_of_a_membership_is_added():
    want = desired({"alice": mk_user("alice")}, {"lab": mk_group("lab", "alice")},
                   dirty_users=frozenset({"alice"}))
    have = converged(want, memberships={"alice": (frozenset({"lab"}), frozenset())})
    assert only_change(plan(want, have, INCREMENTAL)).mods == (
        Mod("add", "member", (L.user_dn("alice"),)),)


def test_a_user_who_left_the_site_leaves_its_access_and_status_groups():
    want = desired({"bob": mk_user("bob")},
                   {"login-ssh-users": mk_group("login-ssh-users", "bob"),
                    "active-users": mk_group("active-users", "bob")},
                   former_users=frozenset({"alice"}))
    listed = frozenset({"login-ssh-users", "active-users"})
    have = converged(want, memberships={"alice": (listed, listed)})
    result = plan(want, have, INCREMENTAL)
    assert sorted(c.label for c in result.changes) == ["group active-users",
                                                       "group login-ssh-users"]
    for change in result.changes:
        assert change.mods == (Mod("delete", "memberUid", ("alice",)),
                               Mod("delete", "member", (L.user_dn("alice"),)))
        assert change.records == (("user", "alice"),)


def test_membership_patches_of_several_users_merge_into_one_write_per_group():
    names = ["u1", "u2", "u3"]
    want = desired({n: mk_user(n) for n in names}, {"big": mk_group("big", *names)},
                   dirty_users=frozenset(names))
    have = converged(want, memberships={n: (frozenset(), frozenset()) for n in names})
    change = only_change(plan(want, have, INCREMENTAL))
    assert change.mods[0] == Mod("add", "memberUid", ("u1", "u2", "u3"))
    assert set(change.records) == {("user", n) for n in names}


def test_no_patch_for_a_group_compared_in_full_or_about_to_be_pruned():
    want = desired({"alice": mk_user("alice")}, {"lab": mk_group("lab", "alice")},
                   dirty_users=frozenset({"alice"}), dirty_groups=frozenset({"lab"}))
    stray = as_entry(mk_group("old", "alice"))
    have = converged(want, groups={"lab": mk_group("lab")},
                     group_index={"lab": as_entry(mk_group("lab")), "old": stray},
                     memberships={"alice": (frozenset({"old"}), frozenset({"old"}))})
    result = plan(want, have, WITH_PRUNE)
    assert labels(result) == [("update groups", "modify", "group lab"),
                              ("delete groups", "delete", "group old")]
    # without prune, the stray group just loses the user
    kept = plan(want, have, INCREMENTAL)
    assert ("update groups", "modify", "group old") in labels(kept)


def test_many_member_users_read_every_group_once():
    names = [f"u{i}" for i in range(MEMBER_SEARCH_LIMIT + 1)]
    want = desired({n: mk_user(n) for n in names}, dirty_users=frozenset(names))
    assert focus(want, INCREMENTAL).read_all_groups
    assert not focus(desired({"a": mk_user("a")}, dirty_users=frozenset({"a"})),
                     INCREMENTAL).read_all_groups


def test_bootstrap_creates_containers_and_special_groups_only():
    want = desired({"alice": mk_user("alice")},
                   {"active-users": mk_group("active-users", "alice"), "lab": mk_group("lab")},
                   dirty_users=frozenset({"alice"}), dirty_groups=frozenset({"lab"}))
    result = plan(want, ActualState(), Scope(bootstrap=True))
    assert [c.label for c in result.changes] == [
        "ou people", "ou farm", "ou groups", "ou automount", "map auto.home",
        "map auto.master", "group active-users"]
    assert focus(want, Scope(bootstrap=True)) == Focus()
    assert plan(want, converged(want), Scope(bootstrap=True)).is_empty


def test_only_groups_compares_that_group_alone():
    want = desired(groups={"a": mk_group("a", "x"), "b": mk_group("b", "y")})
    have = converged(want, groups={"a": mk_group("a"), "b": mk_group("b")})
    result = plan(want, have, Scope(kinds=frozenset({"groups"}), full=True,
                                    only_groups=frozenset({"a"})))
    assert labels(result) == [("update groups", "modify", "group a")]


# -- automount --------------------------------------------------------------------------------


def test_changed_automount_information_is_modified_in_place():
    key = ("auto.home", "alice")
    want = desired(automounts={key: mk_key(*key, "-rw nfs2:/x")},
                   dirty_automounts=frozenset({key}))
    have = converged(want, automounts={key: mk_key(*key, "nfs1:/x")})
    change = only_change(plan(want, have, INCREMENTAL))
    assert change.op == "modify"
    assert change.mods == (Mod("replace", "automountInformation", ("-rw nfs2:/x",)),)


def test_prune_deletes_stale_keys_and_maps_of_any_name_but_keeps_ignored_ones():
    keep = ("auto.home", "alice")
    want = desired(automounts={keep: mk_key(*keep)},
                   ignored_automounts=frozenset({("auto.share", "frozen")}),
                   maps=("auto.master", "auto.home", "auto.share"))
    have = converged(want, automounts={
        keep: mk_key(*keep), ("auto.share", "old+data"): mk_key("auto.share", "old+data"),
        ("auto.share", "frozen"): mk_key("auto.share", "frozen"),
        ("auto.gone", "x"): mk_key("auto.gone", "x")},
        maps={"auto.master": L.map_dn("auto.master"), "auto.home": L.map_dn("auto.home"),
              "auto.share": L.map_dn("auto.share"), "auto.gone": L.map_dn("auto.gone")})
    result = plan(want, have, WITH_PRUNE)
    assert labels(result) == [
        ("delete automount keys", "delete", "automount auto.gone/x"),
        ("delete automount keys", "delete", "automount auto.share/old+data"),
        ("delete automount maps", "delete", "map auto.gone")]
    assert result.changes[1].dn.startswith("automountKey=old\\+data,")
    assert plan(want, have, INCREMENTAL).is_empty  # no prune, no deletes


def test_a_moved_master_key_is_added_and_the_old_one_pruned():
    old, new = ("auto.master", "/home"), ("auto.master", "/homes")
    want = desired(automounts={new: mk_key(*new, L.map_dn("auto.home"))},
                   dirty_automounts=frozenset({new}))
    have = converged(want, automounts={old: mk_key(*old, L.map_dn("auto.home"))})
    assert labels(plan(want, have, WITH_PRUNE)) == [
        ("add automount keys", "add", "automount auto.master//homes"),
        ("delete automount keys", "delete", "automount auto.master//home")]


# -- prune ------------------------------------------------------------------------------------


def test_prune_users_only_those_missing_from_the_whole_store():
    want = desired({"alice": mk_user("alice")},
                   store_users=frozenset({"alice", "elsewhere"}))
    index = {n: as_entry(mk_user(n)) for n in ("alice", "elsewhere", "ghost", "admin")}
    index["service"] = Entry(f"uid=service,{L.users}",
                             {"objectclass": ("top", "account"), "uid": ("service",)})
    result = plan(want, converged(want, user_index=index), WITH_PRUNE)
    assert labels(result) == [("delete users", "delete", "user ghost")]


def test_prune_groups_absent_from_the_site_but_not_ignored_or_foreign_entries():
    want = desired(groups={"lab": mk_group("lab")}, ignored_groups=frozenset({"frozen"}))
    index = {n: as_entry(mk_group(n)) for n in ("lab", "frozen", "left-site")}
    index["note"] = Entry(f"cn=note,{L.groups}", {"objectclass": ("top", "groupOfMembers")})
    result = plan(want, converged(want, group_index=index), WITH_PRUNE)
    assert labels(result) == [("delete groups", "delete", "group left-site")]


def test_prune_scope_limits_what_is_deleted():
    want = desired()
    have = converged(want, group_index={"g": as_entry(mk_group("g"))},
                     user_index={"u": as_entry(mk_user("u"))})
    only_groups = Scope(kinds=frozenset({"prune"}), prune=frozenset({"groups"}))
    assert labels(plan(want, have, only_groups)) == [("delete groups", "delete", "group g")]


def test_deletes_come_last_and_are_all_counted():
    want = desired({"new": mk_user("new")}, dirty_users=frozenset({"new"}))
    have = converged(desired(), user_index={"gone": as_entry(mk_user("gone"))},
                     group_index={"g": as_entry(mk_group("g"))})
    result = plan(want, have, WITH_PRUNE)
    assert [b.label for b in result.batches] == ["add users", "delete groups", "delete users"]
    assert len(result.deletions) == 2


# -- value rules and escaping -----------------------------------------------------------------


def test_user_entry_values():
    alice = mk_user("alice", fullname="Doe, Jane Q", surname=None, password="$y$j9T$s$h",
                    expires_at=datetime(2030, 1, 1), keys=("tagged key",))
    assert alice.dn == "uid=alice,ou=people,dc=example,dc=org"
    assert alice.get("cn") == alice.get("displayName") == {"Doe, Jane Q"}
    assert alice.get("sn") == {"Q"}
    assert alice.get("userPassword") == {"{CRYPT}$y$j9T$s$h"}
    assert alice.get("shadowExpire") == {"21915"}
    assert alice.classes == ("top", "inetOrgPerson", "posixAccount", "ldapPublicKey",
                             "shadowAccount")
    bare = mk_user("bob", surname="Builder")
    assert bare.get("sn") == {"Builder"}
    assert "userPassword" not in bare.as_ldap() and "shadowExpire" not in bare.as_ldap()
    assert "sshPublicKey" not in bare.as_ldap()


def test_value_rules():
    assert crypt_value("$y$abc") == "{CRYPT}$y$abc"
    assert crypt_value("{SSHA}xyz") == "{SSHA}xyz"
    assert shadow_expire(None) is None
    assert shadow_expire(datetime(2030, 1, 1)) == 21915
    assert shadow_expire(datetime(2030, 1, 1, tzinfo=UTC)) == 21915
    pacific = timezone(timedelta(hours=-8))
    assert shadow_expire(datetime(2029, 12, 31, 20, 0, tzinfo=pacific)) == 21915
    assert automount_info("nfs", "/srv/home/a", ["rw", "nosuid"], "${HOST_SUFFIX}") == \
        "-rw,nosuid nfs${HOST_SUFFIX}:/srv/home/a"
    assert automount_info("nfs", "/srv/x", [], "") == "nfs:/srv/x"


def test_layout_escapes_every_name():
    layout = Layout.for_site(CONFIG.model_copy(update={"groups_ou": "posix groups"}), "farm")
    assert layout.group_dn("lab") == "cn=lab,ou=posix groups,ou=farm,dc=example,dc=org"
    assert layout.key_dn("auto.share", "a+b") == (
        "automountKey=a\\+b,automountMapName=auto.share,ou=automount,ou=farm,"
        "dc=example,dc=org")
    assert layout.key_dn("auto.master", "/home").startswith("automountKey=/home,")
    assert layout.containers(["users"]) == ["ou=people,dc=example,dc=org"]
    other = Layout.for_site(CONFIG.model_copy(update={"user_base": "cn=users,dc=x"}), "farm")
    assert other.containers(["users"]) == []  # only an ou= base is created
    assert ou_entry("ou=a\\,b,dc=x").get("ou") == {"a,b"}


def test_attr_mods_and_entry_helpers():
    assert attr_mods("cn", frozenset({"A"}), frozenset({"A"})) == []
    assert attr_mods("cn", frozenset(), frozenset({"A"})) == [Mod("delete", "cn")]
    assert attr_mods("memberUid", frozenset({"a"}), frozenset()) == [
        Mod("replace", "memberUid", ("a",))]
    e = entry("group", "cn=g,dc=x", ("top",), {"cn": ["g"], "memberUid": [], "gidNumber": [7]})
    assert dict(e.attrs) == {"cn": {"g"}, "gidNumber": {"7"}}
    mods, recreate = entry_mods(mk_group("g"), EntryState("group", "cn=g", ("top",), {}))
    assert recreate and mods == []
