"""Log records as JSON lines, and the context (run id, site, task) they carry.

``--log-format json`` (or ``$CHEETO_LOG_FORMAT=json`` for units that cannot change their
command line) makes every line one JSON object a log shipper reads without a parser:
``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, ``process``, the context
fields that are set (``run_id``, ``site``, ``task``) and ``exception`` (the traceback
text) when there is one.

``context(task=..., site=..., run_id=...)`` sets fields for the code inside it. It is
built on ``contextvars``, so each asyncio task and each thread sees its own values
(``asyncio`` copies the context into the tasks it starts, so a field set around a
``gather`` reaches every branch). ``ContextFilter``, installed on the handlers by
``setup_process_logging`` (and by ``handler``), copies them onto each record, where the
text format ignores them and the JSON format writes them.

Plain standard library only: the CLI imports this on its fast path.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

FIELDS = ("run_id", "site", "task")
FORMATS = ("text", "json")
ENV_FORMAT = "CHEETO_LOG_FORMAT"
TEXT_FORMAT = "[%(asctime)s: %(levelname)s/%(processName)s] %(name)s: %(message)s"

_fields: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar(
    "cheeto_log_context", default={})  # noqa: B039 - never mutated: replaced whole


@contextmanager
def context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` (None values are left out) to every record logged inside.

    Nested contexts add to the outer one; leaving restores it."""
    merged = {**_fields.get(), **{key: str(value) for key, value in fields.items()
                                  if value is not None}}
    token = _fields.set(merged)
    try:
        yield
    finally:
        _fields.reset(token)


def current() -> dict[str, str]:
    """The fields set now (a copy)."""
    return dict(_fields.get())


class ContextFilter(logging.Filter):
    """Puts the current context fields on each record (``record.cheeto_context``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "cheeto_context"):
            record.cheeto_context = _fields.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in messages are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        fields = getattr(record, "cheeto_context", None)
        if fields is None:
            fields = _fields.get()
        for key in FIELDS:
            if key in fields:
                entry[key] = fields[key]
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def resolve_format(explicit: str | None) -> str:
    """``--log-format`` if given, else ``$CHEETO_LOG_FORMAT``, else text. An unknown
    environment value means text: a log setting must not stop a service from starting."""
    if explicit:
        return explicit
    value = os.environ.get(ENV_FORMAT, "").strip().lower()
    return value if value in FORMATS else "text"


def formatter(fmt: str, text_format: str = TEXT_FORMAT) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else logging.Formatter(text_format)


def prepare(handler: logging.Handler, fmt: str, text_format: str = TEXT_FORMAT
            ) -> logging.Handler:
    """Give ``handler`` the format and the context filter; returns it."""
    handler.setFormatter(formatter(fmt, text_format))
    if not any(isinstance(f, ContextFilter) for f in handler.filters):
        handler.addFilter(ContextFilter())
    return handler
