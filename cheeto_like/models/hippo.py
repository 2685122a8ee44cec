"""Local records of HiPPO account-request events, so processing is tracked and retried."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from .base import BaseDoc, index, unique
from .fields import NonEmptyStr, PosixName, SiteName

HippoAction = Literal["CreateAccount", "AddAccountToGroup", "UpdateSshKey",
                      "RemoveAccountFromGroup", "CreateGroup"]
HippoStatus = Literal["Pending", "Complete", "Failed", "Canceled"]
TERMINAL_STATUSES: tuple[HippoStatus, ...] = ("Complete", "Failed", "Canceled")


class HippoEvent(BaseDoc):
    """``target_username``/``target_groupnames`` are what HiPPO asked for; ``target_user``
    and ``target_groups`` are the local records they resolved to (renames follow those).

    ``action`` is whatever HiPPO sent (one of ``HippoAction`` when it can be handled), so
    an event with an unknown action is still recorded, Failed with a readable error.
    ``notified_at`` is set once the event's e-mails went out, so a re-run never sends
    them twice.
    """

    hippo_id: int
    hippo_endpoint: str
    action: NonEmptyStr
    status: HippoStatus = "Pending"
    n_tries: int = 0
    last_error: str | None = None
    cluster: str = ""
    site: SiteName | None = None
    target_username: str | None = None
    target_user: PosixName | None = None
    target_groupnames: list[str] = Field(default_factory=list)
    target_groups: list[PosixName] = Field(default_factory=list)
    sponsor_username: str | None = None
    raw: dict[str, Any] = Field(default_factory=dict)
    queued_at: datetime | None = None
    first_seen_at: datetime | None = None
    completed_at: datetime | None = None
    posted_back_at: datetime | None = None
    notified_at: datetime | None = None

    class Settings(BaseDoc.Settings):
        name = "hippo_events"
        indexes = [unique("hippo_id", "hippo_endpoint"), index("status"), index("action"),
                   index("site"), index("target_user"), index("target_groups"),
                   index("-first_seen_at")]
