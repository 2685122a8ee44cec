"""Turn pydantic validation failures into the one line an admin reads."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from .errors import InvalidInput


def _location(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc if not str(part).startswith("function-"))


def _message(error: dict[str, Any]) -> str:
    msg: str = error.get("msg", "invalid value")
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    if error.get("type") == "extra_forbidden":
        return "unknown key"
    if error.get("type") == "missing":
        return "required but missing"
    return msg


def describe_validation_error(exc: ValidationError) -> str:
    """``field.sub: problem`` for the first error, plus a count of the others."""
    errors = exc.errors()
    if not errors:
        return str(exc)
    first = errors[0]
    where = _location(tuple(first.get("loc", ())))
    text = f"{where}: {_message(first)}" if where else _message(first)
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return text


def require_limit(limit: int | None) -> None:
    """A result limit is a positive count; ``None`` means no limit. (Zero or a negative
    number would be read by the store as "no limit" or "one batch", never what was meant.)"""
    if limit is not None and (isinstance(limit, bool) or limit < 1):
        raise InvalidInput(f"limit must be at least 1, not {limit}")
