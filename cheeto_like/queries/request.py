"""Request reads: one request, the queue (ours joined with HiPPO's account requests), who
may approve a step, and the SLA of each row.

The queue is one list to triage: cheeto's own requests and, read-only, the HiPPO events
that are account requests (``CreateAccount`` -> ``account``, ``AddAccountToGroup`` ->
``join``, ``CreateGroup`` -> ``group``), each with its state and SLA by the same
calendar. A fixed number of queries, whatever the queue holds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from beanie.operators import In

from ..config import RequestsConfig
from ..errors import InvalidInput, NotFound
from ..models import GroupMembership, HippoEvent, Request, RoleGrant, User
from ..models.base import select, select_one
from ..sla import Calendar, SlaState, format_age, format_days, parse_target, sla_state
from ..validation import require_limit
from .site import Session

HIPPO_KINDS = {"CreateAccount": "account", "AddAccountToGroup": "join", "CreateGroup": "group"}
HIPPO_STATES = {"Pending": "pending", "Complete": "done", "Failed": "failed",
                "Canceled": "canceled"}
OPERATOR_ROLES = ("operator", "admin")


def calendar_of(config: RequestsConfig) -> Calendar:
    return Calendar.of(config.timezone, config.workdays, config.holidays)


def target_days(config: RequestsConfig, kind: str) -> float:
    """The kind's SLA target in business days (HiPPO's ``group`` uses ``account``'s)."""
    spec = config.kinds.get(kind) or config.kinds["account"]  # type: ignore[call-overload]
    return parse_target(spec.sla)


def steps_for(config: RequestsConfig, kind: str) -> list[str]:
    spec = config.kinds[kind]  # type: ignore[index]
    return ["sponsor", "operator"] if spec.operator else ["sponsor"]


async def find_request(number: int, session: Session = None) -> Request | None:
    return await select_one(Request, session, number=number)


async def get_request(number: int, session: Session = None) -> Request:
    found = await find_request(number, session)
    if found is None:
        raise NotFound(f"request {number} does not exist")
    return found


async def next_number(session: Session = None) -> int:
    last = await Request.find({}, session=session).sort(-Request.number).limit(1).to_list()
    return last[0].number + 1 if last else 1


# -- who approves ------------------------------------------------------------------------


async def eligible_approvers(request: Request, step: str,
                             session: Session = None) -> set[str]:
    """Who may approve ``step``: for ``sponsor``, the group's sponsors at the request's
    site and the managers granted that group (``RoleGrant``); for ``operator``, every
    operator and admin. Two queries."""
    if step == "sponsor":
        edges = await select(GroupMembership, session, group=request.group, site=request.site,
                             roles="sponsor")
        managers = await select(RoleGrant, session, role="manager")
        return ({e.user for e in edges}
                | {g.user for g in managers if request.group in g.accounts})
    grants = await RoleGrant.find(In(RoleGrant.role, list(OPERATOR_ROLES)),
                                  session=session).to_list()
    return {g.user for g in grants}


async def may_approve(name: str | None, request: Request, step: str,
                      session: Session = None) -> bool:
    """Whether ``name`` may approve ``step``. Nobody approves the operator step of their
    own request (four eyes); a sponsor's own request counts as sponsored."""
    if not name:
        return False
    if step == "operator" and name == request.requester:
        return False
    return name in await eligible_approvers(request, step, session)


async def emails_of(names: set[str] | list[str], session: Session = None) -> dict[str, str]:
    """name -> e-mail for the names that are users (one query)."""
    if not names:
        return {}
    users = await User.find(In(User.name, sorted(names)), session=session).to_list()
    return {u.name: u.email for u in users}


# -- the queue -----------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueRow:
    """One row of the queue; ``id`` is the request number, or ``h<id>`` for HiPPO."""

    id: str
    source: str  # cheeto | hippo
    kind: str
    status: str
    site: str | None
    group: str | None
    user: str | None
    requester: str | None
    next_step: str | None
    created: datetime
    sla: SlaState
    escalated: bool = False
    detail: dict[str, Any] = field(default_factory=dict)
    ended: bool = False  # done, denied or closed: no time left, no breach to show

    @property
    def open_breach(self) -> bool:
        """Past its SLA and still open (an ended request has no breach to act on)."""
        return self.sla.breached and not self.ended

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "source": self.source, "kind": self.kind,
                "status": self.status, "site": self.site, "group": self.group,
                "user": self.user, "requester": self.requester,
                "next_step": self.next_step, "created": self.created,
                "age": format_age(self.sla.age), "age_s": int(self.sla.age.total_seconds()),
                "due": self.sla.due, "left": format_days(self.sla.left_days),
                "left_days": round(self.sla.left_days, 3), "breached": self.sla.breached,
                "escalated": self.escalated, "ended": self.ended}


def _epoch_dt(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def request_row(request: Request, config: RequestsConfig, calendar: Calendar,
                now: datetime) -> QueueRow:
    created = _epoch_dt(request.created_epoch)
    closed = _epoch_dt(request.closed_epoch) if request.closed_epoch else None
    state = sla_state(calendar, created, target_days(config, request.kind), now, closed)
    return QueueRow(str(request.number), "cheeto", request.kind, request.status, request.site,
                    request.group, request.user, request.requester, request.next_step,
                    created, state, request.escalated_epoch is not None,
                    ended=request.status != "pending" or closed is not None)


def _hippo_row(event: HippoEvent, config: RequestsConfig, calendar: Calendar,
               now: datetime) -> QueueRow:
    kind = HIPPO_KINDS[event.action]
    created = event.first_seen_at or event.queued_at or event.created_at
    created = created if created.tzinfo else created.replace(tzinfo=UTC)
    closed = event.completed_at if event.status != "Pending" else None
    if closed is not None and closed.tzinfo is None:
        closed = closed.replace(tzinfo=UTC)
    if event.status != "Pending" and closed is None:
        closed = event.updated_at if event.updated_at.tzinfo else \
            event.updated_at.replace(tzinfo=UTC)
    state = sla_state(calendar, created, target_days(config, kind), now, closed)
    groups = event.target_groups or event.target_groupnames
    return QueueRow(f"h{event.hippo_id}", "hippo", kind, HIPPO_STATES.get(event.status,
                                                                          event.status.lower()),
                    event.site or event.cluster or None, ", ".join(groups) or None,
                    event.target_user or event.target_username, event.sponsor_username,
                    "hippo" if event.status == "Pending" else None, created, state,
                    detail={"error": event.last_error, "tries": event.n_tries},
                    ended=closed is not None)


def triage_key(row: QueueRow) -> tuple[Any, ...]:
    """Breached first, the oldest breach (earliest due) first; then by kind, oldest
    first."""
    if row.sla.breached:
        return (0, row.sla.due.timestamp(), "", 0.0)
    return (1, 0.0, row.kind, -row.sla.age.total_seconds())


async def request_queue(config: RequestsConfig, *, now: datetime | None = None,
                        status: str | None = "pending", kind: str | None = None,
                        site: str | None = None, group: str | None = None,
                        user: str | None = None, breached: bool = False,
                        include_hippo: bool = True, triage: bool = False,
                        limit: int | None = None, session: Session = None) -> list[QueueRow]:
    """The queue: open requests by default (``status=None``: all), oldest first, or in
    triage order. One query for ours, one for HiPPO's."""
    if limit is not None:
        require_limit(limit)
    now = now or datetime.now(UTC)
    calendar = calendar_of(config)
    where = {"status": status} if status else {}
    ours = await Request.find(where, session=session).to_list()
    rows = [request_row(r, config, calendar, now) for r in ours]
    if include_hippo and (status is None or status in ("pending", "done")):
        hippo_status = {"pending": "Pending", "done": "Complete"}.get(status or "")
        hwhere = {"status": hippo_status} if hippo_status else {}
        events = await HippoEvent.find(hwhere, session=session).to_list()
        rows += [_hippo_row(e, config, calendar, now) for e in events
                 if e.action in HIPPO_KINDS]
    rows = [r for r in rows if (kind is None or r.kind == kind)
            and (site is None or r.site == site)
            and (group is None or (r.group or "") == group
                 or group in (r.group or "").split(", "))
            and (user is None or r.user == user)
            and (not breached or r.sla.breached)]
    rows.sort(key=triage_key if triage else (lambda r: (r.created, r.id)))
    return rows[:limit] if limit else rows


async def breaches_to_escalate(config: RequestsConfig, now: datetime,
                               session: Session = None) -> list[tuple[Request, SlaState]]:
    """Open requests past their SLA that were never escalated (oldest breach first)."""
    calendar = calendar_of(config)
    found = []
    for request in await Request.find({"status": "pending"}, session=session).to_list():
        if request.escalated_epoch is not None:
            continue
        state = request_row(request, config, calendar, now).sla
        if state.breached:
            found.append((request, state))
    return sorted(found, key=lambda pair: pair[1].due)


def now_epoch() -> int:
    return int(time.time())


def check_kind(kind: str | None) -> None:
    from ..models.request import REQUEST_KINDS

    if kind is not None and kind not in (*REQUEST_KINDS, "group"):
        raise InvalidInput(f"unknown request kind {kind!r}")
