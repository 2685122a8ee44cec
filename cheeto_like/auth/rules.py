"""The authorisation rules, shared by the API and the dashboard: pure functions, no I/O.

``can(principal, action, target)`` answers one question; the caller loads what the rule
needs into a ``Target`` (the user asked about and the accounts they belong to, or the
account asked about) first. Roles (slurm-quota's, with manager scoped as in its #63):

- **user**: their own record, Slurm associations, ``why``, usage and quota, and the
  accounts they are a member of; every site, the defaults and the GPU factors.
- **manager**: also the accounts they are assigned (or sponsor) and those accounts'
  members.
- **operator**: reads everything; sets quotas, defaults, GPU factors, adjustments.
- **admin**: operator, plus roles, API keys, and ending a person's tokens and sessions.

Requests (``ng request``, ``/api/v1/requests``): a person sees and comments on the
requests they filed or that are for them, and those of the groups they manage (sponsor
or manager); files for themselves, and for the groups they manage or belong to (a
group's quota or storage); approves or denies for the groups they manage. Operators see
and file everything. Which *step* someone may approve (the sponsors of the group at the
request's site, then an operator; never one's own operator step) is the operation's
check (``queries.request.may_approve``), refused with ``NotAllowed`` (403).

Machine keys carry scopes instead of roles: ``puppet:read`` (the puppet routes),
``api:read`` (every read an operator has), ``quota:write`` (the operator's writes).
"""

from __future__ import annotations

from dataclasses import dataclass

from .principal import Principal

# -- actions --------------------------------------------------------------------------
ME = "me:read"
SITE_READ = "site:read"
USER_READ = "user:read"            # target.user (+ target.accounts: the user's groups)
USER_LIST = "user:list"
GROUP_READ = "group:read"          # target.account
GROUP_LIST = "group:list"
USAGE_READ = "usage:read"          # target.user or target.account; neither = site-wide
QUOTA_READ = "quota:read"          # as USAGE_READ
SETTINGS_READ = "settings:read"    # defaults and GPU factors of a site
QUOTA_WRITE = "quota:write"        # quotas, defaults, GPU factors, adjustments
SYNC_READ = "sync:read"
ROLE_READ = "role:read"
ROLE_WRITE = "role:write"
KEY_READ = "apikey:read"
KEY_WRITE = "apikey:write"
TOKENS_REVOKE = "tokens:revoke"    # end every token and session of a person
PUPPET_READ = "puppet:read"
REQUEST_LIST = "request:list"        # the queue (each row then checked as REQUEST_READ)
REQUEST_READ = "request:read"        # target.people (requester, user) + target.account
REQUEST_COMMENT = "request:comment"  # as REQUEST_READ
REQUEST_FILE = "request:file"        # target.user (None: a group's) + target.account
REQUEST_DECIDE = "request:decide"    # approve or deny: target.account (the group)

ACTIONS: tuple[str, ...] = (
    ME, SITE_READ, USER_READ, USER_LIST, GROUP_READ, GROUP_LIST, USAGE_READ, QUOTA_READ,
    SETTINGS_READ, QUOTA_WRITE, SYNC_READ, ROLE_READ, ROLE_WRITE, KEY_READ, KEY_WRITE,
    TOKENS_REVOKE, PUPPET_READ, REQUEST_LIST, REQUEST_READ, REQUEST_COMMENT, REQUEST_FILE,
    REQUEST_DECIDE,
)

_READS = frozenset({SITE_READ, USER_READ, USER_LIST, GROUP_READ, GROUP_LIST, USAGE_READ,
                    QUOTA_READ, SETTINGS_READ, SYNC_READ, REQUEST_LIST, REQUEST_READ})
_OPERATOR = _READS | {QUOTA_WRITE, PUPPET_READ, REQUEST_COMMENT, REQUEST_FILE,
                      REQUEST_DECIDE}
_ADMIN = _OPERATOR | {ROLE_READ, ROLE_WRITE, KEY_READ, KEY_WRITE, TOKENS_REVOKE}
_SCOPES: dict[str, frozenset[str]] = {
    "puppet:read": frozenset({PUPPET_READ}),
    "api:read": _READS,
    "quota:write": frozenset({QUOTA_WRITE}),
}


@dataclass(frozen=True)
class Target:
    """What an action is about. ``user``: the person asked about, with ``accounts`` the
    groups they belong to; ``account``: a Slurm account (group name); ``people``: the
    persons a request concerns (its requester and the person it is for)."""

    user: str | None = None
    accounts: frozenset[str] = frozenset()
    account: str | None = None
    people: frozenset[str] = frozenset()


NOTHING = Target()


def can(principal: Principal | None, action: str, target: Target = NOTHING) -> bool:
    """Whether ``principal`` may do ``action`` on ``target`` (None: nobody signed in)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    if principal is None:
        return False
    if principal.kind != "user":
        return any(action in _SCOPES.get(scope, frozenset()) for scope in principal.scopes)
    roles = principal.roles
    if "admin" in roles and action in _ADMIN:
        return True
    if "operator" in roles and action in _OPERATOR:
        return True
    if action in (ME, SITE_READ, SETTINGS_READ):
        return "user" in roles
    if action in (USER_READ, USAGE_READ, QUOTA_READ) and target.user is not None:
        return target.user == principal.name or bool(principal.managed & target.accounts)
    if action in (GROUP_READ, USAGE_READ, QUOTA_READ) and target.account is not None:
        return target.account in principal.managed or target.account in principal.member_of
    return _request_rule(principal, action, target)


def _request_rule(principal: Principal, action: str, target: Target) -> bool:
    """A person's requests (operators were answered before)."""
    manages = target.account is not None and target.account in principal.managed
    if action == REQUEST_LIST:
        return "user" in principal.roles
    if action in (REQUEST_READ, REQUEST_COMMENT):
        return principal.name in target.people or manages
    if action == REQUEST_FILE:
        if manages or target.user == principal.name:
            return True
        return target.user is None and target.account in principal.member_of
    if action == REQUEST_DECIDE:
        return manages
    return False


def visible_accounts(principal: Principal) -> frozenset[str] | None:
    """The accounts a list may show this principal; None = all of them."""
    if can(principal, GROUP_LIST):
        return None
    return principal.managed | principal.member_of
