"""``did you mean …``: the closest known names to a word nobody knows (stdlib only, so the
CLI's fast paths may import it)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_matches(word: str, known: Iterable[str], *, limit: int = 3) -> list[str]:
    """Up to ``limit`` known names closest to ``word`` (difflib's ratio, at least 0.7;
    a prefix of ``word`` or a name it is a prefix of counts too)."""
    names = sorted(set(known))
    found = difflib.get_close_matches(word, names, n=limit, cutoff=0.7)
    if len(found) < limit and len(word) >= 3:
        found += [n for n in names if n not in found
                  and (n.startswith(word) or (word.startswith(n) and len(n) >= 3))][
                      :limit - len(found)]
    return found


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` (did you mean a or b?)``, or an empty string when nothing is close."""
    found = close_matches(word, known)
    if not found:
        return ""
    return " (did you mean " + " or ".join(found) + "?)"
