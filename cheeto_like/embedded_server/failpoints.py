"""mongod's ``failCommand`` fail point (with ``enableTestCommands``) and the error labels a
driver retries on.

Part of the embedded store's server (the package docstring says why it exists).
"""

from __future__ import annotations

from typing import Any

from .protocol import RETRYABLE_CODES, RETRYABLE_WRITES


class CloseConnection(Exception):
    """failCommand's ``closeConnection``: drop the client's connection unanswered."""


CODE_NAMES = {
    1: "InternalError", 2: "BadValue", 6: "HostUnreachable", 7: "HostNotFound",
    8: "UnknownError", 11: "UserNotFound", 13: "Unauthorized", 20: "IllegalOperation",
    24: "LockTimeout", 43: "CursorNotFound", 50: "MaxTimeMSExpired", 59: "CommandNotFound",
    64: "WriteConcernFailed", 72: "InvalidOptions", 89: "NetworkTimeout",
    91: "ShutdownInProgress", 100: "UnsatisfiableWriteConcern", 112: "WriteConflict",
    117: "ConflictingOperationInProgress", 189: "PrimarySteppedDown",
    251: "NoSuchTransaction", 262: "ExceededTimeLimit", 9001: "SocketException",
    10107: "NotWritablePrimary", 10334: "BSONObjectTooLarge", 11000: "DuplicateKey",
    11600: "InterruptedAtShutdown", 11602: "InterruptedDueToReplStateChange",
    13435: "NotPrimaryNoSecondaryOk", 13436: "NotPrimaryOrSecondary",
}


def code_name(code: int) -> str:
    """mongod's codeName for a code (``Location<code>`` for an assertion without one)."""
    return CODE_NAMES.get(code, f"Location{code}")


class FailCommand:
    """mongod's ``failCommand`` fail point (``configureFailPoint``, test commands only).

    ``mode``: ``"alwaysOn"``, ``"off"``, ``{times: n}`` (fire n times, then off) or
    ``{skip: n}`` (let n matching commands through, then always on). ``data``:
    ``failCommands`` (command names), optional ``appName`` (only clients whose handshake
    named that application), ``errorCode``, ``errorLabels``, ``writeConcernError``,
    ``closeConnection``, ``blockConnection`` + ``blockTimeMS``. Only matching commands
    count toward ``times``/``skip``, as on mongod."""

    def __init__(self) -> None:
        self.mode = "off"
        self.remaining = 0
        self.data: dict[str, Any] = {}
        self.commands: frozenset[str] = frozenset()
        self.entered = 0

    def configure(self, mode: Any, data: Any) -> str | None:
        """Apply a configureFailPoint; the reason it is refused, or None."""
        if data is not None and not isinstance(data, dict):
            return "'data' must be an object"
        data = dict(data or {})
        if mode in ("off", "alwaysOn"):
            new_mode, remaining = mode, 0
        elif isinstance(mode, dict) and len(mode) == 1 and next(iter(mode)) in ("times",
                                                                                   "skip"):
            key, value = next(iter(mode.items()))
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                return f"'{key}' must be a non-negative integer"
            new_mode, remaining = key, value
            if key == "times" and value == 0:
                new_mode = "off"
        else:
            return f"unknown fail point mode {mode!r}"
        commands = data.get("failCommands", [])
        if new_mode != "off" and (not isinstance(commands, list) or not commands
                                  or not all(isinstance(c, str) for c in commands)):
            return "failCommand needs data.failCommands, a list of command names"
        if "errorCode" in data and (not isinstance(data["errorCode"], int)
                                    or isinstance(data["errorCode"], bool)):
            return "'errorCode' must be an integer"
        if "writeConcernError" in data and not isinstance(data["writeConcernError"], dict):
            return "'writeConcernError' must be an object"
        if "errorLabels" in data and not isinstance(data["errorLabels"], list):
            return "'errorLabels' must be an array"
        self.mode, self.remaining, self.data = new_mode, remaining, data
        self.commands = frozenset(c.lower() for c in commands)
        self.entered = 0  # as mongod's setMode: the reply had the count before this one
        return None

    def fires(self, name: str, app_name: str | None) -> dict[str, Any] | None:
        """The fail point's data when it fires for this command, else None."""
        if self.mode == "off" or name.lower() not in self.commands:
            return None
        wanted = self.data.get("appName")
        if wanted is not None and wanted != app_name:
            return None
        if self.mode == "skip":
            if self.remaining > 0:
                self.remaining -= 1
                return None
        elif self.mode == "times":
            self.remaining -= 1
            if self.remaining <= 0:
                self.mode = "off"
        self.entered += 1
        return self.data


def error_labels(code: int, name: str, cmd: dict[str, Any], *,
                 write_concern: bool = False) -> list[str]:
    """The labels mongod adds to an error it computes labels for itself: a retryable
    code on a retryable write (or a commit/abort) is RetryableWriteError; a command of
    a transaction (but its commit) failing with a transient code is
    TransientTransactionError."""
    labels: list[str] = []
    in_txn = cmd.get("autocommit") is False
    finishing = name in ("commitTransaction", "abortTransaction")
    retryable_write = ((name in RETRYABLE_WRITES and "txnNumber" in cmd and not in_txn)
                       or finishing)
    if retryable_write and code in RETRYABLE_CODES:
        labels.append("RetryableWriteError")
    if (in_txn and not finishing and not write_concern
            and (code in RETRYABLE_CODES or code in (24, 112, 251))):
        labels.append("TransientTransactionError")
    return labels
