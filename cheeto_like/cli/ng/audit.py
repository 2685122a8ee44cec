"""``cheeto ng audit run``: the access audit (store, LDAP, slurmdbd, puppet export)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ...adapters.sacctmgr import SAcctMgr
from ...errors import InvalidInput
from ...files import write_atomically
from ...queries.audit import SEVERITIES
from ...sync.audit import run_audit
from ...sync.slurm.actual import Policy, SAcctMgrReader
from .. import args as a
from ..app import command, group_help
from ..output import esc

group_help("ng", "audit", help="the access audit: who holds what, drift, stale keys")


@command("ng", "audit", "run",
         help="audit access across the store, LDAP, slurmdbd and puppet; send the digest",
         store=True, progress="audit")
async def audit_run(args: argparse.Namespace) -> int:
    from ...operations.audit_digest import deliver, digest_markdown, jsonl_lines

    ctx = args.ctx
    config = ctx.config
    for path in (args.jsonl, args.markdown):  # refuse before auditing, not after
        _check_output(path)
    slurm = None if args.no_slurm else SAcctMgrReader(
        SAcctMgr(binary=args.sacctmgr, sudo=args.sudo, timeout=args.timeout))
    ldap = None if args.no_ldap else config.ldap
    audit = config.audit
    report = await run_audit(
        ctx.require_store(), sites=args.site, slurm=slurm,
        policy=Policy.of(config.slurm.root_users, config.slurm.unmanaged_accounts),
        offboarding=config.offboarding,
        ldap=ldap, rotation_days=config.api.key_rotation_days if config.api else 90,
        unused_days=audit.key_unused_days if audit else 90,
        key_grace_days=config.api.key_new_grace_days if config.api else 7, author=ctx.author)
    if args.jsonl:
        write_atomically(args.jsonl, "".join(json.dumps(line, default=str) + "\n"
                                             for line in jsonl_lines(report)), mode=0o600)
    if args.markdown:
        write_atomically(args.markdown, digest_markdown(report), mode=0o600)
    if not args.no_send:
        await deliver(ctx.require_store(), ctx.author, config, report)
    counts = report.counts()
    if ctx.out.machine:
        ctx.out.write_data(report.as_dict())
    else:
        rows = [{"severity": f.severity, "status": f.status, "kind": f.kind,
                 "site": f.site or "*", "object": f.object, "fix": f.fix}
                for f in [*report.findings, *report.resolved]]
        ctx.out.table(rows, title=f"audit {report.run_id}: {counts['total']} finding(s), "
                                  f"{counts['new']} new, {counts['resolved']} resolved")
        for source, state in sorted(report.sources.items()):
            if state not in ("ok", "skipped"):
                ctx.out.warn(f"{esc(source)}: {esc(state)}")
        for channel, state in sorted(report.delivered.items()):
            if state == "sent":
                ctx.out.success(f"digest {esc(channel)}: sent")
            else:
                ctx.out.warn(f"digest {esc(channel)}: {esc(state)}")
    failing = report.at_or_above(args.fail_on) if args.fail_on else []
    if failing:
        ctx.out.error(f"{len(failing)} finding(s) at or above {args.fail_on}")
        return 1
    return 0


def _check_output(path: str | None) -> None:
    """A path that cannot name a file to write (in no directory, a directory, a NUL in it,
    a name longer than the system allows) is bad input, found before the audit runs."""
    if not path:
        return
    if "\0" in path:
        raise InvalidInput(f"cannot write {path}: a path cannot hold a NUL character")
    try:
        target = Path(path).expanduser()
        usable = not target.is_dir() and target.parent.is_dir()
    except (OSError, ValueError) as exc:  # ENAMETOOLONG; "embedded null byte"
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidInput(f"cannot write {path}: {reason}") from None
    if not usable:
        raise InvalidInput(f"cannot write {path}: no such directory, or a directory")


@audit_run.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--site", "-s", action="append", metavar="SITE",
                        help="audit this site (repeat for more; default: every site)")
    parser.add_argument("--jsonl", metavar="FILE",
                        help="write every finding (and the resolved ones) as JSON lines")
    parser.add_argument("--markdown", metavar="FILE", help="write the digest as Markdown")
    parser.add_argument("--fail-on", choices=SEVERITIES, metavar="SEVERITY",
                        help="exit 1 when a finding is at or above this severity "
                             f"({', '.join(SEVERITIES)})")
    parser.add_argument("--no-send", action="store_true",
                        help="do not e-mail or post the digest (audit.to, audit.webhook_url)")
    parser.add_argument("--no-slurm", action="store_true", help="do not compare slurmdbd")
    parser.add_argument("--no-ldap", action="store_true", help="do not compare LDAP")
    parser.add_argument("--sacctmgr", metavar="PATH", default="sacctmgr",
                        help="the sacctmgr to read slurmdbd with (default: on PATH)")
    parser.add_argument("--sudo", action="store_true", help="run sacctmgr via sudo -n")
    parser.add_argument("--timeout", type=a.seconds, default=60.0,
                        help="seconds each sacctmgr call may take (default 60)")
    a.output_format(parser)
