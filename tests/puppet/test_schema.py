"""The legacy account schema: what it accepts, what it refuses and how it says so."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from cheeto_like.constants import ID_MAX
from cheeto_like.puppet.merge import merge_files
from cheeto_like.puppet.schema import (
    PuppetAccountMap,
    PuppetValidationError,
    postload_problems,
    validate_accounts,
)
from cheeto_like.puppet.yamlio import loads


def user(**overrides: Any) -> dict[str, Any]:
    record = {"fullname": "Test User", "email": "testuser@example.org", "uid": 1001,
              "gid": 1001}
    record.update(overrides)
    return {k: v for k, v in record.items() if v is not None}


def problems(data: Any, *, partial: bool = False) -> list[str]:
    accounts, found = validate_accounts(data, partial=partial)
    assert (accounts is None) == bool(found)
    return [p.describe() for p in found]


def valid(data: Any, **kwargs: Any) -> PuppetAccountMap:
    accounts, found = validate_accounts(data, **kwargs)
    assert not found, [p.describe() for p in found]
    assert accounts is not None
    return accounts


def test_load_a_user_and_a_group():
    accounts = valid({
        "user": {"testuser": user(groups=["testgroup"], shell="/usr/bin/zsh",
                                  tag=["ssh-tag"], home="/home/testuser",
                                  password="$y$j9T$abc", ensure="present",
                                  membership="minimum",
                                  storage={"zfs": {"quota": "20G"},
                                           "autofs": {"nas": "nas-1.example.org",
                                                      "path": "/export/home"}})},
        "group": {"testgroup": {"gid": 5000, "sponsors": ["testuser"], "tag": ["x"],
                                "storage": [{"name": "lab", "owner": "testuser",
                                             "zfs": False}]}},
        "share": {"genomes": {"storage": {"owner": "testuser", "group": "testgroup",
                                          "zfs": True}}},
        "meta": {"admin_sponsors": ["testuser"]},
    })
    alice = accounts.user["testuser"]
    assert (alice.uid, alice.gid, alice.email) == (1001, 1001, "testuser@example.org")
    assert alice.storage is not None and alice.storage.zfs is not None
    assert accounts.group["testgroup"].gid == 5000
    assert accounts.group["testgroup"].storage[0].globus is False  # the default
    assert accounts.share["genomes"].storage.zfs is True


@pytest.mark.parametrize(("field", "value", "message"), [
    ("email", None, "required but missing"),
    ("email", "not-an-email", "'not-an-email' is not a valid e-mail address"),
    ("uid", "abc", "Input should be a valid integer"),
    ("uid", ID_MAX + 1, f"id {ID_MAX + 1} is outside 0..{ID_MAX}"),
    ("uid", -1, f"id -1 is outside 0..{ID_MAX}"),
    ("uid", True, "expected a number, not true/false"),
    ("gid", 1.5, "Input should be a valid integer"),
    ("shell", "/bin/fish", "shell '/bin/fish' is not allowed"),
    ("home", "relative/home", "is not an absolute path"),
    ("ensure", "gone", "Input should be 'present' or 'absent'"),
    ("expiry", "2025-13-01", "must be a date (YYYY-MM-DD) or 'absent'"),
    ("expiry", "tomorrow", "must be a date (YYYY-MM-DD) or 'absent'"),
    ("groups", ["Lab"], "'Lab' is not a valid user or group name"),
])
def test_bad_user_fields_are_keyed_by_field(field: str, value: Any, message: str):
    data = {"user": {"testuser": user(**{field: value})}}  # None: the field is left out
    [problem] = problems(data)
    where = f"user.testuser.{field}" + (".0" if field == "groups" else "")
    assert problem.startswith(f"{where}: "), problem
    assert message in problem


def test_ids_up_to_the_32_bit_ceiling():
    accounts = valid({"user": {"u": user(uid=ID_MAX, gid=0)}})
    assert accounts.user["u"].uid == ID_MAX


def test_every_problem_is_reported():
    found = problems({"user": {"a": user(uid="x", shell="/bin/fish"), "b": {"uid": 1}}})
    assert found == [
        "user.a.uid: Input should be a valid integer, unable to parse string as an integer",
        "user.a.shell: shell '/bin/fish' is not allowed (choose from /bin/sh, /bin/bash, "
        "/bin/zsh, /usr/bin/sh, /usr/bin/zsh, /usr/bin/bash, "
        "/usr/sbin/nologin-account-disabled, /bin/false, /usr/sbin/nologin)",
        "user.b.fullname: required but missing",
        "user.b.email: required but missing",
        "user.b.gid: required but missing",
    ]


@pytest.mark.parametrize("name", ["alice!!", "Alice", "1abc", "a" * 34, "ab$c", ""])
def test_names_must_be_whole_kerberos_ids(name: str):
    [problem] = problems({"user": {name: user()}})
    assert problem.startswith(f"user.{name}: bad name: ")


@pytest.mark.parametrize("name", ["alice", "_svc", "a-b_c9", "a" * 32, "host1$", "a" * 31 + "$"])
def test_kerberos_ids_accepted(name: str):
    valid({"user": {name: user()}})


def test_unknown_keys_are_errors():
    assert problems({"user": {"alice": user(shel="/bin/bash")}}) == \
        ["user.alice.shel: unknown key"]
    assert problems({"users": {}}) == ["users: unknown key"]


def test_the_top_level_must_be_a_mapping():
    assert problems(["a"]) == ["(top level): expected a mapping, got a list"]


def test_empty_sections_are_allowed():
    accounts = valid(loads("user:\ngroup:\n"))
    assert accounts.user == {} and accounts.group == {}


def test_expiry_accepts_dates_strings_and_absent():
    for value, expected in ((date(2025, 6, 30), "2025-06-30"), ("2025-06-30", "2025-06-30"),
                            ("absent", "absent")):
        assert valid({"user": {"u": user(expiry=value)}}).user["u"].expiry == expected


def test_set_like_lists_are_sorted_and_unique():
    accounts = valid({"user": {"u": user(groups=["b", "a", "b"], tag=["z", "y", "z"])},
                      "group": {"g": {"gid": 1, "sponsors": ["u", "u"]}}})
    assert accounts.user["u"].groups == ["a", "b"] and accounts.user["u"].tag == ["y", "z"]
    assert accounts.group["g"].sponsors == ["u"]


def test_qos_mem_is_normalised_to_megabytes():
    slurm = {"account": ["lab", "gpu"], "max_jobs": 10, "partitions": {
        "high": {"qos": {"group": {"cpus": 64, "gpus": 4, "mem": "1T"},
                         "user": {"mem": "1.5G"}, "job": {"mem": 2048},
                         "priority": 10, "flags": ["NoDecay", "DenyOnLimit"]}},
        "low": {"qos": "shared-qos"}}}
    accounts = valid({"group": {"lab": {"gid": 1, "slurm": slurm}}})
    qos = accounts.group["lab"].slurm.partitions["high"].qos
    assert (qos.group.mem, qos.user.mem, qos.job.mem) == ("1048576M", "1536M", "2048M")
    assert qos.flags == ["DenyOnLimit", "NoDecay"]
    assert accounts.group["lab"].slurm.partitions["low"].qos == "shared-qos"
    assert accounts.group["lab"].slurm.account == ["lab", "gpu"]


@pytest.mark.parametrize(("qos", "where", "message"), [
    ({"group": {"mem": "10X"}}, "group.mem", "invalid quota '10X'"),
    ({"group": {"cpus": -1}}, "group.cpus", "greater than or equal to 0"),
    ({"flags": ["Bogus"]}, "flags.0", "QOS flag 'Bogus' is not one of"),
    ({"grp": {}}, "grp", "unknown key"),
])
def test_bad_qos(qos: dict[str, Any], where: str, message: str):
    data = {"user": {"u": user(slurm={"account": "lab", "partitions": {"p": {"qos": qos}}})}}
    [problem] = problems(data)
    assert problem.startswith(f"user.u.slurm.partitions.p.qos.{where}: "), problem
    assert message in problem


def test_zfs_is_a_quota_or_a_flag():
    valid({"user": {"u": user(storage={"zfs": True})}})
    valid({"user": {"u": user(storage={"zfs": {"quota": "1.5T"}})}})
    assert problems({"user": {"u": user(storage={"zfs": "yes"})}}) == \
        ["user.u.storage.zfs: expected a mapping, got the string 'yes'"]
    assert problems({"user": {"u": user(storage={"zfs": {}})}}) == \
        ["user.u.storage.zfs.quota: required but missing"]


def test_group_storage_entries_are_checked_by_index():
    found = problems({"group": {"g": {"gid": 1, "storage": [
        {"name": "ok", "owner": "alice"},
        {"name": "bad", "owner": "alice", "autofs": {"nas": "nas 1", "path": "/x"}}]}}})
    assert found == ["group.g.storage.1.autofs.nas: 'nas 1' is not a valid host name"]


def test_partial_allows_missing_required_fields_only():
    assert valid({"user": {"alice": {"shell": "/bin/zsh"}}}, partial=True)
    assert problems({"user": {"alice": {"shell": "/bin/fish"}}}, partial=True)[0].startswith(
        "user.alice.shell: shell '/bin/fish' is not allowed")


def test_postload_finds_unknown_sponsors_and_groups():
    accounts = valid({
        "user": {"alice": user(groups=["lab", "bob", "ghost"], group_sudo=["nowhere"]),
                 "bob": user(uid=1002, gid=1002)},
        "group": {"lab": {"gid": 5000, "sponsors": ["alice", "carol"]}},
    })
    assert [p.describe() for p in postload_problems(accounts)] == [
        "group.lab.sponsors: sponsor 'carol' is not a known user",
        "user.alice.groups: group 'ghost' is not a known group",
        "user.alice.group_sudo: group 'nowhere' is not a known group",
    ]


def test_problems_name_the_file_that_set_the_value():
    forest = merge_files("farm", [
        ("farm.yaml", {"user": {"alice": user(groups=["lab"])}}),
        ("farm.site.yaml", {"user": {"alice": {"shell": "/bin/fish", "groups": ["gpu"]}}}),
    ])
    accounts, found = validate_accounts(forest.data)
    assert accounts is None
    assert found[0].describe(forest).startswith(
        "farm.site.yaml: user.alice.shell: shell '/bin/fish' is not allowed")
    accounts = valid(deep := {"user": {"alice": user(groups=["gpu"])}})
    [unknown] = postload_problems(accounts)
    forest = merge_files("farm", [("farm.yaml", {"user": {"alice": user()}}),
                                  ("farm.site.yaml", deep)])
    assert unknown.describe(forest) == \
        "farm.site.yaml: user.alice.groups: group 'gpu' is not a known group"


def test_the_error_carries_every_line():
    err = PuppetValidationError(["a.yaml: x: bad", "a.yaml: y: bad", "b.yaml: z: bad"])
    assert err.message == "a.yaml: x: bad (and 2 more problems)"
    assert err.exit_code == 2 and len(err.lines) == 3
    assert PuppetValidationError(["only"]).message == "only"


def test_dump_round_trips():
    data = {"user": {"alice": user(expiry=date(2030, 1, 1), groups=["lab"],
                                   storage={"zfs": False})},
            "group": {"lab": {"gid": 5000, "slurm": {"partitions": {
                "high": {"qos": {"group": {"mem": "2G"}}}}}}}}
    accounts = valid(data)
    text = accounts.dump()
    assert "zfs: false" in text and "expiry: '2030-01-01'" in text and "mem: 2048M" in text
    again = valid(loads(text))
    assert again == accounts
    assert again.dump() == text
