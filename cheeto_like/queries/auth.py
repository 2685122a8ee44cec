"""Reads for roles and API keys: listings and the key audit (no secrets, ever)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..models import ApiKey, GroupMembership, RoleGrant
from .site import Session

DAY = 86400


async def list_roles(user: str | None = None, session: Session = None) -> list[dict[str, Any]]:
    """Explicit grants plus the implicit manager role of sponsors (``via: sponsor``)."""
    where = {"user": user} if user is not None else {}
    grants = await RoleGrant.find(where, session=session).to_list()
    rows = [{"user": g.user, "role": g.role, "accounts": list(g.accounts), "via": "grant"}
            for g in grants]
    # ``$in``, not equality: the embedded store can miss equality on an array field
    edges = await GroupMembership.find({"roles": {"$in": ["sponsor"]}} if user is None
                                       else {"user": user},
                                       session=session).to_list()
    sponsored: dict[str, set[str]] = {}
    for edge in edges:
        if "sponsor" in edge.roles:
            sponsored.setdefault(edge.user, set()).add(edge.group)
    rows += [{"user": name, "role": "manager", "accounts": sorted(groups), "via": "sponsor"}
             for name, groups in sponsored.items()]
    return sorted(rows, key=lambda r: (r["user"], r["role"], r["via"]))


def key_view(key: ApiKey, now: int | None = None) -> dict[str, Any]:
    now = int(time.time()) if now is None else now
    if key.revoked_epoch is not None:
        state = "revoked"
    elif key.expires_epoch is not None and key.expires_epoch <= now:
        state = "expired"
    else:
        state = "active"
    overlap = (key.previous_prefix if key.previous_valid_until
               and key.previous_valid_until > now else None)
    return {"name": key.name, "prefix": key.prefix, "scopes": list(key.scopes), "state": state,
            "created_by": key.created_by, "created_epoch": int(key.created_at.timestamp()),
            "rotated_epoch": key.rotated_epoch, "expires_epoch": key.expires_epoch,
            "revoked_epoch": key.revoked_epoch, "last_used_epoch": key.last_used_epoch,
            "previous_prefix": overlap,
            "previous_valid_until": key.previous_valid_until if overlap else None}


async def list_api_keys(*, include_revoked: bool = False,
                        session: Session = None) -> list[dict[str, Any]]:
    keys = await ApiKey.find({}, session=session).to_list()
    now = int(time.time())
    rows = [key_view(k, now) for k in keys]
    if not include_revoked:
        rows = [r for r in rows if r["state"] != "revoked"]
    return sorted(rows, key=lambda r: r["name"])


@dataclass(frozen=True)
class Finding:
    name: str
    prefix: str
    problem: str  # past_rotation | unused | never_used | expired
    detail: str

    def as_dict(self) -> dict[str, str]:
        return self.__dict__.copy()


async def audit_api_keys(*, rotation_days: int, unused_days: int, grace_days: int = 7,
                         now: int | None = None, session: Session = None) -> list[Finding]:
    """Live keys past the rotation policy, unused for ``unused_days``, never used (once
    ``grace_days`` have passed since they were made: a new key has not been put to work
    yet), and expired keys not yet revoked (mats-compute-admin's auditor, for keys we
    actually serve)."""
    now = int(time.time()) if now is None else now
    found: list[Finding] = []
    for key in sorted(await ApiKey.find({}, session=session).to_list(), key=lambda k: k.name):
        if key.revoked_epoch is not None:
            continue
        if key.expires_epoch is not None and key.expires_epoch <= now:
            found.append(Finding(key.name, key.prefix, "expired",
                                 f"expired {(now - key.expires_epoch) // DAY} day(s) ago; "
                                 "revoke it"))
            continue
        age = (now - key.rotated_epoch) // DAY
        if age > rotation_days:
            found.append(Finding(key.name, key.prefix, "past_rotation",
                                 f"secret is {age} day(s) old (policy {rotation_days})"))
        if key.last_used_epoch is None:
            created_seconds = now - int(key.created_at.timestamp())
            if created_seconds < grace_days * DAY:
                continue
            created = created_seconds // DAY
            found.append(Finding(key.name, key.prefix, "never_used",
                                 f"created {created} day(s) ago, never used"))
        elif (now - key.last_used_epoch) // DAY >= unused_days:
            found.append(Finding(key.name, key.prefix, "unused",
                                 f"last used {(now - key.last_used_epoch) // DAY} day(s) ago"))
    return found
