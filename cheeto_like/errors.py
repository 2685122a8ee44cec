"""Typed errors shared by every layer.

The CLI turns them into one red line and an exit code, the API into a 4xx/5xx with a
message. Anything else that escapes is a bug and is reported as an internal error.
"""

from __future__ import annotations

from collections.abc import Sequence


class CheetoError(Exception):
    """Base class: a failure we expected and can explain in one sentence."""

    exit_code: int = 1
    http_status: int = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidInput(CheetoError):
    """The request itself is wrong (a bad name, uid, shell, quota, …)."""

    exit_code = 2
    http_status = 422


class NotFound(CheetoError):
    """A named site, user, group or other record does not exist."""

    exit_code = 2
    http_status = 404


class AlreadyExists(CheetoError):
    """A create collided with an existing record (usually via a unique index)."""

    exit_code = 2
    http_status = 409


class Conflict(CheetoError):
    """The request contradicts the current state (e.g. removing a site in use)."""

    exit_code = 2
    http_status = 409


class GuardTripped(CheetoError):
    """A safety cap refused a destructive step; nothing was changed."""

    exit_code = 1
    http_status = 409

    def __init__(self, message: str, would_delete: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.would_delete = list(would_delete)


class Busy(CheetoError):
    """Another run holds the lease this one needs (a sync of the same target and site).

    Exit 1, not 2: the request is fine, it just cannot run now; retry once the holder
    ends (or its lease expires, within a minute of it dying)."""

    exit_code = 1
    http_status = 409


class ExternalError(CheetoError):
    """An outside system (store, sacctmgr, LDAP, HTTP API) failed."""

    exit_code = 1
    http_status = 503

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class ConfigError(InvalidInput):
    """The configuration file is missing, unreadable or invalid."""


class NotAllowed(CheetoError):
    """The acting person may not do this (approve a request they are not an approver of)."""

    exit_code = 2
    http_status = 403
