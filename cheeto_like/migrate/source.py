"""Reading a reference (cheeto v2) database: a ``mongodump`` directory or a live MongoDB.

Both give the same thing, raw documents per collection, so the mapping layer
(``from_cheeto.py``) never knows where they came from and a dump is testable without a
MongoDB server. Only the collections the reference's models use are read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import bson
from bson.codec_options import CodecOptions

from ..errors import ExternalError, InvalidInput

# The reference's collections (its ALL_MODELS), in the order they are read.
SOURCE_COLLECTIONS = (
    "sites", "users", "ssh_keys", "groups", "user_site_info", "group_membership",
    "slurm_accounts", "slurm_allocations", "slurm_partitions", "slurm_qos",
    "slurm_associations", "automount_maps", "storage_volumes", "static_mounts",
    "storages", "history", "hippo_events",
)
PASSWORD_ENV = "CHEETO_SOURCE_MONGO_PASSWORD"
CODEC = CodecOptions(tz_aware=True)

Raw = dict[str, list[dict[str, Any]]]


def read_dump(directory: Path, database: str | None = None) -> Raw:
    """Documents from ``<dir>/<collection>.bson`` (or ``<dir>/<database>/…``, as
    ``mongodump --out`` lays it out). A missing collection file reads as empty."""
    try:
        found = directory.is_dir()
    except OSError as exc:  # a name longer than the system allows
        raise InvalidInput(f"dump directory {directory}: {exc.strerror}") from None
    if not found:
        raise InvalidInput(f"dump directory {directory} does not exist")
    base = directory
    if database and (directory / database).is_dir():
        base = directory / database
    elif not any(base.glob("*.bson")):
        subdirs = [d for d in directory.iterdir() if d.is_dir() and any(d.glob("*.bson"))]
        if len(subdirs) == 1:
            base = subdirs[0]
        elif len(subdirs) > 1:
            raise InvalidInput(f"{directory} holds dumps of several databases "
                               f"({', '.join(sorted(d.name for d in subdirs))}): "
                               "choose one with --database")
        else:
            raise InvalidInput(f"no .bson files in {directory}")
    if not any((base / f"{name}.bson").exists() for name in SOURCE_COLLECTIONS):
        raise InvalidInput(f"{base} holds none of the reference's collections "
                           "(sites.bson, users.bson, groups.bson, …)")
    raw: Raw = {}
    for name in SOURCE_COLLECTIONS:
        path = base / f"{name}.bson"
        if not path.exists():
            raw[name] = []
            continue
        try:
            with path.open("rb") as handle:
                raw[name] = list(bson.decode_file_iter(handle, CODEC))
        except (bson.errors.BSONError, OSError) as exc:
            raise InvalidInput(f"{path}: not a readable BSON dump ({exc})") from None
    return raw


def check_uri(uri: str) -> None:
    """A password never travels in argv (other users see it in ``ps``)."""
    if not uri.startswith(("mongodb://", "mongodb+srv://")):
        raise InvalidInput("--uri must start with mongodb:// or mongodb+srv://")
    netloc = urlsplit(uri).netloc
    if "@" in netloc and ":" in netloc.rsplit("@", 1)[0]:
        raise InvalidInput(f"--uri must not carry a password: put it in ${PASSWORD_ENV}")


async def read_uri(uri: str, database: str, timeout_s: float = 10.0) -> Raw:
    """Documents from a live reference database, read-only."""
    from pymongo import AsyncMongoClient
    from pymongo.errors import PyMongoError

    check_uri(uri)
    options: dict[str, Any] = {"serverSelectionTimeoutMS": int(timeout_s * 1000),
                               "tz_aware": True}
    if password := os.environ.get(PASSWORD_ENV):
        options["password"] = password
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, **options)
    try:
        db = client[database]
        present = set(await db.list_collection_names())
        if not present & set(SOURCE_COLLECTIONS):
            raise InvalidInput(f"database {database!r} has none of the reference's "
                               "collections (sites, users, groups, …)")
        raw: Raw = {}
        for name in SOURCE_COLLECTIONS:
            raw[name] = (await db[name].find({}).to_list()) if name in present else []
        return raw
    except PyMongoError as exc:
        raise ExternalError(f"cannot read the source database: {exc}") from None
    finally:
        await client.close()
