"""Reusable argument bundles, so every command spells the same flag the same way."""

from __future__ import annotations

import argparse
from datetime import datetime

from ..errors import InvalidInput
from ..timeparse import _Clear, parse_when

Parser = argparse.ArgumentParser | argparse._ArgumentGroup


def output_format(parser: Parser) -> None:
    """``--yaml``/``--json``: machine output on stdout (every show and list command)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--yaml", action="store_true", help="print YAML on stdout")
    group.add_argument("--json", action="store_true", help="print JSON on stdout")


def site(parser: Parser, *, required: bool = True, help: str = "site name") -> None:
    parser.add_argument("--site", "-s", required=required, metavar="SITE", help=help)


def user(parser: Parser, *, required: bool = True, help: str = "user name") -> None:
    parser.add_argument("--user", "-u", required=required, metavar="USER", help=help)


def group(parser: Parser, *, required: bool = True, help: str = "group name") -> None:
    parser.add_argument("--group", "-g", required=required, metavar="GROUP", help=help)


def force(parser: Parser, help: str = "do not ask for confirmation") -> None:
    parser.add_argument("--force", "-f", action="store_true", help=help)


TIME_FORMATS = ("ISO 8601 (2026-12-31, 2026-12-31T17:00; UTC unless it has an offset) or "
                "relative to now (+30d, -7d, +6mo, +1y, +2w, +12h, +5min)")


def when_help(what: str, *, clear: bool = False) -> str:
    """The help of a time option: what it sets and every format it accepts."""
    return f"{what}: {TIME_FORMATS}" + ("; 'clear' removes it" if clear else "")


def when(text: str | None) -> datetime | _Clear | None:
    """Parse an optional time flag (ISO 8601, +30d, clear)."""
    return None if text is None else parse_when(text)


def future_or_none(text: str | None, flag: str) -> datetime | None:
    value = when(text)
    if isinstance(value, _Clear):
        raise InvalidInput(f"{flag} cannot be 'clear' here")
    return value


MAX_TIMEOUT_S = 86_400.0


def seconds(text: str) -> float:
    """``type=`` of a time limit in seconds: positive and at most a day. Zero or a
    negative limit would kill the program before it starts (reported as a time-out of a
    healthy cluster), and a huge one overflows the wait."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= MAX_TIMEOUT_S:  # also false for nan
        raise argparse.ArgumentTypeError(
            f"{text} is not between 0 and {MAX_TIMEOUT_S:g} seconds (exclusive of 0)")
    return value


MAX_CHUNK = 100_000


def chunk_size(text: str) -> int:
    """``type=`` of a ``--chunk-size``: documents per write of a long job (restore,
    prune, migrate), 1 to 100,000 (each write must stay short and under 16 MiB)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_CHUNK:
        raise argparse.ArgumentTypeError(f"{text} is not between 1 and {MAX_CHUNK}")
    return value
