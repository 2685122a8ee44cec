"""``cheeto db dump`` / ``db restore``: a portable archive of one database.

The archive is a gzip'd tar with ``cheeto-dump/manifest.json`` and one JSON-lines file
per collection (``cheeto-dump/<collection>.jsonl``), each line one document in MongoDB's
canonical extended JSON (``bson.json_util``), so dates, binary and number types come back
exactly. Only plain pymongo calls read and write it, so the same archive moves a site
from the embedded store to a MongoDB replica set and back.

Neither command holds one transaction over whole collections: on a replica set a
transaction lives at most ``transactionLifetimeLimitSeconds`` (60 s) and must fit the
storage engine's cache (``TransactionTooLargeForCache``), which a million ledger rows do
not.

**Dump** streams each collection with a cursor (``chunk`` documents a batch) into a
private temporary file, outside any transaction, and only then builds the archive, so
memory stays bounded and a dump can be retried. How it is consistent:

- On a MongoDB replica set or sharded cluster of 5.0 or later it reads in a snapshot
  session (``readConcern: snapshot``, one ``atClusterTime`` for every read): the archive
  is the database at one instant. The server keeps snapshot history for
  ``minSnapshotHistoryWindowInSeconds`` (300 s by default); a dump that outlives it
  (``SnapshotTooOld``) falls back to the check below.
- Otherwise (the embedded store) it compares a change marker read before and after the
  dump: every collection's count, History's newest row and the data generations (every
  operation inserts a generation mark and a History row). The counts must also equal
  what was written. When the marker moved, the dump is thrown away and taken again (up to
  ``DUMP_ATTEMPTS`` times), then refused: the archive never mixes two states of an
  operation. Writes outside operations that replace rows in place (a sync's own run
  record, a usage re-collect of a job already in the ledger) are not seen by the marker.

The manifest records which (``consistency``).

**Restore** reads and validates the whole archive (every line parses, every document of
a modelled collection validates against its model, counts match the manifest) before it
writes anything. It then loads every collection aside, into a staging collection
``<name>__restore_<id>`` with the model's indexes, in chunks (each chunk one short
transaction together with the progress it adds to the restore record in
``db_restores``), and only then switches: each staging collection replaces its live
collection (``renameCollection`` with ``dropTarget``, atomic per collection on every
store).
Until the switch, readers see the old data; after it, the new. A bad archive, a
duplicate key or any refused write drops the staging collections and leaves the store
as it was. A restore that was killed is resumed by running the same command again (the
record names the archive's SHA-256, and each collection's loaded count); another archive
starts over (the leftovers are dropped first). A switch that was interrupted is
finished first, whatever the next archive. It is a store-level tool, not an operation:
it writes no History row (the History collection itself is part of the archive).

The switch takes milliseconds per collection, but the collections are switched one
after another (MongoDB has no multi-collection rename), so a reader in those
milliseconds may see some collections new and others old; never one collection empty.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import secrets
import shutil
import tarfile
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import bson
from bson import json_util
from bson.json_util import JSONMode, JSONOptions
from pydantic import ValidationError
from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from . import progress
from .errors import Conflict, ExternalError, InvalidInput
from .models import ALL_MODELS
from .store import Store
from .validation import describe_validation_error

FORMAT = "cheeto-dump"
VERSION = 1
PREFIX = "cheeto-dump"
JSON_OPTIONS = JSONOptions(json_mode=JSONMode.CANONICAL, tz_aware=True, tzinfo=UTC)
COLLECTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,120}$")
CHUNK = 1000  # documents per read batch and per restore write
CHUNK_BYTES = 4 * 1024 * 1024  # and at most this much BSON per restore write (16 MiB limit)
INSERT_BATCH = CHUNK  # older name, kept for callers
MAX_MEMBER_BYTES = 2 * 1024**3
DUMP_ATTEMPTS = 3
STAGING = "__restore_"
RESTORES = "db_restores"  # the restore record (one per database), never archived
RECORD_ID = "current"
SNAPSHOT_TOO_OLD = 239
GENERATIONS = "generations"
HISTORY = "history"


def models_by_collection() -> dict[str, Any]:
    return {model.get_settings().name: model for model in ALL_MODELS}


def is_bookkeeping(name: str) -> bool:
    """Restore's own collections: its record and its staging collections."""
    return name == RESTORES or STAGING in name


async def data_collections(store: Store) -> list[str]:
    """The database's collections worth keeping (not the server's own ``system.*``, not
    a restore's staging collections or record)."""
    names = await store.database.list_collection_names()
    return sorted(n for n in names if COLLECTION_NAME.match(n) and not is_bookkeeping(n))


# -- dump -------------------------------------------------------------------------------


@dataclass
class DumpSummary:
    collections: dict[str, int]
    database: str
    consistency: str = "transaction"

    @property
    def documents(self) -> int:
        return sum(self.collections.values())


async def change_marker(store: Store, names: list[str], session: Any = None
                        ) -> dict[str, Any]:
    """What moves when an operation commits: every collection's count, History's newest
    row (by time, then id) and the generations' total (``models/generation.py``)."""
    database = store.database
    counts = {name: await database[name].count_documents({}, session=session)
              for name in names}
    newest = await database[HISTORY].find_one(
        {}, {"_id": 1}, sort=[("timestamp", -1), ("_id", -1)], session=session)
    total = 0
    async for doc in database[GENERATIONS].find({}, {"n": 1}, session=session):
        value = doc.get("n")
        total += int(value) if isinstance(value, int) else 0
    return {"counts": counts, "history_newest": newest and newest["_id"],
            "generations": total}


async def supports_snapshot(store: Store) -> bool:
    """A snapshot read outside a transaction needs a replica set or sharded cluster of
    MongoDB 5.0+ (wire version 13). The embedded store answers ``readConcern`` without
    honouring it, so it never counts."""
    if store.is_embedded:
        return False
    hello = await store.client.admin.command("hello")
    replicated = "setName" in hello or hello.get("msg") == "isdbgrid"
    return replicated and int(hello.get("maxWireVersion", 0)) >= 13


class Spool:
    """A dump read into private temporary files (one JSON-lines file per collection),
    ready to be written as an archive any number of times. ``close()`` deletes them."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.dir = Path(tempfile.mkdtemp(prefix="cheeto-dump-"))  # 0700
        self.counts: dict[str, int] = {}
        self.consistency = "checked"

    def path(self, name: str) -> Path:
        return self.dir / f"{name}.jsonl"

    def write(self, target: IO[bytes]) -> DumpSummary:
        manifest = {"format": FORMAT, "version": VERSION, "database": self.database,
                    "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "collections": self.counts, "consistency": self.consistency}
        with tarfile.open(fileobj=target, mode="w|gz") as tar:
            _add(tar, "manifest.json", json.dumps(manifest, indent=2).encode() + b"\n")
            for name in self.counts:
                path = self.path(name)
                info = _info(f"{name}.jsonl", path.stat().st_size)
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
        return DumpSummary(dict(self.counts), self.database, self.consistency)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


async def _spool_collections(store: Store, spool: Spool, names: list[str], chunk: int,
                             session: Any = None) -> None:
    spool.counts = {}
    for name in names:
        count = 0
        cursor = store.database[name].find({}, session=session, batch_size=chunk).sort("_id", 1)
        with spool.path(name).open("w", encoding="utf-8") as fh:
            async for doc in cursor:
                fh.write(json_util.dumps(doc, json_options=JSON_OPTIONS) + "\n")
                count += 1
        spool.counts[name] = count
        progress.advance()


async def spool(store: Store, *, chunk: int = CHUNK, attempts: int = DUMP_ATTEMPTS) -> Spool:
    """Read the whole database into a ``Spool``, consistently (the module docstring
    says how); ``Conflict`` when the data kept changing through every attempt."""
    out = Spool(store.database.name)
    try:
        names = await data_collections(store)
        progress.begin(len(names), "dumping collections")
        if await supports_snapshot(store):
            try:
                async with store.client.start_session(snapshot=True) as session:
                    await _spool_collections(store, out, names, chunk, session)
                out.consistency = "snapshot"
                return out
            except OperationFailure as exc:
                if exc.code != SNAPSHOT_TOO_OLD:
                    raise
        for _ in range(attempts):
            before = await change_marker(store, names)
            await _spool_collections(store, out, names, chunk)
            after = await change_marker(store, await data_collections(store))
            if before == after and out.counts == before["counts"]:
                out.consistency = "checked"
                return out
            names = await data_collections(store)
        raise Conflict(f"the data changed during each of {attempts} dump attempts (an "
                       "operation committed while the collections were read); run it again "
                       "when the store is quieter")
    except BaseException:
        out.close()
        raise


async def read_all(store: Store, *, chunk: int = CHUNK) -> dict[str, list[dict[str, Any]]]:
    """Every document of every collection, as one consistent dump (tests, small stores:
    it holds everything in memory; ``spool`` does not)."""
    out = await spool(store, chunk=chunk)
    try:
        return {name: [json_util.loads(line, json_options=JSON_OPTIONS)
                       for line in out.path(name).read_text().splitlines()]
                for name in out.counts}
    finally:
        out.close()


def build_archive(database: str, collections: dict[str, list[dict[str, Any]]],
                  target: IO[bytes]) -> DumpSummary:
    """An archive from documents in memory (tests build doctored archives with it)."""
    counts = {name: len(docs) for name, docs in collections.items()}
    manifest = {"format": FORMAT, "version": VERSION, "database": database,
                "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "collections": counts}
    with tarfile.open(fileobj=target, mode="w|gz") as tar:
        _add(tar, "manifest.json", json.dumps(manifest, indent=2).encode() + b"\n")
        for name, docs in collections.items():
            body = "".join(json_util.dumps(doc, json_options=JSON_OPTIONS) + "\n"
                           for doc in docs)
            _add(tar, f"{name}.jsonl", body.encode())
    return DumpSummary(counts, database, "in memory")


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(f"{PREFIX}/{name}")
    info.size = size
    info.mode = 0o600
    info.mtime = int(time.time())
    return info


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    tar.addfile(_info(name, len(data)), io.BytesIO(data))


def write_private_file(path: Path, write: Any, *, overwrite: bool) -> Any:
    """Write through ``write(fileobj)`` into ``path`` created 0600 (the archive holds
    password hashes): a temporary file in the same directory, renamed at the end."""
    if path.exists() and not overwrite:
        raise InvalidInput(f"{path} exists; pass --force to overwrite it")
    if not path.parent.is_dir():
        raise InvalidInput(f"directory {path.parent} does not exist")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            result = write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return result


async def dump(store: Store, target: IO[bytes], *, chunk: int = CHUNK) -> DumpSummary:
    out = await spool(store, chunk=chunk)
    try:
        return out.write(target)
    finally:
        out.close()


# -- reading and validating an archive --------------------------------------------------


@dataclass
class Archive:
    source: str
    database: str
    created_at: str
    collections: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    digest: str = ""  # SHA-256 of the archive's bytes: which restore a record belongs to

    @property
    def documents(self) -> int:
        return sum(len(d) for d in self.collections.values())


def _sha256(path: Path | None, data: bytes | None) -> str:
    digest = hashlib.sha256()
    if data is not None:
        digest.update(data)
    elif path is not None:
        with path.open("rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


def read_archive(path: Path | None, data: bytes | None = None) -> Archive:
    """Read and validate the whole archive (from ``path``, or ``data`` read from standard
    input); InvalidInput names the first problem."""
    source = str(path) if path is not None else "standard input"
    try:
        if data is not None:
            tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
        else:
            assert path is not None
            tar = tarfile.open(path, mode="r:*")
    except FileNotFoundError:
        raise InvalidInput(f"{source} does not exist") from None
    except (OSError, tarfile.TarError) as exc:
        raise InvalidInput(f"{source}: not a cheeto dump (a .tar.gz): {exc}") from None
    with tar:
        members = _read_members(tar, source)
    if "manifest.json" not in members:
        raise InvalidInput(f"{source}: not a cheeto dump (no {PREFIX}/manifest.json)")
    manifest = _manifest(members.pop("manifest.json"), source)
    counts: dict[str, int] = manifest["collections"]
    extra = sorted(set(members) - {f"{n}.jsonl" for n in counts})
    if extra:
        raise InvalidInput(f"{source}: {extra[0]} is not listed in the manifest")
    archive = Archive(source, str(manifest.get("database", "?")),
                      str(manifest.get("created_at", "?")), digest=_sha256(path, data))
    models = models_by_collection()
    for name, expected in counts.items():
        member = members.pop(f"{name}.jsonl", None)
        if member is None:
            raise InvalidInput(f"{source}: {name}.jsonl is missing")
        docs = _parse_collection(name, member, models.get(name), source)
        if len(docs) != expected:
            raise InvalidInput(f"{source}: {name}.jsonl holds {len(docs)} documents, the "
                               f"manifest says {expected}")
        archive.collections[name] = docs
    return archive


def _read_members(tar: tarfile.TarFile, source: str) -> dict[str, bytes]:
    """Member name (without the prefix) -> content; nothing is extracted to disk."""
    members: dict[str, bytes] = {}
    try:
        for info in tar:
            if info.isdir():
                continue
            name = info.name.removeprefix("./")
            if not info.isfile() or not name.startswith(f"{PREFIX}/") or "/" in name[
                    len(PREFIX) + 1:]:
                raise InvalidInput(f"{source}: unexpected member {info.name!r}")
            if info.size > MAX_MEMBER_BYTES:
                raise InvalidInput(f"{source}: member {info.name!r} is too large")
            handle = tar.extractfile(info)
            assert handle is not None
            members[name[len(PREFIX) + 1:]] = handle.read()
    except (OSError, EOFError, tarfile.TarError) as exc:
        raise InvalidInput(f"{source}: damaged archive: {exc}") from None
    return members


def _manifest(data: bytes, source: str) -> dict[str, Any]:
    try:
        manifest = json.loads(data)
    except ValueError as exc:
        raise InvalidInput(f"{source}: manifest.json: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InvalidInput(f"{source}: manifest.json is not a {FORMAT} manifest")
    if manifest.get("version") != VERSION:
        raise InvalidInput(f"{source}: dump format version {manifest.get('version')!r} is "
                           f"not supported (this cheeto reads version {VERSION})")
    counts = manifest.get("collections")
    if not isinstance(counts, dict) or not all(
            isinstance(k, str) and COLLECTION_NAME.match(k) and not is_bookkeeping(k)
            and isinstance(v, int)
            for k, v in counts.items()):
        raise InvalidInput(f"{source}: manifest.json has no valid 'collections' table")
    return manifest


def _parse_collection(name: str, data: bytes, model: Any, source: str) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    seen: set[Any] = set()
    for number, line in enumerate(data.decode("utf-8", errors="strict").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{source}: {name}.jsonl line {number}"
        try:
            doc = json_util.loads(line, json_options=JSON_OPTIONS)
        except (ValueError, TypeError) as exc:
            raise InvalidInput(f"{where}: not extended JSON ({exc})") from None
        if not isinstance(doc, dict) or "_id" not in doc:
            raise InvalidInput(f"{where}: not a document with an _id")
        key = repr(doc["_id"])
        if key in seen:
            raise InvalidInput(f"{where}: duplicate _id {doc['_id']!r}")
        seen.add(key)
        if model is not None:
            try:
                model.model_validate(doc)
            except ValidationError as exc:
                raise InvalidInput(f"{where}: {describe_validation_error(exc)}") from None
        docs.append(doc)
    return docs


# -- restore ----------------------------------------------------------------------------


async def document_counts(store: Store) -> dict[str, int]:
    """Collections of the target database that hold documents (and how many)."""
    counts = {}
    for name in await data_collections(store):
        if await store.database[name].find_one({}, {"_id": 1}) is not None:
            counts[name] = await store.database[name].count_documents({})
    return counts


@dataclass
class RestoreResult:
    counts: dict[str, int]
    notes: list[str] = field(default_factory=list)
    resumed: bool = False


def staging_name(name: str, restore_id: str) -> str:
    return f"{name}{STAGING}{restore_id}"


async def restore(store: Store, archive: Archive, *, force: bool, chunk: int = CHUNK,
                  chunk_bytes: int = CHUNK_BYTES) -> RestoreResult:
    """Replace the database's contents with the archive's: load aside, then switch (the
    module docstring says how, and what a reader sees)."""
    present = await document_counts(store)
    if present and not force:
        raise Conflict(f"database {store.database.name!r} is not empty "
                       f"({sum(present.values())} documents in {len(present)} collections); "
                       "pass --force to replace its contents")
    await store.bind()  # every live collection and index exists
    records = store.database[RESTORES]
    result = RestoreResult({name: len(docs) for name, docs in archive.collections.items()})
    record = await records.find_one({"_id": RECORD_ID})
    if record is not None and record.get("state") == "switching":
        await _switch(store, record)
        result.notes.append(f"finished the switch of an interrupted restore (archive "
                            f"{str(record.get('digest', '?'))[:12]}…) first")
        record = None
        present = await document_counts(store)
    if record is not None and record.get("digest") != archive.digest:
        await _discard(store, record)
        result.notes.append("dropped the staging collections of an unfinished restore of "
                            "another archive")
        record = None
    if record is None:
        await _discard_orphans(store)
        targets = sorted(set(archive.collections) | set(present))
        restore_id = secrets.token_hex(4)
        record = {"_id": RECORD_ID, "digest": archive.digest, "restore_id": restore_id,
                  "state": "loading", "source": archive.source, "started_at": datetime.now(UTC),
                  "targets": targets, "loaded": {}}
        await records.insert_one(record)
    else:
        result.resumed = True
        loaded = sum(int(v) for v in record.get("loaded", {}).values())
        result.notes.append(f"resumed an interrupted restore of this archive ({loaded} "
                            "documents were already loaded aside)")
    try:
        await _load(store, archive, record, chunk, chunk_bytes)
    except (InvalidInput, Conflict, ExternalError):
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, ConnectionFailure) or (
                isinstance(exc, PyMongoError) and exc.has_error_label(
                    "TransientTransactionError")):
            raise ExternalError(f"restore interrupted while loading aside, the store still "
                                f"holds its old data ({first}); run the same command again "
                                "to continue", transient=True) from None
        await _discard(store, record)
        raise ExternalError(f"restore failed, nothing was changed: {first}") from None
    await records.update_one({"_id": RECORD_ID}, {"$set": {"state": "switching"}})
    record["state"] = "switching"
    await _switch(store, record)
    return result


def _indexes_for(name: str) -> list[Any]:
    model = models_by_collection().get(name)
    return list(getattr(model.Settings, "indexes", []) or []) if model is not None else []


async def _copy_live_indexes(store: Store, name: str) -> list[Any]:
    """A collection no model describes: its live indexes (key, unique, sparse)."""
    from pymongo import IndexModel

    out = []
    async for spec in await store.database[name].list_indexes():
        if spec.get("name") == "_id_" or list(spec.get("key", {})) == ["_id"]:
            continue
        out.append(IndexModel(list(spec["key"].items()), unique=bool(spec.get("unique")),
                              sparse=bool(spec.get("sparse"))))
    return out


async def _load(store: Store, archive: Archive, record: dict[str, Any], chunk: int,
                chunk_bytes: int) -> None:
    """Each target's staging collection, with its indexes, filled in chunks: a chunk and
    the progress it makes are one short transaction, so the record never lies."""
    records = store.database[RESTORES]
    loaded: dict[str, int] = dict(record.get("loaded", {}))
    total = sum(len(archive.collections.get(n, [])) for n in record["targets"])
    progress.begin(total, "restoring documents")
    progress.advance(sum(loaded.values()))
    for name in record["targets"]:
        staging = store.database[staging_name(name, record["restore_id"])]
        indexes = _indexes_for(name) or await _copy_live_indexes(store, name)
        if name not in loaded:
            await store.database.create_collection(staging.name, check_exists=False)
            if indexes:
                await staging.create_indexes(indexes)
            loaded[name] = 0
            await records.update_one({"_id": RECORD_ID}, {"$set": {f"loaded.{name}": 0}})
        docs = archive.collections.get(name, [])
        done = loaded[name]
        for batch in _sized_batches(docs[done:], chunk, chunk_bytes):
            async with store.session(transaction=True) as session:
                await staging.insert_many(batch, session=session)
                done += len(batch)
                await records.update_one({"_id": RECORD_ID},
                                         {"$set": {f"loaded.{name}": done}}, session=session)
            progress.advance(len(batch))
        loaded[name] = done


def _sized_batches(docs: list[dict[str, Any]], size: int, max_bytes: int
                   ) -> Iterable[list[dict[str, Any]]]:
    """At most ``size`` documents and ``max_bytes`` of BSON a batch (one document over it
    goes alone: the store refuses it if it passes 16 MiB)."""
    batch: list[dict[str, Any]] = []
    used = 0
    for doc in docs:
        length = len(bson.encode(doc))
        if batch and (len(batch) >= size or used + length > max_bytes):
            yield batch
            batch, used = [], 0
        batch.append(doc)
        used += length
    if batch:
        yield batch


async def _switch(store: Store, record: dict[str, Any]) -> None:
    """Every target's staging collection over its live one, then the record goes and the
    models' indexes are ensured again. Rerunnable: a target whose staging collection is
    gone was switched already."""
    existing = set(await store.database.list_collection_names())
    for name in record["targets"]:
        staging = staging_name(name, record["restore_id"])
        if staging in existing:
            await replace_collection(store, staging, name)
    await forget_ldap_marks(store)
    await store.database[RESTORES].delete_one({"_id": RECORD_ID})
    await store.bind()


async def forget_ldap_marks(store: Store) -> None:
    """Drop every site's LDAP watermark after a restore. The marks say what the directory
    held when the dump was made; the directory may be ahead of that (runs since the
    dump), so a restored mark would call unchanged records clean and hide the
    difference. Without a mark the next LDAP run compares the whole site."""
    from .sync.ldap.mark import COLLECTION, VERSIONS

    for name in (COLLECTION, VERSIONS):
        await store.database[name].delete_many({})


async def replace_collection(store: Store, source: str, target: str) -> None:
    """Rename ``source`` over ``target``: ``renameCollection`` with ``dropTarget`` on
    the admin database, one atomic step on every store (the embedded server runs it in
    one SQLite transaction). Checked afterwards: a rename that did not happen (an older
    embedded server answered ok and renamed nothing) is an error, never a restore that
    quietly kept the old data."""
    database = store.database
    await store.client.admin.command("renameCollection", f"{database.name}.{source}",
                                     to=f"{database.name}.{target}", dropTarget=True)
    if source in await database.list_collection_names():
        raise ExternalError(f"the store did not rename {source} to {target}")


async def _discard(store: Store, record: dict[str, Any]) -> None:
    """Drop a restore's staging collections and its record (the live data is untouched)."""
    suffix = f"{STAGING}{record.get('restore_id', '')}"
    for name in await store.database.list_collection_names():
        if name.endswith(suffix):
            await store.database.drop_collection(name)
    await store.database[RESTORES].delete_one({"_id": RECORD_ID})


async def _discard_orphans(store: Store) -> None:
    """Staging collections no record names (a record deleted by hand, or one dropped
    with its database's other contents): only called when there is no record."""
    for name in await store.database.list_collection_names():
        if STAGING in name:
            await store.database.drop_collection(name)
