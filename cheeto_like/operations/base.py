"""The write path: every change is one ``Operation``, committed with its ``History`` row.

An operation declares its keyword arguments as a pydantic model (``Args``), so they are
validated before any I/O and no subclass repeats constructor boilerplate. ``run()``
validates, opens a session (a transaction unless ``transactional = False``), calls
``execute(session)``, marks the generations of the sites it touched, inserts
``History(op, author, describe())`` (its ``_id`` is the operation id) in the same
transaction, and commits. A failure anywhere writes nothing at all.

Retries follow pymongo's ``with_transaction``: a ``TransientTransactionError`` (a write
conflict, a transaction the server aborted, an election) re-runs the whole transaction
with jittered exponential backoff until ``Store.transaction_retry_seconds`` have passed;
a commit whose result is unknown is committed again (``store.commit_with_retry``).
``prepare()`` runs once, before the first attempt. Every attempt carries the same
operation id, so an attempt after a commit that did apply finds it (the History row,
looked up first after an uncertain commit) and reports the applied attempt's result
instead of applying twice. ``run_once`` does the same across requests for a
client-chosen id (``/api/v1``'s ``Idempotency-Key``): its id is claimed first, by a
record of its own (``models/applied.py``) that also keeps the answer to replay.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import (
    ConnectionFailure,
    DuplicateKeyError,
    OperationFailure,
    PyMongoError,
)

from .. import metrics
from ..errors import AlreadyExists, Conflict, ExternalError, InvalidInput
from ..models import ALL_MODELS
from ..models import applied as applied_records
from ..models.fields import new_id, utcnow
from ..models.history import HISTORY_COLLECTION, History, history_document
from ..store import WRITE_CONFLICT, Store, Write, defer, deferring
from ..validation import describe_validation_error
from . import generations

log = logging.getLogger(__name__)

OPERATIONS: dict[str, type[Operation]] = {}
BACKOFF_INITIAL_S = 0.005  # pymongo's with_transaction: 5 ms * 1.5**retry, jittered,
BACKOFF_MAX_S = 0.5  # at most 500 ms


@dataclass(frozen=True)
class Once:
    """A caller-chosen operation id (already scoped to the caller), a fingerprint of the
    request it stands for, and how to turn the result into the answer that is stored
    with the id and replayed to a retry (JSON-able: it is kept as JSON text)."""

    operation_id: str
    fingerprint: str
    summarize: Callable[[Any], dict[str, Any]]


@dataclass(frozen=True)
class Outcome:
    """What ``run_once`` did: ``replayed`` when an earlier call with the id had applied
    (then ``result`` is None and ``summary`` is that call's stored answer)."""

    summary: dict[str, Any]
    replayed: bool
    result: Any = None


class _Applied(Exception):
    """The operation id was claimed already: an earlier attempt or request applied."""


class Explained(Exception):
    """A unique index refused a write, and the operation can say why better than the
    index's name does, by reads it makes once the transaction is over (a refused write
    ends the transaction on MongoDB). Lets an operation insert first and explain a
    clash on the rare refusal, instead of paying its pre-check reads on every run.
    ``explain()`` returns the error to raise, or None for ``describe_duplicate``'s."""

    def __init__(self, error: DuplicateKeyError,
                 explain: Callable[[], Awaitable[Exception | None]]) -> None:
        super().__init__(str(error))
        self.error = error
        self.explain = explain


def _is_write_of(exc: DuplicateKeyError, index: int, document_id: str) -> bool:
    """Whether the refused write of a tail was the insert at ``index`` (a client
    bulkWrite names it by ``idx``) or of ``document_id`` (a collection's write error
    names the clashing key)."""
    details = exc.details or {}
    if "idx" in details:
        return details["idx"] == index
    return details.get("keyValue") == {"_id": document_id}


def backoff(retry: int) -> float:
    return random.random() * min(BACKOFF_INITIAL_S * 1.5 ** retry,
                                 BACKOFF_MAX_S)


class OpArgs(BaseModel):
    """Base for operation arguments: keyword-only, immutable, no unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoArgs(OpArgs):
    pass


class Operation:
    """Subclass, set ``op_name`` and ``Args``, implement ``execute`` and ``describe``.

    ``describe()`` runs after ``execute`` so it can report what happened (resolved names,
    counts); it must be JSON-able and must never contain secrets.
    """

    op_name: ClassVar[str]
    transactional: ClassVar[bool] = True
    Args: ClassVar[type[OpArgs]] = NoArgs

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("op_name")
        if name is None:
            return
        if name in OPERATIONS:
            raise TypeError(f"duplicate op_name {name!r} ({OPERATIONS[name].__name__}, "
                            f"{cls.__name__})")
        OPERATIONS[name] = cls

    def __init__(self, store: Store, author: str | None, args: OpArgs) -> None:
        self.store = store
        self.author = author
        self.args = args
        self._nested_touched: list[frozenset[str] | None] = []

    # -- entry points -------------------------------------------------------------------

    @classmethod
    def parse_args(cls, **kwargs: Any) -> OpArgs:
        try:
            return cls.Args(**kwargs)
        except ValidationError as exc:
            raise InvalidInput(describe_validation_error(exc)) from None

    @classmethod
    async def run(cls, store: Store, author: str | None, *, skip_history: bool = False,
                  **kwargs: Any) -> Any:
        """Validate, execute in one transaction with its History row, and return the result.

        Transient transaction errors (write conflicts on a real replica set) re-run the
        whole operation from scratch, with backoff, for a bounded time (module doc).
        """
        args = cls.parse_args(**kwargs)
        prepared = await cls.prepare(args)
        outcome = await cls._attempts(store, author, args, prepared,
                                      skip_history=skip_history, once=None)
        return outcome.result

    @classmethod
    async def run_once(cls, store: Store, author: str | None, once: Once, *,
                       skip_history: bool = False, **kwargs: Any) -> Outcome:
        """``run`` under a caller-chosen operation id: the first call applies and stores
        ``once.summarize(result)``; a later call with the same id (a client's retry)
        applies nothing and gets that stored answer back. The same id with another
        fingerprint (another request) is a ``Conflict``."""
        if not cls.transactional:
            raise TypeError(f"{cls.op_name} is not transactional: it cannot be run once")
        args = cls.parse_args(**kwargs)
        prepared = await cls.prepare(args)
        return await cls._attempts(store, author, args, prepared,
                                   skip_history=skip_history, once=once)

    @classmethod
    async def _attempts(cls, store: Store, author: str | None, args: OpArgs, prepared: Any,
                        *, skip_history: bool, once: Once | None) -> Outcome:
        operation_id = once.operation_id if once is not None else uuid.uuid4().hex
        deadline = time.monotonic() + store.transaction_retry_seconds
        maybe_committed: Operation | None = None  # an attempt whose commit may have applied
        retry = 0
        while True:
            op = cls(store, author, args)
            op.prepared = prepared
            try:
                result = await op._run(skip_history=skip_history, operation_id=operation_id,
                                       once=once, deadline=deadline,
                                       uncertain=maybe_committed is not None)
            except _Applied:
                if maybe_committed is not None:  # our own earlier attempt did commit
                    return Outcome(maybe_committed.summary, False, maybe_committed.result)
                return await cls._replay(operation_id, once)
            except DuplicateKeyError as exc:
                raise AlreadyExists(describe_duplicate(exc)) from None
            except Explained as exc:
                better = await exc.explain()
                raise (better or AlreadyExists(describe_duplicate(exc.error))) from None
            except ValidationError as exc:  # a document built in execute refused a value
                raise InvalidInput(describe_validation_error(exc)) from None
            except PyMongoError as exc:
                if op.reached_commit:
                    maybe_committed = op
                if isinstance(exc, OperationFailure) and exc.code == WRITE_CONFLICT:
                    metrics.inc("cheeto_store_write_conflicts_total")
                if exc.has_error_label("UnknownTransactionCommitResult"):
                    raise ExternalError(
                        f"the store did not confirm the commit of {cls.op_name} within "
                        f"{store.transaction_retry_seconds:g}s (it may have applied): "
                        f"{exc}", transient=True) from None
                if exc.has_error_label("TransientTransactionError"):
                    retry += 1
                    pause = backoff(retry)
                    if time.monotonic() + pause < deadline:
                        log.info("%s: transient transaction error, retry %d (%s)",
                                 cls.op_name, retry, exc)
                        metrics.inc("cheeto_store_transaction_retries_total",
                                    reason="transient")
                        await asyncio.sleep(pause)
                        continue
                raise translate_store_error(exc) from None
            await generations.after_commit(store)
            return Outcome(op.summary, False, result)

    @classmethod
    async def _replay(cls, operation_id: str, once: Once | None) -> Outcome:
        """The stored answer of the call that applied ``operation_id``."""
        record = await applied_records.collection().find_one({"_id": operation_id})
        if once is None or record is None:
            raise ExternalError(f"{cls.op_name}: operation {operation_id} was applied, but "
                                "its record is gone", transient=True)
        if record.get("op") != cls.op_name or record.get("fingerprint") != once.fingerprint:
            raise Conflict("this idempotency key was used for a different request")
        return Outcome(json.loads(record.get("summary") or "{}"), True)

    @classmethod
    async def within(cls, parent: Operation, session: AsyncClientSession,
                     **kwargs: Any) -> Any:
        """Run as part of ``parent``'s transaction (no History row of its own)."""
        op = cls(parent.store, parent.author, cls.parse_args(**kwargs))
        op.nested = True
        result = await op.execute(session)
        parent._nested_touched.append(op.touched_sites())
        return result

    reached_commit = False
    summary: dict[str, Any] = {}
    result: Any = None
    # Run ``within`` another operation: its writes go to the store at once (the parent
    # may read them back), never held back for the tail (``insert_later``).
    nested = False
    # How to explain a unique-index refusal of a write held back for the tail (set by
    # ``insert_later``'s callers): read after the transaction, as ``Explained``'s.
    explain_clash: Callable[[], Awaitable[Exception | None]] | None = None

    async def _run(self, *, skip_history: bool, operation_id: str, once: Once | None,
                   deadline: float, uncertain: bool = False) -> Any:
        """One attempt. The operation id is claimed first: by a record of its own
        (``models/applied.py``) when the caller chose the id (``run_once``) or no History
        row is written; otherwise the History row carries it as its ``_id`` (no extra
        write), and an attempt after an uncertain commit looks for that row first."""
        history_id = operation_id if once is None and not skip_history else None
        async with self.store.session(transaction=self.transactional,
                                      deadline=deadline) as session:
            if self.transactional and history_id is None:
                await self._claim(session, operation_id, once)
            elif self.transactional and uncertain and await History.get_pymongo_collection(
                    ).find_one({"_id": history_id}, {"_id": 1}, session=session):
                raise _Applied
            with deferring(session) if self.transactional else nullcontext([]) as held:
                result = self.result = await self.execute(session)
            changes = self.describe()
            recorded = not skip_history and self.records_history()
            if not recorded and history_id is not None and self.transactional:
                # no History row carries the id this time: claim it by its own record
                await self._claim(session, operation_id, once)
            # What execute held back (store.defer), the generation marks and the History
            # row: one command (Store.write_together), then the commit.
            tail = [*held, *generations.mark_writes(self._all_touched_sites())]
            row_id = None
            if recorded:
                row_id = history_id if history_id is not None and self.transactional \
                    else new_id()
                tail.append(Write(HISTORY_COLLECTION, history_document(
                    row_id, self.op_name, self.author, changes, utcnow())))
            try:
                await self.store.write_together(session, tail)
            except DuplicateKeyError as exc:
                if row_id is not None and history_id is not None and self.transactional \
                        and _is_write_of(exc, len(tail) - 1, row_id):
                    raise _Applied from None  # the History row's _id: already applied
                if self.explain_clash is not None:  # a held-back insert met a unique index
                    raise Explained(exc, self.explain_clash) from None
                raise
            if once is not None:
                self.summary = once.summarize(result)
                await applied_records.collection().update_one(
                    {"_id": operation_id}, {"$set": {"summary": json.dumps(self.summary)}},
                    session=session)
            self.reached_commit = True
        log.info("%s by %s: %s", self.op_name, self.author or "(unknown)", changes)
        return result

    async def insert_later(self, session: AsyncClientSession, collection: str,
                           document: dict[str, Any]) -> None:
        """Insert ``document`` (already validated: ``models.base.insert_document``) with
        the operation's tail, in the one command before the commit, when nothing in the
        transaction reads it back: this operation runs on its own (not ``within``
        another, which may read it). Otherwise it is inserted now. A unique index's
        refusal then surfaces at the tail; set ``explain_clash`` to say why."""
        if self.nested or not defer(session, Write(collection, document)):
            await self.store.database[collection].insert_one(document, session=session)

    async def _claim(self, session: AsyncClientSession, operation_id: str,
                     once: Once | None) -> None:
        """Insert the operation's record first: a second claim of the id (a retry after
        a commit that applied) is a duplicate key, or, while the first is still open on
        a replica set, a write conflict that is retried until it is one."""
        now = utcnow()
        doc: dict[str, Any] = {"_id": operation_id, "op": self.op_name,
                               "author": self.author, "at": now,
                               "at_epoch": int(now.timestamp())}
        if once is not None:
            doc["fingerprint"] = once.fingerprint
        try:
            await applied_records.collection().insert_one(doc, session=session)
        except DuplicateKeyError:
            raise _Applied from None

    def _all_touched_sites(self) -> frozenset[str] | None:
        """This operation's sites and those of every operation run ``within`` it."""
        found: set[str] = set()
        for sites in (self.touched_sites(), *self._nested_touched):
            if sites is None:
                return None
            found |= sites
        return frozenset(found)

    # -- to implement -------------------------------------------------------------------

    def touched_sites(self) -> frozenset[str] | None:
        """Sites whose data (exports, API bodies) this operation can change; ``None`` means
        any site. ``run`` bumps their generations (``models/generation.py``) in the
        operation's transaction, which is how the API's cache learns of the change.
        Default: the site named by an ``Args.site`` field, else every site. Override it
        when an operation names one site but changes data other sites show."""
        site = getattr(self.args, "site", None)
        name = getattr(site, "name", site)
        return frozenset({name}) if isinstance(name, str) else None


    prepared: Any = None

    @classmethod
    async def prepare(cls, args: OpArgs) -> Any:
        """Slow work that needs no store (password hashing), done once before the
        transaction opens so the transaction stays short; available as ``self.prepared``."""
        return None

    async def execute(self, session: AsyncClientSession) -> Any:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {}

    def records_history(self) -> bool:
        """Whether this run writes its History row (asked after ``execute``). An
        operation that records only changes (the IAM refresh: a nightly run over every
        user would otherwise add a row per user per night) says no for a no-op."""
        return True

    @classmethod
    def from_args(cls, store: Store, author: str | None, **kwargs: Any) -> Self:
        """Build without running (tests and composition)."""
        return cls(store, author, cls.parse_args(**kwargs))


def load_all() -> None:
    """Import every operation module (``operations.MODULES``), registering them all."""
    import importlib

    from .modules import MODULES

    for module in MODULES:
        importlib.import_module(f"{__package__}.{module}")


def operation_names() -> list[str]:
    load_all()
    return sorted(OPERATIONS)


def get_operation(name: str) -> type[Operation]:
    load_all()
    try:
        return OPERATIONS[name]
    except KeyError:
        raise InvalidInput(f"unknown operation {name!r}") from None


# -- store error translation ------------------------------------------------------------

_INDEX_NAME = re.compile(r"index(?::| ')\s*'?(?P<name>[A-Za-z0-9_.$-]+)")


def _unique_index_fields() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Index name (both MongoDB's and the embedded store's spelling) -> (collection, keys)."""
    names: dict[str, tuple[str, tuple[str, ...]]] = {}
    for model in ALL_MODELS:
        collection = model.get_settings().name
        for idx in getattr(model.Settings, "indexes", []):
            doc = idx.document
            if not doc.get("unique"):
                continue
            keys = tuple(doc["key"].keys())
            mongo_name = "_".join(f"{k}_{v}" for k, v in doc["key"].items())
            for name in (doc.get("name"), mongo_name, f"idx_{collection}_{'_'.join(keys)}"):
                if name:
                    names[name] = (collection, keys)
    return names


COLLECTION_LABELS = {
    "users": "user", "groups": "group", "sites": "site", "ssh_keys": "SSH key",
    "user_site_info": "site membership", "group_membership": "group membership",
    "slurm_accounts": "Slurm account", "slurm_partitions": "Slurm partition",
    "slurm_qos": "Slurm QOS", "slurm_associations": "Slurm association",
    "automount_maps": "automount map", "storage_volumes": "storage volume",
    "static_mounts": "static mount", "storages": "storage", "hippo_events": "HiPPO event",
    "usage_records": "usage record", "gpu_factors": "GPU factor", "quotas": "quota",
    "quota_defaults": "quota defaults", "quota_notices": "quota notice",
    "names": "user or group", "role_grants": "role grant", "api_keys": "API key",
    "requests": "request",
}


def describe_duplicate(exc: DuplicateKeyError) -> str:
    """A readable sentence for a unique-index violation, on either store."""
    details = exc.details or {}
    message = str(details.get("errmsg") or exc)
    match = _INDEX_NAME.search(message)
    info = _unique_index_fields().get(match["name"]) if match else None
    key_value = details.get("keyValue")
    if info is None:
        return f"a record with the same unique key already exists ({message})"
    collection, keys = info
    label = COLLECTION_LABELS.get(collection, collection)
    if key_value:
        shown = ", ".join(f"{k}={v}" for k, v in key_value.items())
        return f"{label} with {shown} already exists"
    return f"a {label} with the same {'/'.join(keys)} already exists"


def translate_store_error(exc: PyMongoError) -> ExternalError:
    if isinstance(exc, ConnectionFailure):
        return ExternalError(f"lost the connection to the store: {exc}", transient=True)
    if isinstance(exc, OperationFailure) and exc.code == 20:
        return ExternalError("the store does not support transactions (MongoDB must run as a "
                             f"replica set): {exc}")
    return ExternalError(f"store error: {exc}", transient=exc.has_error_label(
        "TransientTransactionError"))
