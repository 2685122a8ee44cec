"""A site's LDAP watermark: one small document per site, written once per whole-site run.

Why: stamping ``ldap.synced.<site>`` on every record a run brought up to date cost one
document write per record (34,010 after a full sync of 10k users: 26 s on the embedded
store, which rewrites each document), and deciding what changed meant reading every
record. The mark says, for a site, *as of when* the directory matched the store and
*what the sync made exist there*, so an incremental run can skip the reads when nothing
moved and otherwise read only the changed records:

- ``through_ms``: the store's clock (``$currentDate`` on this document, taken before the
  run read anything). A record whose ``ldap.modified_at`` is at or before it was seen by
  that run. ``window`` holds the ``modified_at`` the run read for records stamped within
  ``MARGIN_MS`` before it: a change committed after the read but stamped just before
  ``through_ms`` (a transaction in flight, a client clock slightly behind) differs from
  the snapshot and stays dirty.
- ``pending``: record keys whose writes failed or were skipped; dirty whatever their time.
- ``rosters``: the names of the users on the site, its groups and its automount keys as
  the run left them. An incremental run diffs them against the store to find what left
  (a user taken off the site or deleted, a group no longer used there, a removed
  storage) without listing the directory.
- ``stale_ms``: the soonest expiry (epoch ms, the worker's clock) ahead of the run among
  what it projected (users, site records, keys): an expiry passing takes access away
  with no write, so past it an unchanged fingerprint does not skip the run (``fresh``),
  and the records it concerns read as dirty (``sync.ldap_desired``).
- ``fingerprint``: per collection, the count and the latest ``ldap.modified_at`` and
  ``updated_at`` (answered by one ``$group`` each, in SQL on the embedded store), plus
  the site's data generations. When all of them equal the mark's, nothing was inserted,
  changed or deleted since (by an operation, which moves a generation, or by any other
  writer, which moves a count or a timestamp) and the run reads nothing else.

Per-record stamps stay for runs that cover part of a site (``sync-user``, one kind): a
record is clean when either its own stamp or the site's mark covers it (``is_clean``).
Only ``sync/ldap.py`` writes marks (under the site's lease); values are ints and strings,
never datetimes (the embedded store keeps a ``$set`` datetime as a string).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

from ..models import (
    AutomountMap,
    Group,
    GroupMembership,
    SshKey,
    Storage,
    StorageVolume,
    User,
    UserSiteInfo,
)
from ..models.generation import ALL, site_key
from ..queries.generations import generations_of
from .ldap_state import RecordKey

COLLECTION = "ldap_marks"
MARGIN_MS = 10_000
ROSTER_KINDS = ("users", "groups", "automounts")


def ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def key_text(key: RecordKey) -> str:
    return f"{key[0]}:{key[1]}"


def key_of(text: str) -> RecordKey:
    kind, _, name = text.partition(":")
    return kind, name  # type: ignore[return-value]


@dataclass(frozen=True)
class SiteMark:
    site: str
    through_ms: int
    window: Mapping[str, int] = field(default_factory=dict)
    pending: frozenset[str] = frozenset()
    rosters: Mapping[str, frozenset[str]] = field(default_factory=dict)
    fingerprint: Mapping[str, Any] = field(default_factory=dict)
    stale_ms: int | None = None

    def fresh(self, now: datetime) -> bool:
        """No expiry the run depended on has passed since (see ``stale_ms``)."""
        return self.stale_ms is None or ms(now) < self.stale_ms

    def roster(self, kind: str) -> frozenset[str]:
        return self.rosters.get(kind, frozenset())

    def covers(self, key: RecordKey, modified: datetime) -> bool:
        """Whether the run that wrote this mark saw ``key`` as modified at ``modified``."""
        text = key_text(key)
        if text in self.pending:
            return False
        stamp = ms(modified)
        if stamp > self.through_ms:
            return False
        return stamp <= self.through_ms - MARGIN_MS or self.window.get(text) == stamp


def is_clean(key: RecordKey, modified: datetime, own_stamp: datetime | None,
             mark: SiteMark | None) -> bool:
    """A record needs no comparison when its own per-site stamp or the site's mark covers
    its last projected change. A record whose writes failed at the last whole-site run
    is dirty whatever its stamps say."""
    if mark is not None and key_text(key) in mark.pending:
        return False
    if own_stamp is not None and modified <= own_stamp:
        return True
    return mark is not None and mark.covers(key, modified)


def marks() -> AsyncCollection[dict[str, Any]]:
    return User.get_pymongo_collection().database[COLLECTION]


async def read_mark(site: str) -> SiteMark | None:
    doc = await marks().find_one({"_id": site})
    if doc is None or not isinstance(doc.get("through_ms"), int):
        return None
    return SiteMark(site=site, through_ms=doc["through_ms"],
                    window={str(k): int(v) for k, v in (doc.get("window") or {}).items()},
                    pending=frozenset(doc.get("pending") or ()),
                    rosters={k: frozenset(doc.get(f"roster_{k}") or ()) for k in ROSTER_KINDS},
                    fingerprint=dict(doc.get("fingerprint") or {}),
                    stale_ms=doc["stale_ms"] if isinstance(doc.get("stale_ms"), int) else None)


async def store_clock_ms(site: str) -> int:
    """The store's clock now (``$currentDate`` on the site's mark document, read back).
    On the embedded store the write waits for any open transaction, so every change
    committed before it carries an earlier time and is visible to the reads after it."""
    await marks().update_one({"_id": site}, {"$currentDate": {"clock": True}}, upsert=True)
    doc = await marks().find_one({"_id": site}, {"clock": 1})
    assert doc is not None
    return ms(doc["clock"])


async def write_mark(mark: SiteMark, previous: SiteMark | None) -> None:
    """One update of the site's document; the rosters are rewritten only when they moved."""
    fields: dict[str, Any] = {"through_ms": mark.through_ms, "window": dict(mark.window),
                              "pending": sorted(mark.pending),
                              "fingerprint": dict(mark.fingerprint),
                              "stale_ms": mark.stale_ms}
    for kind in ROSTER_KINDS:
        if previous is None or previous.roster(kind) != mark.roster(kind):
            fields[f"roster_{kind}"] = sorted(mark.roster(kind))
    await marks().update_one({"_id": mark.site}, {"$set": fields}, upsert=True)


async def forget_marks() -> None:
    """Drop every site's mark (after ``clear-tree``): the next runs list the directory."""
    await marks().delete_many({})


# -- has anything moved? ----------------------------------------------------------------------

_WATCHED: tuple[tuple[str, Any, bool, bool], ...] = (
    # name, model, filtered by site, has ldap.modified_at
    ("users", User, False, True),
    ("groups", Group, False, True),
    ("storages", Storage, True, True),
    ("site_users", UserSiteInfo, True, False),
    ("memberships", GroupMembership, True, False),
    ("keys", SshKey, False, False),
    ("maps", AutomountMap, True, False),
    ("volumes", StorageVolume, True, False),
)


def _plain(value: Any) -> Any:
    """A ``$max`` as a comparable scalar: the embedded store answers a datetime's stored
    text, MongoDB a datetime (kept as epoch milliseconds)."""
    if isinstance(value, datetime):
        return ms(value)
    return None if value is None else str(value)


async def fingerprint(site: str, site_updated: datetime) -> dict[str, Any]:
    """Counts and latest change times of everything the site's projection reads, and the
    data generations: a constant number of one-row aggregations."""
    found: dict[str, Any] = {"site": ms(site_updated)}
    for name, model, by_site, projected in _WATCHED:
        group: dict[str, Any] = {"_id": None, "n": {"$sum": 1},
                                 "u": {"$max": "$updated_at"}}
        if projected:
            group["m"] = {"$max": "$ldap.modified_at"}
        pipeline: list[dict[str, Any]] = [{"$match": {"site": site} if by_site else {}},
                                          {"$group": group}]
        cursor = await model.get_pymongo_collection().aggregate(pipeline)
        rows = await cursor.to_list()
        row = rows[0] if rows else {}
        found[name] = [int(row.get("n") or 0), _plain(row.get("u")), _plain(row.get("m"))]
    counters = await generations_of([ALL, site_key(site)])
    found["generations"] = sorted(f"{key}={n}" for key, n in counters.items())
    return found


def window_of(records: Iterable[tuple[RecordKey, datetime]], through_ms: int) -> dict[str, int]:
    """The snapshot kept for records stamped within the margin before ``through_ms``."""
    low = through_ms - MARGIN_MS
    return {key_text(key): stamp for key, when in records
            if (stamp := ms(when)) > low}
