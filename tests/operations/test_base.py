"""The Operation base: the registry, argument validation before any I/O, one History row
per committed operation, nothing at all written by a failed one, composition with
``within``, and the translation of store errors into typed errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo.errors import DuplicateKeyError

from cheeto_like.errors import AlreadyExists, InvalidInput, NotFound
from cheeto_like.models import History, Site, User
from cheeto_like.operations import OPERATIONS, Operation, get_operation, operation_names
from cheeto_like.operations.base import OpArgs, describe_duplicate
from cheeto_like.operations.site import CreateSite
from cheeto_like.operations.user import CreateSystemUser, CreateUser

from ..factories import AUTHOR, history, make_site, snapshot


@pytest.fixture
def probe_op() -> Iterator[type[Operation]]:
    """An operation that inserts a site and then a duplicate of it (registered only for
    the test)."""

    class InsertTwice(Operation):
        op_name = "test_insert_twice"

        class Args(OpArgs):
            name: str

        async def execute(self, session: Any) -> None:
            await Site(name=self.args.name, fqdn="a.example.org").insert(session=session)
            await User(name="probe", email="p@example.org", uid=1, gid=1, fullname="P",
                       home_directory="/home/probe").insert(session=session)
            await Site(name=self.args.name, fqdn="b.example.org").insert(session=session)

    try:
        yield InsertTwice
    finally:
        OPERATIONS.pop("test_insert_twice", None)


# -- registry --------------------------------------------------------------------------------


def test_every_registered_operation_is_under_its_own_name():
    assert OPERATIONS
    for name, cls in OPERATIONS.items():
        assert cls.op_name == name
        assert issubclass(cls, Operation)


def test_operation_names_are_sorted_and_unique():
    names = operation_names()
    assert names == sorted(set(names))
    for expected in ("create_user", "create_site", "rename_user", "rename_group",
                     "set_user_status", "add_group_member", "seed_access_status_groups"):
        assert expected in names


def test_every_concrete_operation_subclass_is_registered():
    def subclasses(cls: type) -> Iterator[type]:
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    for cls in subclasses(Operation):
        if "op_name" in cls.__dict__ and not cls.op_name.startswith("test_"):
            assert OPERATIONS.get(cls.op_name) is cls


def test_get_operation_by_name():
    assert get_operation("create_user") is CreateUser
    with pytest.raises(InvalidInput, match="unknown operation 'nope'"):
        get_operation("nope")


def test_a_duplicate_op_name_is_refused_at_class_creation():
    with pytest.raises(TypeError, match="duplicate op_name 'create_user'"):
        class Again(Operation):
            op_name = "create_user"
    assert OPERATIONS["create_user"] is CreateUser


# -- arguments -------------------------------------------------------------------------------


async def test_unknown_argument_is_invalid_input_before_any_io(empty_db):
    with pytest.raises(InvalidInput, match="unknown key"):
        await CreateSite.run(empty_db, AUTHOR, name="farm", fqdn="farm.example.org", colour="red")
    assert await history() == []


async def test_missing_argument_names_the_field(empty_db):
    with pytest.raises(InvalidInput) as info:
        await CreateSite.run(empty_db, AUTHOR, name="farm")
    assert str(info.value) == "fqdn: required but missing"


async def test_invalid_argument_is_one_line_naming_the_field(empty_db):
    with pytest.raises(InvalidInput) as info:
        await CreateSite.run(empty_db, AUTHOR, name="Farm!", fqdn="farm.example.org")
    assert str(info.value).startswith("name: site name 'Farm!'")
    assert "\n" not in str(info.value)


def test_args_are_immutable():
    args = CreateSite.parse_args(name="farm", fqdn="farm.example.org")
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen-instance error
        args.name = "hive"


# -- History ---------------------------------------------------------------------------------


async def test_committed_operation_writes_one_history_row(empty_db):
    await make_site(empty_db, "farm")
    rows = await history()
    assert len(rows) == 1
    row = rows[0]
    assert (row.op, row.author) == ("create_site", AUTHOR)
    assert row.changes == {"site": "farm", "fqdn": "farm.example.org"}
    assert row.timestamp.tzinfo is not None
    json.dumps(row.changes)  # JSON-able


async def test_author_may_be_none(empty_db):
    await CreateSite.run(empty_db, None, name="farm", fqdn="farm.example.org")
    assert (await history())[0].author is None


async def test_skip_history_commits_without_a_row(empty_db):
    await CreateSite.run(empty_db, AUTHOR, skip_history=True, name="farm",
                         fqdn="farm.example.org")
    assert await Site.find_one(Site.name == "farm") is not None
    assert await history() == []


async def test_failed_operation_writes_nothing(empty_db):
    await make_site(empty_db, "farm")
    before = await snapshot()
    with pytest.raises(AlreadyExists):
        await make_site(empty_db, "farm")
    assert await snapshot() == before


async def test_duplicate_key_inside_an_operation_is_already_exists_and_rolls_back(
        empty_db, probe_op):
    with pytest.raises(AlreadyExists) as info:
        await probe_op.run(empty_db, AUTHOR, name="farm")
    assert "site" in str(info.value) and "name" in str(info.value)
    assert await Site.count() == 0
    assert await User.count() == 0
    assert await History.count() == 0


async def test_describe_duplicate_names_the_collection_and_key(empty_db):
    await User(name="alice", email="a@example.org", uid=1, gid=1, fullname="A",
               home_directory="/home/alice").insert()
    with pytest.raises(DuplicateKeyError) as info:
        await User(name="alice", email="b@example.org", uid=2, gid=2, fullname="B",
                   home_directory="/home/alice").insert()
    text = describe_duplicate(info.value)
    assert text.startswith(("user with name=alice", "a user with the same name"))


# -- composition -----------------------------------------------------------------------------


async def test_within_shares_the_parent_transaction_and_history_row(db):
    user, group = await CreateSystemUser.run(db, AUTHOR, name="svc")
    assert (user.name, group.name) == ("svc", "svc")
    assert [r.op for r in await history()] == ["create_system_user"]


async def test_typed_errors_carry_exit_codes_and_http_statuses():
    assert (InvalidInput("x").exit_code, InvalidInput("x").http_status) == (2, 422)
    assert (NotFound("x").exit_code, NotFound("x").http_status) == (2, 404)
    assert AlreadyExists("x").http_status == 409
