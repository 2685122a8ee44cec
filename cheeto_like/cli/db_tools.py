"""``cheeto db check|dump|restore``: is the store sound, and portable backups of it."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

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
         "and the name registry", store=True)
async def db_check(args: argparse.Namespace) -> int:
    ctx = args.ctx
    rows = await check_store(ctx.store, ctx.config.mongo, repair=args.repair)
    data = [row.as_dict() for row in rows]
    sound = all(row.status != "problem" for row in rows)
    ctx.out.table(data, title=f"store check: {ctx.store.description}", columns=CHECK_COLUMNS,
                  data={"ok": sound, "database": ctx.store.database.name, "checks": data})
    if not ctx.out.machine:
        if sound:
            ctx.out.success("the store is sound")
        else:
            ctx.out.error("the store has problems (see the table)")
    return 0 if sound else 1


@db_check.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--repair", action="store_true",
                        help="add missing name-registry rows and drop stale ones")
    a.output_format(parser)


@command("db", "dump", help="write a portable archive of the database (gzip'd tar of "
         "JSON lines; works on the embedded store and MongoDB)", store=True)
async def db_dump(args: argparse.Namespace) -> None:
    ctx = args.ctx
    collections = await backup.read_all(ctx.store)
    name = ctx.store.database.name
    if args.output == "-":
        stream = getattr(ctx.out.stdout, "buffer", None)
        if stream is None:
            raise InvalidInput("this standard output takes no binary data; pass -o FILE")
        if ctx.out.stdout.isatty():
            raise InvalidInput("refusing to write a binary archive to a terminal; pass -o FILE "
                               "or redirect standard output")
        summary = backup.build_archive(name, collections, stream)
        stream.flush()
        where = "standard output"
    else:
        path = Path(args.output).expanduser()
        summary = await asyncio.to_thread(
            backup.write_private_file, path,
            lambda fh: backup.build_archive(name, collections, fh), overwrite=args.force)
        where = str(path)
    ctx.out.success(f"dumped {esc(summary.documents)} documents in {len(summary.collections)} "
                    f"collections of {esc(name)} to {esc(where)}")


@db_dump.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("-o", "--output", default="-", metavar="FILE",
                        help="archive to write, created 0600 (default -: standard output)")
    parser.add_argument("--force", "-f", action="store_true",
                        help="overwrite an existing archive file")


@command("db", "restore", help="load an archive from `db dump` into the database "
         "(all or nothing; refuses a non-empty database without --force)")
async def db_restore(args: argparse.Namespace) -> None:
    """Connects itself (not ``store=True``): with ``--force`` it may first have to set a
    lost embedded-store file aside (``store_files.start_over``)."""
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
    counts = await backup.restore(ctx.store, archive, force=args.force)
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
