"""The web dashboard: server-rendered pages for users, sponsors, operators and admins,
served by the API process next to ``/api/v1`` (``install_dashboard``, at the API's
prefix, ``/`` by default).

Same sign-in as the API (``pages_auth``: the token in an HttpOnly, Secure,
SameSite=Strict cookie; CSRF tokens on every form; logout revokes the token), same
authorisation (``auth.rules.can`` on every page and form, server-side), same reads and
writes (queries; operations with the signed-in person as the History author). Pages run
no JavaScript and load only ``static/dashboard.css``, so they work on an offline
network. Modules: ``session`` (cookie, CSRF, forms), ``render`` (Jinja2, autoescaped;
navigation by role), ``guard`` (error pages), ``charts`` (SVG geometry), ``forms``
(field errors) and one ``pages_*`` module per page.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.staticfiles import StaticFiles

from ...config import ApiConfig, Config

STATIC_DIR = Path(__file__).parent / "static"


def install_dashboard(app: FastAPI, config: Config) -> None:
    """Mount the pages and their stylesheet (after ``install_v1``: it uses the app's
    ``Auth``)."""
    from . import (
        pages_accounts,
        pages_admin,
        pages_auth,
        pages_me,
        pages_operator,
        pages_requests,
    )
    from .guard import install_handlers

    prefix = (config.api or ApiConfig()).prefix
    router = APIRouter(prefix=prefix, include_in_schema=False)
    for module in (pages_auth, pages_me, pages_requests, pages_accounts, pages_operator,
                   pages_admin):
        module.add_routes(router)
    app.include_router(router)
    # (method, path) of every page and form, for the authorisation matrix tests
    app.state.dashboard_routes = {(m, r.path) for r in router.routes
                                  for m in getattr(r, "methods", set()) - {"HEAD"}}
    app.mount(f"{prefix}/dashboard-static", StaticFiles(directory=STATIC_DIR),
              name="dashboard-static")
    install_handlers(app)
