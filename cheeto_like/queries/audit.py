"""The access audit's findings from the store and the exported puppet data (reads only).

Each finding names a severity, the object, what is wrong and the command that fixes it.
Severities, lowest first: ``info`` (a review list: sudo and root-ssh holders), ``low``,
``medium``, ``high``, ``critical``. The reconcilers' drift (slurmdbd, LDAP) is added by
``sync.audit``, which also keeps each run so the next can mark findings new or resolved.

Query count is fixed: every user, site record, membership, group, allocation and key is
read once, plus one quota status and one root-key export per site.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..models import (
    AuditFinding,
    AuditRun,
    Group,
    GroupMembership,
    SlurmAllocation,
    User,
    UserSiteInfo,
)
from .exports import root_key_blocks
from .sync_runs import last_sync_run
from .user import effective_access, effective_status

SEVERITIES: tuple[str, ...] = ("info", "low", "medium", "high", "critical")
PRIVILEGED = ("sudo", "root-ssh")
INACTIVE = ("inactive", "disabled")


def severity_rank(name: str) -> int:
    return SEVERITIES.index(name)


@dataclass
class Finding:
    severity: str
    kind: str
    site: str | None
    object: str
    detail: str
    fix: str
    status: str = "new"  # new | ongoing | resolved (against the previous audit)

    @property
    def key(self) -> str:
        return f"{self.kind}|{self.site or '*'}|{self.object}"

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "severity": self.severity, "kind": self.kind,
                "site": self.site, "object": self.object, "detail": self.detail,
                "fix": self.fix, "status": self.status}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(**{k: data[k] for k in ("severity", "kind", "site", "object", "detail",
                                           "fix")}, status=data.get("status", "new"))


@dataclass
class AuditReport:
    run_id: str
    scope: str
    started_at: datetime
    findings: list[Finding]
    resolved: list[Finding]
    sources: dict[str, str]
    previous_at: datetime | None = None
    delivered: dict[str, str] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        by = Counter(f.severity for f in self.findings)
        out = {s: by.get(s, 0) for s in SEVERITIES}
        out["new"] = sum(1 for f in self.findings if f.status == "new")
        out["resolved"] = len(self.resolved)
        out["total"] = len(self.findings)
        return out

    def at_or_above(self, severity: str) -> list[Finding]:
        floor = severity_rank(severity)
        return [f for f in self.findings if severity_rank(f.severity) >= floor]

    def as_dict(self) -> dict[str, Any]:
        return {"run": self.run_id, "scope": self.scope, "started_at": self.started_at,
                "previous_at": self.previous_at, "counts": self.counts(),
                "sources": self.sources, "delivered": self.delivered,
                "findings": [f.as_dict() for f in self.findings],
                "resolved": [f.as_dict() for f in self.resolved]}


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _expired(value: datetime | None, now: datetime) -> bool:
    when = _aware(value)
    return when is not None and when <= now


async def store_findings(sites: list[str], now: datetime) -> list[Finding]:
    """People, memberships, sponsors, privileges, allocations at ``sites``."""
    users = {u.name: u for u in await User.find_all().to_list()}
    usis = [u for u in await UserSiteInfo.find_all().to_list() if u.site in sites]
    on_site = {(u.user, u.site): u for u in usis}
    edges = [e for e in await GroupMembership.find_all().to_list() if e.site in sites]
    groups = {g.name: g for g in await Group.find({"type": "group"}).to_list()}
    found: list[Finding] = []

    def standing(user: str, site: str) -> tuple[str | None, list[str], bool]:
        record, usi = users.get(user), on_site.get((user, site))
        if record is None or usi is None:
            return None, [], False
        expired = _expired(record.expires_at, now) or _expired(usi.expires_at, now)
        return effective_status(record, usi), effective_access(record, usi), expired

    for usi in sorted(usis, key=lambda u: (u.site, u.user)):
        status, access, expired = standing(usi.user, usi.site)
        gone = status in INACTIVE or expired
        privileged = [a for a in access if a in PRIVILEGED]
        if gone and privileged:
            found.append(Finding(
                "high", "inactive_holds_privilege", usi.site, usi.user,
                f"{'expired' if expired else status} but still granted "
                f"{', '.join(privileged)}",
                f"cheeto ng user remove access -u {usi.user} -s {usi.site} "
                f"-a {' '.join(privileged)}"))
        elif privileged:
            found.append(Finding(
                "info", "privileged", usi.site, usi.user,
                f"holds {', '.join(privileged)} (review)",
                f"cheeto ng user remove access -u {usi.user} -s {usi.site} "
                f"-a {' '.join(privileged)}  # if no longer needed"))

    for edge in sorted(edges, key=lambda e: (e.site, e.group, e.user)):
        status, _, expired = standing(edge.user, edge.site)
        if (edge.user, edge.site) not in on_site:
            for role in edge.roles:
                found.append(Finding(
                    "medium", "membership_off_site", edge.site, f"{edge.user}@{edge.group}",
                    f"{role} of {edge.group} at {edge.site}, a site {edge.user} is not on",
                    f"cheeto ng group remove {role} -g {edge.group} -u {edge.user} "
                    f"-s {edge.site}  # or: cheeto ng user add site -u {edge.user} "
                    f"-s {edge.site}"))
            continue
        if (status in INACTIVE or expired) and {"sponsor", "sudoer"} & set(edge.roles):
            roles = sorted({"sponsor", "sudoer"} & set(edge.roles))
            found.append(Finding(
                "high", "inactive_holds_role", edge.site, f"{edge.user}@{edge.group}",
                f"{'expired' if expired else status} but still {' and '.join(roles)} of "
                f"{edge.group}",
                "; ".join(f"cheeto ng group remove {r} -g {edge.group} -u {edge.user} "
                          f"-s {edge.site}" for r in roles)))
        elif "sudoer" in edge.roles:
            found.append(Finding(
                "info", "group_sudoer", edge.site, f"{edge.user}@{edge.group}",
                f"sudoer of {edge.group} (review)",
                f"cheeto ng group remove sudoer -g {edge.group} -u {edge.user} "
                f"-s {edge.site}  # if no longer needed"))

    by_group: dict[tuple[str, str], list[GroupMembership]] = {}
    for edge in edges:
        if edge.group in groups:
            by_group.setdefault((edge.group, edge.site), []).append(edge)
    for (group, site), members in sorted(by_group.items()):
        sponsors = [e.user for e in members if "sponsor" in e.roles]
        active = [s for s in sponsors if standing(s, site)[0] == "active"
                  and not standing(s, site)[2]]
        if not active:
            found.append(Finding(
                "medium", "no_active_sponsor", site, group,
                f"{len(members)} member(s); sponsors: {', '.join(sorted(sponsors)) or 'none'}"
                + (" (none active)" if sponsors else ""),
                f"cheeto ng group add sponsor -g {group} -u SPONSOR -s {site}"))

    for site in sites:
        for block in await root_key_blocks(site):
            status, _, expired = standing(block.name, site)
            if status in INACTIVE or expired:
                found.append(Finding(
                    "critical", "inactive_in_root_keys", site, block.name,
                    f"{'expired' if expired else status} but exported to puppet as a root "
                    f"key holder ({len(block.entries)} key(s))",
                    f"cheeto ng user remove access -u {block.name} -s {site} -a root-ssh; "
                    f"cheeto ng site sync-old-puppet -s {site} REPO"))
            else:
                found.append(Finding(
                    "info", "root_key_holder", site, block.name,
                    f"{len(block.entries)} root key(s) in the puppet export (review)",
                    f"cheeto ng user remove access -u {block.name} -s {site} -a root-ssh  "
                    f"# if no longer needed"))
    return found


async def allocation_findings(sites: list[str], now: datetime) -> list[Finding]:
    """Expired allocations: still counted by slurmdbd when no applied sync ran since they
    expired, else only a record to remove."""
    found = []
    allocations = [a for a in await SlurmAllocation.find_all().to_list()
                   if a.site in sites and _expired(a.expires_at, now)]
    last = {site: await last_sync_run("slurm", site) for site in {a.site for a in allocations}}
    for alloc in sorted(allocations, key=lambda a: (a.site, a.qos, a.id)):
        expires = _aware(alloc.expires_at)
        assert expires is not None
        run = last.get(alloc.site)
        synced = run is not None and run.apply and run.status == "ok" \
            and _aware(run.started_at) is not None and _aware(run.started_at) > expires  # type: ignore[operator]
        label = f"{alloc.qos}/{alloc.bucket} {alloc.id}"
        if synced:
            found.append(Finding(
                "low", "expired_allocation", alloc.site, label,
                f"expired {expires:%Y-%m-%d}; no longer counted, the record remains",
                f"cheeto ng slurm allocation remove --id {alloc.id}"))
        else:
            found.append(Finding(
                "high", "expired_allocation_counted", alloc.site, label,
                f"expired {expires:%Y-%m-%d} but slurmdbd still counts it (no applied "
                f"Slurm sync since)",
                f"cheeto ng slurm sync -s {alloc.site} --apply"))
    return found


async def quota_findings(sites: list[str], now: datetime) -> list[Finding]:
    from .quota import quota_status

    found = []
    for site in sites:
        for status in await quota_status(site, now):
            over = [(res, r) for res, r in (("cpu", status.cpu), ("gpu", status.gpu))
                    if r.percent is not None and r.percent >= 100 and r.quota]
            if not over:
                continue
            flag = "-u" if status.kind == "user" else "-A"
            found.append(Finding(
                "medium", "over_quota", site, f"{status.kind} {status.name}",
                ", ".join(f"{res} {r.percent:.0f}% of {r.quota:.0f} min" for res, r in over),
                f"cheeto ng quota show -s {site} {flag} {status.name}; raise it with "
                f"`cheeto ng quota set` or credit with `cheeto ng quota adjust`"))
    return found


async def api_key_findings(*, rotation_days: int, unused_days: int,
                           grace_days: int = 7) -> list[Finding]:
    from .auth import audit_api_keys

    severity = {"expired": "medium", "past_rotation": "medium", "unused": "low",
                "never_used": "low"}
    found = []
    for item in await audit_api_keys(rotation_days=rotation_days, unused_days=unused_days,
                                     grace_days=grace_days):
        verb = "revoke" if item.problem in ("expired", "unused", "never_used") else "rotate"
        found.append(Finding(severity.get(item.problem, "low"), f"api_key_{item.problem}", None,
                             f"{item.name} ({item.prefix}…)", item.detail,
                             f"cheeto ng apikey {verb} --name {item.name}"))
    return found


async def run_findings(run: AuditRun) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The findings and the resolved findings of ``run``, as stored (``Finding.as_dict``),
    in the order the audit listed them: one indexed query on ``audit_findings``. A run
    from before they had their own collection keeps them on its document (read raw)."""
    found: dict[str, list[tuple[int, dict[str, Any]]]] = {"findings": [], "resolved": []}
    async for doc in AuditFinding.get_pymongo_collection().find(
            {"run": run.id}, {"list": 1, "index": 1, "data": 1}):
        found.setdefault(doc["list"], []).append((int(doc["index"]), doc["data"]))
    if not found["findings"] and not found["resolved"]:
        legacy = await AuditRun.get_pymongo_collection().find_one(
            {"_id": run.id}, {"findings": 1, "resolved": 1})
        return list((legacy or {}).get("findings") or []), \
            list((legacy or {}).get("resolved") or [])
    return ([d for _, d in sorted(found["findings"], key=lambda p: p[0])],
            [d for _, d in sorted(found["resolved"], key=lambda p: p[0])])
