"""``cheeto db dump`` / ``db restore``: a portable archive of one database.

The archive is a gzip'd tar with ``cheeto-dump/manifest.json`` and one JSON-lines file
per collection (``cheeto-dump/<collection>.jsonl``), each line one document in MongoDB's
canonical extended JSON (``bson.json_util``), so dates, binary and number types come back
exactly. Only plain pymongo calls read and write it, so the same archive moves a site
from the embedded store to a MongoDB replica set and back.

Restore reads and validates the whole archive (every line parses, every document of a
modelled collection validates against its model, counts match the manifest) before it
writes anything, then replaces the data in one transaction, so a bad archive or a failed
write leaves the store as it was (on MongoDB that transaction is bounded by the server's
``transactionLifetimeLimitSeconds``, 60 s by default: ample for an account store). It
is a store-level tool, not an operation: it writes no History row (the History
collection itself is part of the archive).
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from bson import json_util
from bson.json_util import JSONMode, JSONOptions
from pydantic import ValidationError

from .errors import Conflict, ExternalError, InvalidInput
from .models import ALL_MODELS
from .store import Store
from .validation import describe_validation_error

FORMAT = "cheeto-dump"
VERSION = 1
PREFIX = "cheeto-dump"
JSON_OPTIONS = JSONOptions(json_mode=JSONMode.CANONICAL, tz_aware=True, tzinfo=UTC)
COLLECTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,120}$")
INSERT_BATCH = 500
MAX_MEMBER_BYTES = 2 * 1024**3


def models_by_collection() -> dict[str, Any]:
    return {model.get_settings().name: model for model in ALL_MODELS}


async def data_collections(store: Store) -> list[str]:
    """The database's collections worth keeping (not the server's own ``system.*``)."""
    names = await store.database.list_collection_names()
    return sorted(n for n in names if COLLECTION_NAME.match(n))


# -- dump -------------------------------------------------------------------------------


@dataclass
class DumpSummary:
    collections: dict[str, int]
    database: str

    @property
    def documents(self) -> int:
        return sum(self.collections.values())


async def read_all(store: Store) -> dict[str, list[dict[str, Any]]]:
    """Every document of every collection, read inside one transaction: a consistent
    snapshot on MongoDB, and on the embedded store no write lands half-way through."""
    out: dict[str, list[dict[str, Any]]] = {}
    names = await data_collections(store)  # not inside: listing is no transaction command
    async with store.session(transaction=True) as session:
        for name in names:
            cursor = store.database[name].find({}, session=session).sort("_id", 1)
            out[name] = await cursor.to_list()
    return out


def build_archive(database: str, collections: dict[str, list[dict[str, Any]]],
                  target: IO[bytes]) -> DumpSummary:
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
    return DumpSummary(counts, database)


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(f"{PREFIX}/{name}")
    info.size = len(data)
    info.mode = 0o600
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(data))


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


async def dump(store: Store, target: IO[bytes]) -> DumpSummary:
    return build_archive(store.database.name, await read_all(store), target)


# -- reading and validating an archive --------------------------------------------------


@dataclass
class Archive:
    source: str
    database: str
    created_at: str
    collections: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def documents(self) -> int:
        return sum(len(d) for d in self.collections.values())


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
                      str(manifest.get("created_at", "?")))
    models = models_by_collection()
    for name, expected in counts.items():
        data = members.get(f"{name}.jsonl")
        if data is None:
            raise InvalidInput(f"{source}: {name}.jsonl is missing")
        docs = _parse_collection(name, data, models.get(name), source)
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
            isinstance(k, str) and COLLECTION_NAME.match(k) and isinstance(v, int)
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


async def restore(store: Store, archive: Archive, *, force: bool) -> dict[str, int]:
    """Replace the database's contents with the archive's, all in one transaction."""
    present = await document_counts(store)
    if present and not force:
        raise Conflict(f"database {store.database.name!r} is not empty "
                       f"({sum(present.values())} documents in {len(present)} collections); "
                       "pass --force to replace its contents")
    await store.bind()  # every collection and index exists before the transaction
    try:
        async with store.session(transaction=True) as session:
            for name in sorted(present):
                await store.database[name].delete_many({}, session=session)
            for name, docs in archive.collections.items():
                for batch in _batches(docs, INSERT_BATCH):
                    await store.database[name].insert_many(batch, session=session)
    except Exception as exc:
        if isinstance(exc, (InvalidInput, Conflict, ExternalError)):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExternalError(f"restore failed, nothing was changed: {first}") from None
    return {name: len(docs) for name, docs in archive.collections.items()}


def _batches(docs: list[dict[str, Any]], size: int) -> Iterable[list[dict[str, Any]]]:
    for start in range(0, len(docs), size):
        yield docs[start:start + size]
