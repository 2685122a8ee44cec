"""Programme reads: who is due to go offboarding, and ``ng program show``.

A fixed number of queries: the programme(s), their membership edges, their members
(one ``$in`` per 500 names), one usage aggregation per site and one quota status per
site."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pymongo.asynchronous.client_session import AsyncClientSession

from ..errors import InvalidInput
from ..models import Group, GroupMembership, User
from ..models.group import PROGRAM
from .access_policy import as_utc
from .group import get_group

Session = AsyncClientSession | None
IN_CHUNK = 500


def _ms(value: datetime | None) -> datetime | None:
    value = as_utc(value)
    return None if value is None else value.replace(
        microsecond=value.microsecond // 1000 * 1000)


async def _users(names: list[str], session: Session) -> list[User]:
    found: list[User] = []
    for start in range(0, len(names), IN_CHUNK):
        found += await User.find({"name": {"$in": names[start:start + IN_CHUNK]}},
                                 session=session).to_list()
    return sorted(found, key=lambda u: u.name)


async def program_members(program: str, site: str | None = None,
                          session: Session = None) -> list[GroupMembership]:
    edges = await GroupMembership.find(GroupMembership.group == program,
                                       session=session).to_list()
    return [e for e in edges if "member" in e.roles and (site is None or e.site == site)]


async def due_program_members(now: datetime, session: Session = None
                              ) -> dict[str, list[str]]:
    """Programme -> its active members whose expiry is still the programme's end, for
    every programme whose end is at or before ``now`` (``EndPrograms`` and its dry
    run share this)."""
    now = as_utc(now)  # type: ignore[assignment]
    due: dict[str, list[str]] = {}
    for group in await Group.find(Group.type == PROGRAM, session=session).to_list():
        ends = _ms(group.ends_at)
        if ends is None or ends > now:
            continue
        names = sorted({e.user for e in await program_members(group.name, session=session)})
        users = [u.name for u in await _users(names, session)
                 if u.status == "active" and _ms(u.expires_at) == ends]
        if users:
            due[group.name] = users
    return due


@dataclass
class ProgramView:
    name: str
    gid: int
    starts_at: datetime | None
    ends_at: datetime | None
    members: list[dict[str, Any]] = field(default_factory=list)
    budgets: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"program": self.name, "gid": self.gid, "starts_at": self.starts_at,
                "ends_at": self.ends_at, "members": len(self.members),
                "budget": self.budgets}


def budget_row(status: Any) -> dict[str, Any]:
    """The programme's quota at a site, as ``ng quota show`` counts it (hours).

    Hook for money budgets (issue 28 item 5): when ``QuotaStatus.budget`` carries a
    quota, it is shown beside the hours; nothing else here needs to change."""
    row: dict[str, Any] = {"period": status.period, "start": status.start,
                           "end": status.end}
    for name, res in (("cpu", status.cpu), ("gpu", status.gpu)):
        row[f"{name}_hours_used"] = round(res.used / 60, 2)
        row[f"{name}_hours_quota"] = ("unlimited" if res.quota is None
                                      else round(res.quota / 60, 2))
    budget = getattr(status, "budget", None)
    if budget is not None and budget.quota is not None:
        row["budget_used"], row["budget"] = round(budget.used, 2), round(budget.quota, 2)
    return row


async def program_view(name: str, site: str | None, now: datetime) -> ProgramView:
    """Members (status, expiry, CPU/GPU hours used since the programme started, at each
    of their sites) and the programme's quota per site."""
    from .quota import quota_status
    from .usage import used_by

    group = await get_group(name)
    if group.type != PROGRAM:
        raise InvalidInput(f"{group.name!r} is a {group.type} group, not a programme")
    edges = await program_members(group.name, site)
    users = {u.name: u for u in await _users(sorted({e.user for e in edges}), None)}
    start = as_utc(group.starts_at) or now
    end = min(as_utc(group.ends_at) or now, now)
    sites = sorted({e.site for e in edges} | ({site} if site else set()))
    used: dict[str, dict[str, tuple[float, float]]] = {}
    for s in sites:
        names = sorted({e.user for e in edges if e.site == s})
        used[s] = await used_by(s, start, end, "user", names) if end > start else {}
    view = ProgramView(group.name, group.gid, group.starts_at, group.ends_at)
    for edge in sorted(edges, key=lambda e: (e.user, e.site)):
        user = users.get(edge.user)
        cpu, gpu = used[edge.site].get(edge.user, (0.0, 0.0))
        view.members.append({
            "user": edge.user, "site": edge.site,
            "status": user.status if user else None,
            "expires_at": user.expires_at if user else None,
            "cpu_hours": round(cpu / 60, 2), "gpu_hours": round(gpu / 60, 2)})
    for s in sites:
        for status in await quota_status(s, now, account=group.name):
            view.budgets.append({"site": s, **budget_row(status)})
    return view
