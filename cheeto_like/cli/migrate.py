"""``cheeto migrate from-cheeto``: import a cheeto v2 (reference) database; ``cheeto
migrate from-slurm-quota``: import a slurm-quota v3 SQLite database into one site.

Reading and mapping happen before the store is touched; the writer checks the whole
mapping against the store first (or writes nothing and lists every refusal), then writes
it in short chunks with one History row at the end. A run that was killed is finished by
running the same command again (``migrate/writer.py``). ``--dry-run`` stops after the
check.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..config import mask_uri
from ..errors import Conflict, InvalidInput
from . import args as a
from .app import command, group_help
from .output import esc

CHUNK = 500  # = migrate.writer.CHUNK (not imported here: --help stays light)

group_help("migrate", help="move in: import from another deployment")


@command("migrate", "from-cheeto", help="import a cheeto v2 database (a live MongoDB or a "
                                        "mongodump directory)", store=True,
         progress="importing")
async def migrate_from_cheeto(args: argparse.Namespace) -> int:
    from ..migrate.from_cheeto import map_reference
    from ..migrate.source import read_dump, read_uri
    from ..migrate.writer import OP_NAME, plan_import, write_import
    from ..queries.imports import describe, unfinished_import

    ctx = args.ctx
    if bool(args.uri) == bool(args.dump):
        raise InvalidInput("give exactly one of --uri or --dump")
    if args.uri:
        raw = await read_uri(args.uri, args.database or "cheeto")
        source = mask_uri(args.uri) + f" database {args.database or 'cheeto'}"
    else:
        raw = read_dump(Path(args.dump).expanduser(), args.database)
        source = f"dump {args.dump}"
    mapping = map_reference(raw)
    if args.dry_run:
        plan = await plan_import(ctx.store, mapping, chunk=args.chunk_size)
        plan.interrupted = await unfinished_import(ctx.store, OP_NAME)
    else:
        plan = await write_import(ctx.store, mapping, author=ctx.author, source=source,
                                  chunk=args.chunk_size)
    interrupted = plan.interrupted
    report: dict[str, Any] = {"source": source, "dry_run": args.dry_run,
                              "collections": plan.counts(), "refused": plan.refusals,
                              "notes": plan.notes,
                              "written": not args.dry_run and plan.finished,
                              "chunks": plan.chunks,
                              "interrupted": describe(interrupted) if interrupted else None}
    if ctx.out.machine:
        ctx.out.write_data(report)
    else:
        ctx.out.table([c for c in plan.counts() if c["source"] or c["new"] or c["present"]],
                      title=f"import from {source}",
                      columns=["collection", "source", "new", "present"])
        for note in plan.notes:
            ctx.out.info(f"note: {esc(note)}")
        for line in plan.refusals:
            ctx.out.warn(f"refused: {esc(line)}")
        if interrupted is not None and not plan.finished:
            ctx.out.warn(esc(describe(interrupted)))
    if not plan.ok:
        raise Conflict(f"{len(plan.refusals)} refusal(s): nothing was written")
    if args.dry_run:
        ctx.out.info(f"dry run: {esc(plan.new_count)} document(s) would be written")
    elif not plan.finished:
        ctx.out.info("nothing to import: the store already holds all of it")
    elif interrupted is not None:
        ctx.out.success(f"finished the interrupted import: {esc(plan.new_count)} more "
                        f"document(s) in {esc(plan.chunks)} chunk(s)")
    else:
        ctx.out.success(f"imported {esc(plan.new_count)} document(s) in "
                        f"{esc(plan.chunks)} chunk(s)")
    return 0


@migrate_from_cheeto.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--uri", metavar="MONGO_URI",
                        help="the reference's MongoDB (no password in it: set "
                             "$CHEETO_SOURCE_MONGO_PASSWORD)")
    parser.add_argument("--database", metavar="NAME",
                        help="the reference's database (default cheeto; with --dump, the "
                             "sub-directory of a mongodump --out tree)")
    parser.add_argument("--dump", metavar="DIR", help="a mongodump directory of .bson files")
    parser.add_argument("--dry-run", action="store_true",
                        help="show counts per collection and every conflict; write nothing")
    parser.add_argument("--chunk-size", type=a.chunk_size, default=CHUNK, metavar="N",
                        help=f"documents per write transaction and per read batch "
                             f"(default {CHUNK})")
    a.output_format(parser)


@command("migrate", "from-slurm-quota",
         help="import a slurm-quota v3 database (quotas, consumed minutes, GPU factors, "
              "defaults, roles) into a site", store=True, progress="importing")
async def migrate_from_slurm_quota(args: argparse.Namespace) -> int:
    from ..migrate.from_slurm_quota import OP_NAME, map_slurm_quota
    from ..migrate.slurm_quota_read import known_state, read_database
    from ..migrate.writer import plan_import, write_import
    from ..models.fields import utcnow
    from ..queries.imports import describe, unfinished_import
    from ..queries.site import get_site

    ctx = args.ctx
    site = await get_site(args.site)
    path = Path(args.database).expanduser()
    source_rows = read_database(path)
    origin = str(path.resolve())
    mapping = map_slurm_quota(source_rows, site=site.name, origin=origin,
                              known=await known_state(site.name), now=utcnow(),
                              author=ctx.author)
    source = f"slurm-quota {origin} for site {site.name}"
    if args.dry_run:
        plan = await plan_import(ctx.store, mapping, chunk=args.chunk_size)
        plan.interrupted = await unfinished_import(ctx.store, OP_NAME)
    else:
        plan = await write_import(ctx.store, mapping, author=ctx.author, source=source,
                                  op=OP_NAME, chunk=args.chunk_size)
    interrupted = plan.interrupted
    report: dict[str, Any] = {"site": site.name, "source": source, "dry_run": args.dry_run,
                              "collections": plan.counts(), "refused": plan.refusals,
                              "notes": plan.notes, "skipped": mapping.skipped,
                              "not_in_store": mapping.not_in_store,
                              "written": not args.dry_run and plan.finished,
                              "chunks": plan.chunks,
                              "interrupted": describe(interrupted) if interrupted else None}
    if ctx.out.machine:
        ctx.out.write_data(report)
    else:
        ctx.out.table(plan.counts(), title=f"import from {source}",
                      columns=["collection", "source", "new", "present"])
        for note in plan.notes:
            ctx.out.info(f"note: {esc(note)}")
        for line in mapping.skipped:
            ctx.out.info(f"skipped: {esc(line)}")
        for line in plan.refusals:
            ctx.out.warn(f"refused: {esc(line)}")
        if interrupted is not None and not plan.finished:
            ctx.out.warn(esc(describe(interrupted)))
    if not plan.ok:
        raise Conflict(f"{len(plan.refusals)} refusal(s): nothing was written")
    if args.dry_run:
        ctx.out.info(f"dry run: {esc(plan.new_count)} document(s) would be written")
    elif not plan.finished:
        ctx.out.info("nothing to import: the store already holds all of it")
    elif interrupted is not None:
        ctx.out.success(f"finished the interrupted import: {esc(plan.new_count)} more "
                        f"document(s) in {esc(plan.chunks)} chunk(s)")
    else:
        ctx.out.success(f"imported {esc(plan.new_count)} document(s) in "
                        f"{esc(plan.chunks)} chunk(s)")
    return 0


@migrate_from_slurm_quota.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("database", metavar="DB",
                        help="slurm-quota's SQLite file (read only; its default place is "
                             "/var/lib/state/slurm-quota/slurm-quota.db)")
    a.site(parser, help="the site to import into (it must exist)")
    parser.add_argument("--dry-run", action="store_true",
                        help="show counts per collection, notes and every conflict; write "
                             "nothing")
    parser.add_argument("--chunk-size", type=a.chunk_size, default=CHUNK, metavar="N",
                        help=f"documents per write transaction and per read batch "
                             f"(default {CHUNK})")
    a.output_format(parser)
