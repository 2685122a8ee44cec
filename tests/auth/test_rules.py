"""``auth.rules.can``: the pure authorisation rules, case by case (no store)."""

from __future__ import annotations

import pytest

from cheeto_like.auth import rules
from cheeto_like.auth.principal import STATIC_KEY, Principal, machine
from cheeto_like.auth.rules import Target, can


def person(name: str, *roles: str, managed: tuple[str, ...] = (),
           member_of: tuple[str, ...] = ()) -> Principal:
    return Principal(name=name, roles=frozenset({"user", *roles}),
                     managed=frozenset(managed), member_of=frozenset(member_of))


ALICE = person("alice", member_of=("lab",))
MONA = person("mona", "manager", managed=("lab",))
OLGA = person("olga", "operator")
ADAM = person("adam", "admin")
ALICE_T = Target(user="alice", accounts=frozenset({"lab"}))
BOB_T = Target(user="bob", accounts=frozenset({"proj"}))


def test_nobody_may_do_anything():
    assert not any(can(None, action) for action in rules.ACTIONS)


def test_a_user_reads_their_own_data_only():
    for action in (rules.USER_READ, rules.USAGE_READ, rules.QUOTA_READ):
        assert can(ALICE, action, ALICE_T)
        assert not can(ALICE, action, BOB_T)
    assert can(ALICE, rules.GROUP_READ, Target(account="lab"))
    assert not can(ALICE, rules.GROUP_READ, Target(account="proj"))
    assert can(ALICE, rules.ME) and can(ALICE, rules.SITE_READ)
    assert can(ALICE, rules.SETTINGS_READ)
    for action in (rules.USER_LIST, rules.QUOTA_WRITE, rules.SYNC_READ, rules.ROLE_READ,
                   rules.KEY_WRITE, rules.PUPPET_READ, rules.GROUP_LIST, rules.TOKENS_REVOKE):
        assert not can(ALICE, action), action
    assert not can(ALICE, rules.TOKENS_REVOKE, ALICE_T)  # an admin's act, even on oneself
    assert not can(ALICE, rules.USAGE_READ)  # site-wide


def test_a_manager_reads_their_accounts_and_their_members():
    assert can(MONA, rules.USER_READ, ALICE_T)
    assert not can(MONA, rules.USER_READ, BOB_T)
    assert can(MONA, rules.USAGE_READ, Target(account="lab"))
    assert not can(MONA, rules.USAGE_READ, Target(account="proj"))
    assert not can(MONA, rules.QUOTA_WRITE)
    assert rules.visible_accounts(MONA) == frozenset({"lab"})


def test_operator_reads_everything_and_writes_quotas_but_not_roles():
    for action in (rules.USER_LIST, rules.USER_READ, rules.USAGE_READ, rules.QUOTA_WRITE,
                   rules.SYNC_READ, rules.PUPPET_READ, rules.GROUP_LIST):
        assert can(OLGA, action, BOB_T), action
    for action in (rules.ROLE_READ, rules.ROLE_WRITE, rules.KEY_READ, rules.KEY_WRITE,
                   rules.TOKENS_REVOKE):
        assert not can(OLGA, action)
    assert rules.visible_accounts(OLGA) is None


def test_admin_does_everything_a_person_can():
    assert all(can(ADAM, action, BOB_T) for action in rules.ACTIONS)


def test_keys_act_by_scope():
    puppet = machine("puppet", ["puppet:read"])
    reader = machine("monitor", ["api:read"])
    writer = machine("billing", ["quota:write"])
    assert can(puppet, rules.PUPPET_READ) and not can(puppet, rules.USER_LIST)
    assert can(STATIC_KEY, rules.PUPPET_READ) and not can(STATIC_KEY, rules.SITE_READ)
    assert can(reader, rules.USER_LIST) and can(reader, rules.USAGE_READ, BOB_T)
    assert not can(reader, rules.QUOTA_WRITE) and not can(reader, rules.PUPPET_READ)
    assert can(writer, rules.QUOTA_WRITE) and not can(writer, rules.USER_READ, BOB_T)
    for key in (puppet, reader, writer):
        assert not any(can(key, a) for a in (rules.ROLE_WRITE, rules.KEY_WRITE, rules.ME,
                                             rules.TOKENS_REVOKE))


def test_unknown_actions_are_a_bug():
    with pytest.raises(ValueError, match="unknown action"):
        can(ADAM, "everything:write")


def test_requests_follow_the_cli_workflow():
    sam = person("sam", "manager", managed=("proj",))  # a sponsor of proj
    mine = Target(people=frozenset({"alice"}), account="lab")
    theirs = Target(people=frozenset({"bob"}), account="proj")
    # everyone signed in may list (rows are then checked one by one)
    assert all(can(p, rules.REQUEST_LIST) for p in (ALICE, MONA, OLGA, ADAM, sam))
    # the requester (or the person it is for) reads and comments; so does the group's
    # manager or sponsor; operators read everything
    for action in (rules.REQUEST_READ, rules.REQUEST_COMMENT):
        assert can(ALICE, action, mine) and not can(ALICE, action, theirs)
        assert can(sam, action, theirs) and not can(sam, action, mine)
        assert can(MONA, action, mine) and can(OLGA, action, theirs)
    assert can(OLGA, rules.REQUEST_READ) and not can(ALICE, rules.REQUEST_READ)
    # filing: for oneself, for a group one belongs to (its quota or storage), or as its
    # manager for someone else
    assert can(ALICE, rules.REQUEST_FILE, Target(user="alice", account="proj"))
    assert can(ALICE, rules.REQUEST_FILE, Target(account="lab"))
    assert not can(ALICE, rules.REQUEST_FILE, Target(account="proj"))
    assert not can(ALICE, rules.REQUEST_FILE, Target(user="bob", account="lab"))
    assert can(sam, rules.REQUEST_FILE, Target(user="newbie", account="proj"))
    assert can(OLGA, rules.REQUEST_FILE, Target(user="bob", account="proj"))
    # deciding: the group's managers and sponsors, and operators (the step is the
    # operation's check); never the requester as such
    assert can(sam, rules.REQUEST_DECIDE, theirs) and not can(sam, rules.REQUEST_DECIDE, mine)
    assert not can(ALICE, rules.REQUEST_DECIDE, mine)
    assert can(OLGA, rules.REQUEST_DECIDE, mine) and can(ADAM, rules.REQUEST_DECIDE, mine)
    # keys: api:read reads the queue, nothing writes
    reader = machine("monitor", ["api:read"])
    assert can(reader, rules.REQUEST_LIST) and can(reader, rules.REQUEST_READ, theirs)
    for action in (rules.REQUEST_FILE, rules.REQUEST_DECIDE, rules.REQUEST_COMMENT):
        assert not can(reader, action, theirs)
        assert not can(machine("w", ["quota:write"]), action, theirs)
