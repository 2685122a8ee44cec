"""``cheeto db serve|status|stop``: the embedded store and what the config points at."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import EmbeddedStoreConfig
from ..embedded import EmbeddedServer
from ..errors import CheetoError, InvalidInput
from ..store import connect
from . import args as a
from .app import command, group_help
from .output import esc

group_help("db", help="the store: run the embedded server, check the connection")


def _server(args: argparse.Namespace) -> EmbeddedServer:
    config = args.ctx.config.mongo
    embedded = config.embedded
    overrides = {}
    if getattr(args, "path", None):
        overrides["path"] = Path(args.path).expanduser()
    if getattr(args, "port", None):
        overrides["port"] = args.port
    if getattr(args, "host", None):
        overrides["host"] = args.host
    if getattr(args, "listen", None):
        overrides["listen"] = args.listen
    elif "port" in overrides or "host" in overrides:
        overrides["listen"] = "tcp"
    if overrides:
        embedded = EmbeddedStoreConfig(**{**embedded.model_dump(), **overrides})
    parameters: dict[str, str] = {}
    for item in getattr(args, "set_parameter", None) or []:
        name, sep, value = item.partition("=")
        if not sep or name not in ("enableTestCommands", "transactionLifetimeLimitSeconds"):
            raise InvalidInput(f"--set-parameter {item!r}: expected enableTestCommands=0|1 "
                               "or transactionLifetimeLimitSeconds=N")
        parameters[name] = value
    return EmbeddedServer(embedded, set_parameters=parameters)


@command("db", "serve", help="run the embedded store in the foreground")
def db_serve(args: argparse.Namespace) -> None:
    if not args.ctx.config.mongo.is_embedded:
        raise InvalidInput("the config names a real MongoDB (mongo.uri); nothing to serve")
    server = _server(args)
    if server.is_up():
        raise InvalidInput(f"something already listens on {server.address}")
    args.ctx.out.info(f"serving the embedded store on {esc(server.address)} "
                      f"(data in {esc(server.data_dir)})")
    server.serve_foreground()


@db_serve.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--path", help="data directory (default from config)")
    parser.add_argument("--listen", choices=("unix", "tcp"),
                        help="a Unix socket in the data directory (default) or TCP")
    parser.add_argument("--host", help="TCP address to listen on (implies --listen tcp)")
    parser.add_argument("--port", type=int, help="TCP port (implies --listen tcp)")
    parser.add_argument("--set-parameter", "--setParameter", action="append",
                        dest="set_parameter", metavar="NAME=VALUE",
                        help="a mongod start-up parameter: enableTestCommands=1 (fail "
                             "points, for tests) or transactionLifetimeLimitSeconds=N")


@command("db", "stop", help="stop an embedded store started in the background")
def db_stop(args: argparse.Namespace) -> None:
    server = _server(args)
    if server.stop():
        args.ctx.out.success(f"stopped the embedded store on {esc(server.address)}")
    else:
        args.ctx.out.info("no embedded store of ours is running")


@command("db", "status", help="say what the config points at and whether it answers")
async def db_status(args: argparse.Namespace) -> int:
    ctx = args.ctx
    mongo = ctx.config.mongo
    data: dict[str, object] = {"profile": ctx.config.profile, "database": mongo.database}
    if mongo.is_embedded:
        server = _server(args)
        data |= {"store": "embedded", "transport": server.transport,
                 "address": server.address,
                 "data_dir": str(server.data_dir), "pid": server.pid()}
    else:
        from ..config import mask_uri

        data |= {"store": "mongodb", "uri": mask_uri(mongo.uri or "")}
    try:
        store = await connect(mongo, autostart=False, create_indexes=False)
    except CheetoError as exc:
        data |= {"answers": False, "error": exc.message}
        if mongo.is_embedded and _fresh(_server(args).data_dir):
            # a fresh home: nothing is wrong, there is just no store yet
            del data["error"]
            data |= {"state": "not created yet",
                     "note": "the embedded store is created and started on first use (any "
                             "command that needs it), or now with `cheeto db serve`"}
    else:
        from ..queries.imports import describe, unfinished_imports

        info = await store.client.admin.command("buildInfo")
        data |= {"answers": True, "server_version": info.get("version", "unknown")}
        from ..queries.class_batches import describe_batch, unfinished_class_batches

        pending = [describe(r) for r in await unfinished_imports(store)]
        if pending:
            data["unfinished_import"] = pending[0] if len(pending) == 1 else pending
        batches = [describe_batch(r) for r in await unfinished_class_batches(store)]
        if batches:
            data["unfinished_class_batches"] = batches
        await store.close()
    ctx.out.show(data, title="store")
    if data.get("unfinished_import") and not ctx.out.machine:
        ctx.out.warn(esc(data["unfinished_import"]))
    if not ctx.out.machine:
        for line in data.get("unfinished_class_batches") or []:
            ctx.out.warn(esc(line))
    return 0 if data["answers"] or data.get("state") == "not created yet" else 1


def _fresh(path: Path) -> bool:
    """No embedded store was ever made here (no data directory, or one without the
    marker or any database file)."""
    from ..store_files import marker_path

    return not path.exists() or (not marker_path(path).exists()
                                 and not any(path.glob("*.db")))


@db_status.args()
def _(parser: a.Parser) -> None:
    a.output_format(parser)
