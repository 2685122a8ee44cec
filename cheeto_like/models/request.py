"""Requests people file for compute resources: an account at a site, joining or leaving a
group, an access grant, a quota increase, a storage request.

One document per request, numbered (``number``) so people can say "request 12". Its
``steps`` (the group's ``sponsor``, then an ``operator`` where the kind needs one) are
fixed when it is filed, from the config, so changing the config does not re-route
requests already in the queue. The last approval runs the request's operations in the
same transaction and records them in ``actions``; a denial records who and why.

Times a query compares are epoch seconds (``created_epoch``, ``closed_epoch``,
``escalated_epoch``): the embedded store compares integers reliably, datetimes written
by another process not (CLAUDE.md).
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field

from .base import BaseDoc, Embedded, index, unique
from .fields import NonBlankStr, PosixName, SiteName

RequestKind = Literal["account", "join", "leave", "access", "quota", "storage"]
REQUEST_KINDS: tuple[str, ...] = get_args(RequestKind)
RequestStatus = Literal["pending", "done", "denied"]
REQUEST_STATUSES: tuple[str, ...] = get_args(RequestStatus)
Step = Literal["sponsor", "operator"]

KIND_HELP = {
    "account": "put an existing user on a site, as a member of a group there",
    "join": "join a group at a site",
    "leave": "leave a group at a site (a sponsor removing a member)",
    "access": "an access grant at a site (e.g. sudo)",
    "quota": "a CPU/GPU-minute quota for a user or an account at a site",
    "storage": "a group storage at a site (a new one, or a bigger quota)",
}


class Approval(Embedded):
    step: Step
    by: str
    at_epoch: int
    note: str | None = None


class Comment(Embedded):
    by: str
    at_epoch: int
    text: str


class Request(BaseDoc):
    """``requester`` is whoever filed it (the CLI's ``--author``); ``user`` the person it
    is for (None for an account's quota); ``group`` the group whose sponsors approve (for
    an account's quota, the account itself). ``params`` holds the kind's own values
    (``access``; ``cpu_minutes``/``gpu_minutes``; ``quota``/``parent_volume``)."""

    number: int = Field(ge=1)
    kind: RequestKind
    status: RequestStatus = "pending"
    requester: PosixName
    user: PosixName | None = None
    group: PosixName
    site: SiteName
    params: dict[str, Any] = Field(default_factory=dict)
    reason: NonBlankStr | None = None
    steps: list[Step] = Field(min_length=1)
    approvals: list[Approval] = Field(default_factory=list)
    comments: list[Comment] = Field(default_factory=list)
    denied_by: str | None = None
    denial_reason: str | None = None
    actions: list[dict[str, Any]] = Field(default_factory=list)
    created_epoch: int
    closed_epoch: int | None = None
    escalated_epoch: int | None = None

    @property
    def next_step(self) -> str | None:
        """The step waiting for an approval (None once closed)."""
        if self.status != "pending":
            return None
        done = {a.step for a in self.approvals}
        return next((s for s in self.steps if s not in done), None)

    class Settings(BaseDoc.Settings):
        name = "requests"
        indexes = [unique("number"), index("status"), index("site"), index("group"),
                   index("user"), index("requester"), index("escalated_epoch")]
