"""``models.base.insert_document``: the dict the write path holds back for its tail is
the one beanie's own ``insert()`` would have sent (pydantic's dump instead of beanie's
encoder, for speed), for every kind of document the held-back inserts write; and a
record written that way reads back as the model it was built from."""

from __future__ import annotations

from datetime import UTC, datetime

from beanie.odm.utils.dump import get_dict

from cheeto_like.models import Group, GroupMembership, NameClaim, SshKey, User, UserSiteInfo
from cheeto_like.models.base import LDAPSyncable, insert_document
from cheeto_like.operations.user import CreateUser

from ..factories import AUTHOR, ED25519_KEY


def _documents() -> list[object]:
    when = datetime(2031, 5, 4, 3, 2, 1, tzinfo=UTC)
    return [
        User(name="alice", email="alice@example.org", uid=71001, gid=71001,
             fullname="Alice A", surname="A", home_directory="/home/alice",
             access=["login-ssh", "slurm"], expires_at=when, password="$y$j9T$x$y"),
        Group(name="alice", gid=71001, type="user"),
        GroupMembership(user="alice", group="lab", site="farm", roles=["sponsor", "member"],
                        expires_at=when),
        UserSiteInfo(user="alice", site="farm", access=["slurm"]),
        NameClaim(name="alice", kind="user"),
        SshKey(user="alice", key=ED25519_KEY),
    ]


async def test_insert_document_is_what_beanie_would_insert(db):
    for doc in _documents():
        got = insert_document(doc)  # type: ignore[arg-type]
        # beanie's before-insert hook (the LDAP fingerprint) has run on ``doc`` now; a
        # second run changes nothing (same fingerprint), as beanie's insert would find
        if isinstance(doc, LDAPSyncable):
            before = doc.ldap.model_dump()
            doc.refresh_ldap_fingerprint()
            assert doc.ldap.model_dump() == before
            assert doc.ldap.version > 0
        settings = doc.get_settings()  # type: ignore[attr-defined]
        assert got == get_dict(doc, to_db=True, keep_nulls=settings.keep_nulls), \
            type(doc).__name__


async def test_a_held_back_insert_reads_back_as_built(db):
    user, _group = await CreateUser.run(db, AUTHOR, name="bob", uid=71002,
                                       email="bob@example.org", fullname="Bob B",
                                       access=["login-ssh"], ssh_key=ED25519_KEY)
    stored = await User.find_one(User.name == "bob")
    assert stored is not None
    assert stored.model_dump(exclude={"created_at", "updated_at", "ldap"}) == \
        user.model_dump(exclude={"created_at", "updated_at", "ldap"})
    assert stored.ldap.version == user.ldap.version > 0
    assert stored.ldap.fingerprint == user.ldap.fingerprint
    assert await Group.find_one(Group.name == "bob", Group.gid == 71002) is not None
    assert await SshKey.find_one(SshKey.user == "bob") is not None
