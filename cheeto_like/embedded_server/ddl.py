"""Collections: ``renameCollection`` (ours, mongod's form) and drop, in one SQLite
transaction each; refused inside a transaction (263).

Part of the embedded store's server (the package docstring says why it exists).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from .protocol import _error

# -- collections: rename and drop --------------------------------------------------------

# What mongod refuses inside a multi-document transaction (OperationNotSupportedInTransaction)
# and nx-27017 would run there. SQLite rolls DDL back with the transaction, but neosqlite's
# cache of Collection objects does not: a rename rolled back left the staging name serving
# the live data, and a committed one left the new name empty and without its indexes.
NOT_IN_TRANSACTION = frozenset({"drop", "dropDatabase", "dropdatabase", "dropIndexes",
                                "dropIndex", "renameCollection", "renamecollection"})
RENAME_COMMANDS = frozenset({"renameCollection", "renamecollection"})
# neosqlite's table names (``quote_identifier``): a name it cannot store is refused here
# with mongod's InvalidNamespace rather than failing half-way through a rename.
COLLECTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def not_in_transaction(name: str) -> dict[str, Any]:
    """mongod's answer to a command no transaction may run (the transaction stays open)."""
    return _error(f"Cannot run '{name}' in a multi-document transaction.", 263,
                  "OperationNotSupportedInTransaction")


class RenameRefused(Exception):
    """A renameCollection mongod would refuse: the reply to send."""

    def __init__(self, message: str, code: int, code_name: str) -> None:
        super().__init__(message)
        self.reply = _error(message, code, code_name)


def parse_namespace(value: Any, what: str) -> tuple[str, str]:
    """``db.collection`` into its two parts (mongod's TypeMismatch/InvalidNamespace)."""
    if not isinstance(value, str):
        raise RenameRefused(f"BSON field '{what}' is the wrong type "
                            f"'{type(value).__name__}', expected type 'string'", 14,
                            "TypeMismatch")
    database, dot, collection = value.partition(".")
    if not dot or not database or not collection:
        raise RenameRefused(f"Invalid {what} namespace: {value}", 73, "InvalidNamespace")
    return database, collection


def _tables(conn: Any) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _collection_exists(conn: Any, name: str) -> bool:
    from neosqlite.connection import _is_internal_collection_name

    return not _is_internal_collection_name(name) and name in _tables(conn)


def _index_names(conn: Any, table: str) -> list[str]:
    return [row[0] for row in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='index' AND tbl_name=? AND sql IS NOT NULL",
        (table,))]


@contextlib.contextmanager
def sqlite_transaction(db: Any) -> Iterator[None]:
    """One SQLite transaction around DDL (the connection is in autocommit mode, and no
    transaction of a client is open: the caller holds the gate and the database's lock).
    Whatever happens, neosqlite's cache is checked against the file afterwards."""
    conn = db.db
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    finally:
        forget_stale_collections(db)


def forget_stale_collections(db: Any) -> None:
    """Drop neosqlite's cached Collection objects that no longer match the file (a name
    whose table is gone, or an entry whose object was renamed to another name): the next
    access builds a fresh one. Run under the database's lock after any DDL or rollback."""
    cache = getattr(db, "_collections", None)
    if not cache:
        return
    tables = _tables(db.db)
    for key, collection in list(cache.items()):
        if key != getattr(collection, "name", None) or key not in tables:
            cache.pop(key, None)


def drop_collection(db: Any, name: str) -> None:
    """Drop a collection with everything neosqlite keeps beside its table: the stored key
    specs of its indexes and its TTL rows (a later collection of the same name must not
    inherit another's expiry), its FTS tables, and its cached object. Inside the
    caller's ``sqlite_transaction``."""
    conn = db.db
    for index in _index_names(conn, name):
        with contextlib.suppress(Exception):  # the key table exists once an index did
            conn.execute("DELETE FROM neosqlite_index_keys WHERE index_name = ?", (index,))
    db.drop_collection(name)  # table, TTL rows by collection, FTS tables, the cache entry


def rename_collection(db: Any, source: str, target: str, drop_target: bool) -> None:
    """Rename ``source`` to ``target`` in one SQLite transaction (dropping ``target``
    first when ``drop_target``): readers, waiting on the gate and the database's lock,
    see the old state or the new one, never a dropped target without its replacement.

    neosqlite renames the table, its indexes and their stored keys, but leaves the TTL
    rows under the old index names (the expiry would vanish from listIndexes), so those
    follow here. On any failure everything is rolled back and the cache cleaned."""
    conn = db.db
    prefix = f"idx_{source}_"
    renamed = {index: f"idx_{target}_{index[len(prefix):]}"
               for index in _index_names(conn, source) if index.startswith(prefix)}
    try:
        with sqlite_transaction(db):
            if drop_target:
                drop_collection(db, target)
            for new in renamed.values():  # rows an older drop left under the new names
                for table in ("neosqlite_index_keys", "_neosqlite_ttl_indexes"):
                    with contextlib.suppress(Exception):  # the table exists once used
                        conn.execute(f"DELETE FROM {table} WHERE index_name = ?", (new,))
            db.rename_collection(source, target)
            for old, new in renamed.items():
                with contextlib.suppress(Exception):  # no TTL table: nothing to move
                    conn.execute("UPDATE _neosqlite_ttl_indexes SET index_name = ? "
                                 "WHERE index_name = ?", (new, old))
    finally:  # fresh objects for both names (no query or TTL cache of the old ones)
        db._collections.pop(source, None)
        db._collections.pop(target, None)
