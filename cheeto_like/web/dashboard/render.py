"""Rendering: one Jinja2 environment (autoescape on for every template, so user data is
always escaped), the navigation a person may use, and the headers every page carries.

Pages are not cached anywhere (``no-store``: they hold personal data), may not be framed,
and may load nothing but this site's own stylesheet (the CSP has no script source: the
dashboard runs no JavaScript).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader
from starlette.requests import Request
from starlette.responses import HTMLResponse

from ...auth import rules
from ...auth.principal import Principal
from .session import CSRF_FIELD, Session

HERE = Path(__file__).parent
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": ("default-src 'none'; style-src 'self'; img-src 'self'; "
                                "form-action 'self'; frame-ancestors 'none'; "
                                "base-uri 'none'"),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@cache
def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True,
                      trim_blocks=True, lstrip_blocks=True)
    env.globals["CSRF_FIELD"] = CSRF_FIELD
    return env


def may_see_accounts(who: Principal) -> bool:
    """The sponsor/manager page: people who manage (or sponsor) an account, and those
    who may list every account (operators, admins)."""
    return bool(who.managed) or rules.can(who, rules.GROUP_LIST)


def may_operate(who: Principal) -> bool:
    return rules.can(who, rules.QUOTA_WRITE) and rules.can(who, rules.SYNC_READ)


def may_administer(who: Principal) -> bool:
    return rules.can(who, rules.ROLE_WRITE) and rules.can(who, rules.KEY_WRITE)


def navigation(who: Principal) -> list[tuple[str, str]]:
    items = [("me", "Me"), ("requests", "Requests")] if rules.can(who, rules.ME) else []
    if may_see_accounts(who):
        items.append(("accounts", "Accounts"))
    if may_operate(who):
        items += [("operator", "Operator"), ("runs", "Sync runs")]
    if may_administer(who):
        items.append(("admin", "Admin"))
    return items


def base_path(request: Request) -> str:
    root = str(request.scope.get("root_path", "")).rstrip("/")
    return root + request.app.state.auth.api.prefix


def render(request: Request, template: str, session: Session | None, *, status: int = 200,
           **context: Any) -> HTMLResponse:
    base = base_path(request)
    html = environment().get_template(template).render(
        base=base, session=session, who=session.who if session else None,
        nav=navigation(session.who) if session else [], csrf=session.csrf if session else "",
        **context)
    return HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)
