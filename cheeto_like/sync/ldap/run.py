"""The LDAP reconciler: desired (store) -> actual (directory) -> plan -> guarded apply.

``run`` does the four steps for one site and one ``Scope`` (a whole-site sync, one user,
one group, a prune, a bootstrap) and stores a ``SyncRun`` with the plan counts and every
write's outcome. The apply:
- takes the ``ldap:<site>`` lease before reading the directory (``Busy``, exit 1, when
  another applying run holds it), so the plan is computed under it; the lease is
  renewed while the run lives and taking it closes runs a crashed holder left
  ``running`` as ``crashed``;
- refuses before any write when the plan removes more than ``max_deletions`` or more
  than the site's rolling 24-hour budget has left (``GuardTripped``: the run fails, it
  is not merely reported); removals are deleted entries and dropped ``memberUid``,
  ``member`` and ``sshPublicKey`` values;
- records its progress before each batch (``extra.progress``, the items so far and the
  removals the batch may make), so a crashed run shows how far it got;
- writes nothing at all on a dry run (neither LDAP nor watermarks);
- runs the batches in order, up to ``concurrency`` writes at a time within a batch,
  recording every outcome; skips the deletes when anything before them failed, and stops
  early when the directory becomes unreachable;
- never raises halfway: the run ends ``ok`` or ``failed`` with the full report.
Afterwards a whole-site run (users, groups, automounts and the prune) writes the site's
mark (``sync/ldap/mark.py``): which version of each record the directory now matches
(the ``ldap.version`` the run *read*, so an edit committed after the read, whenever it
was stamped, stays dirty), which records failed (still dirty) and what the run left in
the directory. Any other applying run stamps each record whose writes all succeeded
with the token it read (``ldap.synced_version.<site>``; ``ldap.synced.<site>`` is the
time, for display). A user who left the site loses the site's stamp once their
memberships are gone.

An incremental whole-site run with a mark first compares the store's fingerprint (counts,
latest change times, data generations: a constant number of one-row aggregations) with
the mark's: equal means nothing changed and the run reads nothing else. Otherwise it
reads light columns of the site's records, builds only the entries that changed, and
reads only those from the directory (``ldap_actual``). At most one applying run per site
holds the ``ldap:<site>`` lease; it stops before its next write if the lease was lost.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import UpdateOne

from ...adapters.ldap import Directory, DirectoryError, Entry, dn_depth, normalize_dn
from ...config import LDAPConfig
from ...errors import Busy, GuardTripped, InvalidInput
from ...models import Group, Storage, SyncRun, User
from ...models.fields import utcnow
from ...models.sync import SyncItem
from ...queries.access_status import SEED_HINT
from ...queries.group import get_group
from ...queries.site import get_site
from ...queries.user import get_user, user_sites
from ...store import Store
from ..lease import Held, holder_name, maybe_lease
from ..report import ItemOutcomes
from ..run_metrics import logged_run, record_end
from ..runs import RunJournal, check_budget, close_stale_runs, note_raised, stamp_end
from .actual import actual_state, parse_entry, read_memberships
from .apply import apply_plan, check_guard
from .apply import stored_items as _stored_items
from .desired import DesiredState, desired_state
from .mark import (
    SiteMark,
    fingerprint,
    forget_marks,
    is_clean,
    key_text,
    ms,
    read_mark,
    store_clock_ms,
    with_versions,
    write_mark,
)
from .plan import PRUNE_KINDS, Focus, Plan, Scope, entry_mods, focus, plan
from .state import GROUP_ATTRS, USER_ATTRS, Layout, RecordKey

TARGET = "ldap"


async def full_check_due(site: str, every: timedelta) -> bool:
    """No applied, successful full run at ``site`` within ``every``: the daemon's
    incremental runs never list the directory, so this is what bounds hand-made drift.
    One range read over recent runs (the pattern of ``runs.removed_recently``)."""
    since = utcnow() - every
    async for doc in SyncRun.get_pymongo_collection().find(
            {"started_at": {"$gte": since}}, {"target": 1, "site": 1, "status": 1,
                                              "apply": 1, "extra.full": 1}):
        # the embedded store answers a dotted projection with a flat "extra.full" key
        full = doc.get("extra.full", (doc.get("extra") or {}).get("full"))
        if doc.get("target") == TARGET and doc.get("site") == site and doc.get("apply") \
                and doc.get("status") == "ok" and full:
            return False
    return True
# ids per watermark update (one request each; the store's cost is per updated document)
WATERMARK_CHUNK = 2000
_COLLECTIONS = {"users": User, "groups": Group, "storages": Storage}


@dataclass
class Report(ItemOutcomes):
    plan: Plan
    dry_run: bool
    items: list[SyncItem] = field(default_factory=list)
    run_id: str | None = None
    writes: dict[str, int] = field(default_factory=dict)
    watermarked: int = 0
    redirtied: int = 0
    watermark_writes: int = 0  # store writes of the watermark phase
    unchanged: bool = False    # the fingerprint matched the site's mark: nothing was read
    by_name: bool = False      # incremental with a mark: entries read by name, no listing
    guard_exceeded: bool = False
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase

    @property
    def applied(self) -> bool:
        return not self.dry_run

    def as_dict(self) -> dict[str, Any]:
        return {"run": self.run_id, "dry_run": self.dry_run, **self.plan.as_dict(),
                "applied_writes": self.writes, "watermarked": self.watermarked,
                "redirtied": self.redirtied, "watermark_writes": self.watermark_writes,
                "unchanged": self.unchanged, "by_name": self.by_name,
                "timings": self.timings, "tally": self.tally(),
                "failed": [i.model_dump() for i in self.failed]}


# -- watermarks -------------------------------------------------------------------------------


def _succeeded(desired: DesiredState, planned: Plan, items: list[SyncItem]) -> set[RecordKey]:
    """Records to stamp: those in focus that were dirty or written, none of whose writes
    failed or were skipped. (A clean record compared by ``--full`` keeps its watermark.)"""
    bad: set[RecordKey] = set()
    written: set[RecordKey] = set()
    changes = planned.changes
    for index, change in enumerate(changes):  # apply_plan keeps the plan's order
        written.update(change.records)
        if index >= len(items) or items[index].outcome != "ok":
            bad.update(change.records)
    return (set(planned.focus.records) & (desired.dirty_records | written)) - bad


def _base_version(token: int | str) -> int:
    """The record's own ``ldap.version`` in a token (a storage's is ``v|map|volume``)."""
    return token if isinstance(token, int) else int(str(token).partition("|")[0])


async def _ids(collection_name: str, site: str, names: list[str]) -> dict[str, str]:
    """natural key (``Record.id``) -> ``_id`` for the named records."""
    model = _COLLECTIONS[collection_name]
    if collection_name != "storages":
        found = await model.get_pymongo_collection().find(
            {"name": {"$in": names}}, {"name": 1}).to_list()
        return {row["name"]: row["_id"] for row in found}
    wanted = set(names)
    found = await model.get_pymongo_collection().find(
        {"name": {"$in": sorted({n.partition("/")[2] for n in names})}},
        {"name": 1, "site": 1, "category": 1}).to_list()
    return {key: row["_id"] for row in found if row.get("site") == site
            and (key := f"{row.get('category')}/{row['name']}") in wanted}


async def write_watermarks(store: Store, desired: DesiredState,
                           records: Iterable[RecordKey]) -> tuple[int, int]:
    """Stamp on each record the token this run read (``ldap.synced_version.<site>``; the
    time in ``ldap.synced.<site>``, ``$currentDate``: the embedded store keeps a ``$set``
    datetime as a string) and drop both from users who left the site. Never a later
    token: a record changed since this run read it keeps a version above the stamp, so
    it stays dirty with no second write (counted as re-dirtied). Returns (stamped,
    re-dirtied). Runs that cover part of a site use this; a whole-site run writes the
    site's mark instead (``write_site_mark``)."""
    path = f"ldap.synced.{desired.site}"
    token_path = f"ldap.synced_version.{desired.site}"
    stamp: dict[str, list[tuple[str, int | str]]] = {}
    unstamp: list[str] = []
    for key in records:
        record = desired.records.get(key)
        if record is None:
            continue
        if key[0] == "user" and key[1] in desired.former_users:
            unstamp.append(record.id)
        else:
            stamp.setdefault(record.collection, []).append((record.id, record.version))
    stamped = redirtied = 0
    async with store.exclusive():
        for collection_name, named in stamp.items():
            collection = _COLLECTIONS[collection_name].get_pymongo_collection()
            ids = await _ids(collection_name, desired.site, [n for n, _ in named])
            snapshot = {ids[n]: when for n, when in named if n in ids}
            order = sorted(snapshot)
            for start in range(0, len(order), WATERMARK_CHUNK):
                chunk = order[start:start + WATERMARK_CHUNK]
                # by _id alone (the embedded store's fast path), one request per chunk
                await collection.bulk_write([UpdateOne(
                    {"_id": i}, {"$set": {token_path: snapshot[i]},
                                 "$currentDate": {path: True}}) for i in chunk], ordered=False)
                stamped += len(chunk)
                async for row in collection.find({"_id": {"$in": chunk}}, {"ldap": 1}):
                    seen = (row.get("ldap") or {}).get("version") or 0
                    if seen != _base_version(snapshot[row["_id"]]):
                        redirtied += 1  # changed after the read: its version moved past
        if unstamp:
            users = User.get_pymongo_collection()
            for start in range(0, len(unstamp), WATERMARK_CHUNK):
                await users.update_many({"name": {"$in": unstamp[start:start + WATERMARK_CHUNK]}},
                                        {"$unset": {path: "", token_path: ""}})
    return stamped, redirtied


def _whole_site(scope: Scope) -> bool:
    """Runs that write the site's mark: every kind, the full prune, no single record."""
    return (scope.only_users is None and scope.only_groups is None and not scope.bootstrap
            and {"users", "groups", "automounts", "prune"} <= scope.kinds
            and set(PRUNE_KINDS) <= scope.prune)


async def write_site_mark(store: Store, desired: DesiredState, planned: Plan,
                          items: list[SyncItem], previous: SiteMark | None, through_ms: int,
                          print_: dict[str, Any]) -> tuple[int, int]:
    """After a whole-site run: the site's mark (one write) and the per-record stamps of
    users who left the site (dropped). Returns (records covered, store writes)."""
    bad: set[RecordKey] = set()
    rosters = {"users": set(desired.users), "groups": set(desired.groups),
               "automounts": {f"{m}/{k}" for m, k in desired.automounts}}
    kinds = {"user": "users", "group": "groups", "automount": "automounts"}
    for index, change in enumerate(planned.changes):  # apply_plan keeps the plan's order
        if index < len(items) and items[index].outcome == "ok":
            continue
        bad.update(change.records)
        kind, _, name = change.label.partition(" ")
        roster = rosters.get(kinds.get(kind, ""))
        if roster is None or change.mods:  # containers, or a modify (the entry is there)
            continue
        if change.op == "delete":
            roster.add(name)      # still there: the next run deletes it again
        else:
            roster.discard(name)  # an add or recreation that failed: maybe missing
    for user in desired.former_users:
        if ("user", user) in bad:
            rosters["users"].add(user)  # memberships still to drop
    # the token read for every record this run covers (a clean one's equals what the
    # previous mark or its own stamp held); a failed one stays out, so it stays dirty
    versions = {key_text(k): r.version for k, r in desired.records.items() if k not in bad}
    mark = SiteMark(
        site=desired.site, through_ms=through_ms, versions=versions,
        pending=frozenset(key_text(k) for k in bad),
        rosters={k: frozenset(v) for k, v in rosters.items()}, fingerprint=print_,
        stale_ms=None if desired.stale_at is None else ms(desired.stale_at))
    async with store.exclusive():
        writes = await write_mark(mark, previous)
    left = [("user", u) for u in desired.former_users if ("user", u) not in bad]
    if left:
        await write_watermarks(store, desired, left)
        writes += 1
    return len(desired.records) - len(bad & set(desired.records)), writes


# -- runs ---------------------------------------------------------------------------------------


@asynccontextmanager
async def _connected(config: LDAPConfig, given: Directory | None,
                     concurrency: int) -> AsyncIterator[Directory]:
    if given is not None:
        yield given
        return
    # ``concurrency`` requests in flight, over at most ``pool_max_connections``
    # connections: several requests pipeline on one connection (slapd runs them on its
    # threads), which costs the client far less than a connection each
    size = max(min(config.pool_max_connections, concurrency), 1)
    async with Directory(config, max_connections=size,
                         window=-(-max(concurrency, 1) // size)) as directory:
        yield directory


class _Clock:
    def __init__(self) -> None:
        self.last = time.monotonic()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name] = round(now - self.last, 3)
        self.last = now


def scope_for(config: LDAPConfig, **kwargs: Any) -> Scope:
    return Scope(protected_users=frozenset(config.protected_users), **kwargs)


async def run(store: Store, config: LDAPConfig, site_name: str, *, scope: Scope,
              dry_run: bool = False, max_deletions: int | None = 50, concurrency: int = 1,
              author: str | None = None, command: str = "sync-site",
              directory: Directory | None = None, allow_deletions: int | None = None) -> Report:
    """One reconcile run of ``scope`` at ``site_name``. An applying run holds the site's
    lease from before it reads the directory until its watermarks are written."""
    site = await get_site(site_name)
    ttl = timedelta(seconds=config.lease_seconds)
    try:
        async with maybe_lease(store, TARGET, site.name, not dry_run, ttl=ttl) as held:
            if held is not None:
                await close_stale_runs(store, target=TARGET, site=site.name)
            with logged_run(site.name) as run_id:
                return await _run(store, config, site.name, scope=scope, held=held,
                                  max_deletions=max_deletions, concurrency=concurrency,
                                  author=author, command=command, directory=directory,
                                  allow_deletions=allow_deletions, run_id=run_id)
    except Busy as exc:
        await _record_busy(store, site.name, author, command, exc)
        raise


async def _record_busy(store: Store, site: str, author: str | None, command: str,
                       exc: Busy) -> None:
    run = SyncRun(target=TARGET, site=site, author=author, apply=True, status="failed",
                  error=exc.message, finished_at=utcnow(), duration_s=0.0,
                  holder=holder_name(), extra={"command": command, "busy": True})
    record_end(run)
    async with store.exclusive():
        await run.insert()


async def _run(store: Store, config: LDAPConfig, site: str, *, scope: Scope,
               held: Held | None, max_deletions: int | None, concurrency: int,
               author: str | None, command: str, directory: Directory | None,
               allow_deletions: int | None, run_id: str) -> Report:
    dry_run = held is None
    started = time.monotonic()
    sync_run = SyncRun(id=run_id, target=TARGET, site=site,
                       author=author, apply=not dry_run,
                       holder=held.holder if held else holder_name(),
                       lease=held.key if held else None,
                       extra={"command": command, "full": scope.full, "force": scope.force,
                              "scope": sorted(scope.kinds), "concurrency": concurrency,
                              "max_deletions": max_deletions})
    async with store.exclusive():
        await sync_run.insert()
    journal = RunJournal(store, sync_run, held=held)
    report: Report | None = None
    try:
        for user in sorted(scope.only_users or ()):
            await get_user(user)
        for group in sorted(scope.only_groups or ()):
            await get_group(group)
        clock = _Clock()
        whole = _whole_site(scope)
        mark = await read_mark(site, versions=False)  # the tokens only once something moved
        # a prune alone is a sweep of the directory: it lists, whatever the mark says
        incremental = mark is not None and not (scope.full or scope.force or scope.bootstrap) \
            and bool(scope.kinds & {"users", "groups", "automounts"})
        print_: dict[str, Any] = {}
        if whole and (incremental or not dry_run):
            print_ = await fingerprint(site, (await get_site(site)).updated_at)
        if whole and incremental and mark is not None and not mark.pending \
                and print_ == dict(mark.fingerprint) and mark.fresh(utcnow()):
            clock.lap("desired")
            report = Report(Plan(site, (), Focus()), dry_run=dry_run, run_id=sync_run.id,
                            timings=clock.laps, unchanged=True)
            sync_run.extra["unchanged"] = True
            sync_run.status = "ok"
            return report
        if mark is not None:
            mark = await with_versions(mark)
        # "synced as of" (display): the store's clock before the reads
        through_ms = await store_clock_ms(site) if whole and not dry_run else None
        desired = await desired_state(site, config, mark=mark, incremental=incremental)
        clock.lap("desired")
        if scope.bootstrap and not desired.special_groups:
            raise InvalidInput(f"no access or status groups to create; {SEED_HINT}")
        seen = focus(desired, scope)
        async with _connected(config, directory, concurrency) as connected:
            actual = await actual_state(connected, desired, scope, seen)
            clock.lap("actual")
            planned = plan(desired, actual, scope, seen)
            clock.lap("plan")
            report = Report(planned, dry_run=dry_run, run_id=sync_run.id, timings=clock.laps,
                            by_name=desired.known is not None)
            if dry_run:
                report.guard_exceeded = max_deletions is not None \
                    and len(planned.removals) > max_deletions
            else:
                check_guard(planned, max_deletions)
                sync_run.extra["budget"] = await check_budget(
                    TARGET, site, planned.removals, per_day=config.max_deletions_per_day,
                    allow=allow_deletions, what="LDAP entries or member/key values",
                    exclude=sync_run.id)
                before = Counter(connected.writes)
                report.items = await apply_plan(planned, connected, concurrency=concurrency,
                                                max_deletions=max_deletions, held=held,
                                                journal=journal)
                report.writes = dict(Counter(connected.writes) - before)
                clock.lap("apply")
                if whole and through_ms is not None:
                    report.watermarked, report.watermark_writes = await write_site_mark(
                        store, desired, planned, report.items, mark, through_ms, print_)
                else:
                    report.watermarked, report.redirtied = await write_watermarks(
                        store, desired, _succeeded(desired, planned, report.items))
                    report.watermark_writes = report.watermarked
                clock.lap("watermarks")
        sync_run.status = "ok" if report.ok else "failed"
        if held is not None and held.lost is not None:
            sync_run.error = held.lost
        elif not report.ok:
            sync_run.error = (f"{len(report.failed)} LDAP write(s) failed, "
                              f"{len(report.skipped)} skipped")
        return report
    except Exception as exc:
        note_raised(sync_run, exc)
        raise
    finally:
        stamp_end(sync_run, started)
        if report is not None:
            sync_run.counts = {**report.plan.counts, "writes": report.plan.writes,
                               "deletions": len(report.plan.deletions),
                               "removals": len(report.plan.removals),
                               "removed": sum(i.removals for i in report.items
                                              if i.outcome == "ok"),
                               "watermarked": report.watermarked,
                               "redirtied": report.redirtied}
            sync_run.extra["notes"] = list(report.plan.notes)
            sync_run.extra["timings"] = report.timings
            sync_run.extra["items_total"] = len(report.items)
            # a dry run stores its plan: the changes an apply would write, ``planned``
            await journal.finish(_stored_items(report.items) if report.items or not dry_run
                                 else _planned_items(report.plan))
        record_end(sync_run, report.items if report else [],
                   plan=report.plan if report else None)
        async with store.exclusive():
            await sync_run.save()


async def sync_site(store: Store, config: LDAPConfig, site: str, *, full: bool = False,
                    prune: bool = True, force: bool = False, dry_run: bool = False,
                    max_deletions: int | None = 50, concurrency: int = 1,
                    author: str | None = None, allow_deletions: int | None = None) -> Report:
    """A whole-site sync (users, groups, automounts and, unless ``prune`` is off, the
    prune): what ``ng ldap sync-site`` and the scheduled task run."""
    kinds = {"users", "groups", "automounts"} | ({"prune"} if prune else set())
    return await run(store, config, site, scope=scope_for(
        config, kinds=frozenset(kinds), full=full, force=force), dry_run=dry_run,
        max_deletions=max_deletions, concurrency=concurrency, author=author,
        allow_deletions=allow_deletions)


def _planned_items(planned: Plan) -> list[SyncItem]:
    """A dry run's items: one ``planned`` item per change, in batch order, as
    ``apply_plan`` would start them (the runs page's commands and drift)."""
    return [SyncItem(batch=batch.label, command=str(change), targets=[change.label],
                     removals=change.removals)
            for batch in planned.batches for change in batch.changes]


# -- clearing a tree ----------------------------------------------------------------------------


@dataclass
class ClearReport:
    base: str
    dry_run: bool
    dns: list[str]
    items: list[SyncItem] = field(default_factory=list)
    run_id: str | None = None
    guard_exceeded: bool = False

    @property
    def failed(self) -> list[SyncItem]:
        return [i for i in self.items if i.outcome != "ok"]


def _under(dn: str, base: str) -> bool:
    return dn == base or dn.endswith("," + base)


def clear_order(entries: Iterable[Entry], base: str, exclude: Iterable[str],
                keep: Iterable[str] = ()) -> list[str]:
    """DNs strictly under ``base`` to delete, deepest first: nothing inside an excluded
    subtree, nor any ancestor of one (it could not be deleted), nor the ``keep`` DNs."""
    norm_base = normalize_dn(base)
    excluded = [normalize_dn(e) for e in exclude if e]
    kept = {normalize_dn(k) for k in keep if k}
    chosen: list[tuple[int, str]] = []
    for item in entries:
        norm = normalize_dn(item.dn)
        if norm == norm_base or not _under(norm, norm_base) or norm in kept:
            continue
        if any(_under(norm, e) or _under(e, norm) for e in excluded):
            continue
        if any(_under(k, norm) for k in kept):
            continue
        chosen.append((dn_depth(item.dn), item.dn))
    return [dn for _, dn in sorted(chosen, key=lambda x: (-x[0], x[1]))]


async def clear_tree(store: Store, config: LDAPConfig, *, base: str, exclude: list[str],
                     max_deletions: int | None = 200, dry_run: bool = False,
                     concurrency: int = 4, author: str | None = None,
                     label: str = "*", directory: Directory | None = None) -> ClearReport:
    """Delete every entry under ``base`` (not ``base`` itself), deepest first, one depth
    at a time; refuses past ``max_deletions``. The bind DN is never deleted."""
    started = time.monotonic()
    sync_run = SyncRun(target=TARGET, site=label, author=author, apply=not dry_run,
                       extra={"command": "clear-tree", "base": base, "exclude": exclude})
    async with store.exclusive():
        await sync_run.insert()
    report: ClearReport | None = None
    try:
        async with _connected(config, directory, concurrency) as connected, \
                maybe_lease(store, TARGET, label, not dry_run,
                            ttl=timedelta(seconds=config.lease_seconds)):
            listing = await connected.search(base, "sub", "(objectClass=*)", ["1.1"],
                                             missing_ok=False)
            order = clear_order(listing, base, exclude, [config.login_dn or ""])
            report = ClearReport(base, dry_run, order, run_id=sync_run.id)
            report.guard_exceeded = max_deletions is not None and len(order) > max_deletions
            if report.guard_exceeded and not dry_run:
                raise GuardTripped(f"clearing {base} deletes {len(order)} entries, more than "
                                   f"--max-deletions {max_deletions}; nothing was changed",
                                   would_delete=order)
            if not dry_run:
                report.items = await _delete_in_bands(order, connected, concurrency)
                if any(item.outcome == "ok" for item in report.items):
                    # the sites' marks say what exists in the directory: no longer true
                    async with store.exclusive():
                        await forget_marks()
        sync_run.status = "ok" if not report.failed else "failed"
        return report
    except Exception as exc:
        note_raised(sync_run, exc, keep_would_delete=False)
        raise
    finally:
        stamp_end(sync_run, started)
        if report is not None:
            sync_run.counts = {"deletions": len(report.dns)}
            await RunJournal(store, sync_run).finish(_stored_items(report.items))
        record_end(sync_run, report.items if report else [],
                   changes={"remove": len(report.dns)} if report else None)
        async with store.exclusive():
            await sync_run.save()


async def _delete_in_bands(order: list[str], directory: Directory,
                           concurrency: int) -> list[SyncItem]:
    items: list[SyncItem] = []
    limit = asyncio.Semaphore(max(concurrency, 1))
    bands: dict[int, list[str]] = {}
    for dn in order:
        bands.setdefault(dn_depth(dn), []).append(dn)

    async def one(dn: str) -> SyncItem:
        base = {"batch": "clear tree", "command": f"delete {dn}", "targets": [dn]}
        async with limit:
            try:
                await directory.delete(dn, missing_ok=True)
            except DirectoryError as exc:
                return SyncItem(**base, outcome="failed", detail=exc.message)
        return SyncItem(**base, outcome="ok")

    for depth in sorted(bands, reverse=True):
        items.extend(await asyncio.gather(*(one(dn) for dn in bands[depth])))
    return items


# -- inspection (``ng ldap show …``) --------------------------------------------------------


async def _watermarks(kind: str, name: str, info: Any,
                      sites: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Per site: when the record was last brought up to date there (its own stamp, or
    the site's mark when that covers it) and whether it is dirty."""
    found: dict[str, dict[str, Any]] = {}
    for site in sorted(set(sites) | set(info.synced)):
        mark = await read_mark(site)
        own = info.synced_version.get(site)
        covered = mark is not None and mark.covers((kind, name), info.version)
        when = info.synced.get(site) if own == info.version else None
        if covered and mark is not None:
            through = datetime.fromtimestamp(mark.through_ms / 1000, UTC)
            when = through if when is None else max(when, through)
        found[site] = {"synced_at": when, "version": info.version,
                       "dirty": not is_clean((kind, name), info.version, own, mark)}
    return found


async def needs_sync(kind: str, name: str, site: str) -> bool:
    """Whether the user or group ``name`` is dirty at ``site`` (its own stamp and the
    site's mark both considered)."""
    record = await (get_user(name) if kind == "user" else get_group(name))
    return not is_clean((kind, name), record.ldap.version,
                        record.ldap.synced_version.get(site), await read_mark(site))


async def describe_user(config: LDAPConfig, name: str, site: str | None = None,
                        *, directory: Directory | None = None) -> dict[str, Any]:
    """The user's entry as LDAP holds it, its sync state per site, and (with ``site``)
    what a sync would change in it and in the site's groups."""
    user = await get_user(name)
    layout = Layout.for_site(config, site or "-")
    dn = layout.user_dn(name)
    data: dict[str, Any] = {"user": name, "dn": dn, "ignore": user.ldap.ignore,
                            "modified_at": user.ldap.modified_at,
                            "sites": await _watermarks("user", name, user.ldap,
                                                       await user_sites(name))}
    async with _connected(config, directory, 1) as connected:
        found = await connected.get(dn, ["objectClass", *USER_ATTRS])
        have = parse_entry("user", found) if found else None
        data["entry"] = have.as_dict() if have else None
        if site is None:
            return data
        desired = await desired_state(site, config, mark=await read_mark(site))
        want = desired.users.get(name)
        data["on_site"] = want is not None
        if want is None:
            data["pending"] = []
        elif have is None:
            data["pending"] = ["add entry"]
        else:
            mods, recreate = entry_mods(want, have)
            data["pending"] = ["recreate entry"] if recreate else [str(m) for m in mods]
        by_uid, by_dn = (await read_memberships(connected, desired, [name]))[name]
        should = {g for g, e in desired.groups.items() if name in e.get("memberUid")}
        listed = by_uid | by_dn
        data["groups"] = {"desired": sorted(should), "ldap": sorted(listed),
                          "missing": sorted(should - by_uid) + sorted(
                              f"{g} (member DN)" for g in should - by_dn),
                          "extra": sorted(listed - should)}
    return data


async def describe_group(config: LDAPConfig, name: str, site: str, *,
                         directory: Directory | None = None) -> dict[str, Any]:
    group = await get_group(name)
    desired = await desired_state(site, config, mark=await read_mark(site))
    dn = desired.layout.group_dn(name)
    want = desired.groups.get(name)
    data: dict[str, Any] = {"group": name, "site": desired.site, "dn": dn,
                            "at_site": want is not None, "ignore": group.ldap.ignore,
                            "modified_at": group.ldap.modified_at,
                            "sync": (await _watermarks("group", name, group.ldap,
                                                       [desired.site]))[desired.site]}
    async with _connected(config, directory, 1) as connected:
        found = await connected.get(dn, ["objectClass", *GROUP_ATTRS])
    have = parse_entry("group", found) if found else None
    data["entry"] = have.as_dict() if have else None
    wanted = sorted(want.get("memberUid")) if want else []
    present = sorted(have.get("memberUid")) if have else []
    data["members"] = {"desired": wanted, "missing": sorted(set(wanted) - set(present)),
                       "extra": sorted(set(present) - set(wanted))}
    if want is None:
        data["pending"] = ["delete entry (prune)"] if have else []
    elif have is None:
        data["pending"] = ["add entry"]
    else:
        mods, recreate = entry_mods(want, have)
        data["pending"] = ["recreate entry"] if recreate else [str(m) for m in mods]
    return data


async def describe_site(config: LDAPConfig, site: str, *,
                        directory: Directory | None = None) -> dict[str, Any]:
    """Where the site lives in LDAP, how much is there, what is dirty, the last run, and
    the site's mark (as of when, what failed, what it knows to be in the directory)."""
    mark = await read_mark(site)
    desired = await desired_state(site, config, mark=mark)
    layout = desired.layout
    async with _connected(config, directory, 1) as connected:
        users = await connected.search(layout.users, "one", "(objectClass=posixAccount)",
                                       ["1.1"])
        groups = await connected.search(layout.groups, "one", "(objectClass=posixGroup)",
                                        ["1.1"])
        keys = await connected.search(layout.automount, "sub", "(objectClass=automount)",
                                      ["1.1"])
    last = await SyncRun.find({"target": TARGET, "site": desired.site}).sort(
        -SyncRun.started_at).limit(1).to_list()
    return {
        "site": desired.site,
        "layout": {"users": layout.users, "site": layout.site_dn, "groups": layout.groups,
                   "automount": layout.automount},
        "store": {"users": len(desired.users), "groups": len(desired.groups),
                  "automount_keys": len(desired.automounts),
                  "ignored": len(desired.ignored_users) + len(desired.ignored_groups)
                  + len(desired.ignored_automounts)},
        "dirty": {"users": len(desired.dirty_users), "left_site": len(desired.former_users),
                  "groups": len(desired.dirty_groups),
                  "automount_keys": len(desired.dirty_automounts)},
        "ldap": {"posix_users_in_base": len(users), "groups": len(groups),
                 "automount_keys": len(keys)},
        "last_run": None if not last else {
            "id": last[0].id, "status": last[0].status, "started_at": last[0].started_at,
            "apply": last[0].apply, "counts": last[0].counts, "error": last[0].error},
        "mark": None if mark is None else {
            "through": datetime.fromtimestamp(mark.through_ms / 1000, UTC),
            "pending": sorted(mark.pending),
            "known": {kind: len(mark.roster(kind)) for kind in ("users", "groups",
                                                               "automounts")}},
        "notes": list(desired.notes),
    }
