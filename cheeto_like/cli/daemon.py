"""``cheeto daemon worker|beat|enqueue|status``: the Celery side of the daemon.

``worker`` and ``beat`` run Celery in this process until stopped (Ctrl-C or SIGTERM: a
warm shutdown that lets the running task finish). Celery is imported only by these
commands, so the rest of the CLI does not pay for it. The serving side (``api``,
``flower``, ``up``) is in ``cli/daemon_serve.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any

from ..config import mask_uri
from ..daemon.config import (
    HUB_QUEUE,
    TASKS,
    daemon_config,
    enabled_tasks,
    lookup,
    site_queue,
    task_block,
    task_sites,
)
from ..errors import ExternalError, InvalidInput
from . import args as a
from .app import command, group_help
from .output import esc

group_help("daemon", help="the Celery hub and site workers, beat, manual runs, the API")

log = logging.getLogger("cheeto_like.daemon")
LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
WAIT_TIMEOUT_S = 300.0  # enqueue --wait: a run nobody picks up is reported, not waited on


def _loglevel(parser: a.Parser) -> None:
    parser.add_argument("--worker-loglevel", default="INFO", type=str.upper,
                        choices=LOG_LEVELS, help="log level of the process (default INFO)")


def _metrics_port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0-65535; 0: off)")
    return value


def _metrics_args(parser: a.Parser, where: str) -> None:
    parser.add_argument("--metrics-port", type=_metrics_port, metavar="N",
                        help=f"serve Prometheus metrics on port N (default {where}; 0: "
                             "off); at metrics.listen_address")


def _start_metrics(args: argparse.Namespace, role: str, configured: int | None, *,
                   name: str = "", multiprocess: bool = True) -> None:
    """The process's metrics server, when a port is set (``--metrics-port`` wins)."""
    from ..metrics import start_for

    port = configured if args.metrics_port is None else args.metrics_port
    server = start_for(args.ctx.config, role, port, name=name, multiprocess=multiprocess)
    if server is not None:
        log.info("%s: metrics on http://%s:%d/metrics", role, server.host, server.port)


def _concurrency(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid concurrency {text!r}") from None
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(f"concurrency must be 1-64, not {value}")
    return value


def _writable_dir(path: Path, what: str) -> None:
    parent = path.parent
    if not parent.is_dir():
        raise InvalidInput(f"the {what} directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ExternalError(f"cannot write the {what} in {parent} (permission denied)")


@command("daemon", "worker", help="run a Celery worker: the hub (queue cheeto) or, with "
                                  "--site, a site's head-node worker (queue slurm.<site>)")
def daemon_worker(args: argparse.Namespace) -> int:
    from celery.utils.nodenames import host_format

    from ..daemon.app import (
        HUB_WORKER_NAME,
        describe,
        make_app,
        run_celery,
        setup_process_logging,
        site_worker_name,
        worker_argv,
    )

    config = args.ctx.config
    daemon_config(config)
    if args.site:
        task_block(config, TASKS["slurm_sync"])  # a site worker only runs slurm_sync
        queue, name = site_queue(args.site), args.name or site_worker_name(args.site)
    else:
        queue, name = HUB_QUEUE, args.name or HUB_WORKER_NAME
    app = make_app(config)
    setup_process_logging(args.worker_loglevel, getattr(args, "log", None),
                          getattr(args, "log_format", None))
    if args.site:
        _start_metrics(args, "site_worker", config.metrics.worker_port(args.site),
                       name=args.site)
        from ..metrics import collectors_quota  # the submit check's files, if it has any

        collectors_quota.install(config, [args.site])
    else:
        _start_metrics(args, "hub_worker", config.metrics.worker_port(None))
    enabled = ", ".join(enabled_tasks(config)) or "none"
    log.info("worker %s consuming %s (enabled tasks: %s); %s", host_format(name), queue,
             enabled, describe(app))
    from ..daemon.rabbitmq import check_consumer_timeout

    if (verdict := check_consumer_timeout(daemon_config(config))) is not None:
        log.log(verdict[0], "worker: %s", verdict[1])
    agent = _quota_agent(args) if args.site else None
    try:
        return run_celery(app, worker_argv(queue=queue, name=name,
                                           loglevel=args.worker_loglevel,
                                           concurrency=args.concurrency))
    finally:
        if agent is not None:
            agent.stop()


def _quota_agent(args: argparse.Namespace) -> Any:
    """A site worker whose site checks quotas at submit keeps the head node's table: it
    runs ``daemon quota-agent`` beside itself (slurm.enforcement.sites)."""
    from ..daemon.quota_agent import AgentChild
    from ..daemon.stack import cheeto_argv

    if args.site not in args.ctx.config.slurm.enforcement.sites:
        return None
    extra = [*(["--config", str(args.config)] if getattr(args, "config", None) else []),
             *(["--profile", args.profile] if getattr(args, "profile", None) else []),
             *(["--log-format", args.log_format] if getattr(args, "log_format", None)
               else [])]
    log.info("worker: starting the quota agent of %s", args.site)
    from .. import metrics

    # the agent's own figures (the Slurm syncs it starts, its store commands) are served
    # on this worker's metrics port: it records into this worker's directory
    return AgentChild(cheeto_argv("daemon", "quota-agent", "-s", args.site, *extra),
                      env=metrics.child_env()).start()


@daemon_worker.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--site", "-s", metavar="SITE",
                        help="be SITE's worker: consume slurm.SITE (run it on the head node)")
    parser.add_argument("--name", "-n", metavar="NAME",
                        help="node name (default cheeto-hub@%%h, or slurm-SITE@%%h)")
    parser.add_argument("--concurrency", "-c", type=_concurrency, default=1, metavar="N",
                        help="tasks this worker runs at once (default 1; 1-64); runs of the "
                             "same task and site still never overlap (their leases)")
    _metrics_args(parser, "metrics.hub_worker_port, or metrics.site_worker_ports[SITE]")
    _loglevel(parser)



@command("daemon", "beat", help="run the beat scheduler (several may run: one sends, the "
                                "others stand by)")
def daemon_beat(args: argparse.Namespace) -> int:
    from ..daemon.app import (
        beat_argv,
        check_pidfile,
        describe,
        make_app,
        run_celery,
        setup_process_logging,
    )
    from ..daemon.schedule import build_beat_schedule

    config = args.ctx.config
    daemon = daemon_config(config)
    plan = build_beat_schedule(config)  # a bad schedule: one line, exit 2
    schedule_file = Path(args.schedule_file or daemon.beat_schedule_filename).expanduser()
    pidfile = Path(args.pidfile).expanduser() if args.pidfile else None
    _writable_dir(schedule_file, "beat schedule file")
    if pidfile is not None:
        _writable_dir(pidfile, "pidfile")
        check_pidfile(pidfile)
    app = make_app(config, beat_schedule=plan.entries)
    setup_process_logging(args.worker_loglevel, getattr(args, "log", None),
                          getattr(args, "log_format", None))
    _start_metrics(args, "beat", config.metrics.beat_port, multiprocess=False)
    from ..metrics import collectors_broker  # the queues' depth, asked at each scrape

    collectors_broker.install(app, config)
    for note in plan.notes:
        log.info("beat: %s", note)
    for name, entry in plan.entries.items():
        log.info("beat: %s -> %s %s every %s", name, entry["options"]["queue"], entry["task"],
                 entry["schedule"])
    if not plan.entries:
        log.warning("beat: nothing is scheduled (no task block has a schedule)")
    log.info("beat schedule file %s; %s", schedule_file, describe(app))
    return run_celery(app, beat_argv(schedule_file=schedule_file, pidfile=pidfile,
                                     loglevel=args.worker_loglevel))


@daemon_beat.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--schedule-file", metavar="PATH",
                        help="beat's state file (default daemon.beat_schedule_filename)")
    parser.add_argument("--pidfile", metavar="PATH",
                        help="refuse to start when PATH names a running beat")
    _metrics_args(parser, "metrics.beat_port")
    _loglevel(parser)


def _label(spec: Any, site: str | None) -> str:
    return spec.name if site is None else f"{spec.name} {site}"


def _describe_markup(outcome: Any) -> str:
    if outcome.state == "ok":
        result = outcome.result if isinstance(outcome.result, dict) else {}
        run = f", run {result['run_id']}" if result.get("run_id") else ""
        return esc(f"ok in {result.get('duration_s', '?')}s on "
                   f"{result.get('worker', '?')}{run}").replace("ok", "[green]ok[/]", 1)
    if outcome.state == "skipped":
        return f"[yellow]skipped[/]: {esc(str(outcome.error))}"
    return f"[red]{outcome.state.upper()}[/]: {esc(str(outcome.error))}"


@command("daemon", "enqueue", help="queue a task now, for the given or configured sites")
async def daemon_enqueue(args: argparse.Namespace) -> int:
    """Checks everything the config decides (the daemon section, the task, its sites)
    before connecting to anything; given the config a running ``daemon up`` was started
    from, it uses the stack's own config (its broker), not that file's."""
    from ..config import load_config
    from ..daemon.app import make_app
    from ..daemon.stack_pointer import running_stack_config
    from ..queries.site import get_site
    from ..store import connect

    ctx = args.ctx
    config = ctx.config
    if (derived := running_stack_config(config)) is not None:
        config = load_config(derived, "default")
        ctx.out.info(esc(f"a `cheeto daemon up` stack runs with this config: using its "
                         f"config {derived}"))
    daemon_config(config)
    spec = lookup(args.task)
    block = task_block(config, spec)
    sites = task_sites(config, spec, block, args.site)
    store = await connect(config.mongo, notify=ctx.out.info)
    try:
        for site in sites:
            await get_site(site)  # a typo would otherwise sit in a queue nobody consumes
    finally:
        await store.close()
    app = make_app(config)
    try:
        return await _send_and_wait(ctx, app, spec, sites if spec.per_site else [None], args)
    finally:
        app.close()


async def _send_and_wait(ctx: Any, app: Any, spec: Any, sites: list[str] | list[None],
                         args: argparse.Namespace) -> int:
    from ..daemon.app import send, wait_for

    sent = [(site, await asyncio.to_thread(send, app, spec, site)) for site in sites]
    rows: list[dict[str, Any]] = []
    for site, result in sent:
        queue = spec.queue(site)
        rows.append({"task": spec.name, "site": site, "queue": queue, "id": result.id})
        ctx.out.info(f"{esc(_label(spec, site))} -> queue {esc(queue)} (id {esc(result.id)})")
    if not args.wait:
        if ctx.out.machine:
            ctx.out.write_data(rows)
        return 0
    deadline = time.monotonic() + args.timeout
    failed = 0
    for row, (site, result) in zip(rows, sent, strict=True):
        outcome = await asyncio.to_thread(wait_for, result, deadline - time.monotonic())
        running = (outcome.result or {}).get("running_task") \
            if outcome.state == "skipped" and isinstance(outcome.result, dict) else None
        if running and running != result.id:
            # another run holds the task's lease: follow it, its result is this one's
            row["running_task"] = running
            ctx.out.info(f"{esc(_label(spec, site))}: already running: run {esc(running)}; "
                         "waiting for it")
            outcome = await asyncio.to_thread(wait_for, app.AsyncResult(running),
                                              deadline - time.monotonic())
        if outcome.state == "timeout":
            outcome.error = (f"no result within {args.timeout:g}s: still queued (does a "
                             f"worker consume queue {row['queue']} on "
                             f"{mask_uri(str(app.conf.broker_url))}?) or still running; see "
                             "`cheeto daemon status`, or wait longer with --timeout")
        row.update(state=outcome.state, result=outcome.result, error=outcome.error)
        failed += outcome.state not in ("ok", "skipped")
        ctx.out.info(f"{esc(_label(spec, site))}: {_describe_markup(outcome)}")
    if ctx.out.machine:
        ctx.out.write_data(rows)
    if failed:
        ctx.out.error(f"{failed} of {len(rows)} run(s) did not succeed")
        return 1
    return 0


@daemon_enqueue.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("task", metavar="TASK", help=f"one of {', '.join(TASKS)}")
    parser.add_argument("--site", "-s", action="append", metavar="SITE",
                        help="a site to run for (repeatable; default the task's sites, "
                             "else daemon.sites)")
    parser.add_argument("--wait", action="store_true",
                        help="wait for every run and print its result (exit 1 if any failed or "
                             "timed out); a run already going (its lease held by another "
                             "run) is followed: its result is reported")
    parser.add_argument("--timeout", type=float, default=WAIT_TIMEOUT_S, metavar="SECONDS",
                        help=f"with --wait: give up after this many seconds (default "
                             f"{WAIT_TIMEOUT_S:g}; exit 1)")
    a.output_format(parser)


@command("daemon", "status", help="the last run of each (task, site): state, when, "
                                  "duration, error", store=True)
async def daemon_status(args: argparse.Namespace) -> None:
    from ..daemon.status import COLUMNS, last_runs

    ctx = args.ctx
    rows = await last_runs(ctx.require_store(), ctx.config)
    ctx.out.table(rows, title="Last run of each (task, site)", columns=COLUMNS)


@daemon_status.args()
def _(parser: a.Parser) -> None:
    a.output_format(parser)
