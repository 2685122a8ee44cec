"""The wire protocol's constants and the checks a message passes before nx-27017 sees it:
malformed or ambiguous messages, update shapes the store cannot hold, and mongod's error
replies.

Part of the embedded store's server (the package docstring says why it exists).
"""

from __future__ import annotations

import struct
from typing import Any

from ..embedded_common import (
    IDENTITY_COMMAND,
)

EXIT_GRACE_S = 5.0
EXIT_WITH_POLL_S = 1.0  # how often ``--exit-with`` looks at the process it follows
HEADER = struct.Struct("<iiii")
HANDSHAKE = frozenset({"hello", "Hello", "isMaster", "ismaster"})
PREAUTH = HANDSHAKE | {"saslStart", "saslContinue", IDENTITY_COMMAND}
# Commands that never touch SQLite (or only the cursor lists nx keeps in memory).
UNGATED = HANDSHAKE | {"ping", "buildInfo", "buildinfo", "whatsmyuri", "getMore",
                       "killCursors", "serverStatus", "getLastError", "getParameter"}
COMMITTED_MEMORY = 1024
# Every key nx-27017's handler dispatches on (it tests membership, in its own order, and
# runs ``handle_insert`` for any body holding ``insert``). A body must carry exactly one,
# so the command we check (authentication, the gate, the file watch) is the one it runs.
DISPATCH_KEYS = frozenset({
    "abortTransaction", "aggregate", "buildInfo", "buildinfo", "bulkWrite", "collStats",
    "collstats", "commitTransaction", "compact", "compactcollection", "count", "create",
    "createIndex", "createIndexes", "createSearchIndexes", "createsearchindexes", "dbStats",
    "dbstats", "delete", "distinct", "drop", "dropDatabase", "dropIndex", "dropIndexes",
    "dropSearchIndex", "dropdatabase", "dropsearchindex", "endSessions", "explain", "find",
    "findAndModify", "findandmodify", "getMore", "hello", "Hello", "insert", "isMaster",
    "ismaster", "killCursors", "listCollections", "listDatabases", "listIndexes",
    "listSearchIndexes", "listcollections", "listdatabases", "listindexes",
    "listsearchindexes", "openDownloadStream", "reIndex", "reindex", "renameCollection",
    "renamecollection", "serverStatus", "startSession", "update", "updateSearchIndex",
    "updatesearchindex", "upload", "vacuum", "validate",
})
# Second dispatch keys a real command carries (findAndModify's ``update`` document; an
# aggregate's ``explain: true``): the handler tests the first of each pair first.
COMPANION_KEYS = {"findAndModify": {"update"}, "findandmodify": {"update"},
                  "aggregate": {"explain"}}
# Commands that may come with document sequences (OP_MSG kind 1).
SEQUENCE_COMMANDS = frozenset({"insert", "update", "delete", "bulkWrite"})

# MongoDB's limits (docs "MongoDB Limits and Thresholds"): a stored document is at most
# 16 MiB; a document the server builds (an aggregation result) may reach 16 MiB + 16 KiB
# (BSONObjMaxInternalSize) before mongod refuses it with BSONObjectTooLarge.
MAX_DOCUMENT_SIZE = 16 * 1024 * 1024
MAX_INTERNAL_SIZE = MAX_DOCUMENT_SIZE + 16 * 1024
DEFAULT_TRANSACTION_LIFETIME_S = 60
# Parameters ``setParameter``/``getParameter`` serve (mongod's names). ``enableTestCommands``
# is start-up only (``--set-parameter enableTestCommands=1``), as on mongod.
RUNTIME_PARAMETERS = frozenset({"transactionLifetimeLimitSeconds"})
STARTUP_PARAMETERS = frozenset({"enableTestCommands"}) | RUNTIME_PARAMETERS
# Error codes mongod labels RetryableWriteError on a retryable write (the retryable-writes
# spec's list); drivers talking to a 4.4+ server retry a write only on that label.
RETRYABLE_CODES = frozenset({6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436})
# Commands of a retryable write (a ``txnNumber`` outside a transaction).
RETRYABLE_WRITES = frozenset({"insert", "update", "delete", "findAndModify", "findandmodify",
                              "bulkWrite"})
RETRIED_MEMORY = 1024
REPLICA_SET_NAME = "cheeto-embedded"


def _error(message: str, code: int, code_name: str, *labels: str) -> dict[str, Any]:
    doc: dict[str, Any] = {"ok": 0, "errmsg": message, "code": code, "codeName": code_name}
    if labels:
        doc["errorLabels"] = list(labels)
    return doc


def _malformed(msg: dict[str, Any]) -> str | None:
    """Why an OP_MSG is refused before anything reads it as a command (None: fine).

    nx-27017 runs the *last* body section, treats any body holding ``insert`` (or any
    document sequence) as an insert, and picks a command by testing keys in its own
    order; the server checks the first key of the body. Those must be one and the same
    command, or a handshake could carry a write past authentication and the gate."""
    bodies = [doc for kind, doc in msg["sections"] if kind == "body"]
    if len(bodies) != 1 or not isinstance(bodies[0], dict) or not bodies[0]:
        return "an OP_MSG must carry exactly one command document"
    cmd = bodies[0]
    name = next(iter(cmd))
    extra = {k for k in cmd if k in DISPATCH_KEYS} - {name} - COMPANION_KEYS.get(name, set())
    if extra:
        return f"command {name} carries another command ({sorted(extra)[0]})"
    if len(msg["sections"]) > 1 and name not in SEQUENCE_COMMANDS:
        return f"command {name} takes no document sequence"
    return None


def _numeric_path(update: Any) -> str | None:
    """The first update path with an array-index part (``items.3``), if any."""
    if not isinstance(update, dict):
        return None  # a pipeline update: nothing of ours sends one
    for operator, fields in update.items():
        if operator.startswith("$") and isinstance(fields, dict):
            for path in fields:
                if any(part.isdigit() for part in str(path).split(".")):
                    return str(path)
    return None


def _unsupported(msg: dict[str, Any]) -> str | None:
    """Why an update is refused although it is valid MongoDB (None: fine).

    nx-27017 answers ``{"$set": {"items.3": …}}`` (an array element by index) with
    success and changes nothing. A write that silently does not happen is worse than an
    error, so such updates fail loudly here; use a whole-field ``$set`` or
    ``array_filters`` (tests/test_store_conformance.py covers those)."""
    updates: list[Any] = []
    for kind, doc in msg["sections"]:
        if kind == "body" and isinstance(doc, dict):
            updates += [u.get("u") for u in doc.get("updates") or [] if isinstance(u, dict)]
            if "findAndModify" in doc or "findandmodify" in doc:
                updates.append(doc.get("update"))
        elif kind == "payload" and isinstance(doc, dict):
            updates += [u.get("u") for u in doc.get("updates") or [] if isinstance(u, dict)]
    for update in updates:
        if (path := _numeric_path(update)) is not None:
            return (f"the embedded store cannot update an array element by index "
                    f"({path!r}); set the whole field instead")
    return None
