"""Refusals in plain words: what the person cannot do, who can, and what to do instead,
from the rule names of ``rules`` (one mapping for the API's 403s and the dashboard's
refusal pages). Pure, no I/O; the caller passes the ``Target`` it authorised against
and the site, when there is one.
"""

from __future__ import annotations

from . import rules

_OPERATORS = "only operators can"
_ADMINS = "only admins can"
_ASK_OPERATOR = "Ask an operator (ng request file) if you need it."


def _at(site: str | None) -> str:
    return f" at {site}" if site else ""


def _subject(what: str, target: rules.Target, site: str | None) -> str:
    """Usage or quota of a user, of an account, or of the whole site."""
    at = _at(site)
    if target.user is not None:
        return (f"You cannot see {target.user}'s {what}{at}: only they, the sponsors and "
                f"managers of their groups, and operators can. Leave out the user to see "
                f"your own.")
    if target.account is not None:
        return (f"You cannot see the {what} of {target.account}{at}: only the account's "
                f"sponsor, its managers, its members and operators can. Ask the sponsor "
                f"of {target.account} if you need it.")
    return (f"You cannot see the {what} of the whole site{at}: {_OPERATORS}. Leave out "
            f"user and account to see your own.")


_FIXED: dict[str, str] = {
    rules.ME: "This page is for people with a user record; a machine key has none.",
    rules.SITE_READ: f"You cannot list sites: only people with a user record can. "
                     f"{_ASK_OPERATOR}",
    rules.SETTINGS_READ: "You cannot see a site's defaults: only people with a user "
                         "record can.",
    rules.USER_LIST: f"You cannot list every user: {_OPERATORS}.",
    rules.GROUP_LIST: f"You cannot list every group: {_OPERATORS}. Your own groups are on "
                      "your page.",
    rules.QUOTA_WRITE: f"You cannot change quotas, defaults or GPU factors: {_OPERATORS}. "
                       f"File a quota request instead; your sponsor and an operator "
                       f"decide it.",
    rules.SYNC_READ: f"You cannot see sync runs: {_OPERATORS}.",
    rules.ROLE_READ: f"You cannot see roles: {_ADMINS}.",
    rules.ROLE_WRITE: f"You cannot grant or revoke roles: {_ADMINS}.",
    rules.KEY_READ: f"You cannot see API keys: {_ADMINS}.",
    rules.KEY_WRITE: f"You cannot make or revoke API keys: {_ADMINS}.",
    rules.TOKENS_REVOKE: f"You cannot end another person's sessions: {_ADMINS}.",
    rules.PUPPET_READ: f"You cannot read the puppet routes: only a puppet key and "
                       f"{_OPERATORS[5:]}.",
    rules.REQUEST_LIST: "You cannot list requests: only people with a user record can.",
}


def refusal(action: str, target: rules.Target = rules.NOTHING,
            site: str | None = None) -> str:
    """Why ``action`` on ``target`` was refused, for the person refused (second
    person), naming who may and the next step."""
    at = _at(site)
    if action == rules.USAGE_READ:
        return _subject("usage", target, site)
    if action == rules.QUOTA_READ:
        return _subject("quota", target, site)
    if action == rules.USER_READ:
        return (f"You cannot see {target.user or 'this user'}'s record: only they, the "
                f"sponsors and managers of their groups, and operators can.")
    if action == rules.GROUP_READ:
        name = target.account or "this group"
        return (f"You cannot see {name}{at}: only its sponsor, its managers, its members "
                f"and operators can. Ask to join it with a group request.")
    if action in (rules.REQUEST_READ, rules.REQUEST_COMMENT):
        verb = "see" if action == rules.REQUEST_READ else "comment on"
        return (f"You cannot {verb} this request: only the person who filed it, the person "
                f"it is for, the sponsors and managers of its group, and operators can.")
    if action == rules.REQUEST_FILE:
        return (f"You cannot file this request{at}: you may file for yourself, for the "
                f"groups you manage, and a group's quota or storage for a group you belong "
                f"to. Ask the group's sponsor to file it.")
    if action == rules.REQUEST_DECIDE:
        name = target.account or "this group"
        return (f"You cannot approve or deny requests for {name}: only its sponsors, its "
                f"managers and operators can.")
    if action in _FIXED:
        return _FIXED[action]
    return f"You cannot do this ({action})."


def refusal_line(name: str, action: str, target: rules.Target = rules.NOTHING,
                 site: str | None = None) -> str:
    """The plain sentence, then the rule in brackets (``bob may not usage:read``) for
    logs and scripts that look for it."""
    return f"{refusal(action, target, site)} ({name} may not {action})"
