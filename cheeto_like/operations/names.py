"""Claims in the name registry (``models/names.py``), written inside the caller's
transaction so a user and a group can never end up with one name, even when two
operations race on a real MongoDB: the second insert of a name hits the unique index
and ``Operation.run`` turns it into ``AlreadyExists``."""

from __future__ import annotations

from pymongo.asynchronous.client_session import AsyncClientSession

from ..models.base import select_one
from ..models.names import NameClaim, NameKind


async def claim_name(name: str, kind: NameKind, session: AsyncClientSession) -> None:
    """Reserve ``name`` for a new user (and their personal group) or group."""
    await NameClaim(name=name, kind=kind).insert(session=session)


async def move_claim(old: str, new: str, kind: NameKind, session: AsyncClientSession) -> None:
    """Move ``old``'s claim to ``new`` (a rename). A store from before the registry may
    have no row for ``old``; then ``new`` is claimed afresh."""
    claim = await select_one(NameClaim, session, name=old)
    if claim is None:
        await claim_name(new, kind, session)
        return
    # A plain update by _id: the store's unique index must refuse ``new`` with a
    # DuplicateKeyError (beanie's save() hides that on the embedded store).
    await NameClaim.get_pymongo_collection().update_one(
        {"_id": claim.id}, {"$set": {"name": new, "kind": kind},
                            "$currentDate": {"updated_at": True}}, session=session)

