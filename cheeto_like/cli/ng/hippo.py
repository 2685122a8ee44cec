"""``cheeto ng hippo …``: HiPPO account requests."""

from __future__ import annotations

import argparse
from typing import Any

from ...adapters.hippo import HippoClient
from ...config import Config, HippoConfig
from ...errors import ConfigError
from ...models import HippoEvent
from ...operations.hippo import HANDLERS, process_events
from ...operations.notify import notifier_from_config
from ...queries.hippo import get_event, list_events
from .. import args as a
from ..app import command, group_help
from ..output import esc

group_help("ng", "hippo", help="HiPPO account requests: process, list, show")

STATUSES = ("Pending", "Complete", "Failed", "Canceled")


def hippo_config(config: Config) -> HippoConfig:
    if config.hippo is None:
        raise ConfigError("this needs the hippo section in the config (base_url, api_key)")
    return config.hippo


def _event_row(event: HippoEvent) -> dict[str, Any]:
    return {"id": event.hippo_id, "action": event.action, "status": event.status,
            "tries": event.n_tries, "site": event.site or event.cluster,
            "user": event.target_user or event.target_username,
            "groups": event.target_groups or event.target_groupnames,
            "first_seen": event.first_seen_at, "posted_back": event.posted_back_at,
            "error": event.last_error}


@command("ng", "hippo", "process", help="handle HiPPO's pending events (post the outcome back "
                                        "with --post)", store=True)
async def hippo_process(args: argparse.Namespace) -> int:
    ctx = args.ctx
    config = hippo_config(ctx.config)
    store = ctx.require_store()
    notifier = None if args.no_notify or ctx.config.mail is None else \
        notifier_from_config(store, ctx.author, ctx.config)
    report = await process_events(store, ctx.author, config, post_back=args.post,
                                  event_id=args.id, action=args.type, notifier=notifier)
    rows = [o.as_dict() for o in report.outcomes]
    if ctx.out.machine:
        ctx.out.write_data({"run": report.run_id, "fetched": report.fetched,
                            "tally": report.tally(), "events": rows,
                            "unreadable": [{"position": u.position, "problem": u.problem}
                                           for u in report.unreadable]})
    else:
        ctx.out.table(rows, title=f"HiPPO events (fetched {report.fetched}, handled "
                                  f"{len(rows)})",
                      columns=["hippo_id", "action", "result", "status", "tries",
                               "posted_back", "error"])
        for outcome in report.outcomes:
            for step in outcome.steps:
                ctx.out.info(f"[dim]{esc(outcome.hippo_id)}: {esc(step)}[/]")
        for bad in report.unreadable:
            ctx.out.warn(f"pending entry #{esc(bad.position)} skipped: {esc(bad.problem)}")
        tally = ", ".join(f"{k}={v}" for k, v in sorted(report.tally().items())) or "nothing"
        ctx.out.info(f"tally: {esc(tally)} (run {esc(report.run_id)})")
    if report.failed:
        ctx.out.error(f"{len(report.failed)} event(s) failed")
        return 1
    return 0


@hippo_process.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--post", action="store_true",
                        help="post each final status back to HiPPO (off by default)")
    parser.add_argument("--id", type=int, help="only this event")
    parser.add_argument("--type", choices=sorted(HANDLERS), help="only events of this action")
    parser.add_argument("--no-notify", action="store_true", help="send no e-mails")
    a.output_format(parser)


@command("ng", "hippo", "events", help="list HiPPO's pending events (upstream, read-only)")
async def hippo_events(args: argparse.Namespace) -> None:
    ctx = args.ctx
    async with HippoClient(hippo_config(ctx.config)) as client:
        queued, unreadable = await client.pending_events()
    chosen = [q for q in queued if (args.id is None or q.id == args.id)
              and (args.type is None or q.action == args.type)]
    rows = []
    for q in chosen:
        data = q.data if isinstance(q.data, dict) else {}
        accounts = data.get("accounts") if isinstance(data.get("accounts"), list) else []
        groups = data.get("groups") if isinstance(data.get("groups"), list) else []
        rows.append({"id": q.id, "action": q.action, "status": q.status,
                     "cluster": data.get("cluster"),
                     "accounts": [x.get("kerberos") for x in accounts if isinstance(x, dict)],
                     "groups": [g.get("name") for g in groups if isinstance(g, dict)],
                     "created_at": q.created_at})
    ctx.out.table(rows, title=f"HiPPO pending events (count={len(rows)})",
                  columns=["id", "action", "status", "cluster", "accounts", "groups",
                           "created_at"],
                  data=[q.raw for q in chosen] if ctx.out.machine else None)
    for bad in unreadable:
        ctx.out.warn(f"pending entry #{esc(bad.position)} is unreadable: {esc(bad.problem)}")


@hippo_events.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--id", type=int, help="only this event")
    parser.add_argument("--type", help="only events of this action")
    a.output_format(parser)


@command("ng", "hippo", "list", help="list the local records of HiPPO events", store=True)
async def hippo_list(args: argparse.Namespace) -> None:
    events = await list_events(status=args.status, action=args.action, site=args.site,
                               user=args.user, limit=args.limit)
    rows = [_event_row(e) for e in events]
    args.ctx.out.table(rows, title=f"HiPPO events (count={len(rows)})",
                       columns=["id", "action", "status", "tries", "site", "user", "groups",
                                "first_seen", "error"])


@hippo_list.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--status", choices=STATUSES, help="only events in this state")
    parser.add_argument("--action", help="only events of this action (e.g. CreateAccount)")
    a.site(parser, required=False, help="only events for this site")
    a.user(parser, required=False, help="only events for this user")
    parser.add_argument("--limit", "-n", type=int, default=50, help="at most this many (50)")
    a.output_format(parser)


@command("ng", "hippo", "show", help="show one HiPPO event's local record", store=True)
async def hippo_show(args: argparse.Namespace) -> None:
    event = await get_event(args.id, args.endpoint)
    data = _event_row(event) | {
        "endpoint": event.hippo_endpoint, "cluster": event.cluster,
        "queued_at": event.queued_at, "completed_at": event.completed_at,
        "notified_at": event.notified_at, "raw": event.raw}
    args.ctx.out.show(data, title=f"HiPPO event {event.hippo_id}")


@hippo_show.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--id", type=int, required=True, help="the HiPPO event id")
    parser.add_argument("--endpoint", help="the HiPPO base URL (when several were used)")
    a.output_format(parser)


@command("ng", "hippo", "sync-puppet", help="ask HiPPO to sync its puppet accounts")
async def hippo_sync_puppet(args: argparse.Namespace) -> None:
    async with HippoClient(hippo_config(args.ctx.config)) as client:
        status = await client.sync_puppet_accounts()
    args.ctx.out.success(f"HiPPO accepted the puppet sync (HTTP {esc(status)})")
