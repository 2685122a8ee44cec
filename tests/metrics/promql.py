"""Helpers the alert-rule and dashboard tests share: the real ``promtool`` (Debian's
``prometheus`` package, installed by scripts/install-system-deps.sh) and a light reading
of PromQL that finds the metric names and selector labels a query uses.

Why not a PromQL parser in Python: promtool *is* Prometheus's parser, so the tests hand
every expression to it (``check rules``) for syntax; the regexes here only pick out
``cheeto_*`` names and ``{label=...}`` matchers, to compare with ``names.SPECS``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cheeto_like.metrics.names import SPECS, all_exposed_names

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
# labels Prometheus adds to every scraped sample, and a histogram bucket's bound
SCRAPE_LABELS = frozenset({"job", "instance"})
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME = re.compile(r"(?<![A-Za-z0-9_:])cheeto_[A-Za-z0-9_]*")
_SELECTOR = re.compile(r"(?<![A-Za-z0-9_:])(cheeto_[A-Za-z0-9_]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")


def promtool() -> str:
    """promtool's path; a missing one fails (never skips): the install script ships it."""
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is not installed: run scripts/install-system-deps.sh "
                    "(Debian's prometheus package)")
    return found


def run_promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def without_strings(expr: str) -> str:
    """The expression with every quoted string emptied (label values, regexes), so a
    value that looks like a name (``queue="cheeto"``) is not read as one."""
    return _STRING.sub('""', expr)


def metric_names(expr: str) -> set[str]:
    """Every ``cheeto_*`` identifier the expression names (outside strings)."""
    return set(_NAME.findall(without_strings(expr)))


def family_of(sample_name: str) -> str | None:
    """The SPECS family a sample name belongs to (a histogram's ``_bucket``, ``_sum``
    and ``_count`` map to the histogram), or None for a name cheeto does not export."""
    if sample_name in SPECS:
        return sample_name
    for suffix in HISTOGRAM_SUFFIXES:
        base = sample_name.removesuffix(suffix)
        if base != sample_name and SPECS.get(base) and SPECS[base].kind == "histogram":
            return base
    return None


def selector_problems(expr: str) -> list[str]:
    """Matchers on a label the family does not have (``{stauts="500"}``): such a
    selector is valid PromQL that silently matches nothing."""
    problems = []
    for name, body in _SELECTOR.findall(without_strings(expr)):
        family = family_of(name)
        if family is None:
            continue  # reported by the name check
        allowed = set(SPECS[family].labels) | SCRAPE_LABELS
        if name.endswith("_bucket"):
            allowed.add("le")
        for label in _MATCHER.findall(body):
            if label not in allowed:
                problems.append(f"{name}: no label {label!r} (has {sorted(allowed)})")
    return problems


def unknown_names(expr: str) -> set[str]:
    return metric_names(expr) - all_exposed_names()
