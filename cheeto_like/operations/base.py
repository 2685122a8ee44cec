"""The write path: every change is one ``Operation``, committed with its ``History`` row.

An operation declares its keyword arguments as a pydantic model (``Args``), so they are
validated before any I/O and no subclass repeats constructor boilerplate. ``run()``
validates, opens a session (a transaction unless ``transactional = False``), calls
``execute(session)``, inserts ``History(op, author, describe())`` in the same
transaction, and commits. A failure anywhere writes nothing at all.
"""

from __future__ import annotations

import logging
import re
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import (
    ConnectionFailure,
    DuplicateKeyError,
    OperationFailure,
    PyMongoError,
)

from ..errors import AlreadyExists, ExternalError, InvalidInput
from ..models import ALL_MODELS
from ..models.fields import utcnow
from ..models.history import History
from ..store import Store
from ..validation import describe_validation_error
from . import generations

log = logging.getLogger(__name__)

OPERATIONS: dict[str, type[Operation]] = {}
MAX_ATTEMPTS = 4


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
        whole operation from scratch, a bounded number of times.
        """
        args = cls.parse_args(**kwargs)
        prepared = await cls.prepare(args)
        for attempt in range(1, MAX_ATTEMPTS + 1):
            op = cls(store, author, args)
            op.prepared = prepared
            try:
                return await op._run(skip_history=skip_history)
            except DuplicateKeyError as exc:
                raise AlreadyExists(describe_duplicate(exc)) from None
            except ValidationError as exc:  # a document built in execute refused a value
                raise InvalidInput(describe_validation_error(exc)) from None
            except PyMongoError as exc:
                if exc.has_error_label("TransientTransactionError") and attempt < MAX_ATTEMPTS:
                    log.info("%s: transient transaction error, retrying (%s)", cls.op_name, exc)
                    continue
                raise translate_store_error(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    @classmethod
    async def within(cls, parent: Operation, session: AsyncClientSession,
                     **kwargs: Any) -> Any:
        """Run as part of ``parent``'s transaction (no History row of its own)."""
        op = cls(parent.store, parent.author, cls.parse_args(**kwargs))
        result = await op.execute(session)
        parent._nested_touched.append(op.touched_sites())
        return result

    async def _run(self, *, skip_history: bool) -> Any:
        async with self.store.session(transaction=self.transactional) as session:
            result = await self.execute(session)
            await generations.bump(session, self._all_touched_sites())
            changes = self.describe()
            if not skip_history:
                await History(op=self.op_name, author=self.author, changes=changes,
                              timestamp=utcnow()).insert(session=session)
        log.info("%s by %s: %s", self.op_name, self.author or "(unknown)", changes)
        return result

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

    @classmethod
    def from_args(cls, store: Store, author: str | None, **kwargs: Any) -> Self:
        """Build without running (tests and composition)."""
        return cls(store, author, cls.parse_args(**kwargs))


def load_all() -> None:
    """Import every operation module (``operations.MODULES``), registering them all."""
    import importlib

    from . import MODULES

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
