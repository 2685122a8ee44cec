"""Programmes (cohorts): groups of ``type`` ``program`` with a start and an end date.

- ``CreateProgram`` / ``EditProgram`` (``ng program new`` / ``edit``): the group (gid
  from the lab band) and its dates. Moving the end moves the expiry of every member
  whose expiry was the old end (the default one); an expiry set by hand stays.
- A member added (``ng group add member``, role ``member``) who has no expiry gets the
  programme's end as theirs (``operations.group_membership``); an explicit expiry (set at
  creation or by ``ng user expire``) wins and is kept.
- ``EndPrograms``: once a programme's end has passed, its active members whose expiry
  is still the programme's end become ``offboarding`` with ``expires_at = end +
  offboarding.program_grace_days``; the reap deactivates them after that. It runs in
  the existing ``reap`` (``ng iam reap``, the daemon's ``reap`` task), before the
  deactivations, in its own transaction; its dry run lists them.

Between the end and the reap task's next run those members are past their expiry, so
the access policy already grants them nothing; the ``offboarding`` window restores
ordinary access for the grace period.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import Field, model_validator
from pymongo.asynchronous.client_session import AsyncClientSession

from ..constants import LAB_GROUP_BAND
from ..errors import InvalidInput
from ..models import Group, User
from ..models.fields import PosixName, UnixId
from ..models.group import PROGRAM
from ..queries.access_policy import as_utc
from ..queries.group import get_group
from ..queries.program import due_program_members
from .base import OpArgs, Operation
from .common import clear_site_statuses, global_status_comment, next_free_id
from .expiry import _when, set_members_expiry
from .group import _check_new_group
from .names import claim_name

MAX_DAYS = 36500


def _dates(starts: datetime | None, ends: datetime | None) -> None:
    if starts is not None and ends is not None and as_utc(ends) <= as_utc(starts):  # type: ignore[operator]
        raise ValueError("the end must be after the start")


class CreateProgram(Operation):
    """A programme group with its dates (the gid is the next free one of the lab band
    unless given)."""

    op_name = "create_program"

    class Args(OpArgs):
        name: PosixName
        starts_at: datetime
        ends_at: datetime
        gid: UnixId | None = None

        @model_validator(mode="after")
        def _ordered(self) -> CreateProgram.Args:
            _dates(self.starts_at, self.ends_at)
            return self

    async def execute(self, session: AsyncClientSession) -> Group:
        a = self.args
        gid = a.gid if a.gid is not None else await next_free_id(LAB_GROUP_BAND, session)
        await _check_new_group(a.name, gid, session)
        self.group = Group(name=a.name, gid=gid, type=PROGRAM, starts_at=_when(a.starts_at),
                           ends_at=_when(a.ends_at))
        await claim_name(a.name, "group", session)
        await self.group.insert(session=session)
        return self.group

    def describe(self) -> dict[str, Any]:
        g = self.group
        return {"program": g.name, "gid": g.gid, "starts_at": g.starts_at,
                "ends_at": g.ends_at}


async def get_program(name: str, session: AsyncClientSession | None = None) -> Group:
    group = await get_group(name, session)
    if group.type != PROGRAM:
        raise InvalidInput(f"{group.name!r} is a {group.type} group, not a programme")
    return group


class EditProgram(Operation):
    """Change a programme's dates; members whose expiry was the old end follow the new
    one (one transaction, ``SetGroupExpiry``'s write pattern)."""

    op_name = "edit_program"

    class Args(OpArgs):
        name: PosixName
        starts_at: datetime | None = None
        ends_at: datetime | None = None

        @model_validator(mode="after")
        def _something(self) -> EditProgram.Args:
            if self.starts_at is None and self.ends_at is None:
                raise ValueError("give a new start, a new end or both")
            _dates(self.starts_at, self.ends_at)
            return self

    def touched_sites(self) -> frozenset[str] | None:
        return None

    async def execute(self, session: AsyncClientSession) -> Group:
        a = self.args
        group = await get_program(a.name, session)
        old_end = _when(group.ends_at)
        starts = _when(a.starts_at) if a.starts_at is not None else _when(group.starts_at)
        ends = _when(a.ends_at) if a.ends_at is not None else old_end
        try:
            _dates(starts, ends)
        except ValueError as exc:
            raise InvalidInput(f"{exc} ({starts:%Y-%m-%d %H:%M} .. {ends:%Y-%m-%d %H:%M})"  # type: ignore[str-format]
                               ) from None
        self.before = {"starts_at": group.starts_at, "ends_at": group.ends_at}
        group.starts_at, group.ends_at = starts, ends
        await group.save(session=session)
        self.moved: list[str] = []
        if ends != old_end:
            _, self.moved = await set_members_expiry(
                group.name, None, ends, session,
                only_if=lambda u: _when(u.expires_at) == old_end)
        self.group = group
        return group

    def describe(self) -> dict[str, Any]:
        return {"program": self.group.name, "before": self.before,
                "starts_at": self.group.starts_at, "ends_at": self.group.ends_at,
                "members_moved": self.moved}


class EndPrograms(Operation):
    """Members of programmes that ended by ``now`` go offboarding (see the module doc);
    one transaction, one History row naming them per programme."""

    op_name = "end_programs"

    class Args(OpArgs):
        now: datetime
        grace_days: int = Field(default=30, ge=0, le=MAX_DAYS)

    async def execute(self, session: AsyncClientSession) -> dict[str, list[str]]:
        a = self.args
        self.ended: dict[str, list[str]] = {}
        for program, users in (await due_program_members(a.now, session)).items():
            group = await get_group(program, session)
            expires = _when(group.ends_at + timedelta(days=a.grace_days))  # type: ignore[operator]
            for user in await User.find({"name": {"$in": users}}, session=session).to_list():
                user.status, user.expires_at = "offboarding", expires
                user.comments.append(global_status_comment(
                    "offboarding", f"programme {program} ended {as_utc(group.ends_at):%Y-%m-%d}"))
                await user.save(session=session)
                await clear_site_statuses(user.name, session)
            self.ended[program] = sorted(users)
        return self.ended

    def describe(self) -> dict[str, Any]:
        a = self.args
        return {"now": a.now, "grace_days": a.grace_days, "offboarded": self.ended}
