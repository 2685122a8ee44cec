"""Control characters in text we store or print (no dependencies: the CLI imports it early).

Terminal escapes, NUL, bidi overrides and line separators in user data could rewrite an
admin's screen or split a line-based file, so validators refuse them (``has_control``) and
human output shows whatever got through anyway as visible escapes (``show_controls``).
"""

from __future__ import annotations

import unicodedata

# Cc: C0/C1 controls (ESC, NUL, newline, DEL); Cf: format (bidi overrides, zero-width);
# Zl/Zp: the Unicode line and paragraph separators.
_CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def has_control(value: str) -> bool:
    """True when ``value`` holds a control, format, or line/paragraph separator character."""
    return any(unicodedata.category(ch) in _CONTROL_CATEGORIES for ch in value)


def show_controls(value: str, *, keep_newlines: bool = False) -> str:
    r"""``value`` with every control character written as a visible escape (``\x1b``)."""
    if not has_control(value):
        return value
    out = []
    for ch in value:
        if keep_newlines and ch in "\n\t":
            out.append(ch)
        elif unicodedata.category(ch) in _CONTROL_CATEGORIES:
            out.append(ascii(ch)[1:-1])
        else:
            out.append(ch)
    return "".join(out)
