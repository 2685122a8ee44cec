"""The access audit: the store's findings plus the drift the reconcilers see, kept per run.

Sources, each read once per site:
- the store and the puppet export (``queries.audit``): inactive people still holding
  privileges or roles, memberships at sites the user is not on, groups without an active
  sponsor, sudo/root-ssh holders (a review list), expired allocations, users over quota,
  API keys past rotation or unused;
- slurmdbd and LDAP: the reconcilers' own desired/actual/plan, run as a dry run (a
  ``SyncRun`` with ``apply: false`` is recorded, as for any dry run). What the plan would
  delete is something no store record explains; a deletion or dropped ``memberUid`` of a
  user who is inactive at the site is that person still holding access there (critical);
  anything else the plan would change is drift.
- slurmdbd is read where the site's Slurm is: the daemon's weekly audit asks each site's
  head-node worker (queue ``slurm.<site>``, task ``cheeto.audit_slurm_state``, which runs
  ``site_slurm_findings`` with that node's sacctmgr) and waits for the answers
  (``SlurmSource``); ``cheeto ng audit run`` reads with the local sacctmgr
  (``StateReader``). A site whose worker does not answer in time is an
  ``audit_incomplete`` finding naming the site.

A source that cannot be read is itself a finding (``audit_incomplete``), so a cron job
with ``--fail-on medium`` notices an audit that did not look everywhere.

Each run is stored as an ``AuditRun``; a finding is ``new`` unless the previous run of
the same scope had its key (``ongoing``), and the previous run's findings that are gone
are listed as ``resolved``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from ..config import LDAPConfig
from ..config.offboarding import OffboardingConfig
from ..errors import CheetoError
from ..models import AuditFinding, AuditRun, User, UserSiteInfo
from ..models.fields import utcnow
from ..queries.audit import (
    INACTIVE,
    AuditReport,
    Finding,
    allocation_findings,
    api_key_findings,
    quota_findings,
    run_findings,
    severity_rank,
    store_findings,
)
from ..queries.offboarding import offboarding_findings
from ..queries.site import get_site, list_sites
from ..queries.user import effective_status
from ..store import Store
from .slurm.actual import Policy, StateReader

FINDINGS_BATCH = 1000  # AuditFinding documents per insert


async def _inactive_at(site: str, now: datetime) -> set[str]:
    """Users on ``site`` whose effective status there is inactive/disabled, or expired."""
    users = {u.name: u for u in await User.find_all().to_list()}
    gone = set()
    for usi in await UserSiteInfo.find({"site": site}).to_list():
        user = users.get(usi.user)
        if user is None:
            continue
        expired = any(t is not None and (t if t.tzinfo else t.replace(tzinfo=now.tzinfo)) <= now
                      for t in (user.expires_at, usi.expires_at))
        if effective_status(user, usi) in INACTIVE or expired:
            gone.add(usi.user)
    return gone


async def slurm_drift(store: Store, site: str, reader: StateReader, *, policy: Policy | None,
                      author: str | None, inactive: set[str]) -> list[Finding]:
    from .slurm.run import sync_site

    report = await sync_site(store, site, reader=reader, runner=None, apply=False,
                             author=author, policy=policy)
    fix = f"cheeto ng slurm sync -s {site} --apply"
    found = []
    for batch in report.plan.batches:
        for command in batch.commands:
            for target in command.targets:
                user = target.split("@", 1)[0] if "@" in target else None
                if batch.kind == "delete" and user in inactive:
                    found.append(Finding(
                        "critical", "inactive_in_slurm", site, target,
                        f"{user} is inactive at {site} but slurmdbd still has {target}", fix))
                elif batch.kind == "delete" or batch.label == "remove coordinators":
                    found.append(Finding(
                        "high", "slurm_unexplained", site, target,
                        f"{batch.label}: slurmdbd has it and no store record explains it", fix))
                else:
                    found.append(Finding("medium", "slurm_drift", site, target,
                                         f"{batch.label}: slurmdbd differs from the store", fix))
    for conflict in report.plan.conflicts:
        found.append(Finding("medium", "slurm_conflict", site, conflict[:120], conflict,
                             f"cheeto ng slurm sync -s {site}  # review the plan"))
    return found


async def site_slurm_findings(store: Store, site: str, reader: StateReader, *,
                              policy: Policy | None, author: str | None,
                              now: datetime | None = None) -> list[Finding]:
    """The Slurm drift of one site, as its head-node worker computes it for the audit."""
    now = now or utcnow()
    inactive = await _inactive_at(site, now)
    return await slurm_drift(store, site, reader, policy=policy, author=author,
                             inactive=inactive)


class SlurmSource(Protocol):
    """Slurm findings read elsewhere (each site's head-node worker): ``begin`` asks every
    site at once, ``findings`` waits for one site's answer (``CheetoError`` when there
    is none: recorded as ``audit_incomplete``)."""

    async def begin(self, sites: list[str], now: datetime) -> None: ...

    async def findings(self, site: str) -> list[Finding]: ...


def _member_name(value: str) -> str | None:
    """``memberUid=bob`` or ``member=uid=bob,ou=people,...`` -> ``bob``."""
    attr, _, rest = value.partition("=")
    if attr.lower() == "memberuid":
        return rest
    if attr.lower() == "member" and rest.lower().startswith("uid="):
        return rest[4:].split(",", 1)[0]
    return None


async def ldap_drift(store: Store, config: LDAPConfig, site: str, *, author: str | None,
                     inactive: set[str]) -> list[Finding]:
    from .ldap import run as ldap_sync
    from .ldap.plan import KINDS

    scope = ldap_sync.scope_for(config, kinds=frozenset({*KINDS, "prune"}), full=True)
    report = await ldap_sync.run(store, config, site, scope=scope, dry_run=True,
                                 max_deletions=None, author=author, command="audit")
    fix = f"cheeto ng ldap sync-site -s {site} --full"
    found = []
    for change in report.plan.changes:
        for value in change.removed:
            name = _member_name(value)
            if name is not None and name in inactive:
                found.append(Finding(
                    "critical", "inactive_in_ldap", site, f"{change.dn} {value}",
                    f"{name} is inactive at {site} but LDAP still lists them ({change.label})",
                    fix))
            else:
                found.append(Finding(
                    "high", "ldap_unexplained", site, f"{change.dn} {value}",
                    f"{change.label}: LDAP has {value} and no store record explains it", fix))
        if change.op == "delete":
            found.append(Finding("high", "ldap_unexplained", site, change.dn,
                                 f"{change.label}: no store record explains this entry", fix))
        elif not change.removed:
            found.append(Finding("medium", "ldap_drift", site, change.dn,
                                 f"{change.label}: {change.op} ({change.why or 'differs'})",
                                 fix))
    return found


async def previous_run(scope: str, *, before: str | None = None) -> AuditRun | None:
    runs = await AuditRun.find({"scope": scope}).sort(-AuditRun.started_ms).limit(3) \
        .to_list()
    return next((r for r in runs if r.id != before and r.finished_at is not None), None)


async def write_findings(store: Store, run: AuditRun, findings: list[Finding],
                         resolved: list[Finding]) -> None:
    """Insert the run's findings as ``AuditFinding`` documents, ``FINDINGS_BATCH`` a
    round trip: however many there are, no document nears the 16 MiB limit."""
    docs = [{"_id": f"{run.id}:{tag}:{n}", "run": run.id, "list": name, "index": n,
             "started_at": run.started_at, "data": f.as_dict()}
            for name, tag, found in (("findings", "f", findings), ("resolved", "r", resolved))
            for n, f in enumerate(found)]
    collection = AuditFinding.get_pymongo_collection()
    for start in range(0, len(docs), FINDINGS_BATCH):
        async with store.exclusive():
            await collection.insert_many(docs[start:start + FINDINGS_BATCH], ordered=True)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: dict[str, Finding] = {}
    for finding in findings:
        seen.setdefault(finding.key, finding)
    return sorted(seen.values(), key=lambda f: (-severity_rank(f.severity), f.site or "",
                                                f.kind, f.object))


async def run_audit(store: Store, *, sites: list[str] | None = None,
                    slurm: StateReader | None = None, slurm_source: SlurmSource | None = None,
                    policy: Policy | None = None,
                    ldap: LDAPConfig | None = None, rotation_days: int = 90,
                    unused_days: int = 90, key_grace_days: int = 7,
                    author: str | None = None,
                    offboarding: OffboardingConfig | None = None,
                    now: datetime | None = None) -> AuditReport:
    """Audit ``sites`` (default: every site) and store the run. Slurm is read with the
    local ``slurm`` reader, or through ``slurm_source`` (each site's worker); neither,
    or ``ldap`` None, skips that source (recorded in ``sources``)."""
    now = now or utcnow()
    now = now.replace(microsecond=now.microsecond // 1000 * 1000)  # as the store keeps it
    if sites:
        names = [(await get_site(s)).name for s in dict.fromkeys(sites)]
        scope = ",".join(sorted(names))
    else:
        names = [s.name for s in await list_sites()]
        scope = "*"
    sources: dict[str, str] = {}
    findings = await store_findings(names, now)
    findings += await allocation_findings(names, now)
    findings += await quota_findings(names, now)
    findings += await api_key_findings(rotation_days=rotation_days, unused_days=unused_days,
                                       grace_days=key_grace_days)
    # offboarding users never reaped; reaped users the site's policy is not met for
    findings += await offboarding_findings(names, now, offboarding)
    sources["store"] = "ok"
    if slurm_source is not None:
        await slurm_source.begin(names, now)  # every site reads at once; waited for below
    for site in names:
        inactive = await _inactive_at(site, now)
        for source, enabled, read in (
                ("slurm", slurm is not None or slurm_source is not None,
                 (lambda s=site: slurm_source.findings(s)) if slurm_source is not None else  # type: ignore[union-attr]
                 lambda s=site, i=inactive: slurm_drift(store, s, slurm, policy=policy,  # type: ignore[arg-type]
                                                        author=author, inactive=i)),
                ("ldap", ldap is not None,
                 lambda s=site, i=inactive: ldap_drift(store, ldap, s, author=author,  # type: ignore[arg-type]
                                                       inactive=i))):
            key = f"{source}:{site}"
            if not enabled:
                sources[key] = "skipped"
                continue
            try:
                findings += await read()
                sources[key] = "ok"
            except CheetoError as exc:
                sources[key] = exc.message
                findings.append(Finding("medium", "audit_incomplete", site, source,
                                        f"could not read {source}: {exc.message}",
                                        "fix the connection, then audit again"))
    findings = _dedupe(findings)

    previous = await previous_run(scope)
    before = {d["key"]: d for d in (await run_findings(previous))[0]} if previous else {}
    for finding in findings:
        finding.status = "ongoing" if finding.key in before else "new"
    current = {f.key for f in findings}
    resolved = [Finding.from_dict({**d, "status": "resolved"}) for k, d in before.items()
                if k not in current]
    for item in resolved:
        item.status = "resolved"
    run = AuditRun(scope=scope, author=author, started_at=now,
                   started_ms=int(now.timestamp() * 1000), finished_at=utcnow(),
                   sources=sources)
    report = AuditReport(run.id, scope, now, findings, resolved, sources,
                         previous_at=previous.started_at if previous else None)
    run.counts = report.counts()
    # the findings first, the run last: a run is "the previous audit" only once it is
    # stored (``previous_run``), so one cut short leaves no half-listed run behind
    await write_findings(store, run, findings, resolved)
    async with store.exclusive():
        await run.insert()
    return report
