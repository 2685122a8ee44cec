"""Reading the operator's and admin's forms into operation arguments, with an error per
field: the page shows each next to its input. Amounts use the CLI's grammar
(``models.quota.parse_amount``: ``600m``, ``10h``, ``unlimited``); an empty amount keeps
the current value, as an omitted ``--cpu`` does."""

from __future__ import annotations

import re
from typing import Any

from ...errors import CheetoError, NotFound
from .session import first

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PERIOD_CHOICES = ("keep", "none", "monthly", "quarterly", "yearly")
BARE_NUMBER = re.compile(r"\s*[+-]?\d+(\.\d+)?\s*$")


class FormErrors(Exception):
    """Field name -> message (``form``: about the whole form)."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


class Reader:
    """Collects the values of one form and the errors of its fields."""

    def __init__(self, fields: dict[str, list[str]]) -> None:
        self.fields = fields
        self.errors: dict[str, str] = {}

    def text(self, name: str, *, required: bool = True, max_length: int = 500) -> str:
        value = first(self.fields, name)
        if required and not value:
            self.errors[name] = "required"
        elif len(value) > max_length or any(ord(c) < 32 or ord(c) == 127 for c in value):
            self.errors[name] = f"at most {max_length} characters on one line"
        return value

    def name(self, name: str, *, required: bool = True) -> str:
        value = self.text(name, required=required, max_length=64)
        if value and name not in self.errors and not NAME.fullmatch(value):
            self.errors[name] = "not a valid name (letters, digits, . _ -)"
        return value

    def choice(self, name: str, choices: tuple[str, ...]) -> str:
        value = first(self.fields, name) or choices[0]
        if value not in choices:
            self.errors[name] = f"one of {', '.join(choices)}"
        return value

    def amount(self, name: str, *, signed: bool = False) -> Any:
        """Minutes from ``10h``, ``90m``, ``unlimited`` or a bare number of hours."""
        from ...models.quota import parse_amount

        value = first(self.fields, name)
        if not value:
            return 0.0 if signed else "keep"
        if BARE_NUMBER.match(value):
            value = value.strip() + "h"  # the pages speak hours: a bare number is hours
        try:
            return parse_amount(value, signed=signed)
        except ValueError as exc:
            self.errors[name] = str(exc)
            return None

    def number(self, name: str, lo: float, hi: float) -> float:
        value = first(self.fields, name)
        try:
            number = float(value)
        except ValueError:
            self.errors[name] = "a number is required"
            return 0.0
        if not lo <= number <= hi:
            self.errors[name] = f"between {lo:g} and {hi:g}"
        return number

    def done(self) -> None:
        if self.errors:
            raise FormErrors(self.errors)


def operation_errors(exc: CheetoError, fields: dict[str, str],
                     subject_field: str | None = None) -> FormErrors:
    """An operation's refusal as field errors: ``field: problem`` lines (a pydantic
    refusal) go next to the matching input (``fields`` maps the operation's argument
    names to the form's), a missing user or group next to the name; the rest is about
    the form."""
    message = exc.message
    head, _, rest = message.partition(": ")
    if rest and head in fields:
        return FormErrors({fields[head]: rest})
    if isinstance(exc, NotFound) and subject_field is not None:
        return FormErrors({subject_field: message})
    return FormErrors({"form": message})
