"""Building blocks every document shares: string ids, timestamps, expiry, LDAP bookkeeping.

Store rules (DESIGN §5): ids are UUID hex strings and references are natural keys
(names), never ObjectIds, DBRefs or beanie Links, so the same documents work on MongoDB
and on the embedded store and read well in History and exports.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any, ClassVar

from beanie import Document, Insert, Replace, Save, SaveChanges, Update, before_event
from pydantic import BaseModel, ConfigDict, Field
from pymongo import ASCENDING, DESCENDING, IndexModel

from .fields import new_id, utcnow


class Embedded(BaseModel):
    """Embedded sub-documents: strict about unknown keys so typos never pass silently."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class BaseDoc(Document):
    """A document with a string id and created/updated timestamps."""

    model_config = ConfigDict(validate_assignment=True)

    id: str = Field(default_factory=new_id)  # type: ignore[assignment]
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    @before_event(Replace, Save, SaveChanges, Update)
    def refresh_updated_at(self) -> None:
        self.updated_at = utcnow()

    class Settings:
        validate_on_save = True


class Expirable(BaseModel):
    """Mixin for records that can be time-limited (class accounts, allocations, …)."""

    expires_at: datetime | None = None
    provisioned_at: datetime | None = None


class LDAPInfo(Embedded):
    """Per-record LDAP bookkeeping: what was projected and when each site last synced.

    ``modified_at`` moves only when the projected fields change (see ``LDAPSyncable``), so
    bookkeeping saves do not make a record dirty. ``synced`` holds one watermark per site.
    """

    ignore: bool = False
    fingerprint: str | None = None
    modified_at: datetime = Field(default_factory=utcnow)
    synced: dict[str, datetime] = Field(default_factory=dict)

    def needs_sync(self, site: str) -> bool:
        last = self.synced.get(site)
        return last is None or self.modified_at > last


def _stable_json(value: Any) -> str:
    """JSON fallback for fingerprints. Datetimes are taken as UTC and cut to milliseconds,
    which is what the store keeps, so a record read back fingerprints as it was written."""
    if isinstance(value, datetime):
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value.replace(microsecond=value.microsecond // 1000 * 1000).isoformat()
    return str(value)


class LDAPSyncable(BaseModel):
    """Mixin for documents projected into LDAP (users, groups, storages).

    Subclasses name the projected fields in ``ldap_fields``; a before-save hook hashes
    them and bumps ``ldap.modified_at`` only when the hash changes. Changes that come from
    other documents (keys, memberships) mark the record dirty explicitly through
    ``operations.base.mark_ldap_dirty``.
    """

    ldap_fields: ClassVar[tuple[str, ...]] = ()
    ldap: LDAPInfo = Field(default_factory=LDAPInfo)

    def ldap_projection(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.ldap_fields}

    def ldap_fingerprint(self) -> str:
        blob = json.dumps(self.ldap_projection(), sort_keys=True, default=_stable_json)
        return hashlib.sha256(blob.encode()).hexdigest()

    @before_event(Insert, Replace, Save, SaveChanges)
    def refresh_ldap_fingerprint(self) -> None:
        fingerprint = self.ldap_fingerprint()
        if fingerprint != self.ldap.fingerprint:
            self.ldap.fingerprint = fingerprint
            self.ldap.modified_at = utcnow()


def index(*fields: str, unique: bool = False, **kwargs: Any) -> IndexModel:
    """An ascending (compound) index; ``-field`` sorts that key descending."""
    keys = [(f[1:], DESCENDING) if f.startswith("-") else (f, ASCENDING) for f in fields]
    return IndexModel(keys, unique=unique, **kwargs)


def unique(*fields: str, **kwargs: Any) -> IndexModel:
    """Uniqueness lives in the store, not only in code (DESIGN §3)."""
    return index(*fields, unique=True, **kwargs)



async def select[D: Document](model: type[D], session: Any, /, **where: Any) -> list[D]:
    """Documents whose fields equal ``where``; a list field matches when it contains the
    value. Only the first condition goes to the store, the rest are checked here.

    Why: the embedded store serves a single-field equality from its index but answers a
    multi-field filter (and beanie's ``$and``) by scanning the collection, 5-30x slower at
    10k documents. Put the most selective, indexed field first; it narrows the result to
    a handful of documents on either store.
    """
    (field, value), *rest = where.items()
    docs = await model.find({field: value}, session=session).to_list()
    return [d for d in docs if all(_holds(getattr(d, f), v) for f, v in rest)]


async def select_one[D: Document](model: type[D], session: Any, /, **where: Any) -> D | None:
    found = await select(model, session, **where)
    return found[0] if found else None


def _holds(actual: Any, wanted: Any) -> bool:
    if isinstance(actual, list) and not isinstance(wanted, list):
        return wanted in actual
    return actual == wanted
