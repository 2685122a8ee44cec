"""What UC Davis IAM last told us about a person (bookkeeping embedded in ``User``)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from .base import Embedded
from .fields import UnixId


class UCDIAMAssociation(Embedded):
    """One PPS/ODR association; codes are strings because they keep leading zeros."""

    org_id: str | None = None
    org_name: str | None = None
    org_code: str | None = None
    dept_name: str | None = None
    dept_code: str | None = None
    title: str | None = None
    title_type: str | None = None


class UCDIAMPerson(Embedded):
    iam_id: str
    mothra_id: UnixId | None = None
    user_types: list[Literal["employee", "faculty", "staff", "student", "external"]] = Field(
        default_factory=list)
    associations: list[UCDIAMAssociation] = Field(default_factory=list)


class UCDIAMInfo(Embedded):
    """IAM state machine inputs: presence, and when the person went missing."""

    iam_status: Literal["present", "missing"] = "present"
    person: UCDIAMPerson | None = None
    iam_synced_at: datetime | None = None
    last_seen_at: datetime | None = None
    first_missing_at: datetime | None = None
