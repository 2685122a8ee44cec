"""``cheeto db check|dump|restore``: is the store sound, and portable backups of it."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from .. import backup, store_files
from ..embedded import EmbeddedServer
from ..errors import InvalidInput
from ..store import connect
from ..store_check import check_store
from . import args as a
from .app import command
from .output import esc

CHECK_COLUMNS = ["check", "target", "status", "documents", "invalid", "detail"]


@command("db", "check", help="verify the store's files, every document against its model, "
         "and the name registry")
async def db_check(args: argparse.Namespace) -> int:
    """Connects itself (not ``store=True``): an embedded store whose data directory is
    read-only or on a full disk cannot start, and is then checked from its files alone
    (opened read-only), the other checks ``skipped`` with the reason."""
    from .app import refuse_client_only, storage_problem

    ctx = args.ctx
    refuse_client_only(ctx.config)
    mongo = ctx.config.mongo
    try:
        ctx.store = await connect(mongo, notify=ctx.out.info)
    except OSError as exc:
        reason = storage_problem(exc, str(mongo.embedded.path) if mongo.is_embedded else None)
        if reason is None or not mongo.is_embedded:
            raise
        return _check_files_only(ctx, mongo, reason)
    try:
        rows = await check_store(ctx.store, mongo, repair=args.repair)
    finally:
        description, database = ctx.store.description, ctx.store.database.name
        await ctx.store.close()
        ctx.store = None
    data = [row.as_dict() for row in rows]
    sound = all(row.status != "problem" for row in rows)
    ctx.out.table(data, title=f"store check: {description}", columns=CHECK_COLUMNS,
                  data={"ok": sound, "database": database, "checks": data})
    if not ctx.out.machine:
        if sound:
            ctx.out.success("the store is sound")
        else:
            ctx.out.error("the store has problems (see the table)")
    return 0 if sound else 1


def _check_files_only(ctx: Any, mongo: Any, reason: str) -> int:
    """The store's files, read-only, when its server cannot start here."""
    from ..store_check import CheckRow, check_files

    rows = check_files(mongo, mongo.database, frozen=True)
    why = "the store cannot start: " + reason.split(";")[0]
    rows += [CheckRow(check, "-", "skipped", detail=why)
             for check in ("documents", "names", "imports", "class batches")]
    data = [row.as_dict() for row in rows]
    sound = all(row.status != "problem" for row in rows)
    ctx.out.table(data, title=f"store check (files only): {mongo.embedded.path}",
                  columns=CHECK_COLUMNS,
                  data={"ok": sound, "database": mongo.database, "files_only": True,
                        "checks": data})
    if not ctx.out.machine:
        ctx.out.warn(f"checked the files only: {esc(why)}")
        if sound:
            ctx.out.success("the store's files are sound")
        else:
            ctx.out.error("the store has problems (see the table)")
    return 0 if sound else 1


@db_check.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--repair", action="store_true",
                        help="add missing name-registry rows and drop stale ones")
    a.output_format(parser)


def _chunk_size(parser: a.Parser) -> None:
    parser.add_argument("--chunk-size", type=a.chunk_size, default=backup.CHUNK,
                        metavar="N", help=f"documents per read batch and per write "
                        f"(default {backup.CHUNK})")


CONSISTENCY = {
    "snapshot": "one snapshot of the database (readConcern snapshot)",
    "checked": "no operation committed while it was read (checked before and after)",
}


@command("db", "dump", help="write a portable archive of the database (gzip'd tar of "
         "JSON lines; works on the embedded store and MongoDB)", store=True,
         progress="dumping")
async def db_dump(args: argparse.Namespace) -> None:
    """Streams each collection outside any transaction; consistent by a snapshot read on
    a MongoDB replica set (5.0+), else by comparing a change marker before and after
    (retried, then refused): ``backup``'s docstring."""
    ctx = args.ctx
    spool = await backup.spool(ctx.store, chunk=args.chunk_size)
    name = ctx.store.database.name
    try:
        if args.output == "-":
            stream = getattr(ctx.out.stdout, "buffer", None)
            if stream is None:
                raise InvalidInput("this standard output takes no binary data; pass -o FILE")
            if ctx.out.stdout.isatty():
                raise InvalidInput("refusing to write a binary archive to a terminal; pass "
                                   "-o FILE or redirect standard output")
            summary = await asyncio.to_thread(spool.write, stream)
            stream.flush()
            where = "standard output"
        else:
            path = Path(args.output).expanduser()
            summary = await asyncio.to_thread(backup.write_private_file, path, spool.write,
                                              overwrite=args.force)
            where = str(path)
    finally:
        spool.close()
    ctx.out.success(f"dumped {esc(summary.documents)} documents in {len(summary.collections)} "
                    f"collections of {esc(name)} to {esc(where)} (consistent: "
                    f"{esc(CONSISTENCY.get(summary.consistency, summary.consistency))})")


@db_dump.args()
def _(parser: a.Parser) -> None:
    parser.description = (
        "Reads each collection with a cursor, outside any transaction (a replica set's "
        "transactions end after 60 s). Consistency: on a MongoDB 5.0+ replica set, one "
        "snapshot read; otherwise a change marker (every collection's count, History's "
        "newest row, the data generations) is compared before and after, and the dump is "
        f"taken again (up to {backup.DUMP_ATTEMPTS} times) or refused when an operation "
        "committed meanwhile.")
    parser.add_argument("-o", "--output", default="-", metavar="FILE",
                        help="archive to write, created 0600 (default -: standard output)")
    parser.add_argument("--force", "-f", action="store_true",
                        help="overwrite an existing archive file")
    _chunk_size(parser)


@command("db", "restore", help="load an archive from `db dump` into the database "
         "(all or nothing; refuses a non-empty database without --force)",
         progress="restoring")
async def db_restore(args: argparse.Namespace) -> None:
    """Connects itself (not ``store=True``): with ``--force`` it may first have to set a
    lost embedded-store file aside (``store_files.start_over``). Loads aside in chunks,
    then switches; a killed restore continues when run again (``backup``'s docstring)."""
    ctx = args.ctx
    path: Path | None = None
    data: bytes | None = None
    if args.file == "-":
        stream = getattr(ctx.stdin, "buffer", None)
        if stream is None or ctx.stdin.isatty():
            raise InvalidInput("give the archive as FILE, or pipe it into standard input")
        data = await asyncio.to_thread(stream.read)
    else:
        path = Path(args.file).expanduser()
        if not path.is_file():
            raise InvalidInput(f"{path} does not exist or is not a file")
    mongo = ctx.config.mongo
    if args.force and mongo.is_embedded:
        server = EmbeddedServer(mongo.embedded)
        note = store_files.start_over(server.data_dir, mongo.database, server_up=server.is_up())
        if note is not None:
            ctx.out.warn(esc(note))
    ctx.store = await connect(mongo, notify=ctx.out.info)
    # Validated against the models (bound by connect) before anything is written.
    archive = await asyncio.to_thread(backup.read_archive, path, data)
    result = await backup.restore(ctx.store, archive, force=args.force,
                                  chunk=args.chunk_size)
    for note in result.notes:
        ctx.out.info(esc(note))
    counts = result.counts
    ctx.out.success(f"restored {esc(sum(counts.values()))} documents in {len(counts)} "
                    f"collections (dumped from {esc(archive.database)} at "
                    f"{esc(archive.created_at)}) into {esc(ctx.store.database.name)}")


@db_restore.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("file", metavar="FILE",
                        help="archive written by `cheeto db dump` (- reads standard input)")
    parser.add_argument("--force", "-f", action="store_true",
                        help="replace the contents of a non-empty database; on the embedded "
                        "store also rebuild a database whose file was lost (stop the store "
                        "and move a damaged file aside first)")
    _chunk_size(parser)
