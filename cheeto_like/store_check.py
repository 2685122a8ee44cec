"""``cheeto db check``: is the store sound? Files, documents and the name registry.

- Files (embedded store only): the database file passes SQLite's ``integrity_check``
  (opened read-only) and is the file the marker recorded.
- Documents: every document of every modelled collection validates against its model,
  the way beanie would read it, and carries no keys the model does not know.
- Names: the registry (``models/names.py``) has exactly one row per user and group name,
  and no user shares a name with a group other than their personal one. ``repair``
  adds missing rows and removes stale ones (the only repair done automatically: the
  rest needs a person to decide).
- Imports: no import (``migrate from-cheeto``, ``ng site adopt``) stopped part-way
  (``queries/imports.py``): the store would hold part of one until it is run again.
- Class batches: no ``ng user new class`` batch stopped part-way
  (``queries/class_batches.py``): its accounts so far are inactive, passwords void.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from . import store_files
from .config import MongoConfig
from .models import ALL_MODELS
from .models.names import backfill_claims, expected_claims
from .store import Store
from .validation import describe_validation_error

MAX_EXAMPLES = 3


@dataclass
class CheckRow:
    check: str
    target: str
    status: str  # ok | problem | skipped | repaired
    documents: int | None = None
    invalid: int | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_files(config: MongoConfig, database: str, *, frozen: bool = False) -> list[CheckRow]:
    """``frozen``: no server can start on the files (a read-only or full file system),
    so they are read as they are."""
    if not config.is_embedded:
        return [CheckRow("file", "-", "skipped",
                         detail="a real MongoDB: no store files to check (use its own tools)")]
    data_dir = Path(config.embedded.path)
    path = store_files.database_file(data_dir, database)
    problems = store_files.integrity_check(path, frozen=frozen)
    recorded = store_files.read_marker(data_dir).get(database)
    if not problems and recorded is not None and recorded.get("inode") != path.stat().st_ino:
        problems.append("not the file the store marker recorded (its inode changed)")
    if not problems and recorded is None:
        problems.append(f"not recorded in {store_files.marker_path(data_dir)}")
    return [CheckRow("file", str(path), "problem" if problems else "ok",
                     detail="; ".join(problems) or "integrity_check ok")]


def _known_keys(model: Any) -> set[str]:
    return {info.alias or name for name, info in model.model_fields.items()}


async def check_documents(store: Store) -> list[CheckRow]:
    rows = []
    for model in ALL_MODELS:
        name = model.get_settings().name
        known = _known_keys(model)
        total = invalid = 0
        examples: list[str] = []
        async for doc in store.database[name].find({}):
            total += 1
            problem = None
            unknown = sorted(set(doc) - known)
            try:
                model.model_validate(doc)
            except ValidationError as exc:
                problem = describe_validation_error(exc)
            if problem is None and unknown:
                problem = f"unknown keys {', '.join(unknown)}"
            if problem is not None:
                invalid += 1
                if len(examples) < MAX_EXAMPLES:
                    examples.append(f"{doc.get('_id')}: {problem}")
        rows.append(CheckRow("documents", name, "problem" if invalid else "ok", total, invalid,
                             "; ".join(examples)))
    return rows


async def check_names(store: Store, *, repair: bool) -> list[CheckRow]:
    db = store.database
    wanted = await expected_claims(db)
    present: dict[str, str] = {}
    async for doc in db["names"].find({}, {"name": 1, "kind": 1}):
        present[doc["name"]] = doc["kind"]
    users = {d["name"] async for d in db["users"].find({}, {"name": 1})}
    shared = sorted([d["name"] async for d in db["groups"].find({}, {"name": 1, "type": 1})
                     if d["name"] in users and d.get("type") != "user"])
    missing = sorted(n for n in wanted if n not in present)
    stale = sorted(n for n in present if n not in wanted)
    wrong_kind = sorted(n for n in wanted if n in present and present[n] != wanted[n])
    rows = [CheckRow("names", "users/groups", "problem" if shared else "ok", len(wanted),
                     len(shared), f"user and group share a name: {', '.join(shared[:5])}"
                     if shared else "no user shares a name with a group")]
    problems = []
    if missing:
        problems.append(f"{len(missing)} without a registry row: {', '.join(missing[:5])}")
    if stale:
        problems.append(f"{len(stale)} stale rows: {', '.join(stale[:5])}")
    if wrong_kind:
        problems.append(f"{len(wrong_kind)} of the wrong kind: {', '.join(wrong_kind[:5])}")
    status = "problem" if problems else "ok"
    if problems and repair:
        await backfill_claims(db)
        if stale:
            await db["names"].delete_many({"name": {"$in": stale}})
        for name in wrong_kind:
            await db["names"].update_one({"name": name}, {"$set": {"kind": wanted[name]}})
        status = "repaired"
    rows.append(CheckRow("names", "names registry", status, len(present),
                         len(missing) + len(stale) + len(wrong_kind),
                         "; ".join(problems) or "one row per user and group name"))
    return rows


async def check_imports(store: Store) -> list[CheckRow]:
    from .queries.imports import describe, unfinished_imports

    pending = await unfinished_imports(store)
    return [CheckRow("imports", "migrations", "problem" if pending else "ok", len(pending),
                     len(pending), "; ".join(describe(r) for r in pending)
                     or "no import stopped part-way")]


async def check_class_batches(store: Store) -> list[CheckRow]:
    from .queries.class_batches import describe_batch, unfinished_class_batches

    pending = await unfinished_class_batches(store)
    return [CheckRow("class batches", "class_batches", "problem" if pending else "ok",
                     len(pending), len(pending),
                     "; ".join(describe_batch(r) for r in pending)
                     or "no class batch stopped part-way")]


async def check_store(store: Store, config: MongoConfig, *,
                      repair: bool = False) -> list[CheckRow]:
    rows = check_files(config, store.database.name)
    rows += await check_documents(store)
    rows += await check_names(store, repair=repair)
    rows += await check_imports(store)
    rows += await check_class_batches(store)
    return rows
