"""HiPPO account requests: the event processor and its five handlers.

Processing (``process_events``), under the ``hippo:all`` lease, one ``SyncRun`` per run:

1. fetch the pending events once (a 401/403 is an error, never an empty queue); entries
   without an integer id are counted as unreadable and skipped;
2. for each event (serially, in queue order): upsert the local ``HippoEvent`` keyed by
   (hippo_id, endpoint); its site comes from ``hippo.site_aliases`` or a site's name,
   fqdn or aliases, case-insensitively;
3. a local record that is already terminal (Complete, Failed, Canceled) is never handled
   or notified again; with ``post_back`` and no successful post-back yet, its status is
   posted back (healing);
4. otherwise ``n_tries += 1`` and the handler runs. A payload HiPPO got wrong (unknown
   action, missing field, non-numeric mothra id, bad key) ends Failed at once with a
   readable ``last_error``; any other failure stays Pending until ``max_tries``, then
   Failed. Success sends the event's e-mails once (``notified_at``) and marks it
   Complete;
5. with ``post_back`` the terminal status is posted to HiPPO; ``posted_back_at`` is set
   only when HiPPO took it, so a failed post-back is retried by a later run without
   handling the event again.

Handlers are sequences of steps, each a separate operation with its own transaction and
History row. **Every step checks whether its effect already exists and skips if so**, so
a retry after a failure at step 3 repeats nothing that steps 1-2 did and leaves exactly
one of each record. E-mails are the last step and never fail the event.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pymongo.errors import DuplicateKeyError

from ..adapters.hippo import HippoClient, QueuedEvent, UnreadableEvent
from ..config import HippoConfig
from ..credentials import parse_ssh_key
from ..errors import CheetoError, Conflict, ExternalError, InvalidInput, NotFound
from ..models import HippoEvent, Site, SyncRun, User
from ..models.base import select_one
from ..models.fields import Email, PosixName, UnixId, utcnow
from ..models.group import GroupMembership
from ..models.hippo import TERMINAL_STATUSES
from ..queries.group import find_group_by_name
from ..queries.hippo import account_summary, group_sponsors, resolve_cluster
from ..queries.storage import find_home_storage
from ..queries.user import find_site_info, find_user_by_name, get_user, list_user_ssh_keys
from ..store import Store
from ..sync.lease import lease
from ..sync.run_metrics import record_end
from ..validation import describe_validation_error
from .group import CreateGroupFromSponsor
from .group_membership import AddGroupMember, AddGroupSponsor, RemoveGroupMember
from .notify import Notifier
from .storage import CreateHomeStorage
from .user import AddUserAccess, AddUserSshKey, CreateUser
from .user_site import AddSiteUser

log = logging.getLogger(__name__)

TARGET = "hippo"
LEASE_SITE = "all"
SLURM_ACCESS = "slurm"
LOGIN_ACCESS = "login-ssh"
TRUE_WORDS = ("1", "true", "yes", "y", "on")


class BadEvent(CheetoError):
    """The event itself is wrong (HiPPO must fix it): retrying cannot help."""

    exit_code = 2


# -- the payload --------------------------------------------------------------------------


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class EventAccount(_Payload):
    kerberos: PosixName
    name: str = Field(min_length=1)
    email: Email
    iam: str | None = None
    mothra: UnixId
    key: str | None = None
    access_types: list[str] = Field(default_factory=list, alias="accessTypes")

    @field_validator("mothra", mode="before")
    @classmethod
    def _numeric(cls, value: Any) -> Any:
        text = str(value).strip() if value is not None else ""
        if isinstance(value, bool) or not text.isdigit():
            raise ValueError(f"mothra id {value!r} is not a number")
        return int(text)

    @field_validator("key", mode="before")
    @classmethod
    def _blank_key(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value


class EventGroup(_Payload):
    name: PosixName


class EventData(_Payload):
    groups: list[EventGroup] = Field(default_factory=list)
    accounts: list[EventAccount] = Field(default_factory=list)
    cluster: str = Field(min_length=1)
    metadata: dict[str, Any] = Field(default_factory=dict)


def parse_data(data: Any) -> EventData:
    if not isinstance(data, dict):
        raise BadEvent(f"event data is {'missing' if data is None else type(data).__name__}, "
                       "not an object")
    try:
        return EventData.model_validate(data)
    except ValidationError as exc:
        raise BadEvent(f"bad event data: {describe_validation_error(exc)}") from None


# -- handlers ---------------------------------------------------------------------------


@dataclass
class HandlerContext:
    """What a handler works with; ``steps`` says what each step did (or why it skipped)."""

    store: Store
    author: str | None
    config: HippoConfig
    event: HippoEvent
    data: EventData
    site: Site
    steps: list[str] = field(default_factory=list)
    emails: list[tuple[str, list[str], dict[str, Any]]] = field(default_factory=list)

    @property
    def account(self) -> EventAccount:
        if not self.data.accounts:
            raise BadEvent(f"a {self.event.action} event needs an account (data.accounts is "
                           "empty)")
        return self.data.accounts[0]

    async def run(self, label: str, op: Any, **kwargs: Any) -> Any:
        result = await op.run(self.store, self.author, **kwargs)
        self.steps.append(f"{label}: done")
        return result

    def skip(self, label: str, why: str) -> None:
        self.steps.append(f"{label}: skipped ({why})")

    def email(self, kind: str, to: list[str], **variables: Any) -> None:
        self.emails.append((kind, to, variables))


async def _user(name: str) -> User:
    user = await find_user_by_name(name)
    if user is None:
        raise NotFound(f"user {name!r} does not exist (yet)")
    return user


async def ensure_ssh_key(ctx: HandlerContext, user: User, key_text: str) -> None:
    """The key is present; the user's other keys stay unless the site replaces them."""
    try:
        key = parse_ssh_key(key_text)
    except InvalidInput as exc:
        raise BadEvent(f"the event's SSH key is not valid: {exc.message}") from None
    replace = ctx.config.site_options(ctx.site.name).replace_ssh_keys
    existing = await list_user_ssh_keys(user.name)
    blobs = []
    for k in existing:
        try:
            blobs.append(parse_ssh_key(k.key).blob)
        except InvalidInput:
            blobs.append(b"")
    has_it = key.blob in blobs
    if has_it and (not replace or len(existing) == 1):
        ctx.skip("ssh key", f"{key.fingerprint} already present")
        return
    await ctx.run("ssh key" + (" (replacing the others)" if replace else ""), AddUserSshKey,
                  name=user.name, key=key.text, replace=replace)


async def ensure_access(ctx: HandlerContext, user: User, wanted: list[str]) -> None:
    missing = [a for a in dict.fromkeys(wanted) if a not in user.access]
    if not missing:
        ctx.skip("access", f"already has {', '.join(wanted) or 'nothing to add'}")
        return
    await ctx.run(f"access {', '.join(missing)}", AddUserAccess, name=user.name,
                  access=missing)


async def ensure_on_site(ctx: HandlerContext, user: User) -> None:
    if await find_site_info(user.name, ctx.site.name):
        ctx.skip("site", f"already on {ctx.site.name}")
        return
    await ctx.run(f"site {ctx.site.name}", AddSiteUser, user=user.name, site=ctx.site.name)


async def ensure_members(ctx: HandlerContext, user: User) -> list[str]:
    """Member of every listed group at the site; unknown groups fail the step after the
    known ones are done. Returns the groups the user is now a member of."""
    unknown, known = [], []
    for entry in ctx.data.groups:
        group = await find_group_by_name(entry.name)
        if group is None:
            unknown.append(entry.name)
            continue
        known.append(group.name)
        edge = await select_one(GroupMembership, None, user=user.name, group=group.name,
                                site=ctx.site.name)
        if edge is not None and "member" in edge.roles:
            ctx.skip(f"member of {group.name}", "already a member")
            continue
        await ctx.run(f"member of {group.name}", AddGroupMember, group=group.name,
                      user=user.name, site=ctx.site.name)
    if unknown:
        raise NotFound(f"group(s) {', '.join(unknown)} do not exist"
                       + (f" ({user.name!r} was added to {', '.join(known)})" if known else ""))
    return known


def wants_slurm(ctx: HandlerContext, account: EventAccount) -> bool:
    mapped = [ctx.config.access_types.get(t) for t in account.access_types]
    asked = SLURM_ACCESS in mapped or str(ctx.data.metadata.get("slurm", "")).strip().lower() \
        in TRUE_WORDS
    return asked or ctx.config.site_options(ctx.site.name).grant_slurm


def mapped_access(ctx: HandlerContext, account: EventAccount) -> list[str]:
    unknown = [t for t in account.access_types if t not in ctx.config.access_types]
    if unknown:  # ours to fix (hippo.access_types), so retried rather than failed at once
        raise InvalidInput(f"unknown HiPPO access type(s) {', '.join(unknown)} "
                           f"(hippo.access_types maps "
                           f"{', '.join(ctx.config.access_types) or 'none'})")
    wanted = [ctx.config.access_types[t] for t in account.access_types]
    wanted = [a for a in wanted if a != SLURM_ACCESS]
    if wants_slurm(ctx, account):
        wanted.append(SLURM_ACCESS)
    return wanted


class Handler:
    action: ClassVar[str]

    async def handle(self, ctx: HandlerContext) -> None:
        raise NotImplementedError


class CreateAccountHandler(Handler):
    """1 user (uid = gid = mothra id; a uid held by someone else is refused), 2 site,
    3 access, 4 home, 5 groups, then the account-ready e-mail."""

    action = "CreateAccount"

    async def handle(self, ctx: HandlerContext) -> None:
        account = ctx.account
        wanted_access = mapped_access(ctx, account)  # a bad access type fails before step 1
        user = await find_user_by_name(account.kerberos)
        if user is None:
            clash = await User.find_one(User.uid == account.mothra)
            if clash is not None:
                raise Conflict(f"uid {account.mothra} (the mothra id of {account.kerberos!r}) "
                               f"already belongs to user {clash.name!r}; refusing to create "
                               "a second account with it")
            if account.key:
                try:
                    parse_ssh_key(account.key)
                except InvalidInput as exc:
                    raise BadEvent(f"the event's SSH key is not valid: {exc.message}") from None
            await ctx.run(f"create user {account.kerberos}", CreateUser,
                          name=account.kerberos, email=account.email, uid=account.mothra,
                          fullname=account.name, home_directory=f"/home/{account.kerberos}",
                          ssh_key=account.key)
            user = await get_user(account.kerberos)
        else:
            ctx.skip("create user", f"{user.name} exists (uid {user.uid})")
            if account.key:
                await ensure_ssh_key(ctx, user, account.key)
        await ensure_on_site(ctx, user)
        await ensure_access(ctx, user, wanted_access)
        await self.ensure_home(ctx, user)
        await ensure_members(ctx, user)
        ctx.email("account_ready", [user.email], user=user.name)

    @staticmethod
    async def ensure_home(ctx: HandlerContext, user: User) -> None:
        if not ctx.config.site_options(ctx.site.name).create_home:
            ctx.skip("home", f"hippo.sites.{ctx.site.name}.create_home is off")
            return
        if await find_home_storage(user.name, ctx.site.name):
            ctx.skip("home", "already has one")
            return
        if not ctx.site.storage.default_home_volume:
            ctx.skip("home", f"site {ctx.site.name} has no default home volume")
            return
        await ctx.run("home", CreateHomeStorage, user=user.name, site=ctx.site.name)


class AddAccountToGroupHandler(Handler):
    action = "AddAccountToGroup"

    async def handle(self, ctx: HandlerContext) -> None:
        user = await _user(ctx.account.kerberos)
        if not ctx.data.groups:
            raise BadEvent("an AddAccountToGroup event needs at least one group")
        groups = await ensure_members(ctx, user)
        ctx.email("new_membership", [user.email], user=user.name, new_groups=groups)


class RemoveAccountFromGroupHandler(Handler):
    """Every listed group (the reference used only the first)."""

    action = "RemoveAccountFromGroup"

    async def handle(self, ctx: HandlerContext) -> None:
        if not ctx.data.groups:
            raise BadEvent("a RemoveAccountFromGroup event needs at least one group")
        name = ctx.account.kerberos
        user = await find_user_by_name(name)
        if user is None:
            ctx.skip("remove", f"user {name} does not exist, so is in no group")
            return
        for entry in ctx.data.groups:
            group = await find_group_by_name(entry.name)
            if group is None:
                ctx.skip(f"leave {entry.name}", "no such group")
                continue
            edge = await select_one(GroupMembership, None, user=user.name, group=group.name,
                                    site=ctx.site.name)
            if edge is None or "member" not in edge.roles:
                ctx.skip(f"leave {group.name}", "not a member")
            else:
                await ctx.run(f"leave {group.name}", RemoveGroupMember, group=group.name,
                              user=user.name, site=ctx.site.name)
            ctx.email("removed_from_group", [user.email], user=user.name, group=group.name)


class UpdateSshKeyHandler(Handler):
    action = "UpdateSshKey"

    async def handle(self, ctx: HandlerContext) -> None:
        account = ctx.account
        if not account.key:
            raise BadEvent("an UpdateSshKey event needs data.accounts[0].key")
        user = await _user(account.kerberos)
        await ensure_ssh_key(ctx, user, account.key)
        await ensure_access(ctx, user, [LOGIN_ACCESS])
        ctx.email("key_updated", [user.email], user=user.name)


class CreateGroupHandler(Handler):
    """``<sponsor>grp`` (gid 100,000,000 + the sponsor's uid) with the sponsor as member
    and sponsor at the site; at a second site only the roles are added."""

    action = "CreateGroup"

    async def handle(self, ctx: HandlerContext) -> None:
        sponsor = await _user(ctx.account.kerberos)
        name = f"{sponsor.name}grp"
        group = await find_group_by_name(name)
        if group is None:
            await ctx.run(f"create group {name}", CreateGroupFromSponsor, sponsor=sponsor.name,
                          site=ctx.site.name)
        else:
            ctx.skip(f"create group {name}", f"exists (gid {group.gid})")
            edge = await select_one(GroupMembership, None, user=sponsor.name, group=name,
                                    site=ctx.site.name)
            roles = set(edge.roles) if edge else set()
            if "sponsor" in roles:
                ctx.skip(f"sponsor of {name}", "already")
            else:
                await ctx.run(f"sponsor of {name}", AddGroupSponsor, group=name,
                              user=sponsor.name, site=ctx.site.name)
            if "member" in roles:
                ctx.skip(f"member of {name}", "already")
            else:
                await ctx.run(f"member of {name}", AddGroupMember, group=name,
                              user=sponsor.name, site=ctx.site.name)
        ctx.email("new_sponsor", [sponsor.email], user=sponsor.name, group=name)


HANDLERS: dict[str, Handler] = {h.action: h for h in (
    CreateAccountHandler(), AddAccountToGroupHandler(), RemoveAccountFromGroupHandler(),
    UpdateSshKeyHandler(), CreateGroupHandler())}


async def _email_vars(ctx: HandlerContext, kind: str, variables: dict[str, Any]
                      ) -> dict[str, Any]:
    user = await get_user(variables["user"])
    base = {"username": user.name, "sitename": ctx.site.name, "sitefqdn": ctx.site.fqdn}
    if kind in ("account_ready", "new_membership"):
        base |= (await account_summary(user, ctx.site)).template_vars()
    if kind == "new_membership":
        base["new_groups"] = variables["new_groups"]
    if kind in ("removed_from_group", "new_sponsor"):
        base["group"] = variables["group"]
    if kind == "removed_from_group":
        base["sponsors"] = [{"name": c.name, "email": c.email}
                            for c in await group_sponsors(variables["group"], ctx.site.name)]
    return base


async def send_event_emails(ctx: HandlerContext, notifier: Notifier) -> tuple[int, int]:
    """(sent, failed); never raises."""
    sent = failed = 0
    for kind, to, variables in ctx.emails:
        try:
            values = await _email_vars(ctx, kind, variables)
        except Exception as exc:
            log.error("HiPPO event %s: cannot prepare the %s e-mail: %s", ctx.event.hippo_id,
                      kind, exc)
            failed += 1
            continue
        ok = await notifier.send(kind, to, context={
            "hippo_event": str(ctx.event.hippo_id), "hippo_endpoint": ctx.event.hippo_endpoint},
            **values)
        sent, failed = sent + ok, failed + (not ok)
    return sent, failed


# -- the processor --------------------------------------------------------------------------


@dataclass
class EventOutcome:
    hippo_id: int
    action: str
    status: str  # the local status after this run
    result: str  # complete, failed, retrying, bad_event, skipped_terminal, error
    tries: int = 0
    error: str | None = None
    steps: list[str] = field(default_factory=list)
    posted_back: bool | None = None  # None: not attempted
    emails_sent: int = 0
    emails_failed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ProcessReport:
    fetched: int = 0
    outcomes: list[EventOutcome] = field(default_factory=list)
    unreadable: list[UnreadableEvent] = field(default_factory=list)
    run_id: str | None = None

    def tally(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for outcome in self.outcomes:
            counts[outcome.result] = counts.get(outcome.result, 0) + 1
            if outcome.posted_back is True:
                counts["posted_back"] = counts.get("posted_back", 0) + 1
            if outcome.posted_back is False:
                counts["postback_error"] = counts.get("postback_error", 0) + 1
            for key, n in (("emails_sent", outcome.emails_sent),
                           ("emails_failed", outcome.emails_failed)):
                if n:
                    counts[key] = counts.get(key, 0) + n
        if self.unreadable:
            counts["unreadable"] = len(self.unreadable)
        return counts

    @property
    def failed(self) -> list[EventOutcome]:
        return [o for o in self.outcomes if o.result in ("failed", "bad_event", "error")]


def _when(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _targets(data: Any) -> tuple[str | None, list[str]]:
    """Best-effort names from a payload that may be malformed (for listing only)."""
    if not isinstance(data, dict):
        return None, []
    accounts = data.get("accounts")
    user = None
    if isinstance(accounts, list) and accounts and isinstance(accounts[0], dict):
        kerberos = accounts[0].get("kerberos")
        user = str(kerberos) if kerberos else None
    groups = data.get("groups")
    names = [str(g.get("name")) for g in groups if isinstance(g, dict) and g.get("name")] \
        if isinstance(groups, list) else []
    return user, names


class EventProcessor:
    def __init__(self, store: Store, author: str | None, config: HippoConfig,
                 client: HippoClient, *, notifier: Notifier | None = None,
                 post_back: bool = False, now: Callable[[], datetime] = utcnow) -> None:
        self.store = store
        self.author = author
        self.config = config
        self.client = client
        self.notifier = notifier if config.notify else None
        self.post_back = post_back
        self.now = now
        self.endpoint = config.base_url

    async def save(self, event: HippoEvent) -> None:
        async with self.store.exclusive():
            await event.save()

    async def upsert(self, queued: QueuedEvent) -> HippoEvent:
        data = queued.data if isinstance(queued.data, dict) else {}
        cluster = str(data.get("cluster") or "")
        username, groups = _targets(queued.data)
        site_name = None
        try:
            site = await resolve_cluster(cluster, self.config.site_aliases)
            site_name = site.name if site else None
        except NotFound:
            pass
        event = await select_one(HippoEvent, None, hippo_id=queued.id,
                                 hippo_endpoint=self.endpoint)
        if event is None:
            event = HippoEvent(
                hippo_id=queued.id, hippo_endpoint=self.endpoint,
                action=queued.action or "(missing)", cluster=cluster, site=site_name,
                target_username=username, target_groupnames=groups, raw=queued.raw,
                queued_at=_when(queued.created_at), first_seen_at=self.now())
            try:
                async with self.store.exclusive():
                    await event.insert()
                return event
            except DuplicateKeyError:  # another processor recorded it a moment ago
                found = await select_one(HippoEvent, None, hippo_id=queued.id,
                                         hippo_endpoint=self.endpoint)
                assert found is not None
                return found
        if event.status not in TERMINAL_STATUSES:
            event.action = queued.action or "(missing)"
            event.cluster, event.site, event.raw = cluster, site_name, queued.raw
            event.target_username, event.target_groupnames = username, groups
            await self.save(event)
        return event

    async def send_status(self, event: HippoEvent, outcome: EventOutcome) -> None:
        if not self.post_back:
            return
        try:
            await self.client.update_status(event.hippo_id, event.status)
        except ExternalError as exc:
            log.warning("HiPPO event %s: post-back of %s failed: %s", event.hippo_id,
                        event.status, exc)
            outcome.posted_back = False
            outcome.error = outcome.error or f"post-back failed: {exc.message}"
            return
        event.posted_back_at = self.now()
        await self.save(event)
        outcome.posted_back = True

    async def handle_one(self, queued: QueuedEvent) -> EventOutcome:
        event = await self.upsert(queued)
        outcome = EventOutcome(event.hippo_id, event.action, event.status, "", event.n_tries)
        if event.status in TERMINAL_STATUSES:
            outcome.result = "skipped_terminal"
            if event.posted_back_at is None:
                await self.send_status(event, outcome)  # healing: no re-handling
            return outcome
        event.n_tries += 1
        outcome.tries = event.n_tries
        handler = HANDLERS.get(event.action)
        ctx: HandlerContext | None = None
        try:
            if handler is None:
                raise BadEvent(f"unknown action {event.action!r} (handled: "
                               f"{', '.join(HANDLERS)})")
            data = parse_data(queued.data)
            site = await resolve_cluster(data.cluster, self.config.site_aliases)
            if site is None:
                raise NotFound(f"cluster {data.cluster!r} matches no site (add it to "
                               "hippo.site_aliases or to the site's aliases)")
            ctx = HandlerContext(self.store, self.author, self.config, event, data, site)
            await handler.handle(ctx)
        except BadEvent as exc:
            self._fail(event, outcome, exc.message, result="bad_event")
        except CheetoError as exc:
            self._retry_or_fail(event, outcome, exc.message)
        except Exception as exc:  # a bug or an unexpected library error: still per event
            log.error("HiPPO event %s (%s) raised:\n%s", event.hippo_id, event.action,
                      traceback.format_exc())
            self._retry_or_fail(event, outcome, f"{type(exc).__name__}: {exc}")
        else:
            if ctx is not None and self.notifier is not None and event.notified_at is None:
                outcome.emails_sent, outcome.emails_failed = await send_event_emails(
                    ctx, self.notifier)
                event.notified_at = self.now()
            event.status, event.last_error = "Complete", None
            event.completed_at = self.now()
            outcome.result = "complete"
        finally:
            if ctx is not None:
                outcome.steps = list(ctx.steps)
                user = await find_user_by_name(ctx.data.accounts[0].kerberos) \
                    if ctx.data.accounts else None
                if user is not None:
                    event.target_user = user.name
                known = [g.name for g in ctx.data.groups
                         if await find_group_by_name(g.name) is not None]
                event.target_groups = known
            await self.save(event)
        outcome.status = event.status
        if event.status in TERMINAL_STATUSES:
            await self.send_status(event, outcome)
        return outcome

    def _fail(self, event: HippoEvent, outcome: EventOutcome, message: str, *,
              result: str = "failed") -> None:
        event.status, event.last_error, event.completed_at = "Failed", message, self.now()
        outcome.result, outcome.error = result, message

    def _retry_or_fail(self, event: HippoEvent, outcome: EventOutcome, message: str) -> None:
        if event.n_tries >= self.config.max_tries:
            self._fail(event, outcome, f"{message} (gave up after {event.n_tries} tries)")
        else:
            event.last_error = message
            outcome.result, outcome.error = "retrying", message

    async def process(self, *, event_id: int | None = None,
                      action: str | None = None) -> ProcessReport:
        report = ProcessReport()
        queued, report.unreadable = await self.client.pending_events()
        for bad in report.unreadable:
            log.warning("HiPPO: skipping pending entry #%s: %s", bad.position, bad.problem)
        chosen = [q for q in queued if q.status in ("Pending", "")
                  and (event_id is None or q.id == event_id)
                  and (action is None or q.action == action)]
        report.fetched = len(queued)
        for item in sorted(chosen, key=lambda q: q.id):
            try:
                report.outcomes.append(await self.handle_one(item))
            except Exception as exc:  # the bookkeeping itself failed: record, go on
                log.error("HiPPO event %s: %s: %s", item.id, type(exc).__name__, exc)
                report.outcomes.append(EventOutcome(item.id, item.action, "?", "error",
                                                    error=f"{type(exc).__name__}: {exc}"))
        return report


async def process_events(store: Store, author: str | None, config: HippoConfig, *,
                         client: HippoClient | None = None, post_back: bool = False,
                         event_id: int | None = None, action: str | None = None,
                         notifier: Notifier | None = None,
                         now: Callable[[], datetime] = utcnow) -> ProcessReport:
    """One processing run (see the module doc), recorded as a ``SyncRun`` (target
    ``hippo``). Raises when the queue cannot be read (auth, transport, bad body)."""
    own_client = client is None
    client = client or HippoClient(config)
    started = time.monotonic()
    run = SyncRun(target=TARGET, site=LEASE_SITE, author=author, apply=True,
                  extra={"post_back": post_back, "endpoint": config.base_url,
                         "event_id": event_id, "action": action})
    async with store.exclusive():
        await run.insert()
    report: ProcessReport | None = None
    try:
        async with lease(store, TARGET, LEASE_SITE):
            processor = EventProcessor(store, author, config, client, notifier=notifier,
                                       post_back=post_back, now=now)
            report = await processor.process(event_id=event_id, action=action)
        report.run_id = run.id
        failed = report.failed
        run.status = "failed" if failed else "ok"
        if failed:
            run.error = f"{len(failed)} event(s) failed; first: {failed[0].hippo_id} " \
                        f"{failed[0].action}: {failed[0].error}"
        return report
    except Exception as exc:
        run.status = "failed"
        run.error = exc.message if isinstance(exc, CheetoError) else \
            f"{type(exc).__name__}: {exc}"
        raise
    finally:
        if own_client:
            await client.aclose()
        run.finished_at = utcnow()
        run.duration_s = round(time.monotonic() - started, 3)
        if report is not None:
            run.counts = {"fetched": report.fetched, **report.tally()}
            run.extra["events"] = [{"id": o.hippo_id, "action": o.action, "result": o.result,
                                    "error": o.error} for o in report.outcomes]
        record_end(run)  # runs and duration by outcome, as the other targets' runs
        async with store.exclusive():
            await run.save()

