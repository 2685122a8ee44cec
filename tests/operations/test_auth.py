"""Role and API key operations: History rows without secrets, refusals that write
nothing, manager accounts merged and removed one by one, rotation's overlap; a person's
token version (what ends their tokens) moved by a revoke and a password change."""

from __future__ import annotations

import time

import pytest

from cheeto_like.auth.apikeys import find_key
from cheeto_like.errors import AlreadyExists, Conflict, InvalidInput, NotFound
from cheeto_like.models import ApiKey, History, RoleGrant, User
from cheeto_like.operations.auth import (
    CreateApiKey,
    GrantRole,
    RevokeApiKey,
    RevokeRole,
    RevokeUserTokens,
    RotateApiKey,
)
from cheeto_like.operations.user import RenameUser, SetUserPassword
from cheeto_like.queries.auth import audit_api_keys, list_roles
from tests.factories import AUTHOR, make_group, make_user


@pytest.fixture
async def people(db):  # type: ignore[no-untyped-def]
    await make_user(db, "mona")
    await make_group(db, "lab")
    await make_group(db, "proj")
    return db


async def test_manager_grants_merge_and_shrink(people):  # type: ignore[no-untyped-def]
    await GrantRole.run(people, AUTHOR, user="mona", role="manager", accounts=["lab"])
    await GrantRole.run(people, AUTHOR, user="mona", role="manager", accounts=["proj"])
    grant = await RoleGrant.find_one({"user": "mona"})
    assert grant is not None and grant.accounts == ["lab", "proj"]
    with pytest.raises(AlreadyExists):
        await GrantRole.run(people, AUTHOR, user="mona", role="manager", accounts=["lab"])
    await RevokeRole.run(people, AUTHOR, user="mona", role="manager", accounts=["lab"])
    assert (await RoleGrant.find_one({"user": "mona"})).accounts == ["proj"]
    await RevokeRole.run(people, AUTHOR, user="mona", role="manager", accounts=["proj"])
    assert await RoleGrant.find_one({"user": "mona"}) is None
    ops = [h.op for h in await History.find({"op": {"$in": ["grant_role", "revoke_role"]}})
           .sort(+History.timestamp).to_list()]
    assert ops == ["grant_role", "grant_role", "revoke_role", "revoke_role"]


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"user": "mona", "role": "manager"}, InvalidInput),
    ({"user": "mona", "role": "operator", "accounts": ["lab"]}, InvalidInput),
    ({"user": "ghost", "role": "operator"}, NotFound),
    ({"user": "mona", "role": "manager", "accounts": ["nosuch"]}, NotFound),
    ({"user": "mona", "role": "king"}, InvalidInput)])
async def test_bad_grants_write_nothing(people, kwargs, error):  # type: ignore[no-untyped-def]
    before = await History.find({}).count()
    with pytest.raises(error):
        await GrantRole.run(people, AUTHOR, **kwargs)
    assert await RoleGrant.find({}).count() == 0
    assert await History.find({}).count() == before


async def test_a_rename_carries_the_grant(people):  # type: ignore[no-untyped-def]
    await GrantRole.run(people, AUTHOR, user="mona", role="operator")
    await RenameUser.run(people, AUTHOR, name="mona", new_name="monica")
    assert [r["user"] for r in await list_roles()] == ["monica"]


async def test_key_secrets_stay_out_of_the_store_and_history(people):  # type: ignore[no-untyped-def]
    made = await CreateApiKey.run(people, AUTHOR, name="puppet", scopes=["puppet:read"],
                                  expires_in_days=90)
    assert (await find_key(made.secret)).name == "puppet"
    raw = await ApiKey.get_pymongo_collection().find_one({"name": "puppet"})
    assert made.secret not in str(raw)
    row = await History.find_one({"op": "create_api_key"})
    assert row is not None and made.secret not in str(row.changes)
    assert raw["fingerprint"] not in str(row.changes)
    with pytest.raises(AlreadyExists):
        await CreateApiKey.run(people, AUTHOR, name="puppet", scopes=["api:read"])
    with pytest.raises(InvalidInput):
        await CreateApiKey.run(people, AUTHOR, name="x", scopes=["root:everything"])
    with pytest.raises(InvalidInput):
        await CreateApiKey.run(people, AUTHOR, name="bad name!", scopes=["api:read"])
    assert await ApiKey.find({}).count() == 1


async def test_rotation_overlap_then_revoke(people):  # type: ignore[no-untyped-def]
    first = await CreateApiKey.run(people, AUTHOR, name="mon", scopes=["api:read"])
    second = await RotateApiKey.run(people, AUTHOR, name="mon", overlap_hours=2)
    now = int(time.time())
    assert (await find_key(first.secret, now=now)) is not None
    assert (await find_key(first.secret, now=now + 3 * 3600)) is None  # overlap over
    assert (await find_key(second.secret, now=now + 3 * 3600)) is not None
    await RevokeApiKey.run(people, AUTHOR, name="mon")
    assert await find_key(first.secret) is None and await find_key(second.secret) is None
    with pytest.raises(Conflict):
        await RotateApiKey.run(people, AUTHOR, name="mon")
    with pytest.raises(NotFound):
        await RevokeApiKey.run(people, AUTHOR, name="nope")


async def test_audit_findings(people):  # type: ignore[no-untyped-def]
    for name in ("fresh", "old", "idle", "gone"):
        await CreateApiKey.run(people, AUTHOR, name=name, scopes=["api:read"])
    now = int(time.time())
    collection = ApiKey.get_pymongo_collection()
    await collection.update_one({"name": "fresh"}, {"$set": {"last_used_epoch": now}})
    await collection.update_one({"name": "old"}, {"$set": {"rotated_epoch": now - 200 * 86400,
                                                           "last_used_epoch": now}})
    await collection.update_one({"name": "idle"}, {"$set": {"last_used_epoch":
                                                            now - 40 * 86400}})
    await collection.update_one({"name": "gone"}, {"$set": {"expires_epoch": now - 86400}})
    found = {(f.name, f.problem) for f in await audit_api_keys(rotation_days=90,
                                                               unused_days=30, now=now)}
    assert found == {("old", "past_rotation"), ("idle", "unused"), ("gone", "expired")}
    await CreateApiKey.run(people, AUTHOR, name="never", scopes=["api:read"])
    # a new key is not "never used" until the grace period has passed
    found = {(f.name, f.problem) for f in await audit_api_keys(rotation_days=90,
                                                               unused_days=30)}
    assert ("never", "never_used") not in found
    later = int(time.time()) + 8 * 86400
    found = {(f.name, f.problem) for f in await audit_api_keys(
        rotation_days=90, unused_days=30, now=later)}
    assert ("never", "never_used") in found
    found = {(f.name, f.problem) for f in await audit_api_keys(
        rotation_days=90, unused_days=30, grace_days=30, now=later)}
    assert ("never", "never_used") not in found
    found = {(f.name, f.problem) for f in await audit_api_keys(
        rotation_days=90, unused_days=30, grace_days=0)}
    assert ("never", "never_used") in found


async def test_every_sponsor_is_listed_as_an_implicit_manager(db):  # type: ignore[no-untyped-def]
    """The site-wide listing finds sponsors by their role (an array field: a plain
    equality there can match nothing on the embedded store)."""
    from cheeto_like.operations.group import CreateGroupFromSponsor
    from tests.factories import make_site

    await make_site(db, "farm")
    await make_user(db, "pat", uid=12345, site="farm")
    await CreateGroupFromSponsor.run(db, AUTHOR, sponsor="pat", site="farm")
    rows = await list_roles()
    assert [r for r in rows if r["via"] == "sponsor"] == [
        {"user": "pat", "role": "manager", "accounts": ["patgrp"], "via": "sponsor"}]


async def test_revoking_a_persons_tokens_moves_their_version(people):  # type: ignore[no-untyped-def]
    before = await User.find_one({"name": "mona"})
    assert before is not None and before.token_version == 0
    assert await RevokeUserTokens.run(people, AUTHOR, user="mona") == 1
    assert await RevokeUserTokens.run(people, AUTHOR, user="mona") == 2
    after = await User.find_one({"name": "mona"})
    assert after is not None and after.token_version == 2
    # bookkeeping only: the record's change time and LDAP projection stay
    assert after.updated_at == before.updated_at
    assert after.ldap.modified_at == before.ldap.modified_at
    rows = await History.find({"op": "revoke_user_tokens"}).to_list()
    assert [r.changes for r in rows] == [{"user": "mona", "token_version": 1},
                                         {"user": "mona", "token_version": 2}]
    # a rename keeps the version (and the id the tokens name)
    await RenameUser.run(people, AUTHOR, name="mona", new_name="monab")
    renamed = await User.find_one({"name": "monab"})
    assert renamed is not None and (renamed.id, renamed.token_version) == (after.id, 2)


async def test_revoking_an_unknown_persons_tokens_writes_nothing(people):  # type: ignore[no-untyped-def]
    with pytest.raises(NotFound, match="ghost"):
        await RevokeUserTokens.run(people, AUTHOR, user="ghost")
    with pytest.raises(InvalidInput):
        await RevokeUserTokens.run(people, AUTHOR, user="Not A Name")
    assert await History.find({"op": "revoke_user_tokens"}).count() == 0


async def test_a_password_change_moves_the_version(people):  # type: ignore[no-untyped-def]
    await SetUserPassword.run(people, AUTHOR, name="mona", password="first-pw")
    await SetUserPassword.run(people, AUTHOR, name="mona", password="second-pw")
    user = await User.find_one({"name": "mona"})
    assert user is not None and user.token_version == 2
    rows = await History.find({"op": "set_user_password"}).to_list()
    assert rows and all("pw" not in str(r.changes) for r in rows)
