"""UC Davis IAM: the per-user state machine, the all-users driver, creation from IAM, and
the reaper.

IAM is asked *before* any transaction opens (``fetch_lookup``); ``SyncUserIAM`` then
applies the answer in one transaction. So an IAM timeout, 5xx or malformed body writes
nothing at all: the driver tallies it as ``transient_error`` and the next run tries
again.

State machine (user and admin accounts only):

- **hit**: the snapshot ``user.iam`` is replaced and the missing streak ends; the
  fields enabled in ``ucdiam.refresh`` (e-mail, full name, and — off by default — the
  login name) take IAM's values. An offboarding user whose expiry is still ahead is
  restored to active (``hit_restored``); inactive and disabled users are never revived.
- **miss**: the streak starts at the first miss (``first_missing_at``). While the user
  has been missing for less than ``grace_days`` (less an hour of slack for schedule
  jitter) the outcome is ``miss_first`` / ``miss_within_grace``. After that (with
  ``grace_days: 0`` at once: the first miss counts): a pending future expiry ->
  ``miss_already_expiring``; a user who is not active -> ``miss_not_active``; otherwise
  the user becomes offboarding with ``expires_at = now + expiry_offset_days``, per-site
  status overrides cleared (``miss_offboarding``).

History gets a row only when something changed beyond bookkeeping timestamps (a status
change, a streak starting, a refreshed field, a first snapshot), so a nightly sync of
thousands of present users does not grow History by thousands of rows.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pymongo.asynchronous.client_session import AsyncClientSession

from .. import progress
from ..adapters.http import HttpAuthError
from ..adapters.iam import IAMBundle, IAMClient, IAMTransientError
from ..config import IAMConfig, IAMRefresh
from ..config.offboarding import OffboardingConfig
from ..constants import IAM_SYNCABLE_USER_TYPES
from ..errors import CheetoError, InvalidInput, NotFound
from ..models import SyncRun, User
from ..models.fields import Email, PosixName, UnixId, utcnow
from ..models.iam import UCDIAMAssociation, UCDIAMInfo, UCDIAMPerson
from ..queries.iam import as_utc, find_reapable_users, iam_sync_candidates
from ..queries.user import get_user
from ..store import Store
from ..sync.run_metrics import record_end
from .base import OpArgs, Operation
from .common import (
    clear_site_statuses,
    global_status_comment,
    mark_ldap_dirty,
    mark_root_key_holders_dirty,
)
from .notify import Notifier
from .user import CreateUser, RenameUser

log = logging.getLogger(__name__)

Outcome = Literal["hit", "hit_restored", "miss_first", "miss_within_grace", "miss_offboarding",
                  "miss_already_expiring", "miss_not_active"]
OUTCOMES: tuple[str, ...] = ("hit", "hit_restored", "miss_first", "miss_within_grace",
                             "miss_offboarding", "miss_already_expiring", "miss_not_active")
# A run that comes a little early (scheduling jitter) still counts as a full day later.
GRACE_SLACK = timedelta(hours=1)
MAX_DAYS = 36500  # a century: larger offsets overflow dates (year 9999)
RECORDED = frozenset({"hit_restored", "miss_first", "miss_offboarding"})
TALLY_KEYS = (*OUTCOMES, "transient_error", "error", "skipped_inactive",
              "notified_offboarding", "notified_restored", "notify_error")


# -- what IAM said ---------------------------------------------------------------------------


class IAMFacts(BaseModel):
    """The person as the state machine needs it (plain data, fit for ``Args``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    iam_id: str
    mothra_id: str | None = None
    user_id: str | None = None
    full_name: str | None = None
    email: str | None = None  # campusEmail, else email
    user_types: list[str] = Field(default_factory=list)
    associations: list[UCDIAMAssociation] = Field(default_factory=list)

    @classmethod
    def from_bundle(cls, bundle: IAMBundle) -> IAMFacts:
        person = bundle.person
        associations = []
        for appt in bundle.appointments:
            division = bundle.divisions.get(appt.org_id or "")
            associations.append(UCDIAMAssociation(
                org_id=appt.org_id, org_name=division.name if division else None,
                org_code=division.code if division else None, dept_name=appt.dept_name,
                dept_code=appt.dept_code, title=appt.title, title_type=appt.title_type))
        return cls(iam_id=person.iam_id, mothra_id=person.mothra_id, user_id=person.user_id,
                   full_name=person.full_name, email=person.campus_email or person.email,
                   user_types=list(person.user_types), associations=associations)

    def snapshot(self, now: datetime) -> UCDIAMInfo:
        mothra = int(self.mothra_id) if self.mothra_id and self.mothra_id.isdigit() else None
        return UCDIAMInfo(
            iam_status="present",
            person=UCDIAMPerson(iam_id=self.iam_id, mothra_id=mothra,
                                user_types=list(dict.fromkeys(self.user_types)),
                                associations=list(self.associations)),
            iam_synced_at=now, last_seen_at=now, first_missing_at=None)


class IAMLookup(BaseModel):
    """The answer for one user: ``facts`` None means IAM does not know them (definitive)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    facts: IAMFacts | None = None
    resolved_by: Literal["cached", "username", "email"] | None = None


async def fetch_lookup(client: IAMClient, user: User) -> IAMLookup:
    """Resolve the IAM id (cached, else by login name, else by e-mail) and fetch the
    person; raises ``IAMTransientError`` (or ``HttpAuthError``) without concluding."""
    cached = user.iam.person.iam_id if user.iam and user.iam.person else None
    resolved_by: Literal["cached", "username", "email"] | None = None
    iam_id = None
    if cached:
        iam_id, resolved_by = cached, "cached"
    else:
        iam_id = await client.iam_id_by_username(user.name)
        resolved_by = "username"
        if iam_id is None and user.email:
            iam_id = await client.iam_id_by_email(user.email)
            resolved_by = "email"
    if iam_id is None:
        return IAMLookup()
    bundle = await client.bundle(iam_id)
    if bundle is None:
        return IAMLookup(resolved_by=resolved_by)
    return IAMLookup(facts=IAMFacts.from_bundle(bundle), resolved_by=resolved_by)


# -- the state machine (pure) ----------------------------------------------------------------


@dataclass(frozen=True)
class MissPlan:
    outcome: Outcome
    first_missing_at: datetime
    offboard: bool = False


def plan_miss(user: User, now: datetime, grace_days: int) -> MissPlan:
    """What a miss means for ``user`` at ``now`` (no I/O)."""
    info = user.iam
    streak = as_utc(info.first_missing_at) if info and info.iam_status == "missing" else None
    first = streak is None
    started = streak or now
    expires = as_utc(user.expires_at)
    if now - started < timedelta(days=grace_days) - GRACE_SLACK:
        return MissPlan("miss_first" if first else "miss_within_grace", started)
    if expires is not None and expires > now:
        return MissPlan("miss_already_expiring", started)
    if user.status != "active":
        return MissPlan("miss_not_active", started)
    return MissPlan("miss_offboarding", started, offboard=True)


def plan_hit(user: User, now: datetime) -> Outcome:
    expires = as_utc(user.expires_at)
    if user.status == "offboarding" and expires is not None and expires > now:
        return "hit_restored"
    return "hit"


@dataclass(frozen=True)
class SyncUserIAMResult:
    username: str
    email: str
    outcome: Outcome
    iam_id: str | None
    resolved_by: str | None
    status: str | None
    expires_at: datetime | None
    refreshed: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class SyncUserIAM(Operation):
    """Apply one IAM answer to one user (see the module doc)."""

    op_name = "sync_user_iam"

    class Args(OpArgs):
        username: PosixName
        lookup: IAMLookup
        now: datetime
        grace_days: int = Field(default=1, ge=0, le=MAX_DAYS)
        expiry_offset_days: int = Field(default=30, ge=0, le=MAX_DAYS)
        refresh: IAMRefresh = Field(default_factory=IAMRefresh)

    async def execute(self, session: AsyncClientSession) -> SyncUserIAMResult:
        a = self.args
        now = as_utc(a.now)
        assert now is not None
        user = await get_user(a.username, session)
        if user.type not in IAM_SYNCABLE_USER_TYPES:
            raise InvalidInput(f"{user.name!r} is a {user.type} account; IAM syncs only "
                               f"{', '.join(IAM_SYNCABLE_USER_TYPES)} accounts")
        self.before = {"status": user.status, "iam_status": user.iam.iam_status
                       if user.iam else None}
        self.refreshed: dict[str, Any] = {}
        self.cleared_sites: list[str] = []
        facts = a.lookup.facts
        if facts is not None:
            user = await self._refresh(user, facts, session)
            outcome = plan_hit(user, now)
            user.iam = facts.snapshot(now)
            if outcome == "hit_restored":
                user.status, user.expires_at = "active", None
                user.comments.append(global_status_comment("active", "IAM lists the user again"))
        else:
            plan = plan_miss(user, now, a.grace_days)
            outcome = plan.outcome
            info = user.iam.model_copy() if user.iam else UCDIAMInfo()
            info.iam_status, info.iam_synced_at = "missing", now
            info.first_missing_at = plan.first_missing_at
            user.iam = info
            if plan.offboard:
                user.status = "offboarding"
                user.expires_at = now + timedelta(days=a.expiry_offset_days)
                user.comments.append(global_status_comment(
                    "offboarding", f"missing from IAM since {plan.first_missing_at:%Y-%m-%d}"))
        await user.save(session=session)
        if outcome == "miss_offboarding":
            self.cleared_sites = await clear_site_statuses(user.name, session)
        self.outcome: Outcome = outcome
        self.result = SyncUserIAMResult(
            username=user.name, email=user.email, outcome=outcome,
            iam_id=facts.iam_id if facts else None, resolved_by=a.lookup.resolved_by,
            status=user.status, expires_at=user.expires_at, refreshed=self.refreshed)
        return self.result

    async def _refresh(self, user: User, facts: IAMFacts,
                       session: AsyncClientSession) -> User:
        """Take IAM's name, e-mail and full name where ``refresh`` says so and they are
        valid; invalid IAM values are left out (logged), never fatal."""
        wanted = self.args.refresh  # type: ignore[attr-defined]
        if wanted.name and facts.user_id and facts.user_id != user.name:
            new = facts.user_id.strip().lower()
            try:
                await RenameUser.within(self, session, name=user.name, new_name=new)
                self.refreshed["name"] = {"from": user.name, "to": new}
                user = await get_user(new, session)
            except CheetoError as exc:
                log.warning("IAM: not renaming %s to %r: %s", user.name, new, exc.message)
        for name, value in (("email", facts.email), ("fullname", facts.full_name)):
            if not getattr(wanted, name) or not value or value == getattr(user, name):
                continue
            try:
                old = getattr(user, name)
                setattr(user, name, value)  # validate_assignment checks the value
                self.refreshed[name] = {"from": old, "to": value}
            except ValidationError:
                log.warning("IAM: ignoring %s %r for %s (not valid)", name, value, user.name)
        return user

    @property
    def worth_recording(self) -> bool:
        return (self.outcome in RECORDED or bool(self.refreshed)
                or self.before["iam_status"] is None
                or self.before["iam_status"] != ("present" if self.outcome.startswith("hit")
                                                 else "missing"))

    def records_history(self) -> bool:
        return self.worth_recording  # History only for changes (see the module doc)

    def describe(self) -> dict[str, Any]:
        r = self.result
        return {"user": r.username, "outcome": r.outcome, "iam_id": r.iam_id,
                "resolved_by": r.resolved_by, "status_before": self.before["status"],
                "status": r.status, "expires_at": r.expires_at, "refreshed": r.refreshed,
                "cleared_site_statuses": self.cleared_sites}


@dataclass(frozen=True)
class IAMSettings:
    grace_days: int = 1
    expiry_offset_days: int = 30
    refresh: IAMRefresh = field(default_factory=IAMRefresh)

    def __post_init__(self) -> None:  # per-run overrides come straight from flags
        for name in ("grace_days", "expiry_offset_days"):
            if not 0 <= getattr(self, name) <= MAX_DAYS:
                raise InvalidInput(f"{name.replace('_', ' ')} must be 0..{MAX_DAYS}, "
                                   f"not {getattr(self, name)}")

    @classmethod
    def from_config(cls, config: IAMConfig, *, grace_days: int | None = None,
                    expiry_offset_days: int | None = None) -> IAMSettings:
        """The ``ucdiam`` settings, with optional per-run overrides."""
        return cls(config.grace_days if grace_days is None else grace_days,
                   config.expiry_offset_days if expiry_offset_days is None
                   else expiry_offset_days, config.refresh)


async def sync_user_iam(store: Store, author: str | None, client: IAMClient, username: str, *,
                        settings: IAMSettings, now: datetime | None = None
                        ) -> SyncUserIAMResult:
    """Ask IAM about one user, then apply the answer (nothing is written when IAM cannot
    answer: ``IAMTransientError`` propagates)."""
    user = await get_user(username)
    if user.type not in IAM_SYNCABLE_USER_TYPES:
        raise InvalidInput(f"{user.name!r} is a {user.type} account; IAM syncs only "
                           f"{', '.join(IAM_SYNCABLE_USER_TYPES)} accounts")
    lookup = await fetch_lookup(client, user)
    return await SyncUserIAM.run(store, author, username=user.name, lookup=lookup,
                                 now=now or utcnow(), grace_days=settings.grace_days,
                                 expiry_offset_days=settings.expiry_offset_days,
                                 refresh=settings.refresh)


def _date(value: datetime | None) -> str:
    return value.strftime("%B %d, %Y") if value else "soon"


async def notify_outcome(notifier: Notifier, result: SyncUserIAMResult,
                         tally: dict[str, int]) -> None:
    if result.outcome == "miss_offboarding":
        kind, key, extra = "offboarding_warning", "notified_offboarding", {
            "deactivation_date": _date(result.expires_at)}
    elif result.outcome == "hit_restored":
        kind, key, extra = "account_restored", "notified_restored", {}
    else:
        return
    ok = await notifier.send(kind, [result.email], context={"iam_outcome": result.outcome},
                             username=result.username, **extra)
    tally[key if ok else "notify_error"] += 1


@dataclass
class IAMSyncReport:
    tally: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TALLY_KEYS, 0))
    results: list[SyncUserIAMResult] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # user -> message
    run_id: str | None = None


async def sync_all_users_iam(store: Store, author: str | None, client: IAMClient, *,
                             settings: IAMSettings, types: list[str] | None = None,
                             max_users: int | None = None, concurrency: int = 1,
                             include_inactive: bool = False, notifier: Notifier | None = None,
                             now: datetime | None = None,
                             on_progress: Callable[[SyncUserIAMResult], None] | None = None,
                             ) -> IAMSyncReport:
    """Sync every user/admin account (``concurrency`` IAM conversations at a time, each
    user in its own transaction, one shared ``now``), tally the outcomes, notify
    offboarding and restored users (best effort), and record a ``SyncRun`` (target
    ``iam``). A refused API key stops the run and raises."""
    if concurrency < 1:
        raise InvalidInput("concurrency must be at least 1")
    now = as_utc(now) or utcnow()
    users, skipped = await iam_sync_candidates(types, include_inactive=include_inactive,
                                               max_users=max_users)
    report = IAMSyncReport()
    report.tally["skipped_inactive"] = skipped
    progress.begin(len(users), "IAM sync")
    started = time.monotonic()
    run = SyncRun(target="iam", site="all", author=author, apply=True,
                  extra={"types": types or list(IAM_SYNCABLE_USER_TYPES),
                         "concurrency": concurrency, "users": len(users)})
    async with store.exclusive():
        await run.insert()
    gate = asyncio.Semaphore(concurrency)
    fatal: list[HttpAuthError] = []

    async def one(user: User) -> None:
        async with gate:
            if fatal:
                return
            try:
                lookup = await fetch_lookup(client, user)
                result = await SyncUserIAM.run(
                    store, author, username=user.name, lookup=lookup, now=now,
                    grace_days=settings.grace_days,
                    expiry_offset_days=settings.expiry_offset_days, refresh=settings.refresh)
            except HttpAuthError as exc:
                fatal.append(exc)
                return
            except IAMTransientError as exc:
                report.tally["transient_error"] += 1
                report.errors[user.name] = exc.message
                return
            except Exception as exc:  # one user's problem never stops the others
                report.tally["error"] += 1
                report.errors[user.name] = exc.message if isinstance(exc, CheetoError) \
                    else f"{type(exc).__name__}: {exc}"
                log.warning("IAM sync of %s failed: %s", user.name, report.errors[user.name])
                progress.advance()
                return
        progress.advance()
        report.tally[result.outcome] += 1
        report.results.append(result)
        if on_progress is not None:
            on_progress(result)
        if notifier is not None:
            await notify_outcome(notifier, result, report.tally)

    try:
        await asyncio.gather(*(one(u) for u in users))
        if fatal:
            raise fatal[0]
        report.results.sort(key=lambda r: r.username)
        report.run_id = run.id
        t = report.tally
        hard = t["error"] or (t["transient_error"] and not report.results)
        run.status = "failed" if hard else "ok"
        if hard:
            first = next(iter(sorted(report.errors.items())), ("?", "?"))
            run.error = (f"{t['error']} error(s), {t['transient_error']} transient; first: "
                         f"{first[0]}: {first[1]}")
        return report
    except Exception as exc:
        run.status = "failed"
        run.error = exc.message if isinstance(exc, CheetoError) else f"{type(exc).__name__}: {exc}"
        raise
    finally:
        run.finished_at = utcnow()
        run.duration_s = round(time.monotonic() - started, 3)
        run.counts = {k: v for k, v in report.tally.items() if v}
        run.extra["errors"] = dict(sorted(report.errors.items())[:50])
        record_end(run)  # runs and duration by outcome, as the other targets' runs
        async with store.exclusive():
            await run.save()


# -- creating a user from IAM ----------------------------------------------------------------


async def create_user_from_iam(store: Store, author: str | None, client: IAMClient,
                               identifier: str, *, settings: IAMSettings,
                               user_type: str = "user", access: list[str] | None = None,
                               password: str | None = None, now: datetime | None = None,
                               ) -> tuple[User, SyncUserIAMResult]:
    """Create the account IAM describes (by e-mail if ``identifier`` has an ``@``, else by
    login name): name = userId, uid = gid = mothraId, e-mail = campus e-mail (else the
    e-mail on record, else the identifier), full name = display name (else official).
    Then store the IAM snapshot with the same answer (no second lookup)."""
    identifier = identifier.strip()
    if not identifier:
        raise InvalidInput("give a login name or an e-mail address")
    by_email = "@" in identifier
    iam_id = await (client.iam_id_by_email(identifier) if by_email
                    else client.iam_id_by_username(identifier.lower()))
    if iam_id is None:
        raise NotFound(f"IAM has no person with {'e-mail' if by_email else 'login'} "
                       f"{identifier!r}")
    bundle = await client.bundle(iam_id)
    if bundle is None:
        raise NotFound(f"IAM resolved {identifier!r} to {iam_id}, but has no such person")
    facts = IAMFacts.from_bundle(bundle)
    fields = user_fields_from_iam(facts, identifier if by_email else None)
    user, _ = await CreateUser.run(store, author, **fields, type=user_type,
                                   access=access or [], password=password)
    lookup = IAMLookup(facts=facts, resolved_by="email" if by_email else "username")
    result = await SyncUserIAM.run(store, author, username=user.name, lookup=lookup,
                                   now=now or utcnow(), grace_days=settings.grace_days,
                                   expiry_offset_days=settings.expiry_offset_days,
                                   refresh=IAMRefresh(name=False, email=False, fullname=False))
    return await get_user(user.name), result


class _NewUserFields(BaseModel):
    name: PosixName
    uid: UnixId
    email: Email
    fullname: str = Field(min_length=1)


def user_fields_from_iam(facts: IAMFacts, fallback_email: str | None) -> dict[str, Any]:
    """CreateUser arguments from IAM facts; a missing or invalid one is ``InvalidInput``
    naming the IAM field."""
    if not facts.user_id:
        raise InvalidInput(f"IAM person {facts.iam_id} has no login id (userId)")
    if not facts.mothra_id or not facts.mothra_id.isdigit():
        raise InvalidInput(f"IAM person {facts.iam_id} has no numeric mothraId "
                           f"({facts.mothra_id!r})")
    if not facts.full_name:
        raise InvalidInput(f"IAM person {facts.iam_id} has no name (dFullName/oFullName)")
    email = facts.email or fallback_email
    if not email:
        raise InvalidInput(f"IAM person {facts.iam_id} has no e-mail address")
    try:
        checked = _NewUserFields(name=facts.user_id.lower(), uid=int(facts.mothra_id),
                                 email=email, fullname=facts.full_name)
    except ValidationError as exc:
        from ..validation import describe_validation_error

        raise InvalidInput(f"IAM person {facts.iam_id}: {describe_validation_error(exc)}"
                           ) from None
    return checked.model_dump()


# -- reaping -----------------------------------------------------------------------------------


class ReapOffboardedUsers(Operation):
    """Deactivate every offboarding user whose expiry has passed (one transaction, one
    History row listing them), then apply each one's sites' offboarding policy
    (``policy``, the config's ``offboarding`` section; None keeps everything): SSH key
    records deleted, group roles at a site deleted, the user's own storage records
    given an expiry. Records only: LDAP, Slurm and the exports follow at their next
    sync, under its deletion cap and daily budget; no data on disk is touched. The
    user's status (inactive) is what LDAP, Slurm and puppet follow."""

    op_name = "reap_offboarded_users"

    class Args(OpArgs):
        now: datetime
        policy: OffboardingConfig | None = None

    async def execute(self, session: AsyncClientSession) -> list[User]:
        a = self.args
        now = as_utc(a.now)  # type: ignore[attr-defined]
        assert now is not None
        self.reaped: list[User] = []
        self.cleared: dict[str, list[str]] = {}
        self.applied: dict[str, dict[str, Any]] = {}
        for user in await find_reapable_users(now, session):
            user.status = "inactive"
            user.comments.append(global_status_comment(
                "inactive", f"offboarding expired {as_utc(user.expires_at):%Y-%m-%d}"))
            await user.save(session=session)
            sites = await clear_site_statuses(user.name, session)
            if sites:
                self.cleared[user.name] = sites
            self.reaped.append(user)
        if a.policy is not None and self.reaped:
            await self._apply_policy(a.policy, now, session)
        return self.reaped

    async def _apply_policy(self, policy: OffboardingConfig, now: datetime,
                            session: AsyncClientSession) -> None:
        from ..models import Group
        from ..queries.offboarding import policy_plan

        groups: set[str] = set()
        for plan in await policy_plan([u.name for u in self.reaped], policy, now, session):
            done: dict[str, Any] = {}
            for key in plan.keys:
                await key.delete(session=session)
            if plan.keys:
                done["ssh_keys_removed"] = len(plan.keys)
            for sp in plan.sites:
                for edge in sp.edges:
                    await edge.delete(session=session)
                    groups.add(edge.group)
                if sp.edges:
                    done.setdefault("memberships_removed", {})[sp.site] = sorted(
                        f"{e.group}:{','.join(e.roles)}" for e in sp.edges)
                for storage in sp.storages:
                    storage.expires_at = sp.storage_expires_at
                    await storage.save(session=session)
                if sp.storages:
                    done.setdefault("storage_expires", {})[sp.site] = {
                        "at": sp.storage_expires_at,
                        "records": sorted(s.name for s in sp.storages)}
            if plan.keys or done.get("memberships_removed"):
                await mark_ldap_dirty(User, [plan.user], session)
            if done:
                self.applied[plan.user] = done
        if groups:
            await mark_ldap_dirty(Group, groups, session)
        if any("ssh_keys_removed" in d for d in self.applied.values()):
            await mark_root_key_holders_dirty(session)

    def describe(self) -> dict[str, Any]:
        return {"now": self.args.now, "reaped": [u.name for u in self.reaped],  # type: ignore[attr-defined]
                "cleared_site_statuses": self.cleared, "policy_applied": self.applied}


@dataclass
class ReapReport:
    users: list[str]
    dry_run: bool
    notified: int = 0
    notify_errors: int = 0
    programs_ended: dict[str, list[str]] = field(default_factory=dict)
    policy: list[dict[str, Any]] = field(default_factory=list)  # rows per user and site
    without_expiry: list[str] = field(default_factory=list)


async def reap_offboarded_users(store: Store, author: str | None, *,
                                now: datetime | None = None, dry_run: bool = False,
                                notifier: Notifier | None = None,
                                offboarding: OffboardingConfig | None = None) -> ReapReport:
    """The reaper: first programmes that ended send their members offboarding
    (``program.EndPrograms``, own transaction, grace ``offboarding.program_grace_days``),
    then offboarding users past their expiry are deactivated and the sites'
    offboarding policy applied (``ReapOffboardedUsers``). ``dry_run`` lists exactly what
    a real run at the same ``now`` would do (the same queries), changing nothing; the
    report also names offboarding users without an expiry (never reaped)."""
    from ..queries.offboarding import offboarding_without_expiry, policy_plan
    from ..queries.program import due_program_members
    from .program import EndPrograms

    now = as_utc(now) or utcnow()
    offboarding = offboarding or OffboardingConfig()
    unexpiring = [u.name for u in await offboarding_without_expiry()]
    ended: dict[str, list[str]] = await due_program_members(now)
    if ended and not dry_run:
        ended = await EndPrograms.run(store, author, now=now,
                                      grace_days=offboarding.program_grace_days)
    due = await find_reapable_users(now)
    rows = [r for p in await policy_plan([u.name for u in due], offboarding, now)
            for r in p.rows()]
    if dry_run or not due:
        return ReapReport([u.name for u in due], dry_run=dry_run, programs_ended=ended,
                          policy=rows, without_expiry=unexpiring)
    reaped = await ReapOffboardedUsers.run(store, author, now=now, policy=offboarding)
    report = ReapReport([u.name for u in reaped], dry_run=False, programs_ended=ended,
                        policy=rows, without_expiry=unexpiring)
    if notifier is not None:
        for user in reaped:
            ok = await notifier.send("account_deactivated", [user.email],
                                     context={"reap": now.isoformat()}, username=user.name)
            report.notified += ok
            report.notify_errors += not ok
    return report
