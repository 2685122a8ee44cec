"""Class accounts: a batch of short-lived users for a course, all-or-nothing as the
admin sees it, written in short chunks.

A batch (up to ``MAX_CLASS_BATCH`` users, each with a personal group, site membership,
optional course-group membership and a home from the site's defaults) is ~19 store
commands per account: 2000 accounts in one transaction would be ~38,000 commands, far
past MongoDB's 60 s ``transactionLifetimeLimitSeconds`` (bench/RESULTS.md, class
batches). So ``CreateClassUsers.run`` checks the batch (outside any transaction),
hashes every password (``prepare``, outside any transaction), and then runs operations
of ``chunk_size`` accounts each, every one a short transaction through ``Operation.run``
(retries, generations, the operation id):

1. ``CreateClassChunk``: the first one also sets the batch's record in
   ``class_batches`` (``_id`` = ``batch_id``: site, prefix and count, so a re-run of the
   same command finds it) and reserves the uid block there; each creates its accounts
   with status ``inactive`` (no access anywhere: ``queries.access_policy``) and moves
   the record's ``created``.
2. ``ActivateClassChunk``: sets each account's password hash (this run's) and expiry and
   makes it ``active``; the last chunk is ``FinishClassBatch``, which also deletes the
   record and writes the batch's one History row (``create_class_users``).

The passwords leave the process only after the last commit (the CLI writes its file
then), so until the batch is finished nobody holds a password of any of its accounts.
A run that is killed leaves the record (``db status``, ``db check`` and the command say
so); running the same command again takes the batch over (the record's ``holder``: a
chunk of the older run, should it still be going, stops with a Conflict), creates the
accounts still missing and gives *every* account a password of the new run, so its
file covers the whole batch (the killed run's passwords were never shown and are void).
A failure in the first chunk writes nothing at all; one in a later chunk leaves the
batch unfinished, with the reason and how to finish it. Uids come from one contiguous
block in the class band (never a block an unfinished batch holds), which must end below
the lab-group band. Passwords are returned once and never recorded.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import UTC, datetime
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pymongo.asynchronous.client_session import AsyncClientSession

from .. import progress
from ..constants import CLASS_USER_BAND, LAB_GROUP_BAND, NAME_MAX_LEN
from ..credentials import generate_password, hash_password
from ..errors import AlreadyExists, CheetoError, Conflict, InvalidInput
from ..models import Group, GroupMembership, Site, StorageVolume, User, UserSiteInfo
from ..models.fields import Email, PosixName, Shorthand, SiteName, utcnow
from ..queries.access_status import require_access, require_status
from ..queries.class_batches import COLLECTION, describe_batch, reserved_uid_blocks
from ..queries.group import get_group
from ..queries.site import get_site
from ..store import Store
from ..validation import describe_validation_error
from .base import OpArgs, Operation
from .common import mark_ldap_dirty
from .storage import CreateHomeStorage
from .user import CreateUser

PREFIX_RE = re.compile(r"^[a-z][a-z0-9-]*$")
MAX_CLASS_BATCH = 2000
# Accounts per chunk transaction: ~19 commands each (CreateUser's checks and inserts,
# site info, membership, home), so ~475 commands: well under a second on a replica set,
# and under 10 s on the embedded store of a loaded 2-core machine (bench/RESULTS.md).
CHUNK = 25
BATCH_NAMESPACE = uuid.UUID("5b0f6a52-3c1e-4d0e-9a59-0c1a55ba7c4e")


def _batch_records() -> Any:
    """The ``class_batches`` collection of the bound database (operations get the store
    from their models, as every other write inside ``execute`` does)."""
    return User.get_pymongo_collection().database[COLLECTION]


async def free_block(count: int, session: AsyncClientSession | None,
                     exclude: str | None = None) -> int:
    """The first uid of ``count`` consecutive ids free as uids and gids, above every id in
    use in the class band and every block an unfinished batch (but ``exclude``) holds
    (access/status groups seeded inside it are stepped over)."""
    band = CLASS_USER_BAND
    span = {"$gte": band.start, "$lt": band.stop}
    taken = {u["uid"] async for u in User.get_pymongo_collection().find(
        {"uid": span}, {"uid": 1}, session=session)} \
        | {g["gid"] async for g in Group.get_pymongo_collection().find(
            {"gid": span}, {"gid": 1, "type": 1}, session=session)
           if g.get("type") not in ("access", "status")}
    held = [r for r in await _batch_records().find({}, session=session).to_list()
            if r["_id"] != exclude]
    taken |= {block[-1] for block in reserved_uid_blocks(held) if block}
    special = sorted([g["gid"] async for g in Group.get_pymongo_collection().find(
        {"gid": span, "type": {"$in": ["access", "status"]}}, {"gid": 1}, session=session)])
    start = (max(taken) + 1) if taken else band.start
    for gid in special:  # skip over a special group inside the block
        if start <= gid < start + count:
            start = gid + 1
    if start + count > LAB_GROUP_BAND.start:
        raise Conflict(f"a block of {count} class uids from {start} would cross into the "
                       f"lab-group band ({LAB_GROUP_BAND.start}…)")
    return start


class ClassBatchArgs(OpArgs):
    """What ``ng user new class`` asks for (validated before anything is read)."""

    site: SiteName
    prefix: str
    count: int = Field(ge=1, le=MAX_CLASS_BATCH)
    email: Email
    expires_at: datetime
    access: list[Shorthand] = Field(default_factory=lambda: ["login-ssh", "slurm"])
    group: PosixName | None = None

    @field_validator("prefix")
    @classmethod
    def _prefix_shape(cls, value: str) -> str:
        if not PREFIX_RE.fullmatch(value):
            raise ValueError(f"prefix {value!r} must be lowercase letters, digits and '-', "
                             "starting with a letter")
        return value

    @field_validator("expires_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        # naive times are UTC (as everywhere else); comparing one with now would raise
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value

    @model_validator(mode="after")
    def _names_fit(self) -> ClassBatchArgs:
        width = len(str(self.count))
        longest = len(self.prefix) + 1 + width
        if longest > NAME_MAX_LEN:
            raise ValueError(f"names like {self.prefix}-{'0' * width} would be longer than "
                             f"{NAME_MAX_LEN} characters")
        if self.expires_at <= utcnow():
            raise ValueError("the expiry must be in the future")
        return self

    def names(self) -> list[str]:
        width = len(str(self.count))
        return [f"{self.prefix}-{i:0{width}d}" for i in range(1, self.count + 1)]

    def batch_id(self) -> str:
        """The same command (site, prefix, count) finds the same batch: how a re-run
        after a kill resumes it."""
        return uuid.uuid5(BATCH_NAMESPACE, f"{self.site}:{self.prefix}:{self.count}").hex


async def check_batch(a: ClassBatchArgs, session: AsyncClientSession | None
                      ) -> tuple[Site, list[str]]:
    """Everything a new batch needs, refused with one line: the site, its home defaults,
    the statuses and access, the course group, every name and home volume free. Run
    before hashing (no minutes of yescrypt for a typo) and again in the first chunk."""
    names = a.names()
    site = await get_site(a.site, session)
    await require_status("active", session)
    await require_status("inactive", session)
    access = await require_access(a.access, session)
    if a.group and (await get_group(a.group, session)).is_special:
        raise InvalidInput(f"{a.group!r} is an access or status group; pass --access "
                           "instead")
    if not site.storage.default_home_volume:
        raise Conflict(f"site {site.name!r} has no default home volume; set one with "
                       "`ng site storage set-defaults` first")
    taken_users = await User.get_pymongo_collection().find(
        {"name": {"$in": names}}, {"name": 1}, session=session).to_list()
    taken_groups = await Group.get_pymongo_collection().find(
        {"name": {"$in": names}}, {"name": 1}, session=session).to_list()
    if taken := sorted({u["name"] for u in taken_users} | {g["name"] for g in taken_groups}):
        raise AlreadyExists(f"{len(taken)} name(s) already taken: {', '.join(taken[:5])}"
                            + (" …" if len(taken) > 5 else ""))
    parent = site.storage.default_home_volume
    volumes = sorted(v["name"] for v in await StorageVolume.get_pymongo_collection().find(
        {"name": {"$in": [f"{parent}/{n}" for n in names]}}, {"name": 1, "site": 1},
        session=session).to_list() if v.get("site") == site.name)
    if volumes:
        raise AlreadyExists(f"volume {volumes[0]!r} already exists at site {site.name!r}"
                            + (f" (and {len(volumes) - 1} more home volume(s))"
                               if len(volumes) > 1 else ""))
    return site, access


class _Step(OpArgs):
    """One chunk of a batch: accounts ``start``..``stop - 1`` (0-based) of ``spec``."""

    spec: ClassBatchArgs
    batch: str
    run: str  # the run that holds the batch (the record's holder)
    start: int = Field(ge=0)
    stop: int = Field(ge=1)
    hashes: list[str] = Field(repr=False)

    @model_validator(mode="after")
    def _span(self) -> _Step:
        if not self.start < self.stop <= self.spec.count or \
                len(self.hashes) != self.stop - self.start:
            raise ValueError("a chunk is a non-empty part of the batch with a hash per "
                             "account")
        return self


async def _held(a: _Step, session: AsyncClientSession) -> dict[str, Any]:
    """The batch's record, as long as this run still holds it."""
    record = await _batch_records().find_one({"_id": a.batch}, session=session)
    if record is None:
        raise Conflict("the class batch's record is gone (another run finished it); this "
                       "run stopped, and its passwords are void")
    if record.get("holder") != a.run:
        raise Conflict("another run of this class batch took it over; this run stopped, "
                       "and its passwords are void")
    return record


class _BatchStep(Operation):
    """A chunk touches its batch's site only (``Args.spec.site``)."""

    def touched_sites(self) -> frozenset[str] | None:
        return frozenset({self.args.spec.site})  # type: ignore[attr-defined]


class TakeOverClassBatch(_BatchStep):
    """A re-run becomes the batch's holder (chunks of an older run then stop)."""

    op_name = "take_over_class_batch"

    class Args(OpArgs):
        spec: ClassBatchArgs
        batch: str
        run: str

    async def execute(self, session: AsyncClientSession) -> dict[str, Any]:
        a = self.args
        record = await _batch_records().find_one({"_id": a.batch}, session=session)
        if record is None:
            raise Conflict("the interrupted class batch was finished meanwhile by another "
                           "run; nothing was written")
        await _batch_records().update_one(
            {"_id": a.batch}, {"$set": {"holder": a.run}, "$inc": {"runs": 1}},
            session=session)
        return record

    def touched_sites(self) -> frozenset[str] | None:
        return frozenset()  # bookkeeping only

    def describe(self) -> dict[str, Any]:
        return {"batch": self.args.batch, "site": self.args.spec.site}


class CreateClassChunk(_BatchStep):
    """Create accounts ``start``..``stop - 1`` inactive, in one transaction; the first
    chunk of a new batch (``fresh``) checks the batch and sets its record."""

    op_name = "create_class_users_chunk"

    class Args(_Step):
        fresh: bool = False

    async def execute(self, session: AsyncClientSession) -> list[str]:
        a, spec = self.args, self.args.spec
        records = _batch_records()
        if a.fresh:
            if a.start != 0:
                raise InvalidInput("only the first chunk sets up a batch")
            if await records.find_one({"_id": a.batch}, {"_id": 1}, session=session):
                raise Conflict("another run of this class batch started just now; run the "
                               "command again when it ends")
            site, access = await check_batch(spec, session)
            first_uid = await free_block(spec.count, session, exclude=a.batch)
            await records.insert_one({
                "_id": a.batch, "site": spec.site, "prefix": spec.prefix,
                "count": spec.count, "email": spec.email, "access": list(spec.access),
                "group": spec.group, "first_uid": first_uid, "author": self.author,
                "started_at": utcnow(), "holder": a.run, "runs": 1, "created": 0,
                "activated": 0, "chunks": 0, "mechanism": None}, session=session)
        else:
            record = await _held(a, session)
            if int(record.get("created", 0)) != a.start:
                raise Conflict(f"the class batch has {record.get('created')} accounts, not "
                               f"{a.start}; run the command again")
            site = await get_site(spec.site, session)
            access = await require_access(spec.access, session)
            first_uid = int(record["first_uid"])
        names = spec.names()[a.start:a.stop]
        mechanism = "none"
        for offset, (name, hashed) in enumerate(zip(names, a.hashes, strict=True),
                                                start=a.start):
            await CreateUser.within(
                self, session, name=name, email=spec.email, uid=first_uid + offset,
                fullname=name, type="class", status="inactive", access=access,
                password_hash=hashed, expires_at=spec.expires_at)
            await UserSiteInfo(user=name, site=site.name).insert(session=session)
            if spec.group:
                await GroupMembership(user=name, group=spec.group, site=site.name,
                                      roles=["member"]).insert(session=session)
            home = await CreateHomeStorage.within(self, session, site=site.name, user=name)
            mechanism = (f"automount:{home.automount_map}" if home.automount_map
                         else f"static:{home.static_mount}" if home.static_mount else "none")
        if spec.group:  # new members change the group's LDAP entry
            await mark_ldap_dirty(Group, [spec.group], session)
        await records.update_one({"_id": a.batch}, {"$set": {
            "created": a.stop, "mechanism": mechanism}, "$inc": {"chunks": 1}},
            session=session)
        self.names, self.first_uid = names, first_uid
        return names

    def describe(self) -> dict[str, Any]:
        return {"batch": self.args.batch, "site": self.args.spec.site, "users": self.names,
                "base_uid": self.first_uid + self.args.start, "status": "inactive"}


class ActivateClassChunk(_BatchStep):
    """Give accounts ``start``..``stop - 1`` this run's passwords and the expiry, and
    make them active."""

    op_name = "activate_class_users_chunk"

    class Args(_Step):
        pass

    async def execute(self, session: AsyncClientSession) -> list[User]:
        a, spec = self.args, self.args.spec
        self.record = record = await _held(a, session)
        if int(record.get("created", 0)) != spec.count:
            raise Conflict(f"the class batch has {record.get('created')} of {spec.count} "
                           "accounts; run the command again")
        names = spec.names()[a.start:a.stop]
        first_uid = int(record["first_uid"])
        found = {u.name: u for u in await User.find(
            {"name": {"$in": names}}, session=session).to_list()}
        users = []
        for offset, (name, hashed) in enumerate(zip(names, a.hashes, strict=True),
                                                start=a.start):
            user = found.get(name)
            if user is None or user.uid != first_uid + offset or user.type != "class":
                raise Conflict(f"account {name!r} of the class batch is missing or was "
                               "changed (not the batch's uid or type); nothing more written")
            user.password, user.expires_at, user.status = hashed, spec.expires_at, "active"
            await user.save(session=session)
            users.append(user)
        await _batch_records().update_one({"_id": a.batch}, {"$set": {"activated": a.stop}},
                                          session=session)
        self.names = names
        return users

    def describe(self) -> dict[str, Any]:
        return {"batch": self.args.batch, "site": self.args.spec.site, "users": self.names}


class FinishClassBatch(ActivateClassChunk):
    """The last activation chunk, the record's removal and the batch's History row."""

    op_name = "create_class_users"

    class Args(_Step):
        replaced: int = Field(default=0, ge=0)  # accounts an earlier run created

    async def execute(self, session: AsyncClientSession) -> list[User]:
        a = self.args
        if a.stop != a.spec.count:
            raise InvalidInput("the batch's last chunk ends at its last account")
        users = await super().execute(session)
        await _batch_records().delete_one({"_id": a.batch}, session=session)
        return users

    def describe(self) -> dict[str, Any]:
        a, spec, record = self.args, self.args.spec, self.record
        return {"site": spec.site, "users": spec.names(), "base_uid": int(record["first_uid"]),
                "count": spec.count, "group": spec.group, "access": spec.access,
                "expires_at": spec.expires_at, "home_mechanism": record.get("mechanism"),
                "has_passwords": True, "batch": a.batch,
                "runs": int(record.get("runs", 1)), "chunks": int(record.get("chunks", 0)),
                "passwords_replaced": a.replaced}


class ClassBatch(list[tuple[User, str]]):
    """The batch's (user, password) pairs, plus what a re-run did: ``replaced`` accounts
    were created by an interrupted run, whose passwords this run replaced."""

    replaced: int = 0
    runs: int = 1


class CreateClassUsers:
    """A whole class batch: ``run`` drives the chunk operations (module docstring).

    Not an ``Operation`` itself (it is several transactions); its History row is
    ``FinishClassBatch``'s, under the name ``create_class_users``."""

    op_name = FinishClassBatch.op_name
    Args = ClassBatchArgs

    @classmethod
    def parse_args(cls, **kwargs: Any) -> ClassBatchArgs:
        try:
            return ClassBatchArgs(**kwargs)
        except ValidationError as exc:
            raise InvalidInput(describe_validation_error(exc)) from None

    @classmethod
    async def prepare(cls, args: ClassBatchArgs) -> list[tuple[str, str]]:
        """(password, hash) per account, made before any transaction: hashing takes
        0.1-0.3 s each, which would otherwise be spent inside one."""
        def make() -> list[tuple[str, str]]:
            pairs = []
            progress.begin(args.count, "hashing passwords")
            for _ in range(args.count):
                password = generate_password()
                pairs.append((password, hash_password(password)))
                progress.advance()
            return pairs
        return await asyncio.to_thread(make)

    @classmethod
    async def run(cls, store: Store, author: str | None, *, chunk_size: int = CHUNK,
                  **kwargs: Any) -> ClassBatch:
        """Check, hash, then create and activate in chunks; resumes an interrupted run
        of the same batch. Returns every account with this run's password."""
        spec = cls.parse_args(**kwargs)
        if chunk_size < 1:
            raise InvalidInput("--chunk-size must be at least 1")
        bid = spec.batch_id()
        record = await _batch_records().find_one({"_id": bid})
        if record is None:
            try:
                await check_batch(spec, None)
            except AlreadyExists as exc:
                raise await _with_unfinished(exc, spec) from None
        else:
            _same_options(record, spec)
        pairs = await cls.prepare(spec)
        hashes = [h for _, h in pairs]
        run_id = uuid.uuid4().hex
        result = ClassBatch()
        start = 0
        if record is not None:
            record = await TakeOverClassBatch.run(store, author, skip_history=True,
                                                  spec=spec, batch=bid, run=run_id)
            start = result.replaced = int(record.get("created", 0))
            result.runs = int(record.get("runs", 1)) + 1
        progress.begin(2 * spec.count - start, "class accounts")
        fresh = record is None
        while start < spec.count:
            stop = min(start + chunk_size, spec.count)
            try:
                await CreateClassChunk.run(store, author, skip_history=True, spec=spec,
                                           batch=bid, run=run_id, start=start, stop=stop,
                                           hashes=hashes[start:stop], fresh=fresh)
            except CheetoError as exc:
                if fresh:
                    raise  # the first chunk of a new batch wrote nothing at all
                raise _stopped(exc, await _batch_records().find_one({"_id": bid})) from None
            fresh = False
            progress.advance(stop - start)
            start = stop
        start = 0
        while start < spec.count:
            stop = min(start + chunk_size, spec.count)
            last = stop == spec.count
            step: type[ActivateClassChunk] = FinishClassBatch if last else ActivateClassChunk
            extra = {"replaced": result.replaced} if last else {}
            try:
                users = await step.run(store, author, skip_history=not last, spec=spec,
                                       batch=bid, run=run_id, start=start, stop=stop,
                                       hashes=hashes[start:stop], **extra)
            except CheetoError as exc:
                raise _stopped(exc, await _batch_records().find_one({"_id": bid})) from None
            result.extend(zip(users, [p for p, _ in pairs[start:stop]], strict=True))
            progress.advance(stop - start)
            start = stop
        return result


def _same_options(record: dict[str, Any], spec: ClassBatchArgs) -> None:
    """A re-run finishes the batch it started: the same e-mail, access and group (the
    expiry may differ: ``+30d`` moves; the finishing run's is set on every account)."""
    wanted = {"email": spec.email, "access": list(spec.access), "group": spec.group}
    differ = sorted(k for k, v in wanted.items() if record.get(k) != v)
    if differ:
        shown = ", ".join(f"{k} {record.get(k)!r}" for k in differ)
        raise Conflict(f"{describe_batch(record)}, with {shown}: give the same options "
                       "(nothing was written)")


async def _with_unfinished(exc: AlreadyExists, spec: ClassBatchArgs) -> AlreadyExists:
    """Names taken by an unfinished batch of the same prefix (run with another count):
    say which command finishes it."""
    others = [r for r in await _batch_records().find({"prefix": spec.prefix}).to_list()
              if r.get("site") == spec.site]
    if others:
        exc.message = (f"{exc.message}; {describe_batch(others[0])} (with --count "
                       f"{others[0].get('count')})")
        exc.args = (exc.message,)
    return exc


def _stopped(exc: CheetoError, record: dict[str, Any] | None) -> CheetoError:
    """A chunk after the first failed: the batch is unfinished; say why and what next."""
    if record is not None:
        exc.message = f"{exc.message}; {describe_batch(record)} once the cause is fixed"
        exc.args = (exc.message,)
    return exc
