"""The admin page: role grants (grant, revoke, assign accounts to a manager, which is a
manager grant naming them) and API keys (create, rotate, revoke). A new or rotated key's
secret is shown once, in the answer to that POST (never in a redirect URL, a log or a
later page); everything else redirects back with a fixed notice. Both lists sort,
search and page on the server (``tables``); the user and account inputs suggest known
names (a ``<datalist>``; an unknown name is still the field's own error).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...errors import CheetoError
from .forms import FormErrors, Reader, operation_errors
from .guard import page
from .render import base_path, may_administer, render
from .session import Refused, Session, check_csrf, read_form, require_session
from .tables import Column, Table, read_tables

ROLES = ("manager", "operator", "admin")
SCOPES = ("puppet:read", "api:read", "quota:write")
NOTICES = {"grant": "Role granted.", "revoke": "Role revoked.", "key-revoke": "Key revoked."}
NAME_SUGGESTIONS = 2000  # user names in the <datalist> at most (more: those with a role)
ROLES_TABLE = Table("roles", (Column("user", "User"), Column("role", "Role"),
                              Column("accounts", "Accounts", get=lambda r: ", ".join(
                                  r["accounts"])),
                              Column("via", "Via"), Column("", "")),
                    default_sort="user")
KEYS_TABLE = Table("keys", (Column("name", "Name"), Column("prefix", "Prefix"),
                            Column("scopes", "Scopes", get=lambda r: ", ".join(r["scopes"])),
                            Column("state", "State"),
                            Column("last_used_epoch", "Last used", numeric=True, search=False),
                            Column("", "")),
                   default_sort="name")


async def admin_session(request: Request) -> Session:
    session = await require_session(request)
    if not may_administer(session.who):
        raise Refused("this page is for admins")
    return session


async def suggestions(roles: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Names the grant form suggests: users (all of them up to ``NAME_SUGGESTIONS``, else
    those holding a role) and the groups with a Slurm account. Projected reads only."""
    from ...models import SlurmAccount, User
    from ...models.base import count, rows

    if await count(User, {}) <= NAME_SUGGESTIONS:
        users = sorted({r["name"] for r in await rows(User, {}, "name")})
    else:
        users = sorted({r["user"] for r in roles})
    accounts = sorted({r["group"] for r in await rows(SlurmAccount, {}, "group")})
    return {"users": users, "accounts": accounts}


async def show_admin(request: Request, session: Session, *, status: int = 200,
                     errors: dict[str, str] | None = None, values: dict[str, str] | None = None,
                     notice: str = "", secret: dict[str, Any] | None = None) -> Response:
    from ...queries.auth import list_api_keys, list_roles

    failure = (errors or {}).get("form", "") or (
        "Not saved: see the marked fields." if errors else "")
    states = read_tables(request, ROLES_TABLE, KEYS_TABLE, path=f"{base_path(request)}/admin")
    roles = await list_roles()
    return render(request, "admin.html", session, status=status, page="admin",
                  roles=states["roles"].apply(roles),
                  keys=states["keys"].apply([
                      {**k, "last_used": None if not k["last_used_epoch"]
                       else datetime.fromtimestamp(k["last_used_epoch"], UTC)}
                      for k in await list_api_keys()]), role_names=ROLES,
                  scopes=SCOPES, errors=errors or {}, values=values or {}, notice=notice,
                  failure=failure, secret=secret, names=await suggestions(roles))


def _accounts(text: str, read: Reader, field: str) -> list[str]:
    names = [a.strip() for a in text.replace(",", " ").split() if a.strip()]
    from .forms import NAME

    bad = [n for n in names if not NAME.fullmatch(n)]
    if bad:
        read.errors[field] = f"not valid account names: {', '.join(bad[:5])}"
    return names


async def _post(request: Request, action: str) -> Response:
    from ...operations.auth import (
        CreateApiKey,
        GrantRole,
        RevokeApiKey,
        RevokeRole,
        RotateApiKey,
    )
    from ...queries.auth import key_view

    session = await admin_session(request)
    fields = await read_form(request)
    check_csrf(fields, session.csrf)
    values = {k: v[0] for k, v in fields.items() if k != "csrf"}
    store, author = request.app.state.store, session.who.author
    read = Reader(fields)
    try:
        if action in ("grant", "revoke"):
            user = read.name("r_user")
            role = read.choice("r_role", ROLES)
            accounts = _accounts(values.get("r_accounts", ""), read, "r_accounts")
            read.done()
            op = GrantRole if action == "grant" else RevokeRole
            try:
                await op.run(store, author, user=user, role=role, accounts=accounts)
            except CheetoError as exc:
                raise operation_errors(exc, {"user": "r_user", "role": "r_role",
                                             "accounts": "r_accounts"}, "r_user") from None
        elif action == "key-create":
            name = read.text("k_name", max_length=64)
            scopes = [s for s in fields.get("k_scope", []) if s]
            if not scopes:
                read.errors["k_scope"] = "pick at least one scope"
            elif any(s not in SCOPES for s in scopes):
                read.errors["k_scope"] = f"one of {', '.join(SCOPES)}"
            days_text = values.get("k_days", "").strip()
            days = read.number("k_days", 0.01, 3650) if days_text else None
            read.done()
            try:
                made = await CreateApiKey.run(store, author, name=name, scopes=scopes,
                                              expires_in_days=days)
            except CheetoError as exc:
                raise operation_errors(exc, {"name": "k_name", "scopes": "k_scope",
                                             "expires_in_days": "k_days"}, "k_name") from None
            return await show_admin(request, session, notice="Key created.",
                                    secret={**key_view(made.key), "secret": made.secret})
        elif action == "key-rotate":
            name = read.text("k_target", max_length=64)
            read.done()
            auth = request.app.state.auth
            made = await RotateApiKey.run(store, author, name=name,
                                          overlap_hours=auth.api.key_overlap_hours)
            return await show_admin(request, session, notice="Key rotated.",
                                    secret={**key_view(made.key), "secret": made.secret})
        else:
            name = read.text("k_target", max_length=64)
            read.done()
            await RevokeApiKey.run(store, author, name=name)
    except FormErrors as exc:
        return await show_admin(request, session, status=422, errors=exc.errors,
                                values=values)
    except CheetoError as exc:
        return await show_admin(request, session, status=exc.http_status,
                                errors={"form": exc.message}, values=values)
    return RedirectResponse(f"{base_path(request)}/admin?done={action}", status_code=303,
                            headers={"Cache-Control": "no-store"})


def add_routes(router: APIRouter) -> None:
    @router.get("/admin")
    @page
    async def admin(request: Request, done: str | None = None) -> Response:
        session = await admin_session(request)
        return await show_admin(request, session, notice=NOTICES.get(done or "", ""))

    for action in ("grant", "revoke", "key-create", "key-rotate", "key-revoke"):
        path = {"grant": "/admin/roles/grant", "revoke": "/admin/roles/revoke",
                "key-create": "/admin/keys/create", "key-rotate": "/admin/keys/rotate",
                "key-revoke": "/admin/keys/revoke"}[action]

        def make(action: str = action) -> Any:
            @page
            async def handler(request: Request) -> Response:
                return await _post(request, action)
            return handler

        router.add_api_route(path, make(), methods=["POST"], name=f"dashboard-{action}")
