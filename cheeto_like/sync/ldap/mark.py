"""A site's LDAP watermark: a few documents per site, written once per whole-site run.

Why: stamping ``ldap.synced.<site>`` on every record a run brought up to date cost one
document write per record (34,010 after a full sync of 10k users: 26 s on the embedded
store, which rewrites each document), and deciding what changed meant reading every
record. The mark says, for a site, *which version of each record* the directory matches
and *what the sync made exist there*, so an incremental run can skip the reads when
nothing moved and otherwise read only the changed records:

- ``versions``: record key -> the token (``ldap.version``; a storage's also names its
  map and volume) the run *read* for every record it covered. A record is clean when its
  token still equals it. Versions grow in the writing transaction (``models.base.
  LDAPInfo``), so a write committed after the run's read (a transaction in flight for
  a minute, a writer whose clock is behind) leaves another token and stays dirty: no
  clock decides. (Issue 18 compared ``ldap.modified_at``, the writer's clock when the
  statement ran, with the run's start minus 10 s: a later commit or a slow clock was
  skipped by every incremental run.) They live beside the site's document in
  ``ldap_mark_versions``, ``PART_SIZE`` pairs a document bucketed by a hash of the key
  (~35 bytes a pair: 50k users and their groups are ~3.5 MB, past what one document
  should carry next to the rosters), and only the parts whose pairs moved are
  rewritten; a run whose fingerprint is unchanged never reads them.
- ``through_ms``: the store's clock when the run started (display: "synced as of").
- ``pending``: record keys whose writes failed or were skipped; dirty whatever their token.
- ``rosters``: the names of the users on the site, its groups and its automount keys as
  the run left them. An incremental run diffs them against the store to find what left
  (a user taken off the site or deleted, a group no longer used there, a removed
  storage) without listing the directory.
- ``stale_ms``: the soonest expiry (epoch ms, the worker's clock) ahead of the run among
  what it projected (users, site records, keys): an expiry passing takes access away
  with no write, so past it an unchanged fingerprint does not skip the run (``fresh``),
  and the records it concerns read as dirty (``sync.ldap.desired``).
- ``fingerprint``: per collection, the count, the latest ``updated_at`` and (users,
  groups, storages) the *sum* of ``ldap.version`` (answered by one ``$group`` each, in SQL
  on the embedded store), plus the site's data generations. When all of them equal the
  mark's, nothing was inserted, changed or deleted since (by an operation, which moves a
  generation, or by any other writer that bumps a version, which moves the sum: versions
  only grow, so the sum moves with any bump; a delete moves the count) and the run reads
  nothing else. A sum rather than a max: a bump of a record below the max moves no max.

Per-record stamps stay for runs that cover part of a site (``sync-user``, one kind):
``ldap.synced_version.<site>`` (the token read) and ``ldap.synced.<site>`` (display); a
record is clean when either its own token or the site's mark covers it (``is_clean``).
Only ``sync/ldap/run.py`` writes marks (under the site's lease); values are ints and strings,
never datetimes (the embedded store keeps a ``$set`` datetime as a string).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pymongo import DeleteMany, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection

from ...models import (
    AutomountMap,
    Group,
    GroupMembership,
    SshKey,
    Storage,
    StorageVolume,
    User,
    UserSiteInfo,
)
from ...models.generation import ALL, site_key
from ...queries.generations import generations_of
from .state import RecordKey

COLLECTION = "ldap_marks"
VERSIONS = "ldap_mark_versions"
PART_SIZE = 20_000  # pairs per versions document (~700 KB)
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
    versions: Mapping[str, int | str] = field(default_factory=dict)
    pending: frozenset[str] = frozenset()
    rosters: Mapping[str, frozenset[str]] = field(default_factory=dict)
    fingerprint: Mapping[str, Any] = field(default_factory=dict)
    stale_ms: int | None = None
    parts: int = 0  # versions documents (``ldap_mark_versions``)

    def fresh(self, now: datetime) -> bool:
        """No expiry the run depended on has passed since (see ``stale_ms``)."""
        return self.stale_ms is None or ms(now) < self.stale_ms

    def roster(self, kind: str) -> frozenset[str]:
        return self.rosters.get(kind, frozenset())

    def covers(self, key: RecordKey, token: int | str) -> bool:
        """Whether the run that wrote this mark brought ``key`` in line at ``token``.
        Equality, never an order: a restored older record differs too."""
        text = key_text(key)
        return text not in self.pending and self.versions.get(text) == token


def is_clean(key: RecordKey, token: int | str, own: int | str | None,
             mark: SiteMark | None) -> bool:
    """A record needs no comparison when its own per-site token (a partial run's) or the
    site's mark holds its current token. A record whose writes failed at the last
    whole-site run is dirty whatever its tokens say."""
    if mark is not None and key_text(key) in mark.pending:
        return False
    if own is not None and own == token:
        return True
    return mark is not None and mark.covers(key, token)


def marks() -> AsyncCollection[dict[str, Any]]:
    return User.get_pymongo_collection().database[COLLECTION]


def version_parts() -> AsyncCollection[dict[str, Any]]:
    return User.get_pymongo_collection().database[VERSIONS]


def _part_id(site: str, index: int) -> str:
    return f"{site}#{index}"


def _bucket(text: str, parts: int) -> int:
    """A key's part: a stable hash, so one record's edit rewrites one part."""
    return zlib.crc32(text.encode()) % parts


def _split(versions: Mapping[str, int | str]) -> list[list[list[Any]]]:
    """Sorted ``[key, token]`` pairs per part (pairs, not a dict: keys may hold dots)."""
    parts = max(1, -(-len(versions) // PART_SIZE))
    split: list[list[list[Any]]] = [[] for _ in range(parts)]
    for text in sorted(versions):
        split[_bucket(text, parts)].append([text, versions[text]])
    return split


async def read_mark(site: str, *, versions: bool = True) -> SiteMark | None:
    """The site's mark; ``versions=False`` leaves the per-record tokens unread (the check
    of an unchanged fingerprint needs none; ``with_versions`` reads them later)."""
    doc = await marks().find_one({"_id": site})
    if doc is None or not isinstance(doc.get("through_ms"), int) \
            or not isinstance(doc.get("parts"), int):
        return None  # none yet, or one of issue 18's (times, no versions): a full compare
    mark = SiteMark(site=site, through_ms=doc["through_ms"], parts=doc["parts"],
                    pending=frozenset(doc.get("pending") or ()),
                    rosters={k: frozenset(doc.get(f"roster_{k}") or ()) for k in ROSTER_KINDS},
                    fingerprint=dict(doc.get("fingerprint") or {}),
                    stale_ms=doc["stale_ms"] if isinstance(doc.get("stale_ms"), int) else None)
    return await with_versions(mark) if versions else mark


async def with_versions(mark: SiteMark) -> SiteMark:
    """The mark with its per-record tokens read (one ``$in`` read of its parts). A part
    missing (a run killed between writing parts and the site's document) leaves its
    records dirty: safe."""
    if mark.versions or not mark.parts:
        return mark
    found: dict[str, int | str] = {}
    ids = [_part_id(mark.site, i) for i in range(mark.parts)]
    async for doc in version_parts().find({"_id": {"$in": ids}}):
        for text, token in doc.get("pairs") or ():
            found[str(text)] = token if isinstance(token, str) else int(token)
    return SiteMark(site=mark.site, through_ms=mark.through_ms, versions=found,
                    pending=mark.pending, rosters=mark.rosters,
                    fingerprint=mark.fingerprint, stale_ms=mark.stale_ms, parts=mark.parts)


async def store_clock_ms(site: str) -> int:
    """The store's clock now (``$currentDate`` on the site's mark document, read back).
    On the embedded store the write waits for any open transaction, so every change
    committed before it carries an earlier time and is visible to the reads after it."""
    await marks().update_one({"_id": site}, {"$currentDate": {"clock": True}}, upsert=True)
    doc = await marks().find_one({"_id": site}, {"clock": 1})
    assert doc is not None
    return ms(doc["clock"])


async def write_mark(mark: SiteMark, previous: SiteMark | None) -> int:
    """The version parts that moved (one ``bulk_write``), then one update of the site's
    document; the rosters are rewritten only when they moved. Parts first: a run killed
    between the two leaves the previous document, whose fingerprint and rosters make the
    next run compare again. Returns the store writes."""
    split = _split(mark.versions)
    old = _split(previous.versions) if previous is not None and previous.versions else None
    # ``$set`` upserts by _id (the embedded store's replace-upsert drops the filter's _id)
    ops: list[Any] = [UpdateOne({"_id": _part_id(mark.site, i)},
                                {"$set": {"site": mark.site, "pairs": pairs}}, upsert=True)
                      for i, pairs in enumerate(split)
                      if old is None or len(old) != len(split) or old[i] != pairs]
    ops.extend(DeleteMany({"_id": _part_id(mark.site, i)})
               for i in range(len(split), max(previous.parts if previous else 0, 0)))
    if ops:
        await version_parts().bulk_write(ops, ordered=True)
    fields: dict[str, Any] = {"through_ms": mark.through_ms, "parts": len(split),
                              "pending": sorted(mark.pending),
                              "fingerprint": dict(mark.fingerprint),
                              "stale_ms": mark.stale_ms}
    for kind in ROSTER_KINDS:
        if previous is None or previous.roster(kind) != mark.roster(kind):
            fields[f"roster_{kind}"] = sorted(mark.roster(kind))
    await marks().update_one({"_id": mark.site}, {"$set": fields, "$unset": {"window": ""}},
                             upsert=True)
    return 1 + (1 if ops else 0)


async def forget_marks() -> None:
    """Drop every site's mark (after ``clear-tree``): the next runs list the directory."""
    await marks().delete_many({})
    await version_parts().delete_many({})


# -- has anything moved? ----------------------------------------------------------------------

_WATCHED: tuple[tuple[str, Any, bool, bool], ...] = (
    # name, model, filtered by site, has ldap.version
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
    """Counts, latest ``updated_at`` and version sums of everything the site's projection
    reads, and the data generations: a constant number of one-row aggregations."""
    found: dict[str, Any] = {"site": ms(site_updated)}
    for name, model, by_site, projected in _WATCHED:
        group: dict[str, Any] = {"_id": None, "n": {"$sum": 1},
                                 "u": {"$max": "$updated_at"}}
        if projected:
            group["v"] = {"$sum": "$ldap.version"}
        pipeline: list[dict[str, Any]] = [{"$match": {"site": site} if by_site else {}},
                                          {"$group": group}]
        cursor = await model.get_pymongo_collection().aggregate(pipeline)
        rows = await cursor.to_list()
        row = rows[0] if rows else {}
        found[name] = [int(row.get("n") or 0), _plain(row.get("u")),
                       int(row.get("v") or 0) if projected else None]
    counters = await generations_of([ALL, site_key(site)])
    found["generations"] = sorted(f"{key}={n}" for key, n in counters.items())
    return found
