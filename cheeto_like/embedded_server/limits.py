"""MongoDB's document size limit (16 MiB), enforced around nx-27017's handler with mongod's
codes.

Part of the embedded store's server (the package docstring says why it exists).
"""

from __future__ import annotations

import threading
from typing import Any

from .protocol import MAX_DOCUMENT_SIZE, MAX_INTERNAL_SIZE, _error

# -- MongoDB's document size limit ---------------------------------------------------------

_LIMITS = threading.local()  # per worker thread: ``big`` (the message exceeds 16 MiB)


class ResultTooLarge(Exception):
    """An update (or an upsert, a replacement) would store a document past 16 MiB."""

    def __init__(self, size: int) -> None:
        super().__init__(f"Resulting document after update is larger than {MAX_DOCUMENT_SIZE}")
        self.size = size


def bson_size(doc: Any) -> int:
    """A document's encoded size (a value bson cannot encode, such as neosqlite's own
    ObjectId, counts as its text: at most a few bytes more than the real encoding)."""
    import bson
    from bson.codec_options import CodecOptions, TypeRegistry

    try:
        return len(bson.encode(doc))
    except Exception:  # an odd value: measure it as text instead
        options = CodecOptions(type_registry=TypeRegistry(fallback_encoder=str))
        return len(bson.encode(doc, codec_options=options))


def install_size_limits() -> None:
    """Refuse what mongod refuses: an update whose resulting document exceeds 16 MiB
    (code 17419, nothing written: the document's update runs in a savepoint that is
    rolled back), and an oversized replacement or upserted document.

    nx-27017 stores whatever it gets. The checks sit where neosqlite writes one document
    (``_internal_update``, ``_internal_replace``, ``_internal_insert``), so every command
    shape (update, findAndModify, bulkWrite, upserts) passes them. Replacements and
    inserts are only measured when the message itself exceeds 16 MiB (``_LIMITS.big``):
    a smaller message cannot carry a larger document. Idempotent."""
    from neosqlite.collection.query_helper import QueryHelper
    from nx_27017 import handler as nx_handler

    if getattr(QueryHelper, "_cheeto_limits", False):
        return
    update = QueryHelper._internal_update
    replace = QueryHelper._internal_replace
    insert = QueryHelper._internal_insert
    bulk_write_error = nx_handler._bulk_write_error

    def refuse(size: int) -> None:
        _LIMITS.too_large = exc = ResultTooLarge(size)  # nx-27017 swallows some errors
        raise exc

    def _internal_update(self: Any, doc_id: Any, update_spec: Any, original_doc: Any,
                         *args: Any, **kwargs: Any) -> Any:
        db = self.collection.db
        db.execute("SAVEPOINT cheeto_size")
        try:
            updated, modified = update(self, doc_id, update_spec, original_doc,
                                       *args, **kwargs)
            if (size := bson_size(updated)) > MAX_DOCUMENT_SIZE:
                refuse(size)
        except BaseException:
            db.execute("ROLLBACK TO cheeto_size")
            db.execute("RELEASE cheeto_size")
            raise
        db.execute("RELEASE cheeto_size")
        return updated, modified

    def _internal_replace(self: Any, doc_id: Any, replacement: Any) -> Any:
        if getattr(_LIMITS, "big", False) and (size := bson_size(replacement)) > \
                MAX_DOCUMENT_SIZE:
            refuse(size)
        return replace(self, doc_id, replacement)

    def _internal_insert(self: Any, document: Any) -> Any:
        if getattr(_LIMITS, "big", False) and (size := bson_size(document)) > \
                MAX_DOCUMENT_SIZE:
            refuse(size)
        return insert(self, document)

    def _bulk_write_error(exc: Exception, index: int) -> dict[str, Any]:
        if isinstance(exc, ResultTooLarge):
            if getattr(_LIMITS, "command", None) == "insert":
                return {"index": index, "code": 2,
                        "errmsg": f"object to insert too large. size in bytes: {exc.size}, "
                                  f"max size: {MAX_DOCUMENT_SIZE}"}
            return {"index": index, "code": 17419, "errmsg": str(exc)}
        return bulk_write_error(exc, index)

    QueryHelper._internal_update = _internal_update
    QueryHelper._internal_replace = _internal_replace
    QueryHelper._internal_insert = _internal_insert
    nx_handler._bulk_write_error = _bulk_write_error
    QueryHelper._cheeto_limits = True


def _insert_documents(msg: dict[str, Any]) -> list[Any]:
    """The documents of an insert, as nx-27017 collects them (sequence, then body)."""
    docs: list[Any] = []
    body: dict[str, Any] = {}
    for kind, doc in msg["sections"]:
        if kind == "payload" and isinstance(doc, dict):
            for value in doc.values():
                docs.extend(value if isinstance(value, list) else [value])
        elif kind == "body" and isinstance(doc, dict):
            body = doc
    docs.extend(body.get("documents") or [])
    return docs


def _object_too_large(size: int, what: str = "") -> dict[str, Any]:
    return _error(f"{what}BSONObj size: {size} ({size:#X}) is invalid. Size must be between "
                  f"0 and {MAX_INTERNAL_SIZE}(16MB)", 10334, "BSONObjectTooLarge")


def _oversized_reply_document(doc: dict[str, Any]) -> int | None:
    """The size of a cursor reply's first document past mongod's internal limit."""
    cursor = doc.get("cursor")
    if not isinstance(cursor, dict):
        return None
    for key in ("firstBatch", "nextBatch"):
        for item in cursor.get(key) or []:
            if (size := bson_size(item)) > MAX_INTERNAL_SIZE:
                return size
    return None
