"""Rendering: one Jinja2 environment (autoescape on for every template, so user data is
always escaped), the navigation a person may use, and the headers every page carries.

Pages are not cached anywhere (``no-store``: they hold personal data), may not be framed,
and may load nothing but this site's own stylesheet (the CSP has no script source: the
dashboard runs no JavaScript).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
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
    env.filters.update(when=when, day=day, last_day=last_day, span=span, hours=hours)
    return env


# -- words and units: every page shows times with their zone, periods with their last
# day (inclusive, as people read a range), and amounts in hours --------------------------

def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def when(value: datetime | None, empty: str = "never") -> str:
    """A moment with its zone: ``2026-12-05 20:04 UTC`` (the store keeps UTC)."""
    if value is None:
        return empty
    return f"{_utc(value):%Y-%m-%d %H:%M} UTC"


def day(value: datetime | date | None) -> str:
    if value is None:
        return ""
    return (_utc(value) if isinstance(value, datetime) else value).strftime("%Y-%m-%d")


def last_day(end: datetime | date | str) -> str:
    """The inclusive last day of a period whose ``end`` is exclusive (a period
    [2026-12-01, 2027-01-01) ends on 2026-12-31); a day string is already inclusive."""
    if isinstance(end, str):
        return end
    if isinstance(end, datetime):
        return (_utc(end) - timedelta(microseconds=1)).strftime("%Y-%m-%d")
    return (end - timedelta(days=1)).isoformat()


def span(start: datetime | date | str, end: datetime | date | str) -> str:
    """``2026-12-01 – 2026-12-31``: a period from its first to its last day."""
    first = start if isinstance(start, str) else day(start)
    return f"{first} – {last_day(end)}"


def hours(minutes: float | None, empty: str = "no limit") -> str:
    """Minutes as hours, as every bar shows them: ``10h``, ``1.5h``, ``12,345h``."""
    if minutes is None:
        return empty
    value = minutes / 60
    text = f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:,.1f}"
    return f"{text}h"


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
