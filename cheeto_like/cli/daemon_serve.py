"""``cheeto daemon api|flower|up|demo-seed|healthcheck``: the serving side of the daemon.

The Celery side (``worker``, ``beat``, ``enqueue``, ``status``) lives in ``cli/daemon.py``;
this module adds the REST API, Flower, the one-command stack and the container health
check. Handlers stay thin: the work is in ``cheeto_like.daemon.*``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import ApiConfig, Config, mask_uri
from ..errors import InvalidInput
from ..store import connect
from . import args as a
from .app import command
from .output import esc

if TYPE_CHECKING:
    from ..auth.tokens import TokenIssuer
    from ..daemon.stack import StackPlan
    from .output import Output


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (1-65535)")
    return value


async def _store_answers(config: Config) -> TokenIssuer:
    """Fail with one clear line (not a uvicorn traceback) when the store is down or the
    token key cannot be had (a key file missing and not creatable, a store-kept key not
    readable: ``ConfigError``, exit 2); the issuer it loaded signs for the app."""
    from ..auth.tokens import TokenIssuer

    store = await connect(config.mongo, autostart=False, create_indexes=False)
    try:
        return await TokenIssuer.load(config.api, store)
    finally:
        await store.close()


@command("daemon", "api", help="serve the REST API (puppet exports, /api/v1 reads and writes, "
                               "the dashboard) with uvicorn")
def daemon_api(args: argparse.Namespace) -> int:
    import uvicorn

    from ..web.app import check_bind, check_tls, create_api, uvicorn_options

    ctx = args.ctx
    api = ctx.config.api or ApiConfig()
    host = args.host or api.host
    port = args.port or api.port
    if args.key_path:  # for the container entrypoint: where the key is, nothing started
        from ..auth.tokens import describe_key

        ctx.out.write_raw(describe_key(api) + "\n")
        return 0
    access = check_bind(api, host, insecure=args.insecure)
    check_tls(api)
    issuer = asyncio.run(_store_answers(ctx.config))
    scheme = "https" if api.tls_cert else "http"
    where = f"[{host}]" if ":" in host else host
    ctx.out.info(esc(f"serving the API on {scheme}://{where}:{port}{api.prefix}/ ({access})"))
    options = uvicorn_options(api, host, port)
    if ctx.config.metrics.api:
        from ..metrics import activate

        activate("api")  # one uvicorn process: a plain registry (metrics/api.py)
    fmt = getattr(args, "log_format", None)
    from ..logs import resolve_format

    if resolve_format(fmt) == "json":  # uvicorn's loggers too, through the root handler
        from ..daemon.app import setup_process_logging

        setup_process_logging(getattr(args, "log_level", "INFO"), getattr(args, "log", None),
                              "json")
        options["log_config"] = None
    uvicorn.run(create_api(ctx.config, insecure=args.insecure, issuer=issuer), **options)
    return 0


@daemon_api.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--host", help="address to listen on (default api.host, 127.0.0.1)")
    parser.add_argument("--port", type=_port, help="port (default api.port, 8000)")
    parser.add_argument("--insecure", action="store_true",
                        help="serve the storage map to anonymous callers (only without "
                             "api.api_key and managed_keys_only); root keys always need a "
                             "credential")
    parser.add_argument("--key-path", action="store_true",
                        help="print where the token key is kept (its file, or 'store') and "
                             "exit (the container entrypoint asks it)")


@command("daemon", "flower", help="run Flower, the Celery monitor, on the daemon's broker "
                                  "and result backend")
def daemon_flower(args: argparse.Namespace) -> int:
    from ..daemon.app import make_app, run_celery, setup_process_logging
    from ..daemon.config import daemon_config
    from ..daemon.flower import (
        check_basic_auth,
        check_flower_bind,
        check_no_secret_args,
        flower_command,
        flower_credentials,
        flower_overrides,
    )

    ctx = args.ctx
    config = ctx.config
    daemon_config(config)
    basic_auth = flower_credentials(config)
    if args.basic_auth is not None:  # the reference's documented form: taken, with a warning
        basic_auth = check_basic_auth(args.basic_auth, "--basic-auth")
        ctx.out.warn("--basic-auth puts the password in the process list (every local user "
                     "can read argv with ps); use $FLOWER_BASIC_AUTH or "
                     "daemon.flower_basic_auth instead")
    check_flower_bind(args.address, basic_auth, insecure=args.insecure)
    extra = [arg for arg in (args.extra or []) if arg != "--"]
    check_no_secret_args(extra, args.broker_api)
    argv, env = flower_command(config, address=args.address, port=args.port,
                               basic_auth=basic_auth, url_prefix=args.url_prefix or "",
                               broker_api=args.broker_api or os.environ.get("FLOWER_BROKER_API"),
                               broker_api_port=args.broker_api_port, extra=extra)
    app = make_app(config, **flower_overrides(config))
    setup_process_logging(args.worker_loglevel, getattr(args, "log", None),
                          getattr(args, "log_format", None))
    os.environ.update(env)
    prefix = f"/{args.url_prefix.strip('/')}" if args.url_prefix else ""
    where = f"[{args.address}]" if ":" in args.address else args.address
    ctx.out.info(esc(f"serving Flower on http://{where}:{args.port}{prefix}/ "
                        f"({'basic auth' if basic_auth else 'no auth: loopback only'}); "
                        f"broker API {mask_uri(env.get('FLOWER_BROKER_API', '(none)'))}"))
    return run_celery(app, argv)


@daemon_flower.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--address", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=5555, help="port (default 5555)")
    parser.add_argument("--url-prefix", metavar="PREFIX",
                        help="serve under /PREFIX (behind a reverse proxy)")
    parser.add_argument("--broker-api", metavar="URL",
                        help="the RabbitMQ management API, without credentials (default "
                             "$FLOWER_BROKER_API, else derived from the broker URL: "
                             "http(s)://<broker credentials>@<broker host>:15672|15671/api/)")
    parser.add_argument("--broker-api-port", type=_port, metavar="PORT",
                        help="management API port for the derived URL (default 15672 for "
                             "amqp, 15671 for amqps)")
    parser.add_argument("--basic-auth", metavar="USER:PASSWORD",
                        help="Flower's login (the reference's form; it shows in the process "
                             "list: prefer $FLOWER_BASIC_AUTH or daemon.flower_basic_auth)")
    parser.add_argument("--insecure", action="store_true",
                        help="allow a non-loopback address without basic auth "
                             "($FLOWER_BASIC_AUTH or daemon.flower_basic_auth)")
    parser.add_argument("--worker-loglevel", default="INFO", type=str.upper,
                        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                        help="log level of the process (default INFO)")
    parser.add_argument("extra", nargs=argparse.REMAINDER, metavar="-- FLOWER ARGS",
                        help="more Flower options after --, e.g. -- --max_tasks=5000")


@command("daemon", "up", help="run the whole daemon on this machine, supervised: store, "
                              "broker, hub and site workers, beat, API and Flower")
def daemon_up(args: argparse.Namespace) -> int:
    from ..daemon.demo import seed_demo
    from ..daemon.flower import flower_credentials
    from ..daemon.stack import RunDirLock, StackOptions, Supervisor, plan_stack

    ctx = args.ctx
    flower_auth = flower_credentials(ctx.config)
    run_dir = Path(args.run_dir).expanduser() if args.run_dir else default_run_dir()
    options = StackOptions(run_dir=run_dir, broker=args.broker, api_port=args.api_port,
                           flower_port=args.flower_port, flower_auth=flower_auth,
                           seed_demo=args.seed_demo, demo_site=args.demo_site,
                           ready_timeout=args.ready_timeout)
    with RunDirLock(run_dir):
        plan = plan_stack(ctx.config, options)
        seed = None
        if args.seed_demo:
            _demo_allowed(plan.store_config, force=args.force)

            async def seed() -> list[str]:
                store = await connect(plan.store_config.mongo, autostart=False)
                try:
                    return await seed_demo(store, ctx.author or "cheeto-demo", args.demo_site)
                finally:
                    await store.close()

        supervisor = Supervisor(plan, stream=ctx.out.stderr,
                                banner=lambda p: _banner(ctx.out, p, args.demo_site))
        return asyncio.run(supervisor.run(seed))


@daemon_up.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--run-dir", metavar="DIR",
                        help="state, logs and the private broker's data (default "
                             "$XDG_DATA_HOME/cheeto/stack)")
    parser.add_argument("--broker", default="auto",
                        choices=["auto", "rabbitmq", "filesystem", "config"],
                        help="auto (default): the config's daemon.broker_url if it sets one, "
                             "else a private RabbitMQ node if installed, else kombu's "
                             "filesystem transport")
    parser.add_argument("--api-port", type=_port, metavar="PORT",
                        help="API port (default api.port, or a free one if taken)")
    parser.add_argument("--flower-port", type=_port, metavar="PORT",
                        help="Flower port (default 5555, or a free one if taken)")
    parser.add_argument("--seed-demo", action="store_true",
                        help="seed the demo site first (idempotent; see daemon demo-seed)")
    parser.add_argument("--demo-site", default="farm", metavar="SITE",
                        help="the demo site's name (default farm)")
    parser.add_argument("--ready-timeout", type=float, default=90.0, metavar="SECONDS",
                        help="how long each service may take to come up (default 90)")
    a.force(parser, help="allow --seed-demo on a real MongoDB")


def default_run_dir() -> Path:
    from ..config import xdg_data_home

    return xdg_data_home() / "cheeto" / "stack"


def _demo_allowed(config: Config, *, force: bool) -> None:
    if not config.mongo.is_embedded and not force:
        raise InvalidInput("refusing to seed demo data into a real MongoDB (mongo.uri is set); "
                           "pass --force if you mean it")


def _banner(out: Output, plan: StackPlan, demo_site: str) -> None:
    info = plan.info
    key = info["api_key"]
    site = demo_site if plan.seed_demo else "SITE"
    out.success("the stack is up; Ctrl-C stops everything")
    lines = [
        f"  API     {info['api_url']}   X-API-Key: {key}"
        + (" (generated)" if info.get("api_key_generated") else ""),
        f"          curl -H 'X-API-Key: {key}' {info['api_url']}puppet/root-keys/{site}",
        f"          docs: {info['api_url']}docs",
        f"  Web     {info['api_url']}   the dashboard (sign in with a cluster account)",
        f"  Flower  {info['flower_url']}   user {info['flower_user']}, password "
        f"{info['flower_password']}" + (" (generated)" if info.get("flower_auth_generated")
                                        else ""),
        f"  broker  {info['broker']}",
        f"  store   {info['store']}",
        "  metrics " + " ".join(f"{name}={url}" for name, url
                                 in info.get("metrics", {}).items()),
        f"  run dir {info['run_dir']} (logs/, config.yaml, stack.json)",
        f"  enqueue CHEETO_CONFIG={info['config']} cheeto daemon enqueue TASK --wait",
        "          (or with the config you gave `daemon up`, while the stack runs)",
    ]
    if plan.seed_demo:
        from ..daemon.demo_dashboard import demo_logins_line

        lines.insert(4, f"          demo logins: {demo_logins_line()}")
    for line in lines:
        out.info(esc(line))


@command("daemon", "demo-seed", help="seed a small demo site (idempotent: a second run "
                                     "changes nothing)")
async def daemon_demo_seed(args: argparse.Namespace) -> int:
    from ..daemon.demo import seed_demo

    ctx = args.ctx
    _demo_allowed(ctx.config, force=args.force)  # before connecting to anything
    store = await connect(ctx.config.mongo, notify=ctx.out.info)
    try:
        ran = await seed_demo(store, ctx.author, args.site)
    finally:
        await store.close()
    if ran:
        ctx.out.success(f"seeded the demo site {esc(args.site)}: {esc(', '.join(ran))}")
    else:
        ctx.out.info(f"the demo site {esc(args.site)} is already seeded; nothing to do")
    return 0


@daemon_demo_seed.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--site", default="farm", metavar="SITE",
                        help="the demo site's name (default farm)")
    a.force(parser, help="allow seeding a real MongoDB (mongo.uri)")


@command("daemon", "healthcheck", help="container health check for whichever role PID 1 "
                                       "runs (exit 0 healthy, 1 not)")
def daemon_healthcheck(args: argparse.Namespace) -> int:
    from ..daemon.health import (
        Role,
        check_broker,
        check_http,
        check_store,
        detect_role,
        probe_url,
        role_config,
    )

    ctx = args.ctx
    role = Role(args.role, []) if args.role else detect_role()
    config = role_config(role, ctx.config)
    if args.url:
        problem = check_http(args.url)
    elif (url := probe_url(role, config)) is not None:
        problem = check_http(url)
    else:
        problem = asyncio.run(check_store(config))
        if problem is None and role.name in ("worker", "beat") and config.daemon:
            problem = check_broker(config)
    if problem is not None:
        ctx.out.error(f"unhealthy ({role.name}): {problem}")
        return 1
    ctx.out.info(f"healthy ({esc(role.name)})")
    return 0


@daemon_healthcheck.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--role", choices=["api", "flower", "worker", "beat", "other"],
                        help="check this role (default: the one PID 1 runs)")
    parser.add_argument("--url", help="just GET this URL and expect 200")
